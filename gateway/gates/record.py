"""Open the request's archive row as soon as we know who asks (live registry, SPEC section 5).

The in-flight entry exists at once; the row write is queued (infer_archive.live), so this
gate never waits for the database.
"""

from django.utils import timezone

from gateway.state import RequestState
from infer_archive.live import open_record


async def open_row(state: RequestState) -> RequestState:
    started = timezone.now()
    key = state.api_key
    entry = open_record(
        started_at=started,
        path=state.path,
        model=state.model,
        api_key_id=key.id if key else None,
        key_name=key.name if key else (state.user.get_username() if state.user else ""),
        user_id=key.user_id if key else (state.user.pk if state.user else None),
        dialect=state.dialect,
        stream=bool(state.body.get("stream")),
    )
    state.record_id, state.entry, state.extra["started_at"] = entry.id, entry, started
    return state
