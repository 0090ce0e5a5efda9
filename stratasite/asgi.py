"""ASGI entry point of the gateway: API consumers for the streaming endpoints, Django for the rest.

The POST endpoints of both dialects are Channels consumers that run the gates
(gateway/pipeline.py); everything else (/v1/models, /health, /concurrency, /metrics, the
login page, admin) is Django, behind gateway.middleware.LoginRequiredMiddleware.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stratasite.settings")
django_application = get_asgi_application()  # sets Django up before the imports below

from channels.sessions import CookieMiddleware, SessionMiddleware  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from gateway.consumers import ChatCompletionsConsumer, MessagesConsumer  # noqa: E402


class with_session:  # noqa: N801 (used like the middleware functions it wraps)
    """Browser sessions (cookie -> DB session) for an API consumer; a request with an API key needs
    none of it, and skips the session wrapper, which otherwise inspects every chunk sent."""

    KEY_HEADERS = (b"authorization", b"x-api-key")

    def __init__(self, consumer):
        self.bare, self.session = consumer, CookieMiddleware(SessionMiddleware(consumer))

    async def __call__(self, scope, receive, send):
        for name, _ in scope.get("headers", ()):
            if name in self.KEY_HEADERS:
                return await self.bare(scope, receive, send)
        return await self.session(scope, receive, send)


class PostOnly:
    """The API consumers take POST; any other method goes on to Django (a 405 there, or a view)."""

    def __init__(self, consumer, fallback):
        self.consumer, self.fallback = consumer, fallback

    async def __call__(self, scope, receive, send):
        app = self.consumer if scope.get("method") == "POST" else self.fallback
        return await app(scope, receive, send)


django_app = ASGIStaticFilesHandler(django_application)
chat = PostOnly(with_session(ChatCompletionsConsumer.as_asgi()), django_app)
messages = PostOnly(with_session(MessagesConsumer.as_asgi()), django_app)

# The API paths, looked up by exact path (a dict, not a regex walk, on every request).
API_ROUTES = {
    "/v1/chat/completions": chat,
    "/v1/chat/completions/count_tokens": chat,
    "/v1/messages": messages,
    "/v1/messages/count_tokens": messages,
}


async def application(scope, receive, send):
    """HTTP only (daphne speaks no lifespan here): an API path to its consumer, anything else to Django."""
    app = API_ROUTES.get(scope.get("path")) if scope["type"] == "http" else None
    return await (app or django_app)(scope, receive, send)
