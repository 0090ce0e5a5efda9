"""Drive one prepared request through the engine and yield dialect-neutral events."""

import asyncio
import json
from dataclasses import dataclass
from typing import AsyncIterator

from engine import protocol

from .config import LaneRuntime
from .dialects import openai as oa
from .engine_client import EngineStream
from .events import Text, Thinking, ToolCall
from .prepare import Prepared
from .tokenizer import TokenDecoder

# The gateway reads usage from this SSE comment line (gateway/tee.py); SSE clients ignore comments.
USAGE_COMMENT = b": strata-usage "


@dataclass
class Finish:
    """The end of a generation: why it stopped, usage by the lane's count, engine timings."""

    reason: str  # stop | length | stop_sequence | tool_calls | cancelled
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    timings: dict
    stop_sequence: str | None = None
    reasoning_tokens: int | None = None

    def usage_comment(self) -> bytes:
        usage = oa.usage_body(self.prompt_tokens, self.completion_tokens, self.cached_tokens, self.reasoning_tokens)
        return USAGE_COMMENT + json.dumps(usage).encode() + b"\n\n"


@dataclass
class Failure:
    message: str


class Ping:
    """Nothing happened for a while (a long prefill): a keep-alive is due."""


PING = Ping()
Event = Text | Thinking | ToolCall | Finish | Failure | Ping


async def events(lane: LaneRuntime, prepared: Prepared, stream: EngineStream,
                 ping_every: float | None = None) -> AsyncIterator[Event]:
    """Text, Thinking and ToolCall events as they arrive, then one Finish or one Failure.

    With `ping_every`, PING is yielded after each that many seconds without a message.
    """
    decoder = TokenDecoder(lane.tokenizer)
    parser = prepared.parser()
    cancelled = False
    async for message in _with_pings(stream, ping_every):
        if message is PING:
            yield PING
            continue
        op = message["op"]
        if op == protocol.TOKENS:
            for event in parser.feed(decoder.feed(message["ids"])):
                yield event
            if parser.done and not cancelled:
                cancelled = True
                await stream.cancel()  # a stop string or the one allowed tool call ended it: free the slot now
        elif op == protocol.DONE:
            for event in parser.feed(decoder.flush()) + parser.finish():
                yield event
            usage = message.get("usage", {})
            reason = message.get("finish_reason", "stop")
            if parser.stop_sequence is not None:
                reason = "stop_sequence"
            elif parser.calls and reason in ("stop", "cancelled"):
                reason = "tool_calls"
            yield Finish(
                reason=reason,
                prompt_tokens=len(prepared.prompt_ids),
                completion_tokens=usage.get("completion_tokens", 0),
                cached_tokens=usage.get("cached_tokens", 0),
                timings=message.get("timings", {}),
                stop_sequence=parser.stop_sequence,
                reasoning_tokens=usage.get("reasoning_tokens"),
            )
        elif op == protocol.ERROR:
            yield Failure(message.get("message") or "the engine failed")


async def _with_pings(stream, every: float | None):
    """The stream's messages, with PING whenever `every` seconds pass without one."""
    if not every:
        async for message in stream:
            yield message
        return
    iterator = stream.__aiter__()
    pending = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=every)
            if not done:
                yield PING
                continue
            try:
                message = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield message
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
