"""Drive one prepared request through the engine and yield dialect-neutral events."""

from dataclasses import dataclass
from typing import AsyncIterator

from engine import protocol

from .config import LaneRuntime
from .engine_client import EngineStream
from .events import TextStream
from .prepare import Prepared


@dataclass
class Finish:
    """The end of a generation: why it stopped, usage by the lane's count, engine timings."""

    reason: str  # stop | length | cancelled
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    timings: dict


@dataclass
class Failure:
    message: str


async def events(lane: LaneRuntime, prepared: Prepared, stream: EngineStream) -> AsyncIterator[str | Finish | Failure]:
    """Text deltas (str), then one Finish or one Failure."""
    text = TextStream(lane.tokenizer, prepared.request.stop)
    async for message in stream:
        op = message["op"]
        if op == protocol.TOKENS:
            delta = text.feed(message["ids"])
            if delta:
                yield delta
            if text.stopped:
                await stream.cancel()  # a stop string ended it: free the slot now
        elif op == protocol.DONE:
            tail = text.flush()
            if tail:
                yield tail
            usage = message.get("usage", {})
            yield Finish(
                reason="stop" if text.stopped else message.get("finish_reason", "stop"),
                prompt_tokens=len(prepared.prompt_ids),
                completion_tokens=usage.get("completion_tokens", 0),
                cached_tokens=usage.get("cached_tokens", 0),
                timings=message.get("timings", {}),
            )
        elif op == protocol.ERROR:
            yield Failure(message.get("message") or "the engine failed")
