"""The lane's ASGI application: loopback only, internal key required, one route table.

GET  /health                -> engine state
GET  /slots                 -> the engine's slots
POST /v1/chat/completions   -> OpenAI Chat Completions (stream and not)
"""

import hmac
import json
import logging

from .asgi_io import read_body, send_json, watch_disconnect
from .config import LaneRuntime
from .dialects.errors import OPENAI, ApiError, bad_request
from .dialects.openai import openai_to_request
from .prepare import engine_request, prepare
from .serve_openai import stream_response, whole_response

log = logging.getLogger("strata.lane")


def _header(scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return ""


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
        try:
            self._authenticate(scope)
            if method == "GET" and path == "/health":
                return await send_json(send, 200, self.health())
            if method == "GET" and path == "/slots":
                return await send_json(send, 200, {"lane": self.lane.name, "slots": await self.lane.engine.slots()})
            if method == "POST" and path == "/v1/chat/completions":
                return await self.chat_completions(scope, receive, send)
            raise ApiError(404, f"no route for {method} {path}")
        except ApiError as exc:
            await send_json(send, exc.status, exc.body(OPENAI))
        except Exception:
            log.exception("lane.unhandled path=%s", path)
            try:
                await send_json(send, 500, ApiError(500, "internal error in the lane").body(OPENAI))
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

    async def chat_completions(self, scope, receive, send):
        raw = await read_body(receive, self.lane.max_body_bytes)
        if raw is None:
            raise ApiError(413, f"request body is larger than {self.lane.max_body_bytes} bytes")
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}")
        prepared = prepare(self.lane, openai_to_request(body))
        stream = await self.lane.engine.open(engine_request(self.lane, prepared))
        watcher = watch_disconnect(receive, stream.aclose)
        try:
            if prepared.request.stream:
                await stream_response(send, self.lane, prepared, stream)
            else:
                await whole_response(send, self.lane, prepared, stream)
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
