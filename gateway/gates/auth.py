"""Gate 1, auth: an API key (Bearer or x-api-key) or a browser login session; else 401 NOT_LOGGED_IN."""

from datetime import timedelta

from channels.auth import get_user
from django.utils import timezone

from gateway.models import ApiKey, hash_key
from gateway.state import RequestState
from lanes.dialects.errors import ApiError

LAST_USED_EVERY = timedelta(seconds=60)  # write last_used at most once a minute per key


def not_logged_in() -> ApiError:
    return ApiError(
        401, "not logged in: send an API key (Authorization: Bearer or x-api-key) or log in", code="NOT_LOGGED_IN"
    )


def presented_key(state: RequestState) -> str:
    auth = state.header(b"authorization")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return state.header(b"x-api-key").strip()


async def authenticate(state: RequestState) -> RequestState:
    raw = presented_key(state)
    if raw:
        key = await ApiKey.objects.select_related("user").filter(key_hash=hash_key(raw), revoked_at__isnull=True).afirst()
        if key is None:
            raise not_logged_in()
        now = timezone.now()
        if key.last_used is None or now - key.last_used > LAST_USED_EVERY:
            await ApiKey.objects.filter(pk=key.pk).aupdate(last_used=now)
        state.api_key, state.user = key, key.user
        return state
    if "session" in state.scope:
        user = await get_user(state.scope)
        if user.is_authenticated:
            state.user = user
            return state
    raise not_logged_in()
