"""The lane's ASGI application: loopback only, internal key required, one route table.

GET  /health                            -> engine state
GET  /slots                             -> the engine's slots
POST /v1/chat/completions               -> OpenAI Chat Completions (stream and not)
POST /v1/chat/completions/count_tokens  -> {"input_tokens": N} for an OpenAI chat body
POST /v1/messages                       -> Anthropic Messages (stream and not)
POST /v1/messages/count_tokens          -> {"input_tokens": N} for an Anthropic body

Errors, the 401 included, come in the dialect of the endpoint: Anthropic's shape under
/v1/messages (or when the client sends `anthropic-version`), OpenAI's elsewhere.
Parsing, rendering and counting run in a worker thread, so a 1 MB prompt being counted
does not hold up the tokens streaming to everyone else.
"""

import asyncio
import hmac
import json
import logging

from . import serve_anthropic, serve_openai
from .asgi_io import read_body, send_json, watch_disconnect
from .config import LaneRuntime
from .dialects.anthropic import anthropic_to_request
from .dialects.errors import ANTHROPIC, OPENAI, ApiError, bad_request
from .dialects.openai import openai_to_request
from .prepare import count_tokens, engine_request, prepare

log = logging.getLogger("strata.lane")

# (method, path) -> (dialect, what): "chat" generates, "count" only counts.
ROUTES = {
    ("POST", "/v1/chat/completions"): (OPENAI, "chat"),
    ("POST", "/v1/chat/completions/count_tokens"): (OPENAI, "count"),
    ("POST", "/v1/messages"): (ANTHROPIC, "chat"),
    ("POST", "/v1/messages/count_tokens"): (ANTHROPIC, "count"),
}
SERVE = {OPENAI: serve_openai, ANTHROPIC: serve_anthropic}


def _header(scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return ""


def dialect_of(scope) -> str:
    """The dialect errors are written in: the endpoint's, else the client's (anthropic-version)."""
    path = scope.get("path", "")
    if path == "/v1/messages" or path.startswith("/v1/messages/") or _header(scope, b"anthropic-version"):
        return ANTHROPIC
    return OPENAI


def to_request(dialect: str, body, counting: bool = False):
    if dialect == ANTHROPIC:
        return anthropic_to_request(body, counting=counting)
    return openai_to_request(body)


class LaneApp:
    """ASGI app of one lane; the engine starts with the app (lifespan) and stops with it."""

    def __init__(self, lane: LaneRuntime):
        self.lane = lane

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        dialect = dialect_of(scope)
        try:
            self._authenticate(scope)
            if method == "GET" and path == "/health":
                return await send_json(send, 200, self.health())
            if method == "GET" and path == "/slots":
                return await send_json(send, 200, {"lane": self.lane.name, "slots": await self.lane.engine.slots()})
            route = ROUTES.get((method, path))
            if route is None:
                raise ApiError(404, f"no route for {method} {path}")
            dialect, what = route
            raw = await self._body(receive)
            if what == "count":
                n = await asyncio.to_thread(self._count, dialect, raw)
                return await send_json(send, 200, {"input_tokens": n})
            return await self.generate(dialect, raw, receive, send)
        except ApiError as exc:
            await send_json(send, exc.status, exc.body(dialect))
        except Exception:
            log.exception("lane.unhandled path=%s", path)
            try:
                await send_json(send, 500, ApiError(500, "internal error in the lane").body(dialect))
            except Exception:
                pass  # the response had already started; the client sees the stream end

    def _authenticate(self, scope):
        auth = _header(scope, b"authorization")
        given = auth[7:] if auth.lower().startswith("bearer ") else _header(scope, b"x-api-key")
        if not hmac.compare_digest(given.encode(), self.lane.lane_key.encode()):
            raise ApiError(401, "the lane key is missing or wrong", code="NOT_LOGGED_IN")

    def health(self) -> dict:
        engine = self.lane.engine
        return {
            "lane": self.lane.name,
            "state": engine.state,
            "in_flight": engine.in_flight,
            "restarts": engine.restarts,
            "max_context": self.lane.max_context,
        }

    async def _body(self, receive) -> bytes:
        raw = await read_body(receive, self.lane.max_body_bytes)
        if raw is None:
            raise ApiError(413, f"request body is larger than {self.lane.max_body_bytes} bytes")
        return raw

    @staticmethod
    def _json(raw: bytes):
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}")

    def _count(self, dialect: str, raw: bytes) -> int:
        return count_tokens(self.lane, to_request(dialect, self._json(raw), counting=True))

    def _prepare(self, dialect: str, raw: bytes):
        return prepare(self.lane, to_request(dialect, self._json(raw)))

    async def generate(self, dialect: str, raw: bytes, receive, send):
        prepared = await asyncio.to_thread(self._prepare, dialect, raw)
        stream = await self.lane.engine.open(engine_request(self.lane, prepared))
        watcher = watch_disconnect(receive, stream.aclose)
        serve = SERVE[dialect]
        try:
            if prepared.request.stream:
                await serve.stream_response(send, self.lane, prepared, stream)
            else:
                await serve.whole_response(send, self.lane, prepared, stream)
        finally:
            watcher.cancel()
            await stream.aclose()

    async def _lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.lane.engine.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.lane.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return
