"""OpenAI Chat Completions at the lane: streamed chunks or one completion object."""

from .asgi_io import SSE_HEADERS, send_json, sse
from .dialects import openai as oa
from .dialects.errors import OPENAI, ApiError
from .events import Text, Thinking, ToolCall
from .generate import Failure, Finish, events


async def stream_response(send, lane, prepared, stream):
    """Send the generation as chat.completion.chunk events, ending with [DONE]."""
    req = prepared.request
    cid = oa.new_completion_id()
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    started = False

    async def emit(data: bytes):
        await send({"type": "http.response.body", "body": data, "more_body": True})

    async def delta(body: dict, finish: str | None = None):
        # The role rides on the first chunk that says something, so the first byte out is the first token.
        nonlocal started
        if not started:
            body, started = {"role": "assistant", **body}, True
        await emit(sse(oa.chunk_body(cid, req.model, body, finish)))

    async for event in events(lane, prepared, stream):
        if isinstance(event, Text):
            await delta({"content": event.text})
        elif isinstance(event, Thinking):
            await delta({"reasoning_content": event.text})
        elif isinstance(event, ToolCall):
            # Name and id first, then the arguments: what clients merge by index.
            await delta({"tool_calls": [{"index": event.index, **oa.tool_call_body(oa.new_call_id(), event.name, "")}]})
            await delta({"tool_calls": [{"index": event.index, "function": {"arguments": event.arguments}}]})
        elif isinstance(event, Finish):
            if not started:
                await delta({"content": ""})
            await delta({}, finish=event.reason)
            usage = oa.usage_body(event.prompt_tokens, event.completion_tokens, event.cached_tokens, event.reasoning_tokens)
            if req.include_usage:
                await emit(sse(oa.usage_chunk_body(cid, req.model, usage)))
            await emit(event.usage_comment())
        elif isinstance(event, Failure):
            await emit(sse(ApiError(503, event.message).body(OPENAI)))
    await send({"type": "http.response.body", "body": sse("[DONE]"), "more_body": False})


async def whole_response(send, lane, prepared, stream):
    """Collect the generation and send one chat.completion object."""
    req = prepared.request
    texts, thoughts, calls = [], [], []
    async for event in events(lane, prepared, stream):
        if isinstance(event, Text):
            texts.append(event.text)
        elif isinstance(event, Thinking):
            thoughts.append(event.text)
        elif isinstance(event, ToolCall):
            calls.append(oa.tool_call_body(oa.new_call_id(), event.name, event.arguments))
        elif isinstance(event, Finish):
            usage = oa.usage_body(event.prompt_tokens, event.completion_tokens, event.cached_tokens, event.reasoning_tokens)
            body = oa.completion_body(oa.new_completion_id(), req.model, "".join(texts), event.reason, usage,
                                      reasoning="".join(thoughts), tool_calls=calls)
            return await send_json(send, 200, body)
        elif isinstance(event, Failure):
            return await send_json(send, 503, ApiError(503, event.message).body(OPENAI))
