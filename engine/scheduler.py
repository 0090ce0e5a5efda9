"""Slots over one llama.cpp context: each step decodes one batch that serves every active request.

Sequence id = slot index. A step puts the decode tokens of every generating slot into the
batch first, then prefill chunks of waiting prompts, within the step budget below. New
requests join at the next step. The scheduler is single-threaded: the server calls
submit/cancel/step from one thread and receives messages through `emit`.

Step budget policy (StepPolicy; every knob is an engine option):
- A step that hands a token to somebody -- any slot is decoding, or the shortest waiting
  prompt would finish within the step -- is an *interactive* step: its prefill is capped
  so that the whole step takes about `interactive_ms`. The cap is measured, not guessed:
  an average of seconds per batch token over past steps turns the target time into a
  token count (or `interactive_tokens` fixes it), never below `min_prefill_tokens`.
  On 2 cores a 512-token chunk takes ~2 s, so without the cap every running stream would
  stall for that long at each chunk of somebody else's long prompt.
- A step that hands a token to nobody (only prompts longer than the interactive cap are
  being read) is a *throughput* step: full chunks of `chunk_tokens` (default n_batch),
  the most efficient size.
- Prefill is served shortest-remaining-first, so a short prompt that arrives behind a long
  one gets its first token after one short step instead of after the whole long prompt.
  Against starvation, when shorter prompts took the whole budget, the oldest prompt being
  read still gets `min_prefill_tokens` on top of it, so a stream of short prompts cannot
  stop it.

Reasoning budget (the optional `reasoning` field of `generate`, see protocol.py): a
ThinkTracker follows the think block over the completion; when the block has used
`budget` tokens and is still open, the `wrap_ids` are emitted at once and decoded as
forced tokens (the KV cache continues; nothing is re-read), then sampling resumes.

Counting rules (what the lane can rely on):
- A token that ends generation (end-of-generation, or one of stop_ids) is not emitted and
  is not counted in completion_tokens; finish_reason is "stop".
- completion_tokens == number of ids sent in `tokens` messages for the request (forced
  wrap-up ids included).
- "length" when max_tokens were emitted, or when prompt_tokens + completion_tokens reached
  n_ctx (the per-slot window; a prompt must leave room for at least one new token). A
  forced wrap-up is cut short by either limit.
- cached_tokens: prompt tokens taken from the slot's KV cache instead of being prefilled.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from . import protocol
from .binding import Batch, LlamaError, Model, Sampler, SamplingParams

IDLE, PREFILL, DECODE = "idle", "prefill", "decode"


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the common case for a follow-up turn: one C-speed comparison
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


# ----- the step budget

@dataclass
class StepPolicy:
    """How many prefill tokens one step may carry (see the module docstring for the policy)."""

    chunk_tokens: int | None = None  # throughput steps: tokens per step; None = n_batch
    # Interactive steps: target duration of the whole step. Measured here (2 cores, SmolLM2,
    # bench/bench_hol.py: a 3K-token prompt, 4 short requests streaming beside it): 500 ms
    # reads ~100-170-token chunks and the long prompt's TTFT grew 1.15-1.17x; 250 ms made it
    # 1.36x. Chunks near 512 are most efficient but stall every stream ~2 s per chunk.
    interactive_ms: float = 500.0
    interactive_tokens: int | None = None  # interactive steps: a fixed prefill cap instead of the measured one
    # Interactive prefill never below this (chunks under ~64 tokens run at half speed or
    # worse here), and the oldest prompt's guaranteed share of every step.
    min_prefill_tokens: int = 64
    ema_weight: float = 0.3  # weight of the newest step in the seconds-per-token average

    def __post_init__(self) -> None:
        if self.chunk_tokens is not None and self.chunk_tokens < 1:
            raise ValueError("chunk_tokens must be >= 1")
        if self.interactive_ms <= 0:
            raise ValueError("interactive_ms must be > 0")
        if self.interactive_tokens is not None and self.interactive_tokens < 1:
            raise ValueError("interactive_tokens must be >= 1")
        if self.min_prefill_tokens < 1:
            raise ValueError("min_prefill_tokens must be >= 1")
        if not 0 < self.ema_weight <= 1:
            raise ValueError("ema_weight must be in (0, 1]")


class StepCost:
    """Running average of seconds per batch token, from steps that carried prefill."""

    def __init__(self, weight: float):
        self.weight = weight
        self.sec_per_token: float | None = None

    def observe(self, n_tokens: int, seconds: float) -> None:
        if n_tokens <= 0 or seconds <= 0:
            return
        x = seconds / n_tokens
        self.sec_per_token = x if self.sec_per_token is None else (
            self.weight * x + (1 - self.weight) * self.sec_per_token)

    def tokens_for(self, seconds: float) -> int | None:
        """How many batch tokens fit in `seconds`; None until a step was measured."""
        if not self.sec_per_token:
            return None
        return int(seconds / self.sec_per_token)


# ----- the reasoning budget

@dataclass(frozen=True)
class ReasoningBudget:
    """The `reasoning` field of a generate message."""

    budget: int
    start_ids: tuple[int, ...]
    end_ids: tuple[int, ...]
    wrap_ids: tuple[int, ...]
    thinking_at_start: bool

    @classmethod
    def from_field(cls, value, n_vocab: int) -> "ReasoningBudget | None":
        """Validate the field (None/absent: no budget); raises ValueError naming what is wrong."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError("reasoning must be an object")
        budget = value.get("budget")
        if type(budget) is not int or budget < 0:
            raise ValueError("reasoning.budget must be an integer >= 0")
        lists = {}
        for name in ("start_ids", "end_ids", "wrap_ids"):
            ids = value.get(name) or []
            if not isinstance(ids, list) or not all(type(t) is int and 0 <= t < n_vocab for t in ids):
                raise ValueError(f"reasoning.{name} must be a list of token ids in [0, {n_vocab})")
            lists[name] = tuple(ids)
        if not lists["wrap_ids"]:
            raise ValueError("reasoning.wrap_ids must not be empty (it closes the think block)")
        at_start = value.get("thinking_at_start", False)
        if type(at_start) is not bool:
            raise ValueError("reasoning.thinking_at_start must be a boolean")
        return cls(budget, lists["start_ids"], lists["end_ids"], lists["wrap_ids"], at_start)


class ThinkTracker:
    """Follows one request's think block over its completion tokens and says when to wrap it up.

    States: "before" (waiting to see whether the completion begins with start_ids), "open",
    "closed" (closed by end_ids or by the wrap-up; or never opened). Counting:
    - `count`, the budget's count: sampled tokens emitted while the block was open (the
      start_ids that open it are not counted; the end_ids that close it are).
    - `reasoning_tokens` (reported in usage): `count` plus the forced wrap-up ids emitted,
      i.e. every completion token from just after the opening through the close of the block.
    """

    def __init__(self, rb: ReasoningBudget):
        self.rb = rb
        self.state = "open" if rb.thinking_at_start else ("before" if rb.start_ids else "closed")
        self.head: list[int] = []
        self.tail: deque[int] = deque(maxlen=max(len(rb.end_ids), 1))
        self.count = 0
        self.forced = 0
        self.hit = False

    @property
    def reasoning_tokens(self) -> int:
        return self.count + self.forced

    def at_start(self, room: int) -> list[int]:
        """Forced ids due before the first sampled token: only budget 0 with thinking_at_start."""
        return self._wrap(room) if self.state == "open" and self.rb.budget == 0 else []

    def on_sampled(self, token: int, room: int) -> list[int]:
        """Account one emitted sampled token; returns the wrap-up ids to emit after it (at most `room`)."""
        if self.state == "before":
            self.head.append(token)
            n = len(self.head)
            if self.head != list(self.rb.start_ids[:n]):
                self.state = "closed"  # the completion does not begin with start_ids: no block
            elif n == len(self.rb.start_ids):
                self.state = "open"
                if self.rb.budget == 0:
                    return self._wrap(room)
            return []
        if self.state != "open":
            return []
        self.count += 1
        if self.rb.end_ids:
            self.tail.append(token)
            if tuple(self.tail) == self.rb.end_ids:
                self.state = "closed"
                return []
        if self.count >= self.rb.budget:
            return self._wrap(room)
        return []

    def _wrap(self, room: int) -> list[int]:
        ids = list(self.rb.wrap_ids[:max(room, 0)])
        self.state = "closed"  # the wrap-up ends with the block's close
        self.hit = True
        self.forced = len(ids)
        return ids


# ----- requests and slots

@dataclass
class Request:
    """One generate request as the scheduler sees it."""

    id: str
    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams
    stop_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    reasoning: ReasoningBudget | None = None
    t_arrive: float = field(default_factory=time.perf_counter)

    @classmethod
    def from_message(cls, msg: dict, n_ctx: int, n_vocab: int) -> "Request":
        """Validate a `generate` message; raises ValueError with a message fit for the lane."""
        rid = msg.get("id")
        if not isinstance(rid, str) or not rid:
            raise ValueError("generate needs a non-empty string id")
        prompt = msg.get("prompt")
        if not isinstance(prompt, list) or not prompt:
            raise ValueError("prompt must be a non-empty list of token ids")
        if not all(type(t) is int and 0 <= t < n_vocab for t in prompt):
            raise ValueError(f"prompt token ids must be integers in [0, {n_vocab})")
        # At least one new token must fit: prompt + completion never exceeds n_ctx.
        if len(prompt) >= n_ctx:
            raise ValueError(f"prompt is too long: {len(prompt)} tokens > {n_ctx - 1} maximum")
        max_tokens = msg.get("max_tokens")
        if type(max_tokens) is not int or max_tokens < 1:
            raise ValueError("max_tokens must be an integer >= 1")
        stop_ids = msg.get("stop_ids") or []
        if not isinstance(stop_ids, list) or not all(type(t) is int for t in stop_ids):
            raise ValueError("stop_ids must be a list of integers")
        try:
            sampling = SamplingParams(
                temperature=float(msg.get("temperature") or 0.0),
                top_p=float(msg.get("top_p") if msg.get("top_p") is not None else 1.0),
                top_k=int(msg.get("top_k") or 0),
                seed=None if msg.get("seed") is None else int(msg["seed"]),
            )
        except (TypeError, ValueError):
            raise ValueError("temperature/top_p/top_k/seed must be numbers") from None
        if sampling.temperature < 0:
            raise ValueError("temperature must be >= 0")
        reasoning = ReasoningBudget.from_field(msg.get("reasoning"), n_vocab)
        return cls(rid, list(prompt), max_tokens, sampling, frozenset(stop_ids), bool(msg.get("ignore_eos")),
                   reasoning)


@dataclass
class Slot:
    """One sequence of the context: its cached tokens and the request it serves, if any."""

    index: int
    cached: list[int] = field(default_factory=list)  # tokens whose KV sits at positions 0..len-1
    state: str = IDLE
    request: Request | None = None
    sampler: Sampler | None = None
    pending: list[int] = field(default_factory=list)  # prompt tokens (then any lead) still to prefill
    lead: list[int] = field(default_factory=list)  # forced ids prefilled after the prompt, emitted with the first token
    feed: list[int] = field(default_factory=list)  # emitted, not yet decoded (the last sampled + forced ids)
    think: ThinkTracker | None = None
    n_out: int = 0
    n_reused: int = 0
    n_prefill: int = 0
    t_start: float = 0.0
    t_first: float = 0.0
    last_used: float = 0.0


class Scheduler:
    """Runs requests on the model's slots; every message for the lane goes through `emit`."""

    def __init__(self, model: Model, emit: Callable[[dict], None], step_tokens: int | None = None,
                 policy: StepPolicy | None = None, clock: Callable[[], float] = time.perf_counter,
                 log_steps: bool = False):
        self.model = model
        self.emit = emit
        self.slots = [Slot(i) for i in range(model.n_seq)]
        self.waiting: deque[Request] = deque()
        self.policy = policy or StepPolicy()
        # The most tokens in one step (decode + prefill): one batch. `step_tokens` is the older
        # name of the throughput chunk and is honoured as such.
        chunk = self.policy.chunk_tokens or step_tokens or model.n_batch
        self.step_tokens = max(min(chunk, model.n_batch), len(self.slots) + 1)
        self.cost = StepCost(self.policy.ema_weight)
        self.clock = clock
        self.log_steps = log_steps  # one stderr line per step: what it carried and how long it took
        self.last_step: dict = {}  # what the last step did: mode, decode/prefill tokens, budget (for tests/logs)
        self.batch = Batch(model.n_batch)

    # ----- requests in

    def submit(self, msg: dict) -> None:
        """Queue a `generate` message; an invalid one is answered with `error` at once."""
        try:
            req = Request.from_message(msg, self.model.n_ctx, self.model.n_vocab)
        except ValueError as exc:
            self.emit({"op": protocol.ERROR, "id": msg.get("id"), "message": str(exc)})
            return
        if any(r.id == req.id for r in self.waiting) or any(s.request and s.request.id == req.id for s in self.slots):
            self.emit({"op": protocol.ERROR, "id": req.id, "message": "a request with this id is already running"})
            return
        self.waiting.append(req)

    def cancel(self, request_id: str) -> bool:
        """Stop a queued or running request now; returns False for an unknown (likely finished) id."""
        for req in self.waiting:
            if req.id == request_id:
                self.waiting.remove(req)
                now = time.perf_counter()
                self._emit_done(req, protocol.FINISH_CANCELLED, 0, 0, None,
                                queue_s=now - req.t_arrive, prefill_s=0.0, prefill_tokens=0,
                                decode_s=0.0, decode_tokens=0, ttft_s=0.0)
                return True
        for slot in self.slots:
            if slot.request and slot.request.id == request_id:
                self._finish(slot, protocol.FINISH_CANCELLED)
                return True
        return False

    def slots_state(self) -> list[dict]:
        """The `slots` reply payload."""
        return [
            {"slot": s.index, "state": s.state, "cached_tokens": len(s.cached),
             "request_id": s.request.id if s.request else None}
            for s in self.slots
        ]

    def has_work(self) -> bool:
        """Whether step() has anything to do."""
        return bool(self.waiting) or any(s.state != IDLE for s in self.slots)

    def close(self) -> None:
        """Free samplers and the batch."""
        for slot in self.slots:
            if slot.sampler:
                slot.sampler.free()
        self.batch.free()

    # ----- the step

    def interactive_budget(self, n_decode: int) -> int:
        """Prefill tokens an interactive step may carry beside n_decode decode tokens."""
        p = self.policy
        if p.interactive_tokens is not None:
            cap = p.interactive_tokens
        else:
            fit = self.cost.tokens_for(p.interactive_ms / 1000.0)
            cap = self.step_tokens if fit is None else fit - n_decode  # unmeasured: no cap yet
        return min(max(p.min_prefill_tokens, cap), self.step_tokens)

    def _plan_prefill(self, n_decode: int) -> list[tuple[Slot, int]]:
        """Which prompts get how many tokens this step (see the policy in the module docstring)."""
        reading = [s for s in self.slots if s.state == PREFILL]
        room = self.step_tokens - n_decode
        if not reading or room <= 0:
            self.last_step.update(mode="decode" if n_decode else "idle", budget=0)
            return []
        order = sorted(reading, key=lambda s: (len(s.pending), s.t_start))  # shortest remaining first
        interactive = self.interactive_budget(n_decode)
        due = n_decode > 0 or len(order[0].pending) <= interactive
        budget = min(interactive if due else self.step_tokens, room)
        self.last_step.update(mode="interactive" if due else "throughput", budget=budget)
        plan: dict[int, int] = {}
        for slot in order:
            if budget <= 0:
                break
            take = min(len(slot.pending), budget)
            plan[slot.index] = take
            budget -= take
        oldest = min(reading, key=lambda s: s.t_start)
        if not plan.get(oldest.index):
            # The starvation guard, on top of the budget: shorter prompts took it all, so the
            # oldest still advances by min_prefill_tokens (as far as the batch has room).
            spare = self.model.n_batch - n_decode - sum(plan.values())
            plan[oldest.index] = max(0, min(len(oldest.pending), self.policy.min_prefill_tokens, spare))
        return [(s, plan[s.index]) for s in order if plan.get(s.index)]

    def step(self) -> None:
        """Admit waiting requests, decode one batch, sample, emit tokens and finishes."""
        self._admit()
        batch = self.batch
        batch.clear()
        self.last_step = {}
        decoding: list[tuple[Slot, int, int | None]] = []  # slot, tokens fed, logits index
        feeders = [s for s in self.slots if s.state == DECODE]
        for k, slot in enumerate(feeders):
            # Usually one token; a forced wrap-up feeds several, leaving one place per later slot.
            allowed = max(1, self.step_tokens - batch.n - (len(feeders) - k - 1))
            chunk = slot.feed[:allowed]
            whole = len(chunk) == len(slot.feed)
            idx = batch.add_many(chunk, len(slot.cached), slot.index, logits_last=whole)
            decoding.append((slot, len(chunk), idx))
        n_decode = batch.n
        prefilling: list[tuple[Slot, int, int | None]] = []  # slot, chunk length, logits index
        for slot, n in self._plan_prefill(n_decode):
            chunk = slot.pending[:n]
            finishes = n == len(slot.pending)
            idx = batch.add_many(chunk, len(slot.cached), slot.index, logits_last=finishes)
            prefilling.append((slot, n, idx))
        if batch.n == 0:
            return
        self.last_step.update(decode_tokens=n_decode, prefill_tokens=batch.n - n_decode)

        t0 = self.clock()
        try:
            self.model.decode(batch)
        except LlamaError as exc:
            self._fail([s for s, _, _ in decoding] + [s for s, _, _ in prefilling], str(exc))
            return
        elapsed = self.clock() - t0
        if prefilling:
            self.cost.observe(batch.n, elapsed)
        self.last_step["ms"] = _ms(elapsed)
        if self.log_steps:
            st = self.last_step
            print(f"engine: step {st.get('mode')} decode {st['decode_tokens']} prefill {st['prefill_tokens']} "
                  f"(budget {st.get('budget')}) {st['ms']:.0f} ms", file=sys.stderr, flush=True)

        now = time.perf_counter()
        to_sample: list[tuple[Slot, int]] = []
        for slot, n, idx in decoding:
            slot.cached.extend(slot.feed[:n])
            del slot.feed[:n]
            if idx is not None:
                to_sample.append((slot, idx))
        for slot, n, idx in prefilling:
            slot.cached.extend(slot.pending[:n])
            del slot.pending[:n]
            if idx is not None:
                to_sample.append((slot, idx))

        out: dict[str, list[int]] = {}
        finished: list[tuple[Slot, str]] = []
        for slot, idx in to_sample:
            req = slot.request
            emitted: list[int] = []
            if slot.state == PREFILL:
                slot.state = DECODE
                slot.t_first = now
                if slot.lead:  # forced ids read with the prompt are emitted first
                    emitted.extend(slot.lead)
                    slot.n_out += len(slot.lead)
                    slot.lead = []
                    if slot.n_out >= req.max_tokens or len(slot.cached) >= self.model.n_ctx:
                        out[req.id] = emitted
                        finished.append((slot, protocol.FINISH_LENGTH))
                        continue
            token = slot.sampler.sample(self.model, idx)
            if token in req.stop_ids or (not req.ignore_eos and self.model.is_eog(token)):
                if emitted:
                    out[req.id] = emitted
                finished.append((slot, protocol.FINISH_STOP))
                continue
            slot.n_out += 1
            slot.feed = [token]
            emitted.append(token)
            if slot.think is not None:
                room = min(req.max_tokens - slot.n_out, self.model.n_ctx - len(slot.cached) - 1)
                forced = slot.think.on_sampled(token, room)
                if forced:
                    slot.feed.extend(forced)
                    slot.n_out += len(forced)
                    emitted.extend(forced)
            out[req.id] = emitted
            # cached + feed is the sequence once the feed is decoded.
            if slot.n_out >= req.max_tokens or len(slot.cached) + len(slot.feed) >= self.model.n_ctx:
                finished.append((slot, protocol.FINISH_LENGTH))
        # Tokens first, then finishes: a done must follow the request's last tokens.
        for rid, ids in out.items():
            self.emit({"op": protocol.TOKENS, "id": rid, "ids": ids})
        for slot, reason in finished:
            self._finish(slot, reason)

    # ----- internals

    def _admit(self) -> None:
        """Move waiting requests into idle slots, reusing the longest cached prefix."""
        while self.waiting:
            idle = [s for s in self.slots if s.state == IDLE]
            if not idle:
                return
            req = self.waiting.popleft()
            # Best prefix match first; among equals the least recently used, to keep hot caches.
            scored = [(common_prefix(s.cached, req.prompt), -s.last_used, s) for s in idle]
            reuse, _, slot = max(scored, key=lambda t: (t[0], t[1]))
            # llama.cpp only returns logits for tokens in the batch, so the last prompt
            # token is always decoded again even when all of it is cached.
            reuse = min(reuse, len(req.prompt) - 1)
            if not self.model.seq_rm(slot.index, reuse, -1):
                self.model.seq_rm(slot.index, -1, -1)
                reuse = 0
            del slot.cached[reuse:]
            slot.request = req
            slot.sampler = Sampler(req.sampling)
            slot.think = ThinkTracker(req.reasoning) if req.reasoning else None
            room = min(req.max_tokens, self.model.n_ctx - len(req.prompt))
            slot.lead = slot.think.at_start(room) if slot.think else []
            slot.pending = req.prompt[reuse:] + slot.lead
            slot.state = PREFILL
            slot.feed = []
            slot.n_out = 0
            slot.n_reused = reuse
            slot.n_prefill = len(req.prompt) - reuse
            slot.t_start = time.perf_counter()
            slot.t_first = 0.0

    def _finish(self, slot: Slot, reason: str) -> None:
        """Send `done` for the slot's request and make the slot idle, keeping its valid cache."""
        req = slot.request
        now = time.perf_counter()
        started = slot.t_first > 0
        read = slot.n_prefill + len(slot.lead) - len(slot.pending)  # lead is emptied once read
        self._emit_done(
            req, reason, slot.n_out, slot.n_reused, slot.think,
            queue_s=slot.t_start - req.t_arrive,
            prefill_s=(slot.t_first if started else now) - slot.t_start,
            prefill_tokens=slot.n_prefill if started else min(read, slot.n_prefill),
            decode_s=(now - slot.t_first) if started else 0.0,
            decode_tokens=max(slot.n_out - 1, 0),
            ttft_s=(slot.t_first - req.t_arrive) if started else 0.0,
        )
        # What `cached` lists is exactly what the KV holds, so the prefix stays reusable;
        # the removal guards against anything decoded past it.
        self.model.seq_rm(slot.index, len(slot.cached), -1)
        self._clear(slot)
        slot.last_used = now

    def _clear(self, slot: Slot) -> None:
        if slot.sampler:
            slot.sampler.free()
        slot.sampler = None
        slot.request = None
        slot.think = None
        slot.state = IDLE
        slot.pending = []
        slot.lead = []
        slot.feed = []

    def fail_all(self, message: str) -> None:
        """After an unexpected failure: end every running and queued request with `error`, drop all caches."""
        while self.waiting:
            req = self.waiting.popleft()
            self.emit({"op": protocol.ERROR, "id": req.id, "message": message})
        self._fail([s for s in self.slots if s.request], message)
        for slot in self.slots:  # the failure may have left any slot's cache out of step with `cached`
            self.model.seq_rm(slot.index, -1, -1)
            slot.cached = []

    def _fail(self, slots: list[Slot], message: str) -> None:
        """Report an error for each slot's request and forget those slots' caches."""
        print(f"engine: requests failed: {message}", file=sys.stderr, flush=True)
        for slot in slots:
            req = slot.request
            self.emit({"op": protocol.ERROR, "id": req.id, "message": message})
            self.model.seq_rm(slot.index, -1, -1)
            slot.cached = []
            self._clear(slot)

    def _emit_done(self, req: Request, reason: str, n_out: int, n_reused: int, think: ThinkTracker | None, *,
                   queue_s: float, prefill_s: float, prefill_tokens: int,
                   decode_s: float, decode_tokens: int, ttft_s: float) -> None:
        usage = {"prompt_tokens": len(req.prompt), "completion_tokens": n_out, "cached_tokens": n_reused}
        if req.reasoning is not None:
            usage["reasoning_tokens"] = think.reasoning_tokens if think else 0
            usage["reasoning_budget_hit"] = bool(think and think.hit)
        self.emit({
            "op": protocol.DONE, "id": req.id, "finish_reason": reason, "usage": usage,
            "timings": {"queue_ms": _ms(queue_s), "prefill_ms": _ms(prefill_s), "prefill_tokens": prefill_tokens,
                        "decode_ms": _ms(decode_s), "decode_tokens": decode_tokens, "ttft_ms": _ms(ttft_s)},
        })
