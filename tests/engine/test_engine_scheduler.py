"""The scheduler's step contract, checked against a fake model that records every batch it is given."""

from __future__ import annotations

import pytest

from engine import scheduler as sched_mod
from engine.binding import LlamaError
from engine.scheduler import Scheduler

EOG = 99


class FakeModel:
    """Stands in for binding.Model: records batches as (token, pos, seq, logits) rows; never computes."""

    def __init__(self, n_seq=2, n_batch=8, n_ctx=64):
        self.n_seq, self.n_batch, self.n_ctx, self.n_vocab = n_seq, n_batch, n_ctx, 100
        self.batches: list[list[tuple[int, int, int, bool]]] = []
        self.removed: list[tuple[int, int, int]] = []
        self.fail_next = False

    def decode(self, batch):
        raw = batch.raw
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

    def build(**kw):
        model = FakeModel(**kw)
        out: list[dict] = []
        return model, Scheduler(model, out.append), out

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
