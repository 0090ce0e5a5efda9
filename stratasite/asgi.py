"""ASGI entry point of the gateway: API consumers for the streaming endpoints, Django for the rest."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stratasite.settings")
django_application = get_asgi_application()  # sets Django up before the imports below

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.sessions import CookieMiddleware, SessionMiddleware  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from gateway.consumers import ChatCompletionsConsumer, MessagesConsumer  # noqa: E402


def with_session(consumer):
    """Browser sessions (cookie -> DB session) for an API consumer; API keys need none of it."""
    return CookieMiddleware(SessionMiddleware(consumer))


api_routes = [
    path("v1/chat/completions", with_session(ChatCompletionsConsumer.as_asgi())),
    path("v1/messages", with_session(MessagesConsumer.as_asgi())),
    path("v1/messages/count_tokens", with_session(MessagesConsumer.as_asgi())),
]

application = ProtocolTypeRouter(
    {"http": URLRouter(api_routes + [re_path(r"", ASGIStaticFilesHandler(django_application))])}
)
