"""OpenAI Chat Completions at the lane: streamed chunks or one completion object."""

import json

from .asgi_io import SSE_HEADERS, send_json, sse
from .dialects import openai as oa
from .dialects.errors import OPENAI, ApiError
from .generate import Failure, Finish, events

# The gateway reads usage from this SSE comment line; SSE clients ignore comments.
USAGE_COMMENT = b": strata-usage "


def usage_comment(usage: dict) -> bytes:
    return USAGE_COMMENT + json.dumps(usage).encode() + b"\n\n"


async def stream_response(send, lane, prepared, stream):
    """Send the generation as chat.completion.chunk events, ending with [DONE]."""
    req = prepared.request
    cid = oa.new_completion_id()
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

    async def emit(data):
        await send({"type": "http.response.body", "body": data, "more_body": True})

    started = False
    async for event in events(lane, prepared, stream):
        if isinstance(event, str):
            # The role rides on the first text chunk, so the first byte out is the first token.
            delta = {"content": event} if started else {"role": "assistant", "content": event}
            started = True
            await emit(sse(oa.chunk_body(cid, req.model, delta)))
        elif isinstance(event, Finish):
            if not started:
                await emit(sse(oa.chunk_body(cid, req.model, {"role": "assistant", "content": ""})))
            await emit(sse(oa.chunk_body(cid, req.model, {}, finish=event.reason)))
            usage = oa.usage_body(event.prompt_tokens, event.completion_tokens, event.cached_tokens)
            if req.include_usage:
                await emit(sse(oa.usage_chunk_body(cid, req.model, usage)))
            await emit(usage_comment(usage))
        elif isinstance(event, Failure):
            await emit(sse(ApiError(503, event.message).body(OPENAI)))
    await send({"type": "http.response.body", "body": sse("[DONE]"), "more_body": False})


async def whole_response(send, lane, prepared, stream):
    """Collect the generation and send one chat.completion object."""
    req = prepared.request
    parts = []
    async for event in events(lane, prepared, stream):
        if isinstance(event, str):
            parts.append(event)
        elif isinstance(event, Finish):
            usage = oa.usage_body(event.prompt_tokens, event.completion_tokens, event.cached_tokens)
            body = oa.completion_body(oa.new_completion_id(), req.model, "".join(parts), event.reason, usage)
            return await send_json(send, 200, body)
        elif isinstance(event, Failure):
            return await send_json(send, 503, ApiError(503, event.message).body(OPENAI))
