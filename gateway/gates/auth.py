"""Gate 1, auth: an API key (Bearer or x-api-key) or a browser login session; else 401 NOT_LOGGED_IN.

Keys are looked up by their SHA-256 in the in-process cache (gateway.config), so a known key
costs no database round trip; `last_used` is written at most once a minute per key, off the
request path. A request that authenticates by its session cookie alone must also carry
Django's CSRF token (X-CSRFToken header), or another site could post with the user's cookie.
"""

import time

from django.conf import settings
from django.utils import timezone

from gateway.config import cache
from gateway.models import hash_key
from gateway.state import RequestState
from infer_archive.live import touch_key
from lanes.dialects.errors import ApiError

LAST_USED_EVERY = 60.0  # seconds between last_used writes per key


def not_logged_in() -> ApiError:
    return ApiError(
        401, "not logged in: send an API key (Authorization: Bearer or x-api-key) or log in", code="NOT_LOGGED_IN"
    )


def presented_key(headers) -> str:
    """The raw key from `Authorization: Bearer ...` or `x-api-key`, '' when neither is sent."""
    auth = headers.get(b"authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return headers.get(b"x-api-key", "").strip()


async def check_key(raw: str):
    """The CachedKey for a raw key (recording its use), or raise 401."""
    key_hash = hash_key(raw)
    key = await cache.key(key_hash)
    if key is None:
        raise not_logged_in()
    now = time.time()
    if key.last_used is None or now - key.last_used > LAST_USED_EVERY:
        cache.touched(key_hash, now)
        touch_key(key.id, timezone.now())
    return key


def is_public(path: str) -> bool:
    """Whether `path` is on the explicit public list (settings.STRATA_PUBLIC_PATHS)."""
    for entry in settings.STRATA_PUBLIC_PATHS:
        if path == entry or (entry.endswith("/") and path.startswith(entry)):
            return True
    return False


def csrf_ok(token: str, cookie: str) -> bool:
    """Django's own comparison of a CSRF token (masked or not) with the csrftoken cookie's secret."""
    from django.middleware.csrf import InvalidTokenFormat, _check_token_format, _does_token_match

    if not token or not cookie:
        return False
    try:
        _check_token_format(token)
        _check_token_format(cookie)
        return _does_token_match(token, cookie)
    except InvalidTokenFormat:
        return False


AUTH_HEADERS = (b"authorization", b"x-api-key", b"x-csrftoken")


async def authenticate(state: RequestState) -> RequestState:
    headers = {k: v.decode("latin-1") for k, v in state.scope.get("headers", []) if k in AUTH_HEADERS}
    raw = presented_key(headers)
    if raw:
        state.api_key = await check_key(raw)
        return state
    if "session" in state.scope:
        from channels.auth import get_user

        user = await get_user(state.scope)
        if user.is_authenticated:
            cookie = state.scope.get("cookies", {}).get(settings.CSRF_COOKIE_NAME, "")
            if not csrf_ok(headers.get(b"x-csrftoken", ""), cookie):
                raise ApiError(403, "CSRF check failed: a request authenticated by a login session must send "
                                    "the csrftoken cookie's value in an X-CSRFToken header", code="CSRF_FAILED")
            state.user = user
            return state
    raise not_logged_in()
