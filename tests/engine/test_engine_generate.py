"""Generation through the real engine process: tokens, finish reasons, usage, cancel, prefix cache, batching."""

from __future__ import annotations


# Every comparison below is exact: on this CPU build, llama.cpp gave bit-identical greedy
# tokens whether a sequence was decoded alone, next to others, or after a prefix-cache hit.
# If a future build/backend breaks that, these tests fail rather than hide it.


def test_ready_reports_window_and_slots(engine):
    """`ready` carries the per-slot window we asked for, the slot count and the model file."""
    assert engine.ready["n_ctx"] == 1024
    assert engine.ready["n_slots"] == 4
    assert engine.ready["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert engine.ready["n_vocab"] == 49152


def test_greedy_matches_in_process_loop_and_stops_on_eog(engine, ref, questions):
    """A greedy request returns exactly the in-process loop's tokens, ends "stop" at eog, and counts right."""
    prompt = ref.chat(questions[0])
    expected, ended_on_eog = ref.greedy(prompt, 16)
    assert ended_on_eog and 0 < len(expected) < 16  # the premise: this prompt stops by itself

    res = engine.generate(prompt, 16)
    assert res.error is None
    assert res.tokens == expected
    assert res.finish_reason == "stop"
    assert res.usage["prompt_tokens"] == len(prompt)
    assert res.usage["completion_tokens"] == len(res.tokens)  # the eog token is neither sent nor counted
    t = res.done["timings"]
    assert t["decode_tokens"] == len(res.tokens) - 1
    assert t["prefill_tokens"] == len(prompt) - res.usage["cached_tokens"]
    assert t["ttft_ms"] >= t["queue_ms"] >= 0 and t["prefill_ms"] > 0 and t["decode_ms"] > 0


def test_max_tokens_gives_length(engine, ref, questions):
    """max_tokens caps the output exactly, with finish "length", and the tokens are the greedy prefix."""
    prompt = ref.chat(questions[2])
    expected, _ = ref.greedy(prompt, 16)
    res = engine.generate(prompt, 5)
    assert res.finish_reason == "length"
    assert res.tokens == expected[:5]
    assert res.usage["completion_tokens"] == 5


def test_stop_ids_end_generation(engine, ref, questions):
    """A token listed in stop_ids ends the request with "stop", and it is not sent."""
    prompt = ref.chat(questions[2])
    expected, _ = ref.greedy(prompt, 16)
    k = next(i for i in range(3, 16) if expected[i] not in expected[:i])  # first fresh token from index 3
    res = engine.generate(prompt, 16, stop_ids=[expected[k]])
    assert res.finish_reason == "stop"
    assert res.tokens == expected[:k]


def test_seeded_sampling_is_reproducible(engine, ref, questions):
    """temperature > 0 with a seed gives the same tokens twice; tokens are valid vocabulary ids."""
    prompt = ref.chat(questions[5])
    kw = dict(temperature=0.9, top_p=0.95, top_k=40, seed=1234)
    a = engine.generate(prompt, 12, **kw)
    b = engine.generate(prompt, 12, **kw)
    assert a.tokens and a.tokens == b.tokens
    assert all(0 <= t < 49152 for t in a.tokens)


def test_prefix_cache_hit_reports_cached_tokens_and_same_tokens(engine, ref):
    """Repeating a prompt reuses all but its last token from the KV cache and yields the cold run's tokens."""
    prompt = ref.chat("Name a color of the rainbow.")
    cold = engine.generate(prompt, 12)
    warm = engine.generate(prompt, 12)
    assert warm.usage["cached_tokens"] == len(prompt) - 1  # the last token is re-decoded for its logits
    assert warm.done["timings"]["prefill_tokens"] == 1
    assert warm.tokens == cold.tokens == ref.greedy(prompt, 12)[0]


def test_follow_up_turn_reuses_the_conversation(engine, ref):
    """A next turn that extends prompt + answer only prefills the new part, and matches a cold run."""
    first = ref.chat("Who wrote Hamlet?")
    answer = engine.generate(first, 8)
    follow = first + answer.tokens + ref.model.tokenize("<|im_end|>\n<|im_start|>user\nAnd Macbeth?<|im_end|>\n<|im_start|>assistant\n")
    res = engine.generate(follow, 10)
    # Everything the slot decoded is reusable: the prompt and all answer tokens but the last
    # (the last sampled token was never decoded into the cache).
    assert res.usage["cached_tokens"] == len(first) + len(answer.tokens) - 1
    assert res.tokens == ref.greedy(follow, 10)[0]


def test_cancel_running_request_frees_slot(engine, ref, questions):
    """Cancel ends a running request with "cancelled" soon after, counts only sent tokens, and idles its slot."""
    prompt = ref.chat(questions[1])
    rid = engine.start(prompt, 400, ignore_eos=True)
    first = engine.recv()
    assert first["op"] == "tokens" and first["id"] == rid
    engine.send({"op": "cancel", "id": rid})
    res = engine.collect([rid])[rid]
    assert res.finish_reason == "cancelled"
    received = len(first["ids"]) + len(res.tokens)
    assert res.usage["completion_tokens"] == received
    assert received < 400
    states = {s["request_id"]: s["state"] for s in engine.slots()}
    assert rid not in states
    assert all(s["state"] == "idle" for s in engine.slots())


def test_cancel_queued_request(fresh_engine, ref, questions):
    """A request still waiting for a slot is cancelled at once without ever running; the other one is untouched."""
    e = fresh_engine(slots=1)
    prompt = ref.chat(questions[2])
    running = e.start(prompt, 16)
    queued = e.start(prompt, 16)
    e.send({"op": "cancel", "id": queued})
    res = e.collect([running, queued])
    assert res[queued].finish_reason == "cancelled"
    assert res[queued].tokens == [] and res[queued].usage["completion_tokens"] == 0
    assert res[running].finish_reason == "length" and len(res[running].tokens) == 16


def test_concurrent_requests_match_each_alone(engine, ref, questions):
    """Four requests decoded together in one batch per step give exactly the tokens each gives alone."""
    prompts = [ref.chat(q) for q in questions[:4]]
    alone = [ref.greedy(p, 16)[0] for p in prompts]
    ids = [engine.start(p, 16) for p in prompts]
    together = engine.collect(ids)
    assert [together[i].tokens for i in ids] == alone
    # They really overlapped: every request's first token came before any request finished.
    firsts = [together[i].token_times[0] for i in ids]
    lasts = [together[i].token_times[-1] for i in ids]
    assert max(firsts) < min(lasts)


def test_more_requests_than_slots_queue_and_finish(fresh_engine, ref, questions):
    """With 2 slots, 5 requests all finish correctly; the later ones waited in the queue."""
    e = fresh_engine(slots=2)
    prompts = [ref.chat(q) for q in questions[:5]]
    ids = [e.start(p, 8) for p in prompts]
    res = e.collect(ids)
    for rid, p in zip(ids, prompts):
        assert res[rid].tokens == ref.greedy(p, 8)[0]
    assert res[ids[4]].done["timings"]["queue_ms"] > 0
    assert res[ids[4]].token_times[0] > min(res[ids[0]].token_times[-1], res[ids[1]].token_times[-1])


def test_chunked_prefill_keeps_decodes_going(fresh_engine, ref, questions):
    """A long prompt prefilled in 32-token chunks interleaves with a running decode; both match their solo runs."""
    e = fresh_engine(slots=2, extra_args=("--step-tokens", "32"))
    short = ref.chat(questions[2])
    long_text = " ".join(f"Item {i}: the quick brown fox jumps over the lazy dog." for i in range(30))
    long = ref.chat(f"Summarise this list in one sentence: {long_text}")
    assert len(long) > 300  # >= 10 chunks
    a = e.start(short, 16, ignore_eos=True)
    b_id = None
    # Let the short one start decoding, then send the long one.
    first = e.recv()
    assert first["op"] == "tokens" and first["id"] == a
    b_id = e.start(long, 4)
    res = e.collect([a, b_id])
    assert first["ids"] + res[a].tokens == ref.greedy(short, 16, ignore_eos=True)[0]
    assert res[b_id].tokens == ref.greedy(long, 4)[0]
    # The short stream kept producing while the long prompt was being read.
    assert any(t < res[b_id].token_times[0] for t in res[a].token_times)
    assert res[b_id].done["timings"]["prefill_tokens"] == len(long)


def test_context_window_is_never_exceeded(fresh_engine, ref, questions):
    """prompt + completion stops at n_ctx with "length"; a prompt that fills the window is refused."""
    e = fresh_engine(slots=1, n_ctx=256)
    n_ctx = e.ready["n_ctx"]
    base = ref.chat(questions[5])
    prompt = (base * (n_ctx // len(base) + 1))[: n_ctx - 3]
    res = e.generate(prompt, 16, ignore_eos=True)
    assert res.finish_reason == "length"
    assert res.usage["prompt_tokens"] + res.usage["completion_tokens"] == n_ctx
    too_long = e.generate((base * (n_ctx // len(base) + 1))[:n_ctx], 4)
    assert too_long.error and "too long" in too_long.error["message"]


def test_q8_0_kv_cache_generates(fresh_engine, ref, questions):
    """--kv-type q8_0 loads and generates; its greedy tokens start like the f16 run's (int8 KV is near lossless)."""
    e = fresh_engine(slots=1, extra_args=("--kv-type", "q8_0"))
    prompt = ref.chat(questions[0])
    res = e.generate(prompt, 16)
    assert res.error is None and res.finish_reason in ("stop", "length")
    assert res.tokens[:3] == ref.greedy(prompt, 3)[0]


def test_timings_are_consistent(engine, ref):
    """ttft = queue + prefill (to rounding); decode covers the tokens after the first, and every part took time."""
    prompt = ref.chat("Count from one to twenty.")
    res = engine.generate(prompt, 16, ignore_eos=True)
    t = res.done["timings"]
    assert abs(t["ttft_ms"] - (t["queue_ms"] + t["prefill_ms"])) < 0.01
    assert t["decode_tokens"] == 15
    assert t["decode_ms"] > 0 and t["prefill_ms"] > 0 and t["prefill_tokens"] > 0


def test_reasoning_budget_forces_wrap_up_on_the_real_model(engine, ref, questions):
    """thinking_at_start, budget 5: the 5 greedy thinking tokens, then exactly the wrap ids, then the greedy
    continuation of prompt + thinking + wrap (so the forced ids really went into the KV cache, in place)."""
    prompt = ref.model.tokenize(
        f"<|im_start|>user\n{questions[2]}<|im_end|>\n<|im_start|>assistant\n<think>\n")
    wrap = ref.model.tokenize("\n\nI have to answer now.\n</think>\n\n")
    end = ref.model.tokenize("</think>")
    thinking, _ = ref.greedy(prompt, 5)
    assert len(thinking) == 5 and not any(thinking[i:i + len(end)] == end for i in range(5))  # still open after 5
    answer, answer_stopped = ref.greedy(prompt + thinking + wrap, 6)
    assert answer  # the premise: the model says something after the wrap-up

    res = engine.generate(prompt, 5 + len(wrap) + 6, reasoning={
        "budget": 5, "start_ids": [], "end_ids": end, "wrap_ids": wrap, "thinking_at_start": True})
    assert res.error is None
    assert res.tokens[:5] == thinking
    assert res.tokens[5:5 + len(wrap)] == wrap
    assert res.tokens[5 + len(wrap):] == answer
    assert res.finish_reason == ("stop" if answer_stopped else "length")
    u = res.usage
    assert u["completion_tokens"] == len(res.tokens)
    assert u["reasoning_tokens"] == 5 + len(wrap) and u["reasoning_budget_hit"] is True


def test_reasoning_within_budget_is_untouched(engine, ref, questions):
    """A budget larger than the output changes nothing: same tokens as plain greedy, budget not hit."""
    prompt = ref.model.tokenize(
        f"<|im_start|>user\n{questions[0]}<|im_end|>\n<|im_start|>assistant\n<think>\n")
    expected, _ = ref.greedy(prompt, 8)
    res = engine.generate(prompt, 8, reasoning={"budget": 100, "end_ids": ref.model.tokenize("</think>"),
                                                "wrap_ids": ref.model.tokenize("</think>"), "thinking_at_start": True})
    assert res.tokens == expected
    assert res.usage["reasoning_budget_hit"] is False and res.usage["reasoning_tokens"] == len(expected)
