"""The scheduler's step contract, checked against a fake model that records every batch it is given."""

from __future__ import annotations

import pytest

from engine import scheduler as sched_mod
from engine.binding import LlamaError
from engine.scheduler import Scheduler, StepPolicy

EOG = 99


class FakeModel:
    """Stands in for binding.Model: records batches as (token, pos, seq, logits) rows; never computes."""

    def __init__(self, n_seq=2, n_batch=8, n_ctx=64, step_cost=(0.0, 0.0)):
        self.n_seq, self.n_batch, self.n_ctx, self.n_vocab = n_seq, n_batch, n_ctx, 100
        self.batches: list[list[tuple[int, int, int, bool]]] = []
        self.removed: list[tuple[int, int, int]] = []
        self.fail_next = False
        # A fake clock: each decode of n tokens "takes" fixed + per_token * n seconds.
        self.fixed_s, self.per_token_s = step_cost
        self.now = 0.0

    def clock(self):
        return self.now

    def decode(self, batch):
        raw = batch.raw
        self.now += self.fixed_s + self.per_token_s * raw.n_tokens
        self.batches.append([(raw.token[i], raw.pos[i], raw.seq_id[i][0], bool(raw.logits[i]))
                             for i in range(raw.n_tokens)])
        if self.fail_next:
            self.fail_next = False
            raise LlamaError("llama_decode returned 1 (no room in the KV cache)")

    def is_eog(self, token):
        return token == EOG

    def seq_rm(self, seq, p0, p1):
        self.removed.append((seq, p0, p1))
        return True


class ScriptedSampler:
    """Replaces binding.Sampler: each request yields the tokens of `script`, then 7s forever."""

    script: list[int] = []

    def __init__(self, params):
        self.left = list(ScriptedSampler.script)

    def sample(self, model, idx):
        return self.left.pop(0) if self.left else 7

    def free(self):
        pass


@pytest.fixture
def make(monkeypatch):
    monkeypatch.setattr(sched_mod, "Sampler", ScriptedSampler)
    ScriptedSampler.script = []

    def build(policy=None, **kw):
        model = FakeModel(**kw)
        out: list[dict] = []
        return model, Scheduler(model, out.append, policy=policy, clock=model.clock), out

    return build


def _gen(rid, prompt, max_tokens=4, **kw):
    return {"op": "generate", "id": rid, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "top_p": 1, "top_k": 0, "seed": None, "stop_ids": [], **kw}


def test_step_puts_decode_tokens_first_then_prefill_chunks_within_budget(make):
    """Each batch holds every decoding slot's one token first, then prefill up to the step budget; logits only where sampled."""
    model, s, out = make(n_seq=2, n_batch=8)
    s.submit(_gen("a", [1, 2, 3], max_tokens=10))
    s.step()  # a: whole prompt in one chunk, samples its first token
    assert model.batches[-1] == [(1, 0, 0, False), (2, 1, 0, False), (3, 2, 0, True)]
    s.submit(_gen("b", list(range(10, 30)), max_tokens=10))  # 20 tokens: needs 3 steps at 7 per step
    s.step()
    assert model.batches[-1][0] == (7, 3, 0, True)  # a's decode token, at the next position
    assert model.batches[-1][1:] == [(10 + i, i, 1, False) for i in range(7)]
    s.step()
    assert model.batches[-1][1:] == [(17 + i, 7 + i, 1, False) for i in range(7)]
    s.step()
    assert model.batches[-1][0] == (7, 5, 0, True)
    assert model.batches[-1][1:] == [(24 + i, 14 + i, 1, i == 5) for i in range(6)]
    s.step()  # now both decode
    assert model.batches[-1] == [(7, 6, 0, True), (7, 20, 1, True)]
    assert all(len(b) <= 8 for b in model.batches)


def test_new_request_joins_at_next_step_and_is_answered_in_order(make):
    """tokens messages precede the request's done; done carries the counts the tokens imply."""
    model, s, out = make()
    ScriptedSampler.script = [5, 6, EOG]
    s.submit(_gen("a", [1, 2], max_tokens=10))
    while s.has_work():
        s.step()
    assert [m["op"] for m in out] == ["tokens", "tokens", "done"]
    assert [m["ids"] for m in out[:2]] == [[5], [6]]
    assert out[-1]["finish_reason"] == "stop"
    assert out[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "cached_tokens": 0}


def test_decode_failure_errors_the_requests_and_scheduler_recovers(make):
    """A failed llama_decode ends the requests in that batch with `error`, clears their cache, and later requests run."""
    model, s, out = make()
    s.submit(_gen("a", [1, 2, 3]))
    model.fail_next = True
    s.step()
    assert out == [{"op": "error", "id": "a", "message": "llama_decode returned 1 (no room in the KV cache)"}]
    assert (0, -1, -1) in model.removed
    assert all(st["state"] == "idle" and st["cached_tokens"] == 0 for st in s.slots_state())
    s.submit(_gen("b", [1, 2, 3], max_tokens=2))
    while s.has_work():
        s.step()
    assert out[-1]["op"] == "done" and out[-1]["usage"]["completion_tokens"] == 2


def test_fail_all_ends_running_and_queued_requests(make):
    """fail_all sends one error per running or queued request and leaves every slot idle and empty."""
    model, s, out = make(n_seq=1)
    s.submit(_gen("run", [1, 2]))
    s.submit(_gen("wait", [1, 2]))
    s.step()
    out.clear()
    s.fail_all("boom")
    assert sorted(m["id"] for m in out) == ["run", "wait"] and {m["op"] for m in out} == {"error"}
    assert not s.has_work()
    assert s.slots_state() == [{"slot": 0, "state": "idle", "cached_tokens": 0, "request_id": None}]


def test_slot_choice_prefers_longest_cached_prefix(make):
    """A new prompt goes to the idle slot whose cache shares the most tokens with it, and reuses them."""
    model, s, out = make(n_seq=2)
    ScriptedSampler.script = [EOG]
    s.submit(_gen("a", [1, 2, 3, 4]))
    s.submit(_gen("b", [5, 6, 7, 8]))
    s.step()
    assert [st["cached_tokens"] for st in s.slots_state()] == [4, 4]
    ScriptedSampler.script = [EOG]
    s.submit(_gen("c", [5, 6, 7, 9, 10]))
    s.step()
    done = out[-1]
    assert done["id"] == "c" and done["usage"]["cached_tokens"] == 3
    assert model.batches[-1] == [(9, 3, 1, False), (10, 4, 1, True)]  # slot 1, only the new tail
    assert (1, 3, -1) in model.removed  # the stale tail of slot 1's cache was dropped first


# ----- the step budget policy


def _prefill_rows(batch, seq):
    return [row for row in batch if row[2] == seq]


def _run(s):
    while s.has_work():
        s.step()


def test_nobody_decoding_means_full_chunks(make):
    """With no stream decoding, a long prompt is read in full step-size chunks (throughput steps)."""
    model, s, out = make(n_seq=2, n_batch=64, n_ctx=512, policy=StepPolicy(interactive_tokens=8, min_prefill_tokens=4))
    s.submit(_gen("long", [5] * 200, max_tokens=1))
    s.step()
    assert len(model.batches[-1]) == 64 and s.last_step["mode"] == "throughput"
    s.step()
    s.step()
    assert [len(b) for b in model.batches] == [64, 64, 64]
    s.step()  # the last 8 tokens finish the prompt: a token is due, so an interactive step
    assert len(model.batches[-1]) == 8 and s.last_step["mode"] == "interactive"
    assert out[-1]["op"] == "done" and out[-1]["timings"]["prefill_tokens"] == 200


def test_prefill_is_capped_while_a_sequence_decodes(make):
    """While any stream decodes, no batch carries more prompt tokens than the interactive budget; after it ends, full chunks again."""
    model, s, out = make(n_seq=2, n_batch=64, n_ctx=512, policy=StepPolicy(interactive_tokens=8, min_prefill_tokens=4))
    s.submit(_gen("short", [1, 2, 3], max_tokens=10))
    s.step()  # short is now decoding
    s.submit(_gen("long", [5] * 200, max_tokens=1))
    for _ in range(9):  # short's 9 remaining decode steps
        s.step()
        batch = model.batches[-1]
        assert batch[0][2] == 0 and batch[0][3]  # short's decode token comes first
        assert len(_prefill_rows(batch, 1)) == 8
    assert out[-1]["id"] == "short" and out[-1]["op"] == "done"
    s.step()  # nobody decodes any more: back to full chunks
    assert len(model.batches[-1]) == 64 and s.last_step["mode"] == "throughput"
    _run(s)
    assert out[-1]["id"] == "long" and out[-1]["timings"]["prefill_tokens"] == 200


def test_interactive_budget_adapts_to_measured_step_time(make):
    """With a cost model of 20 ms + 4 ms/token per step, the measured budget converges to steps of ~interactive_ms (250 ms)."""
    model, s, out = make(n_seq=2, n_batch=512, n_ctx=4096, step_cost=(0.020, 0.004),
                         policy=StepPolicy(interactive_ms=250.0, min_prefill_tokens=4))
    s.submit(_gen("short", [1, 2, 3], max_tokens=40))
    s.step()
    s.submit(_gen("long", [5] * 3000, max_tokens=1))
    durations = []
    for _ in range(30):
        before = model.now
        s.step()
        durations.append(model.now - before)
        assert len(model.batches[-1]) <= 512
    # Fixed point: 0.020 + 0.004 * n = 0.250 -> n = 57.5 tokens per step.
    assert all(abs(d - 0.250) < 0.025 for d in durations[-10:]), durations
    assert 50 <= len(model.batches[-1]) <= 65


def test_short_prompt_behind_long_one_gets_its_token_in_the_next_step(make):
    """Shortest remaining first: short prompts that arrive while a long one is read finish in the next (interactive) step; the long gets the rest."""
    model, s, out = make(n_seq=3, n_batch=64, n_ctx=512, policy=StepPolicy(interactive_tokens=24, min_prefill_tokens=4))
    s.submit(_gen("long", [5] * 300, max_tokens=1))
    s.step()
    assert len(_prefill_rows(model.batches[-1], 0)) == 64
    s.submit(_gen("s1", [70, 71, 72, 73, 74], max_tokens=2))
    s.submit(_gen("s2", [80, 81, 82], max_tokens=2))
    s.step()
    batch = model.batches[-1]
    assert s.last_step["mode"] == "interactive"
    assert len(_prefill_rows(batch, 0)) == 24 - 8  # what the two shorts (5 + 3 tokens) left of the budget
    assert _prefill_rows(batch, 1)[-1][3] and _prefill_rows(batch, 2)[-1][3]  # both shorts sampled this step
    assert sorted(m["id"] for m in out if m["op"] == "tokens") == ["s1", "s2"]


def test_starvation_guard_never_delays_a_short_prompt_that_fits(make):
    """With the budget at its floor, a short prompt that fits still finishes in one step: the oldest's guaranteed share comes on top."""
    model, s, out = make(n_seq=2, n_batch=64, n_ctx=512, policy=StepPolicy(interactive_tokens=8, min_prefill_tokens=8))
    s.submit(_gen("long", [5] * 300, max_tokens=1))
    s.step()
    s.submit(_gen("short", [6] * 8, max_tokens=3))
    s.step()
    assert [m["id"] for m in out if m["op"] == "tokens"] == ["short"]
    assert len(_prefill_rows(model.batches[-1], 0)) == 8 and len(_prefill_rows(model.batches[-1], 1)) == 8


def test_oldest_prompt_is_not_starved_by_a_stream_of_short_ones(make):
    """Even when new short prompts fill every interactive step, the oldest prompt advances by min_prefill_tokens each step (on top of the budget)."""
    model, s, out = make(n_seq=4, n_batch=64, n_ctx=512, policy=StepPolicy(interactive_tokens=12, min_prefill_tokens=4))
    s.submit(_gen("long", [5] * 100, max_tokens=1))
    for k in range(10):  # two 6-token prompts per step: alone they would fill every 12-token step
        s.submit(_gen(f"s{k}a", [50 + k] * 6, max_tokens=1))
        s.submit(_gen(f"s{k}b", [60 + k] * 6, max_tokens=1))
        s.step()
        assert s.last_step["mode"] == "interactive"
        assert len(_prefill_rows(model.batches[-1], 0)) == 4, model.batches[-1]
        assert len(model.batches[-1]) == 12 + 4  # the shorts kept their whole budget


# ----- the reasoning budget

WRAP = [50, 51, 52]


def _think(budget, **kw):
    return {"reasoning": {"budget": budget, "start_ids": kw.get("start", []), "end_ids": kw.get("end", [60]),
                          "wrap_ids": kw.get("wrap", WRAP), "thinking_at_start": kw.get("at_start", True)}}


def _emitted(out, rid):
    return [m["ids"] for m in out if m["op"] == "tokens" and m["id"] == rid]


def test_budget_forces_wrap_up_after_budget_thinking_tokens(make):
    """thinking_at_start, budget 3: the wrap ids follow the 3rd token in the same message, are decoded as one forced run, then sampling continues."""
    model, s, out = make(n_seq=1, n_batch=16, n_ctx=64)
    ScriptedSampler.script = [10, 11, 12, 13, 14]
    s.submit(_gen("a", [1, 2, 3], max_tokens=8, **_think(3)))
    _run(s)
    assert _emitted(out, "a") == [[10], [11], [12, 50, 51, 52], [13], [14]]
    # Positions continue: 12 at 5, the wrap at 6..8, logits only after the last forced id.
    assert model.batches[3] == [(12, 5, 0, False), (50, 6, 0, False), (51, 7, 0, False), (52, 8, 0, True)]
    assert model.batches[4] == [(13, 9, 0, True)]
    done = out[-1]
    assert done["finish_reason"] == "length"
    assert done["usage"]["completion_tokens"] == 8
    assert done["usage"]["reasoning_tokens"] == 6 and done["usage"]["reasoning_budget_hit"] is True


def test_block_closed_by_end_ids_is_not_wrapped(make):
    """start_ids open the block, end_ids close it within budget: no wrap-up, reasoning counts the tokens after the opening."""
    model, s, out = make(n_seq=1, n_batch=16, n_ctx=64)
    ScriptedSampler.script = [40, 41, 10, 60, 20, EOG]
    s.submit(_gen("a", [1, 2], max_tokens=20, **_think(5, start=[40, 41], end=[60], at_start=False)))
    _run(s)
    assert sum(_emitted(out, "a"), []) == [40, 41, 10, 60, 20]
    assert out[-1]["usage"]["reasoning_tokens"] == 2 and out[-1]["usage"]["reasoning_budget_hit"] is False


def test_block_opened_by_start_ids_is_wrapped_at_budget(make):
    """Without thinking_at_start the count starts after start_ids; the budget then wraps up the still-open block."""
    model, s, out = make(n_seq=1, n_batch=16, n_ctx=64)
    ScriptedSampler.script = [40, 41, 10, 11, 12, 20, EOG]
    s.submit(_gen("a", [1, 2], max_tokens=20, **_think(2, start=[40, 41], at_start=False)))
    _run(s)
    assert sum(_emitted(out, "a"), []) == [40, 41, 10, 11, 50, 51, 52, 12, 20]
    assert out[-1]["usage"]["reasoning_tokens"] == 5 and out[-1]["usage"]["reasoning_budget_hit"] is True


def test_budget_zero_wraps_up_right_after_start_ids(make):
    """Budget 0 without thinking_at_start: the wrap ids follow the last start id at once."""
    model, s, out = make(n_seq=1, n_batch=16, n_ctx=64)
    ScriptedSampler.script = [40, 41, 10, EOG]
    s.submit(_gen("a", [1, 2], max_tokens=20, **_think(0, start=[40, 41], at_start=False)))
    _run(s)
    assert _emitted(out, "a") == [[40], [41, 50, 51, 52], [10]]
    assert out[-1]["usage"]["reasoning_tokens"] == 3 and out[-1]["usage"]["reasoning_budget_hit"] is True


def test_completion_not_beginning_with_start_ids_never_thinks(make):
    """If the completion does not begin with start_ids, nothing is counted or forced, however long it runs."""
    model, s, out = make(n_seq=1, n_batch=16, n_ctx=64)
    ScriptedSampler.script = [40, 9, 10, 11, 12]
    s.submit(_gen("a", [1, 2], max_tokens=6, **_think(1, start=[40, 41], at_start=False)))
    _run(s)
    assert sum(_emitted(out, "a"), []) == [40, 9, 10, 11, 12, 7]
    assert out[-1]["usage"]["reasoning_tokens"] == 0 and out[-1]["usage"]["reasoning_budget_hit"] is False


def test_max_tokens_cuts_the_wrap_up(make):
    """max_tokens bounds the total: a wrap-up that does not fit is cut, and the request ends "length"."""
    model, s, out = make(n_seq=1, n_batch=16, n_ctx=64)
    ScriptedSampler.script = [10, 11, 12]
    s.submit(_gen("a", [1, 2], max_tokens=4, **_think(2)))
    _run(s)
    assert _emitted(out, "a") == [[10], [11, 50, 51]]
    assert out[-1]["finish_reason"] == "length" and out[-1]["usage"]["completion_tokens"] == 4
    assert out[-1]["usage"]["reasoning_tokens"] == 4


def test_budget_zero_reads_the_wrap_up_with_the_prompt(make):
    """Budget 0 with thinking_at_start: the wrap ids are prefilled after the prompt and emitted before the first sampled token."""
    model, s, out = make(n_seq=1, n_batch=16, n_ctx=64)
    ScriptedSampler.script = [10, EOG]
    s.submit(_gen("a", [1, 2, 3], max_tokens=8, **_think(0)))
    _run(s)
    assert model.batches[0] == [(1, 0, 0, False), (2, 1, 0, False), (3, 2, 0, False),
                                (50, 3, 0, False), (51, 4, 0, False), (52, 5, 0, True)]
    assert _emitted(out, "a") == [[50, 51, 52, 10]]
    u = out[-1]["usage"]
    assert u["completion_tokens"] == 4 and u["reasoning_tokens"] == 3 and u["reasoning_budget_hit"] is True
    assert out[-1]["timings"]["prefill_tokens"] == 3  # the prompt only


def test_wrap_up_longer_than_a_step_is_fed_over_several_steps(make):
    """A forced run longer than the batch is decoded over consecutive steps without sampling in between."""
    model, s, out = make(n_seq=1, n_batch=4, n_ctx=64)
    ScriptedSampler.script = [10, 11, EOG]
    wrap = [50, 51, 52, 53, 54, 55]
    s.submit(_gen("a", [1, 2], max_tokens=20, **_think(1, wrap=wrap)))
    _run(s)
    assert _emitted(out, "a") == [[10] + wrap, [11]]
    fed = [row for b in model.batches[1:] for row in b]
    assert [r[0] for r in fed] == [10] + wrap + [11]
    assert [r[1] for r in fed] == list(range(2, 2 + 8))
    assert [r[3] for r in fed] == [False] * 6 + [True, True]  # logits only where sampled
    assert all(len(b) <= 4 for b in model.batches)
