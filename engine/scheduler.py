"""Slots over one llama.cpp context: each step decodes one batch that serves every active request.

Sequence id = slot index. A step puts one decode token from each generating slot into the
batch first, then fills the rest of the per-step token budget with prefill chunks of
waiting prompts (oldest first), so a long prompt never stalls running streams for more
than one chunk. New requests join at the next step. The scheduler is single-threaded:
the server calls submit/cancel/step from one thread and receives messages through `emit`.

Counting rules (what the lane can rely on):
- A token that ends generation (end-of-generation, or one of stop_ids) is not emitted and
  is not counted in completion_tokens; finish_reason is "stop".
- completion_tokens == number of ids sent in `tokens` messages for the request.
- "length" when max_tokens were emitted, or when prompt_tokens + completion_tokens reached
  n_ctx (the per-slot window; a prompt must leave room for at least one new token).
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


@dataclass
class Request:
    """One generate request as the scheduler sees it."""

    id: str
    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams
    stop_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
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
        return cls(rid, list(prompt), max_tokens, sampling, frozenset(stop_ids), bool(msg.get("ignore_eos")))


@dataclass
class Slot:
    """One sequence of the context: its cached tokens and the request it serves, if any."""

    index: int
    cached: list[int] = field(default_factory=list)  # tokens whose KV sits at positions 0..len-1
    state: str = IDLE
    request: Request | None = None
    sampler: Sampler | None = None
    pending: list[int] = field(default_factory=list)  # prompt tokens still to prefill
    next_token: int | None = None  # sampled and emitted, not yet decoded
    n_out: int = 0
    n_reused: int = 0
    n_prefill: int = 0
    t_start: float = 0.0
    t_first: float = 0.0
    last_used: float = 0.0


class Scheduler:
    """Runs requests on the model's slots; every message for the lane goes through `emit`."""

    def __init__(self, model: Model, emit: Callable[[dict], None], step_tokens: int | None = None):
        self.model = model
        self.emit = emit
        self.slots = [Slot(i) for i in range(model.n_seq)]
        self.waiting: deque[Request] = deque()
        # Per-step token budget: decode tokens + prefill chunk; never above what one batch holds.
        self.step_tokens = min(step_tokens or model.n_batch, model.n_batch)
        self.step_tokens = max(self.step_tokens, len(self.slots) + 1)
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
                self._emit_done(req, protocol.FINISH_CANCELLED, 0, 0, now,
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

    def step(self) -> None:
        """Admit waiting requests, decode one batch, sample, emit tokens and finishes."""
        self._admit()
        batch = self.batch
        batch.clear()
        decoding: list[tuple[Slot, int]] = []
        prefilling: list[tuple[Slot, int, int | None]] = []  # slot, chunk length, logits index
        for slot in self.slots:
            if slot.state == DECODE:
                idx = batch.add(slot.next_token, len(slot.cached), slot.index, True)
                decoding.append((slot, idx))
        budget = self.step_tokens - batch.n
        for slot in sorted((s for s in self.slots if s.state == PREFILL), key=lambda s: s.t_start):
            if budget <= 0:
                break
            chunk = slot.pending[:budget]
            finishes = len(chunk) == len(slot.pending)
            idx = batch.add_many(chunk, len(slot.cached), slot.index, logits_last=finishes)
            prefilling.append((slot, len(chunk), idx))
            budget -= len(chunk)
        if batch.n == 0:
            return

        try:
            self.model.decode(batch)
        except LlamaError as exc:
            self._fail([s for s, _ in decoding] + [s for s, _, _ in prefilling], str(exc))
            return

        now = time.perf_counter()
        to_sample: list[tuple[Slot, int]] = []
        for slot, idx in decoding:
            slot.cached.append(slot.next_token)
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
            token = slot.sampler.sample(self.model, idx)
            if slot.state == PREFILL:
                slot.state = DECODE
                slot.t_first = now
            if token in req.stop_ids or (not req.ignore_eos and self.model.is_eog(token)):
                finished.append((slot, protocol.FINISH_STOP))
                continue
            slot.n_out += 1
            slot.next_token = token
            out[req.id] = [token]
            # cached holds prompt + all emitted tokens but this one, so +1 is the sequence length.
            if slot.n_out >= req.max_tokens or len(slot.cached) + 1 >= self.model.n_ctx:
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
            slot.pending = req.prompt[reuse:]
            slot.state = PREFILL
            slot.next_token = None
            slot.n_out = 0
            slot.n_reused = reuse
            slot.n_prefill = len(slot.pending)
            slot.t_start = time.perf_counter()
            slot.t_first = 0.0

    def _finish(self, slot: Slot, reason: str) -> None:
        """Send `done` for the slot's request and make the slot idle, keeping its valid cache."""
        req = slot.request
        now = time.perf_counter()
        started = slot.t_first > 0
        self._emit_done(
            req, reason, slot.n_out, slot.n_reused, now,
            queue_s=slot.t_start - req.t_arrive,
            prefill_s=(slot.t_first if started else now) - slot.t_start,
            prefill_tokens=slot.n_prefill - len(slot.pending),
            decode_s=(now - slot.t_first) if started else 0.0,
            decode_tokens=max(slot.n_out - 1, 0),
            ttft_s=(slot.t_first - req.t_arrive) if started else 0.0,
        )
        # What `cached` lists is exactly what the KV holds, so the prefix stays reusable;
        # the removal guards against anything decoded past it.
        self.model.seq_rm(slot.index, len(slot.cached), -1)
        if slot.sampler:
            slot.sampler.free()
        slot.sampler = None
        slot.request = None
        slot.state = IDLE
        slot.pending = []
        slot.next_token = None
        slot.last_used = now

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
            if slot.sampler:
                slot.sampler.free()
            slot.sampler = None
            slot.request = None
            slot.state = IDLE
            slot.pending = []
            slot.next_token = None

    def _emit_done(self, req: Request, reason: str, n_out: int, n_reused: int, now: float, *,
                   queue_s: float, prefill_s: float, prefill_tokens: int,
                   decode_s: float, decode_tokens: int, ttft_s: float) -> None:
        self.emit({
            "op": protocol.DONE, "id": req.id, "finish_reason": reason,
            "usage": {"prompt_tokens": len(req.prompt), "completion_tokens": n_out, "cached_tokens": n_reused},
            "timings": {"queue_ms": _ms(queue_s), "prefill_ms": _ms(prefill_s), "prefill_tokens": prefill_tokens,
                        "decode_ms": _ms(decode_s), "decode_tokens": decode_tokens, "ttft_ms": _ms(ttft_s)},
        })
