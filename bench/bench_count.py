"""Counting at the lane: a coding agent's 1 MB request, cold and one turn later; render+count vs TTFT.

    .venv/bin/python bench/bench_count.py [--repeats 5] [--no-ttft]

1. count_tokens for an Anthropic-shaped request of about 1,000,000 characters, 300
   messages and 50 tools (code and prose from the Python standard library's sources, as
   a coding agent's tool results would be), cold: none of its pieces in the lane's cache,
   (a) in a lane just started, (b) in a lane whose BPE word cache other traffic warmed.
2. The same request with one new message appended, as an agent sends each turn: the
   pieces already seen come from the cache; only the new message is encoded.
3. Render + count time as a share of time to first token for a ~2,000-token prompt on
   the real model (a lane with its engine, in this process), each prompt new to the
   engine's prefix cache.

Each figure is printed twice: in-process (what the lane's worker thread does: JSON parse,
dialect, sanitize, render, encode) and over HTTP to a lane served by uvicorn on loopback
(what a caller of count_tokens waits). The machine is noisy: compare figures of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import sysconfig
import time
from pathlib import Path

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import httpx  # noqa: E402

from engine.models import smollm2_path  # noqa: E402
from lanes.config import LaneRuntime  # noqa: E402
from lanes.dialects.errors import ANTHROPIC  # noqa: E402
from lanes.engine_client import EngineOptions, EngineSupervisor  # noqa: E402
from lanes.inprocess import ThreadedLane  # noqa: E402
from lanes.sanitize import Sanitizer  # noqa: E402
from lanes.server import LaneApp  # noqa: E402
from lanes.template import ChatTemplate  # noqa: E402
from lanes.tokenizer import LaneTokenizer  # noqa: E402

KEY = "bench-key"


# ----- the request

def source_texts() -> list[str]:
    """The standard library's own sources, in a fixed order: real code, comments and docstrings."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for path in sorted(root.glob("*.py")):
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts


class Corpus:
    """Hands out consecutive slices of the stdlib sources, so no two messages are alike."""

    def __init__(self):
        self.text = "\n".join(source_texts())
        self.pos = 0

    def take(self, n: int) -> str:
        if self.pos + n > len(self.text):
            self.pos = 0
        out = self.text[self.pos:self.pos + n]
        self.pos += n
        return out


def tools(corpus: Corpus, n: int = 50) -> list[dict]:
    return [{
        "name": f"tool_{i}",
        "description": corpus.take(900),
        "input_schema": {"type": "object", "properties": {
            "path": {"type": "string", "description": corpus.take(120)},
            "pattern": {"type": "string", "description": corpus.take(120)},
            "limit": {"type": "integer", "description": "How many results at most."},
            "flags": {"type": "array", "items": {"type": "string"}, "description": corpus.take(60)},
        }, "required": ["path"]},
    } for i in range(n)]


def turn(corpus: Corpus, i: int, result_chars: int) -> list[dict]:
    """One agent turn: the assistant calls a tool, the user message carries its result."""
    call_id = f"toolu_{i:05d}"
    return [
        {"role": "assistant", "content": [
            {"type": "text", "text": corpus.take(200)},
            {"type": "tool_use", "id": call_id, "name": f"tool_{i % 50}", "input": {"path": f"src/module_{i}.py", "limit": 200}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": corpus.take(result_chars)},
        ]},
    ]


def agent_request(target_chars: int = 1_000_000, n_messages: int = 300) -> tuple[dict, Corpus]:
    corpus = Corpus()
    body = {
        "model": "strata", "max_tokens": 4096,
        "system": [{"type": "text", "text": corpus.take(12_000)}, {"type": "text", "text": corpus.take(3_000)}],
        "tools": tools(corpus),
        "messages": [{"role": "user", "content": corpus.take(400)}],
    }
    fixed = len(json.dumps(body))
    turns = (n_messages - 1) // 2
    per_result = (target_chars - fixed - turns * 300) // turns
    for i in range(turns):
        body["messages"] += turn(corpus, i, per_result)
    body["messages"].append({"role": "user", "content": corpus.take(300)})
    return body, corpus


def chars_of(body: dict) -> int:
    return len(json.dumps(body, ensure_ascii=False))


# ----- a lane in this process

class ServedLane(ThreadedLane):
    def __init__(self, runtime: LaneRuntime):
        super().__init__(runtime)
        self.client = httpx.Client(base_url=self.url, headers={"x-api-key": KEY, "content-type": "application/json"},
                                   timeout=600)


class NoEngine:
    """Counting needs no engine; this stands in for the supervisor in part 1 and 2."""

    state, in_flight, restarts = "ready", 0, 0

    async def start(self):
        pass

    async def stop(self):
        pass


def runtime(tokenizer: LaneTokenizer, model_path: str, engine) -> LaneRuntime:
    return LaneRuntime(name="bench", max_context=1 << 20, slack=16, fit_max_tokens=True, lane_key=KEY,
                       tokenizer=tokenizer, template=ChatTemplate.load("chatml-tools", model_path),
                       sanitizer=Sanitizer(tokenizer.special_literals), engine=engine)


# ----- measurements

def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def summary(samples: list[float]) -> str:
    return f"median {ms(statistics.median(samples))}   min {ms(min(samples))}   max {ms(max(samples))}"


def stages(app: LaneApp, raw: bytes) -> dict[str, float]:
    """One in-process count split by stage (what LaneApp._count does, step by step)."""
    from lanes.dialects.anthropic import anthropic_to_request
    from lanes.prepare import render_prompt

    t0 = time.perf_counter()
    body = json.loads(raw)
    t1 = time.perf_counter()
    request = anthropic_to_request(body, counting=True)
    t2 = time.perf_counter()
    text = render_prompt(app.lane, request).text
    t3 = time.perf_counter()
    n = len(app.lane.tokenizer.encode_array(text))
    t4 = time.perf_counter()
    return {"json": t1 - t0, "dialect": t2 - t1, "sanitize+render": t3 - t2, "encode": t4 - t3, "total": t4 - t0,
            "tokens": n, "prompt_chars": len(text)}


def bench_count(model_path: str, repeats: int):
    body, corpus = agent_request()
    raw = json.dumps(body).encode()
    other = Corpus()
    other.pos = len(other.text) // 2
    other_traffic = other.take(1_000_000)  # code the request does not contain
    tokenizer = LaneTokenizer.from_gguf(model_path)
    rt = runtime(tokenizer, model_path, NoEngine())
    app = LaneApp(rt)
    print(f"request: {chars_of(body):,} characters of JSON ({len(raw):,} bytes), {len(body['messages'])} messages, "
          f"{len(body['tools'])} tools")
    first = stages(app, raw)
    print(f"prompt:  {first['prompt_chars']:,} characters, {first['tokens']:,} tokens")

    def new_lane():
        """A new tokenizer: its piece cache and the BPE's own word cache empty (a lane just started)."""
        rt.tokenizer = LaneTokenizer.from_gguf(model_path)

    def running_lane():
        """A lane that has served other traffic: BPE word cache warm, none of this request's pieces cached."""
        new_lane()
        rt.tokenizer.encode(other_traffic)
        rt.tokenizer.pieces.clear()

    served = ServedLane(rt).start()
    results = {}
    try:
        for label, setup in (("1a", new_lane), ("1b", running_lane)):
            in_process, http = [], []
            for _ in range(repeats):
                setup()
                in_process.append(stages(app, raw))
                setup()
                t0 = time.perf_counter()
                r = served.client.post("/v1/messages/count_tokens", content=raw)
                http.append(time.perf_counter() - t0)
                assert r.status_code == 200 and r.json()["input_tokens"] == first["tokens"], r.text[:300]
            results[label] = in_process, http

        # Warm: each run appends one agent turn (the assistant's tool call and the ~3 KB tool result it
        # got) to the conversation so far; the turn before was counted, so its pieces are in the cache.
        warm_stage, warm_http, grown = [], [], dict(body)
        new_lane()
        tokenizer = rt.tokenizer
        app._count(ANTHROPIC, raw)
        for i in range(repeats * 2):
            grown = {**grown, "messages": grown["messages"] + turn(corpus, 10_000 + i, 3_000)}
            grown_raw = json.dumps(grown).encode()
            if i % 2 == 0:
                warm_stage.append(stages(app, grown_raw))
            else:
                t0 = time.perf_counter()
                r = served.client.post("/v1/messages/count_tokens", content=grown_raw)
                warm_http.append(time.perf_counter() - t0)
                assert r.status_code == 200
        results["2"] = warm_stage, warm_http
        # Exactness: the warm count equals the count of a new tokenizer.
        warm_n = app._count(ANTHROPIC, grown_raw)
        new_lane()
        assert app._count(ANTHROPIC, grown_raw) == warm_n
    finally:
        served.stop()

    titles = {
        "1a": "1a. count_tokens, cold, a lane just started (piece cache and BPE word cache empty)",
        "1b": "1b. count_tokens, cold request on a running lane (none of its pieces cached; BPE word cache\n"
              "    warmed by 1 MB of other code)",
        "2": "2. count_tokens, one agent turn appended (tool call + ~3 KB result) to the request counted before",
    }
    for label, (in_process, http) in results.items():
        print("\n" + titles[label])
        for key in ("json", "dialect", "sanitize+render", "encode", "total"):
            print(f"   in-process {key:16s} {summary([s[key] for s in in_process])}")
        print(f"   over HTTP  {'round trip':16s} {summary(http)}")
    print(f"   cache: {len(tokenizer.pieces):,} pieces, {tokenizer.pieces.tokens:,} token units held "
          f"(ids as int32: about {tokenizer.pieces.tokens * 4 / 1e6:.1f} MB)")
    return {label: statistics.median(s["total"] for s in in_process) for label, (in_process, _) in results.items()}


def bench_ttft(model_path: str, repeats: int):
    """TTFT of ~2,000-token prompts on the real model vs the lane's render+count of the same body."""
    corpus = Corpus()
    corpus.pos = 400_000
    tokenizer = LaneTokenizer.from_gguf(model_path)
    engine = EngineSupervisor(EngineOptions(model_path=model_path, n_ctx=4096, slots=2, threads=2), name="bench-ttft")
    rt = runtime(tokenizer, model_path, engine)
    rt.max_context = 4096
    app = LaneApp(rt)
    served = ServedLane(rt).start()
    rows = []
    try:
        for i in range(repeats + 1):
            # A new opening each time: nothing in the engine's prefix cache matches.
            body = {"model": "strata", "max_tokens": 1, "stream": True,
                    "messages": [{"role": "user", "content": f"Request {i}. " + corpus.take(7_000)}]}
            raw = json.dumps(body).encode()
            tokenizer.pieces.clear()
            t0 = time.perf_counter()
            n = app._count(ANTHROPIC, raw)
            count_cold = time.perf_counter() - t0
            tokenizer.pieces.clear()
            t0 = time.perf_counter()
            with served.client.stream("POST", "/v1/messages", content=raw) as r:
                ttft = None
                for line in r.iter_lines():
                    # The first token's event (message_delta when that token was the end of the turn).
                    if ttft is None and line.startswith(("event: content_block_delta", "event: message_delta")):
                        ttft = time.perf_counter() - t0
            if i:  # the first one warms the engine up
                rows.append((n, count_cold, ttft))
    finally:
        served.stop()
    print("\n3. render + count as a share of TTFT (real model, new ~2,000-token prompts, streamed, cold piece cache)")
    for n, count_s, ttft_s in rows:
        print(f"   {n:5d} tokens: render+count {ms(count_s)}   TTFT {ms(ttft_s)}   share {100 * count_s / ttft_s:5.2f} %")
    share = statistics.median(c / t for _, c, t in rows)
    print(f"   median share {100 * share:.2f} %")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-ttft", action="store_true", help="skip part 3 (it starts the engine)")
    args = parser.parse_args()
    model_path = str(smollm2_path())
    print(f"cpus: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}")
    medians = bench_count(model_path, args.repeats)
    if not args.no_ttft:
        bench_ttft(model_path, args.repeats)
    print("\ngoals (in-process medians):")
    for label, goal, what in (("1a", 0.25, "cold < 250 ms, lane just started"),
                              ("1b", 0.25, "cold < 250 ms, running lane"),
                              ("2", 0.02, "one turn appended < 20 ms")):
        value = medians[label]
        print(f"   {what:34s} {'met' if value < goal else 'NOT met':8s} {value * 1000:.1f} ms")


if __name__ == "__main__":
    main()
