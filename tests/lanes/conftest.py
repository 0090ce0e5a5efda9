"""Lanes served over real HTTP for the official SDKs: one on a scripted fake engine, one on the real model.

The fake engine has the interface of `lanes.engine_client.EngineSupervisor` (`state`,
`start()`, `stop()`, `slots()`, `open()`, `in_flight`, `restarts`) and answers each
request with a script: text encoded by the lane's own tokenizer and sent one token per
`tokens` message, then `done` (or an `error`). A 135M model cannot be made to emit
thinking or tool-call markup on demand, so those paths are scripted; plain chat runs on
the real model too.
"""

import asyncio
from dataclasses import dataclass, field

import httpx
import pytest

from engine import protocol
from lanes.config import LaneRuntime
from lanes.engine_client import EngineOptions, EngineSupervisor
from lanes.inprocess import ThreadedLane
from lanes.sanitize import Sanitizer
from lanes.template import ChatTemplate

LANE_KEY = "lane-test-key"


@dataclass
class Script:
    """What the fake engine answers to one request."""

    text: str = "Hello."
    finish: str = "stop"
    error: str | None = None        # after the text, an `error` message instead of `done`
    cached_tokens: int = 0
    delay_s: float = 0.0            # before the first token (a long prefill)
    usage_extra: dict = field(default_factory=dict)  # e.g. reasoning_tokens, as the engine reports them


class FakeStream:
    """An `EngineStream` look-alike playing one script: one id per `tokens` message."""

    def __init__(self, request: dict, ids: list[int], script: Script):
        self.id = request.get("id") or "fake"
        self.request, self.script = request, script
        self.full_ids, self.ids = ids, ids[: request["max_tokens"]]  # the engine stops at max_tokens
        self.cancelled = False
        self.finished = False
        self.sent = 0

    def __aiter__(self):
        return self

    async def __anext__(self) -> dict:
        if self.finished:
            raise StopAsyncIteration
        if self.sent == 0 and self.script.delay_s:
            await asyncio.sleep(self.script.delay_s)
        await asyncio.sleep(0)
        if not self.cancelled and self.sent < len(self.ids):
            self.sent += 1
            return {"op": protocol.TOKENS, "id": self.id, "ids": [self.ids[self.sent - 1]]}
        self.finished = True
        if self.script.error and not self.cancelled:
            return {"op": protocol.ERROR, "id": self.id, "message": self.script.error}
        finish = "cancelled" if self.cancelled else (
            "length" if len(self.ids) < len(self.full_ids) else self.script.finish)
        usage = {"prompt_tokens": len(self.request["prompt"]), "completion_tokens": self.sent,
                 "cached_tokens": self.script.cached_tokens, **self.script.usage_extra}
        return {"op": protocol.DONE, "id": self.id, "finish_reason": finish, "usage": usage, "timings": {}}

    async def cancel(self):
        self.cancelled = True

    async def aclose(self):
        self.cancelled = True
        self.finished = True


class FakeEngine:
    """A scripted stand-in for EngineSupervisor; `requests` keeps every `generate` message it got."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.reset()

    def reset(self):
        self.state = "stopped"
        self.scripts: list[Script] = []
        self.requests: list[dict] = []
        self.streams: list[FakeStream] = []
        self.refuse = None  # an ApiError that open() raises (queue full, loading)
        self.restarts = 0

    def script(self, *scripts: Script | str):
        self.scripts.extend(s if isinstance(s, Script) else Script(s) for s in scripts)

    async def start(self):
        self.state = "ready"

    async def stop(self):
        self.state = "stopped"

    async def slots(self):
        return [{"slot": 0, "state": "idle", "cached_tokens": 0, "request_id": None}]

    @property
    def in_flight(self) -> int:
        return sum(not s.finished for s in self.streams)

    async def open(self, request: dict) -> FakeStream:
        if self.refuse is not None:
            raise self.refuse
        self.requests.append(request)
        script = self.scripts.pop(0) if self.scripts else Script()
        ids = self.tokenizer.encode(script.text)
        if self.tokenizer.bos_id is not None:
            ids = ids[1:]
        stream = FakeStream(request, ids, script)
        self.streams.append(stream)
        return stream


class ServedLane(ThreadedLane):
    """A LaneApp on real HTTP in a background thread, with the SDK clients pointed at it."""

    def post(self, path: str, body: dict, **headers) -> httpx.Response:
        return httpx.post(self.url + path, json=body, headers={**self.headers, **headers}, timeout=120)

    def openai(self, **kwargs):
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key=LANE_KEY, max_retries=0, **kwargs)

    def anthropic(self, **kwargs):
        import anthropic

        return anthropic.Anthropic(base_url=self.url, api_key=LANE_KEY, max_retries=0, **kwargs)


def runtime(tokenizer, model_path, engine, max_context=2048, fit=True) -> LaneRuntime:
    return LaneRuntime(
        name="test", max_context=max_context, slack=16, fit_max_tokens=fit, lane_key=LANE_KEY,
        tokenizer=tokenizer, template=ChatTemplate.load("chatml-tools", model_path),
        sanitizer=Sanitizer(tokenizer.special_literals), engine=engine,
    )


@pytest.fixture(scope="session")
def fake_served(tokenizer, model_path):
    engine = FakeEngine(tokenizer)
    served = ServedLane(runtime(tokenizer, model_path, engine)).start()
    yield served
    served.stop()


@pytest.fixture
def fake_lane(fake_served):
    """The fake-engine lane, its engine reset and its window settings restored for each test."""
    engine = fake_served.runtime.engine
    state = engine.state
    engine.reset()
    engine.state = state
    fake_served.runtime.max_context, fake_served.runtime.fit_max_tokens = 2048, True
    return fake_served


@pytest.fixture(scope="module")
def real_lane(tokenizer, model_path):
    """A lane on the real model: LaneApp + EngineSupervisor + `python -m engine` (llama.cpp, SmolLM2)."""
    engine = EngineSupervisor(EngineOptions(model_path=model_path, n_ctx=2048, slots=2, threads=2), name="lanetest")
    served = ServedLane(runtime(tokenizer, model_path, engine)).start(ready_timeout=180)
    yield served
    served.stop()
