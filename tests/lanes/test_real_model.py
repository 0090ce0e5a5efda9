"""Plain chat in both dialects on the real model: LaneApp + EngineSupervisor + llama.cpp (SmolLM2-135M)."""

import pytest

pytestmark = pytest.mark.e2e

SYSTEM = "You are a terse assistant."
QUESTION = "Name a colour."
GREEDY = {"temperature": 0}  # this anthropic SDK has no sampling parameters; the lane still takes them


def test_openai_whole_and_streamed(real_lane):
    client = real_lane.openai()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    count = real_lane.post("/v1/chat/completions/count_tokens", {"messages": messages}).json()["input_tokens"]
    whole = client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0)
    assert whole.choices[0].message.content.strip()
    assert whole.choices[0].finish_reason in {"stop", "length"}
    assert whole.usage.prompt_tokens == count and 1 <= whole.usage.completion_tokens <= 8
    chunks = list(client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content  # greedy: the same answer either way
    assert chunks[-1].usage.prompt_tokens == count


def test_anthropic_whole_and_streamed(real_lane):
    client = real_lane.anthropic()
    messages = [{"role": "user", "content": QUESTION}]
    count = client.messages.count_tokens(model="m", system=SYSTEM, messages=messages).input_tokens
    whole = client.messages.create(model="m", system=SYSTEM, messages=messages, max_tokens=8, extra_body=GREEDY)
    assert [b.type for b in whole.content] == ["text"] and whole.content[0].text.strip()
    assert whole.stop_reason in {"end_turn", "max_tokens"}
    assert whole.usage.input_tokens == count and 1 <= whole.usage.output_tokens <= 8
    with client.messages.stream(model="m", system=SYSTEM, messages=messages, max_tokens=8, extra_body=GREEDY) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == whole.content[0].text
    assert len(texts) >= 2  # streamed token by token, not one blob
    assert final.usage.input_tokens == count and final.stop_reason == whole.stop_reason


def test_both_dialects_give_the_same_greedy_answer(real_lane):
    """One internal form: the same conversation in either dialect is the same prompt, hence the same answer
    (thinking disabled on both sides, so the prompts match to the token)."""
    oa = real_lane.openai().chat.completions.create(
        model="m", max_tokens=12, temperature=0, reasoning_effort="none",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])
    an = real_lane.anthropic().messages.create(
        model="m", max_tokens=12, extra_body=GREEDY, system=SYSTEM, thinking={"type": "disabled"},
        messages=[{"role": "user", "content": QUESTION}])
    assert oa.usage.prompt_tokens == an.usage.input_tokens
    assert oa.choices[0].message.content == an.content[0].text
