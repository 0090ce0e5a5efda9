"""A real lane (lanes.server.LaneApp: dialects, template, exact count, window, events) on a scripted engine.

The engine stand-in has the interface of lanes.engine_client.EngineSupervisor and answers
each request with a script: its text encoded by the lane's own tokenizer, one token per
`tokens` message, optionally paced (per_token_s) or held until released, then `done`.
Tests serve it in a thread (`ServedFakeLane`); the gateway benchmark runs it as its own
process: `python tests/gateway/fakelane.py --port P --key K [--per-token-ms 20]`.
"""

import argparse
import asyncio
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine import protocol  # noqa: E402


@dataclass
class Script:
    """What the fake engine answers to one request."""

    text: str = "Hello there, this is the scripted engine."
    hold: threading.Event | None = None  # tokens wait for this (a request kept in flight)
    per_token_s: float | None = None


class FakeStream:
    def __init__(self, engine, request: dict, ids: list[int], script: Script):
        self.engine, self.request, self.script = engine, request, script
        self.id = request.get("id") or f"fake-{len(engine.requests)}"
        self.ids = ids[: request["max_tokens"]]
        self.full = len(ids)
        self.sent = 0
        self.cancelled = self.finished = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> dict:
        if self.finished:
            raise StopAsyncIteration
        while self.script.hold is not None and not self.script.hold.is_set() and not self.cancelled:
            await asyncio.sleep(0.01)
        pace = self.script.per_token_s if self.script.per_token_s is not None else self.engine.per_token_s
        if pace and self.sent:
            await asyncio.sleep(pace)
        else:
            await asyncio.sleep(0)
        if not self.cancelled and self.sent < len(self.ids):
            self.sent += 1
            return {"op": protocol.TOKENS, "id": self.id, "ids": [self.ids[self.sent - 1]]}
        self.finished = True
        finish = "cancelled" if self.cancelled else "length" if len(self.ids) < self.full else "stop"
        usage = {"prompt_tokens": len(self.request["prompt"]), "completion_tokens": self.sent, "cached_tokens": 0}
        return {"op": protocol.DONE, "id": self.id, "finish_reason": finish, "usage": usage, "timings": {}}

    async def cancel(self):
        self.cancelled = True

    async def aclose(self):
        self.cancelled = self.finished = True


class FakeEngine:
    """A scripted stand-in for EngineSupervisor; `requests` keeps every `generate` message it got."""

    def __init__(self, tokenizer, per_token_s: float = 0.0, text: str | None = None):
        self.tokenizer, self.per_token_s = tokenizer, per_token_s
        self.default = Script(text) if text else Script()
        self.state, self.restarts = "stopped", 0
        self.scripts: list[Script] = []
        self.requests: list[dict] = []
        self.streams: list[FakeStream] = []
        self._ids: dict[str, list[int]] = {}

    def script(self, *scripts):
        self.scripts.extend(s if isinstance(s, Script) else Script(s) for s in scripts)

    def reset(self):
        self.scripts.clear(), self.requests.clear(), self.streams.clear()

    async def start(self):
        self.state = "ready"

    async def stop(self):
        self.state = "stopped"

    async def slots(self):
        live = [s for s in self.streams if not s.finished]
        return [{"slot": i, "state": "generating", "cached_tokens": len(s.request["prompt"]), "request_id": s.id,
                 "generated": s.sent} for i, s in enumerate(live)]

    @property
    def in_flight(self) -> int:
        return sum(not s.finished for s in self.streams)

    def _encode(self, text: str) -> list[int]:
        if text not in self._ids:
            ids = self.tokenizer.encode(text)
            self._ids[text] = ids[1:] if self.tokenizer.bos_id is not None else ids
        return self._ids[text]

    async def open(self, request: dict) -> FakeStream:
        self.requests.append(request)
        script = self.scripts.pop(0) if self.scripts else self.default
        stream = FakeStream(self, request, self._encode(script.text), script)
        self.streams = [s for s in self.streams if not s.finished] + [stream]
        return stream


def build_app(key: str, max_context: int = 2048, slack: int = 16, fit: bool = True, per_token_s: float = 0.0,
              text: str | None = None, name: str = "fake"):
    """(LaneApp, FakeEngine) on the bundled model's tokenizer and the shipped template."""
    from engine.models import smollm2_path
    from lanes.config import LaneRuntime
    from lanes.sanitize import Sanitizer
    from lanes.server import LaneApp
    from lanes.template import ChatTemplate
    from lanes.tokenizer import load_tokenizer

    model = str(smollm2_path())
    tokenizer = load_tokenizer(model)
    engine = FakeEngine(tokenizer, per_token_s, text)
    runtime = LaneRuntime(name=name, max_context=max_context, slack=slack, fit_max_tokens=fit, lane_key=key,
                          tokenizer=tokenizer, template=ChatTemplate.load("chatml-tools", model),
                          sanitizer=Sanitizer(tokenizer.special_literals), engine=engine)
    return LaneApp(runtime), engine


class ServedFakeLane:
    """The fake lane served by uvicorn in a background thread on a free port."""

    def __init__(self, key: str, **options):
        import uvicorn

        from stack import free_port

        self.app, self.engine = build_app(key, **options)
        self.runtime = self.app.lane
        self.key = key
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, lifespan="on", log_level="warning",
                                access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self, timeout: float = 60):
        import httpx

        self.thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", headers={"authorization": f"Bearer {self.key}"}, timeout=2).json().get(
                        "state") == "ready":
                    return self
            except Exception:
                pass
            time.sleep(0.05)
        raise RuntimeError("fake lane not ready")

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


def main():
    parser = argparse.ArgumentParser(description="Serve a lane on the scripted engine (for benchmarks).")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--per-token-ms", type=float, default=0.0)
    parser.add_argument("--max-context", type=int, default=8192)
    parser.add_argument("--text", default=None)
    args = parser.parse_args()
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stratasite.settings")
    import uvicorn

    app, engine = build_app(args.key, max_context=args.max_context, per_token_s=args.per_token_ms / 1000, text=args.text)

    async def with_pace(scope, receive, send):
        """`POST /_pace?ms=N` sets the engine's pace (benchmarks change it between runs)."""
        if scope["type"] == "http" and scope["path"] == "/_pace":
            engine.per_token_s = float(scope["query_string"].decode().partition("ms=")[2]) / 1000
            await send({"type": "http.response.start", "status": 204, "headers": []})
            return await send({"type": "http.response.body", "body": b""})
        return await app(scope, receive, send)

    uvicorn.run(with_pace, host="127.0.0.1", port=args.port, lifespan="on", log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
