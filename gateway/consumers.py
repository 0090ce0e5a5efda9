"""The streaming API endpoints: a Channels AsyncHttpConsumer that runs the gates and forwards."""

import asyncio
import logging
import time

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer

from infer_archive.live import close_record
from infer_archive.models import InferRecord
from infer_archive.writer import append as archive_append
from lanes.dialects.errors import ANTHROPIC, OPENAI, ApiError

from . import metrics
from .forward import forward, server_timing
from .pipeline import run_gates
from .state import RequestState

log = logging.getLogger("strata.gateway")
Status = InferRecord.Status


class ApiConsumer(AsyncHttpConsumer):
    """One API request. The work runs as a task, so a client disconnect can cancel it."""

    dialect = OPENAI
    max_body_bytes = 64 << 20

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.task: asyncio.Task | None = None
        self.response_started = False
        self.response_complete = False
        self.size = 0

    async def dispatch(self, message):
        # Channels' dispatch closes stale DB connections (a thread hop) before every message;
        # this consumer touches the database only through the config cache and the archive
        # writer, which manage their own connections, so the hop is skipped on the hot path.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def http_request(self, message):
        # Collect the body; then serve in a task and keep listening for http.disconnect.
        if self.task:
            return  # an oversized body already got its 413
        self.body.append(message.get("body", b""))
        self.size += len(self.body[-1])
        if message.get("more_body") and self.size <= self.max_body_bytes:
            return
        self.task = asyncio.create_task(self.serve(b"".join(self.body)))

    async def http_disconnect(self, message):
        if self.task and not self.task.done():
            if self.response_complete:
                await asyncio.gather(self.task, return_exceptions=True)  # just finishing its bookkeeping
            else:
                self.task.cancel()  # the client went away: stop upstream generation
                await asyncio.gather(self.task, return_exceptions=True)
        await self.disconnect()
        raise StopConsumer()

    async def send_headers(self, **kwargs):
        self.response_started = True
        await super().send_headers(**kwargs)

    async def serve(self, raw_body: bytes):
        state = RequestState(scope=self.scope, path=self.scope["path"], dialect=self.dialect, raw_body=raw_body)
        metrics.IN_FLIGHT.inc()
        try:
            if self.size > self.max_body_bytes:
                raise ApiError(413, f"request body is larger than {self.max_body_bytes} bytes")
            state = await run_gates(state)
            result = await forward(self, state)
        except ApiError as exc:
            await self.answer_error(state, exc)
        except asyncio.CancelledError:
            await self.finish(state, Status.DISCONNECTED, error="the client disconnected")
            raise
        except Exception as exc:
            log.exception("gateway.unhandled path=%s", state.path)
            await self.answer_error(state, ApiError(500, "internal error in the gateway"), detail=repr(exc))
        else:
            tee = result.tee
            await self.finish(
                state,
                Status.OK if result.status < 400 else Status.REJECTED if result.status < 500 else Status.ERROR,
                http_status=result.status,
                prompt_tokens=tee.prompt_tokens,
                completion_tokens=tee.completion_tokens,
                cached_tokens=tee.cached_tokens,
                ttft_ms=result.ttft_ms,
                error="" if result.status < 400 else tee.body[:2000].decode("utf-8", "replace"),
                response=tee.body,
            )
        finally:
            metrics.IN_FLIGHT.dec()

    async def answer_error(self, state: RequestState, exc: ApiError, detail: str = ""):
        """Send the error in the dialect's shape (if nothing was sent yet) and record it."""
        sent = None
        if not self.response_started:
            sent = exc.to_bytes(self.dialect)
            self.response_complete = True
            if "gateway" not in state.timings:
                state.timings["gateway"] = (time.perf_counter() - state.t0) * 1000 - state.timings.get("count", 0.0)
            headers = [(b"content-type", b"application/json"), (b"server-timing", server_timing(state).encode())]
            await self.send_response(exc.status, sent, headers=headers)
        status = Status.REJECTED if exc.status < 500 else Status.ERROR
        await self.finish(state, status, http_status=exc.status, error=detail or exc.message,
                          prompt_tokens=state.extra.get("prompt_tokens"), response=sent)

    async def finish(self, state: RequestState, status: str, response: bytes | None = None, **fields):
        lane = state.lane.name if state.lane else ""
        metrics.observe(status, fields.get("http_status"), lane, self.dialect, ttft_ms=fields.get("ttft_ms"),
                        duration_ms=(time.perf_counter() - state.t0) * 1000, gateway_ms=state.timings.get("gateway"),
                        prompt_tokens=fields.get("prompt_tokens"), completion_tokens=fields.get("completion_tokens"),
                        cached_tokens=fields.get("cached_tokens"))
        if state.record_id is None:
            return  # stopped before the row was opened (auth, malformed body)
        fields = {k: v for k, v in fields.items() if v is not None}
        fields.update(status=status, route=state.route.model_name if state.route else "", lane=lane)
        close_record(state.record_id, state.extra["started_at"], **fields)
        # The archive keeps the request as received and the response as the client got it (the tee's
        # bytes, or the error body; for a disconnect, what a tee left in state.extra["tee"], if any).
        # `archive_append` only queues them for the archive's own thread, so the event loop never
        # waits on gzip, disk or database; failures are logged, never raised.
        try:
            if response is None:
                response = getattr(state.extra.get("tee"), "body", b"")
            archive_append(state.record_id, state.raw_body, response)
        except Exception:
            log.exception("archive.append_failed record=%s", state.record_id)


class ChatCompletionsConsumer(ApiConsumer):
    dialect = OPENAI


class MessagesConsumer(ApiConsumer):
    dialect = ANTHROPIC
