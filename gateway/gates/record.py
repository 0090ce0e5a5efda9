"""Open the request's archive row as soon as we know who asks (live registry, SPEC section 5)."""

from django.utils import timezone

from gateway.state import RequestState
from infer_archive.live import open_record


async def open_row(state: RequestState) -> RequestState:
    started = timezone.now()
    record = await open_record(
        started_at=started,
        path=state.path,
        model=state.model,
        api_key=state.api_key,
        user=state.user,
        dialect=state.dialect,
        stream=bool(state.body.get("stream")),
    )
    state.record_id, state.extra["started_at"] = record.pk, started
    return state
