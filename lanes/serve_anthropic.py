"""Anthropic Messages at the lane: the event stream (message_start ... message_stop) or one message.

message_start goes out with the first output (or the first keep-alive during a long
prefill), so the first byte the gateway sees still marks the first token; a ping follows
it, and again after each `lane.ping_seconds` without output, as the real API does. Blocks open
only when they have something to say (no empty text block); a thinking block ends with
its signature_delta; a tool call is one tool_use block whose input arrives as
input_json_delta.
"""

import json

from .asgi_io import SSE_HEADERS, send_json
from .dialects import anthropic as an
from .dialects.errors import ANTHROPIC, ApiError
from .events import Text, Thinking, ToolCall
from .generate import Failure, Finish, Ping, events

class _EventWriter:
    """Numbers the content blocks and opens and closes them around the deltas."""

    def __init__(self, send, lane, prepared):
        self.send, self.lane, self.request = send, lane, prepared.request
        self.prompt_tokens = len(prepared.prompt_ids)
        self.mid = an.new_message_id()
        self.started = False
        self.index = -1
        self.block: str | None = None
        self.thought: list[str] = []

    async def emit(self, data: dict | bytes):
        body = data if isinstance(data, bytes) else an.event(data)
        await self.send({"type": "http.response.body", "body": body, "more_body": True})

    async def start(self):
        if self.started:
            return
        self.started = True
        usage = an.usage_body(self.prompt_tokens, 0)
        message = an.message_body(self.mid, self.request.model, [], None, None, usage)
        await self.emit({"type": "message_start", "message": message})
        await self.emit({"type": "ping"})

    async def open(self, kind: str, block: dict):
        await self.start()
        await self.close()
        self.index += 1
        self.block = kind
        await self.emit({"type": "content_block_start", "index": self.index, "content_block": block})

    async def delta(self, delta: dict):
        await self.emit({"type": "content_block_delta", "index": self.index, "delta": delta})

    async def close(self):
        if self.block is None:
            return
        if self.block == "thinking":
            signature = an.thinking_signature(self.lane.lane_key, "".join(self.thought))
            await self.delta({"type": "signature_delta", "signature": signature})
            self.thought = []
        await self.emit({"type": "content_block_stop", "index": self.index})
        self.block = None

    async def on(self, event):
        if isinstance(event, Ping):
            if self.started:
                await self.emit({"type": "ping"})
            else:
                await self.start()
        elif isinstance(event, Thinking):
            if self.block != "thinking":
                await self.open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            self.thought.append(event.text)
            await self.delta({"type": "thinking_delta", "thinking": event.text})
        elif isinstance(event, Text):
            if self.block != "text":
                await self.open("text", {"type": "text", "text": ""})
            await self.delta({"type": "text_delta", "text": event.text})
        elif isinstance(event, ToolCall):
            block = {"type": "tool_use", "id": an.new_tool_use_id(), "name": event.name, "input": {}}
            await self.open("tool_use", block)
            await self.delta({"type": "input_json_delta", "partial_json": event.arguments})
            await self.close()
        elif isinstance(event, Finish):
            await self.start()
            await self.close()
            stop_reason = an.STOP_REASONS.get(event.reason, "end_turn")
            await self.emit({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": event.stop_sequence},
                "usage": an.usage_body(event.prompt_tokens, event.completion_tokens),
            })
            await self.emit({"type": "message_stop"})
            await self.emit(event.usage_comment())
        elif isinstance(event, Failure):
            await self.emit({"type": "error", "error": ApiError(503, event.message).body(ANTHROPIC)["error"]})


async def stream_response(send, lane, prepared, stream):
    """Send the generation as Messages API stream events."""
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    writer = _EventWriter(send, lane, prepared)
    async for event in events(lane, prepared, stream, ping_every=lane.ping_seconds):
        await writer.on(event)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def whole_response(send, lane, prepared, stream):
    """Collect the generation and send one message object."""
    req = prepared.request
    content: list[dict] = []
    async for event in events(lane, prepared, stream):
        last = content[-1] if content else {}
        if isinstance(event, Thinking):
            if last.get("type") == "thinking":
                last["thinking"] += event.text
            else:
                content.append({"type": "thinking", "thinking": event.text, "signature": ""})
        elif isinstance(event, Text):
            if last.get("type") == "text":
                last["text"] += event.text
            else:
                content.append({"type": "text", "text": event.text})
        elif isinstance(event, ToolCall):
            content.append({"type": "tool_use", "id": an.new_tool_use_id(), "name": event.name,
                            "input": json.loads(event.arguments)})
        elif isinstance(event, Finish):
            for block in content:
                if block["type"] == "thinking":
                    block["signature"] = an.thinking_signature(lane.lane_key, block["thinking"])
            body = an.message_body(an.new_message_id(), req.model, content, an.STOP_REASONS.get(event.reason, "end_turn"),
                                   event.stop_sequence, an.usage_body(event.prompt_tokens, event.completion_tokens))
            return await send_json(send, 200, body)
        elif isinstance(event, Failure):
            return await send_json(send, 503, ApiError(503, event.message).body(ANTHROPIC))
