"""Gate 1 for the Django side (pages, admin, /v1/models, /concurrency, /metrics).

Public paths (settings.STRATA_PUBLIC_PATHS: /health, the login pages, static files) pass.
Anything else needs a login session or an API key (Bearer or x-api-key). Without either:
a browser asking for a page is sent to the login page; anything else gets 401
NOT_LOGGED_IN in the dialect's error shape (Anthropic's under /v1/messages or with an
anthropic-version header).
"""

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from django.utils.decorators import sync_and_async_middleware

from lanes.dialects.errors import ANTHROPIC, OPENAI, ApiError

from .gates.auth import check_key, is_public, not_logged_in, presented_key


def dialect_of(request) -> str:
    if request.path.startswith("/v1/messages") or request.headers.get("anthropic-version"):
        return ANTHROPIC
    return OPENAI


def error_response(request, exc: ApiError) -> HttpResponse:
    return HttpResponse(exc.to_bytes(dialect_of(request)), status=exc.status, content_type="application/json")


async def denied(request) -> HttpResponse | None:
    """None when the request may go on, else the response that stops it."""
    request.api_key = None
    if is_public(request.path):
        return None
    raw = presented_key({b"authorization": request.headers.get("authorization", ""),
                         b"x-api-key": request.headers.get("x-api-key", "")})
    if raw:
        try:
            request.api_key = await check_key(raw)
        except ApiError as exc:
            return error_response(request, exc)
        return None
    user = await request.auser()
    if user.is_authenticated:
        return None
    wants_page = request.method == "GET" and "text/html" in request.headers.get("accept", "")
    if wants_page and not request.path.startswith("/v1/"):
        return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
    return error_response(request, not_logged_in())


@sync_and_async_middleware
def LoginRequiredMiddleware(get_response):  # noqa: N802 (Django middleware naming)
    if iscoroutinefunction(get_response):
        async def middleware(request):
            return await denied(request) or await get_response(request)
    else:
        def middleware(request):
            return async_to_sync(denied)(request) or get_response(request)
    return middleware
