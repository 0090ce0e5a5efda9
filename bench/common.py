"""Helpers shared by the engine benchmarks: prompts as token ids, a timed request schedule, percentiles.

Not a benchmark itself. Every prompt made here is unique (a run-wide counter near its
start), so no benchmark profits from the prefix cache unless it means to.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import llama_cpp  # noqa: E402

from engine import protocol  # noqa: E402
from engine.client import EngineProcess  # noqa: E402
from engine.models import smollm2_path  # noqa: E402

__all__ = ["EngineProcess", "NoiseMeter", "Timed", "Tokenizer", "fmt_ratio", "mean", "p50", "run_schedule",
           "smollm2_path", "start_engine"]

_SILENT = llama_cpp.llama_log_callback(lambda level, text, user: None)

WORDS = ("the a lighthouse keeper found message bottle storm harbour ship rope lantern night morning "
         "wave rock island village letter captain crew sea wind rain old young quiet loud read wrote "
         "kept carried opened closed saw heard under over across beside before after because while "
         "server request token engine cache batch queue thread socket kernel memory disk latency").split()


def start_engine(model_path: str, log: str | None = None, **kwargs) -> EngineProcess:
    """An engine child whose stderr goes to the file `log` (default: nowhere), so tables stay readable."""
    stderr = open(log, "a") if log else subprocess.DEVNULL
    return EngineProcess(model_path, stderr=stderr, **kwargs)


class NoiseMeter:
    """How much CPU other processes took while a benchmark ran (this machine is shared).

    Busy CPU time from /proc/stat minus this process's and its waited-for children's
    (engines, the peer server: close them before `report`).
    """

    def __init__(self):
        self.t0, self.busy0, self.own0 = time.monotonic(), self._busy(), self._own()

    @staticmethod
    def _busy() -> float:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:8]]
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def report(self) -> str:
        wall = time.monotonic() - self.t0
        others = max(0.0, (self._busy() - self.busy0) - (self._own() - self.own0))
        cores = os.cpu_count() or 1
        return (f"other processes used {others / wall:.2f} of {cores} cores during this run "
                f"({wall:.0f} s); above ~0.2 the figures are disturbed")


class Tokenizer:
    """llama.cpp's own tokenizer for the model, loaded vocab-only (no weights, no context)."""

    def __init__(self, model_path: str):
        llama_cpp.llama_log_set(_SILENT, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(model_path.encode(), params)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self._n = itertools.count(1)

    def encode(self, text: str) -> list[int]:
        data = text.encode()
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), False, True)
        return list(buf[:n])

    def chat(self, user: str) -> list[int]:
        """A one-turn ChatML prompt."""
        return self.encode(f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")

    def question(self, text: str = "Tell me a long story about a lighthouse keeper.") -> list[int]:
        """A short chat prompt (~30 tokens), unique in this run."""
        return self.chat(f"(note {next(self._n)}) {text}")

    def document(self, n_tokens: int, seed: int | None = None) -> list[int]:
        """About n_tokens of varied prose as ids (cut to exactly n_tokens), unique in this run."""
        rng = random.Random(seed if seed is not None else next(self._n))
        out = self.encode(f"Log {next(self._n)}.")
        while len(out) < n_tokens:
            sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
            out += self.encode(f" {sentence.capitalize()}.")
        return out[:n_tokens]

    def long_chat(self, n_tokens: int, question: str = "Summarise this log in one sentence.") -> list[int]:
        """A ChatML prompt of exactly n_tokens: a question and a document."""
        head = self.encode(f"<|im_start|>user\n{question}\n")
        tail = self.encode("<|im_end|>\n<|im_start|>assistant\n")
        return head + self.document(n_tokens - len(head) - len(tail)) + tail

    def close(self) -> None:
        llama_cpp.llama_model_free(self.model)


@dataclass
class Timed:
    """One request of a schedule and what happened to it (times are perf_counter seconds)."""

    name: str
    at: float  # when it arrives, seconds after the schedule starts
    prompt: list[int]
    max_tokens: int
    extra: dict = field(default_factory=dict)
    t_arrive: float = 0.0
    t_sent: float = 0.0
    t_first: float = 0.0
    t_done: float = 0.0
    tokens: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    done: dict | None = None

    @property
    def ttft(self) -> float:
        """From arrival (not sending: a serialized client makes it wait) to the first token."""
        return self.t_first - self.t_arrive

    @property
    def itl(self) -> float:
        """Mean gap between this request's tokens after the first."""
        ts = self.token_times
        return (ts[-1] - ts[0]) / (len(ts) - 1) if len(ts) > 1 else 0.0


def run_schedule(engine: EngineProcess, reqs: list[Timed], serialized: bool = False, timeout: float = 600.0) -> float:
    """Send each request at its arrival time (serialized: also only after the previous one is done).

    Returns the wall time from the start to the last done. Requests are sent in list order.
    """
    todo = sorted(reqs, key=lambda r: r.at)
    by_id: dict[str, Timed] = {}
    open_ids: set[str] = set()
    t0 = time.perf_counter()
    deadline = t0 + timeout
    for r in todo:
        r.t_arrive = t0 + r.at
    while todo or open_ids:
        now = time.perf_counter()
        if now > deadline:
            raise TimeoutError("schedule did not finish")
        while todo and now >= todo[0].t_arrive and not (serialized and open_ids):
            r = todo.pop(0)
            rid = engine.start(r.prompt, r.max_tokens, **r.extra)
            r.t_sent = time.perf_counter()
            by_id[rid] = r
            open_ids.add(rid)
        wait = (todo[0].t_arrive - now) if todo and not (serialized and open_ids) else 1.0
        if not open_ids:
            time.sleep(max(wait, 0.0))
            continue
        try:
            msg = engine.recv(timeout=max(min(wait, 1.0), 0.001))
        except TimeoutError:
            continue
        now = time.perf_counter()
        r = by_id.get(msg.get("id"))
        if r is None:
            continue
        if msg["op"] == protocol.TOKENS:
            if not r.t_first:
                r.t_first = now
            r.tokens += msg["ids"]
            r.token_times += [now] * len(msg["ids"])
        elif msg["op"] == protocol.DONE:
            r.done, r.t_done = msg, now
            open_ids.discard(msg["id"])
        elif msg["op"] == protocol.ERROR:
            raise RuntimeError(f"{r.name}: {msg['message']}")
    return max(r.t_done for r in reqs) - t0


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def mean(xs: list[float]) -> float:
    return statistics.fmean(xs)


def fmt_ratio(value: float, op: str, target: float) -> str:
    """`12.345x  goal >= 5x: met`; the figure is cut toward failing the goal, never rounded past it."""
    met = value >= target if op == ">=" else value <= target
    shown = math.floor(value * 1000) / 1000 if op == ">=" else math.ceil(value * 1000) / 1000
    return f"{shown:.3f}x  goal {op} {target:g}x: {'met' if met else 'NOT met'}"
