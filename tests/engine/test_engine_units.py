"""Pure pieces of the engine that need no model: prefix matching, request validation, wire encoding."""

from __future__ import annotations

import pytest

from engine import protocol
from engine.scheduler import Request, common_prefix


@pytest.mark.parametrize("a,b,n", [
    ([], [], 0),
    ([1, 2, 3], [], 0),
    ([1, 2, 3], [1, 2, 3], 3),
    ([1, 2, 3], [1, 2, 3, 4], 3),
    ([1, 2, 3, 4], [1, 2, 9, 4], 2),
    ([5], [6], 0),
    (list(range(1000)), list(range(999)) + [-1], 999),
    (list(range(1000)), [0] + [-1] * 999, 1),
])
def test_common_prefix(a, b, n):
    """common_prefix returns the exact longest shared prefix length, both ways round."""
    assert common_prefix(a, b) == n
    assert common_prefix(b, a) == n


def _msg(**kw):
    base = {"op": "generate", "id": "r", "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0.0,
            "top_p": 1.0, "top_k": 0, "seed": None, "stop_ids": [7]}
    base.update(kw)
    return base


def test_request_from_valid_message():
    """A protocol generate message becomes a Request with every field carried over."""
    r = Request.from_message(_msg(temperature=0.7, top_p=0.9, top_k=20, seed=3), n_ctx=16, n_vocab=100)
    assert (r.id, r.prompt, r.max_tokens, r.stop_ids) == ("r", [1, 2, 3], 4, frozenset({7}))
    assert (r.sampling.temperature, r.sampling.top_p, r.sampling.top_k, r.sampling.seed) == (0.7, 0.9, 20, 3)
    assert r.ignore_eos is False


@pytest.mark.parametrize("bad,needle", [
    ({"id": ""}, "id"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 100]}, "prompt"),
    ({"prompt": [1, -1]}, "prompt"),
    ({"prompt": [1, 2.0]}, "prompt"),
    ({"prompt": list(range(16))}, "too long: 16 tokens > 15 maximum"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": "4"}, "max_tokens"),
    ({"stop_ids": "7"}, "stop_ids"),
    ({"temperature": -1}, "temperature"),
    ({"top_k": "many"}, "top_k"),
])
def test_request_validation(bad, needle):
    """Invalid generate messages raise ValueError naming what is wrong."""
    with pytest.raises(ValueError, match=needle):
        Request.from_message(_msg(**bad), n_ctx=16, n_vocab=100)


def test_protocol_round_trip():
    """encode/decode are inverse and produce exactly one line per message."""
    m = {"op": "tokens", "id": "a", "ids": [1, 2]}
    line = protocol.encode(m)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert protocol.decode(line) == m


# ----- reasoning budget field

from engine.scheduler import ReasoningBudget  # noqa: E402


def test_reasoning_field_absent_or_valid():
    """No `reasoning` means no budget; a valid one carries every field over, thinking_at_start defaulting to false."""
    assert Request.from_message(_msg(), n_ctx=16, n_vocab=100).reasoning is None
    r = Request.from_message(_msg(reasoning={"budget": 5, "start_ids": [1], "end_ids": [2, 3], "wrap_ids": [4]}),
                             n_ctx=16, n_vocab=100).reasoning
    assert r == ReasoningBudget(5, (1,), (2, 3), (4,), False)


@pytest.mark.parametrize("bad,needle", [
    ("lots", "reasoning must be an object"),
    ({"budget": -1, "wrap_ids": [4]}, "budget"),
    ({"budget": "5", "wrap_ids": [4]}, "budget"),
    ({"budget": 5}, "wrap_ids must not be empty"),
    ({"budget": 5, "wrap_ids": [100]}, "wrap_ids"),
    ({"budget": 5, "wrap_ids": [4], "end_ids": "</think>"}, "end_ids"),
    ({"budget": 5, "wrap_ids": [4], "thinking_at_start": "yes"}, "thinking_at_start"),
])
def test_reasoning_field_validation(bad, needle):
    """An invalid `reasoning` field is refused with a message naming the bad part."""
    with pytest.raises(ValueError, match=needle):
        Request.from_message(_msg(reasoning=bad), n_ctx=16, n_vocab=100)


# ----- MoE offload patterns

import re  # noqa: E402

from engine.binding import moe_cpu_patterns  # noqa: E402

TENSORS = ["blk.0.ffn_up_exps.weight", "blk.1.ffn_gate_up_exps.weight", "blk.1.ffn_down_exps.weight",
           "blk.2.ffn_gate_exps.weight", "blk.10.ffn_up_exps.weight", "blk.0.ffn_up.weight",
           "blk.0.ffn_up_shexp.weight", "blk.0.attn_q.weight"]


def _kept_in_ram(patterns):
    return [t for t in TENSORS if any(re.search(p, t) for p in patterns)]  # llama.cpp uses regex_search


def test_n_cpu_moe_patterns_pick_the_first_layers_experts_only():
    """--n-cpu-moe 2 matches the expert tensors of blocks 0 and 1 only: not blk.10, not dense or shared-expert weights."""
    assert _kept_in_ram(moe_cpu_patterns(2)) == TENSORS[:3]
    assert moe_cpu_patterns(0) == [] and moe_cpu_patterns(None) == []


def test_cpu_moe_patterns_pick_every_expert_tensor():
    """--cpu-moe matches the expert tensors of every block, and nothing else."""
    assert _kept_in_ram(moe_cpu_patterns(None, cpu_moe=True)) == TENSORS[:5]
