"""The official `openai` SDK against a lane on a scripted engine (see conftest: a 135M model cannot be
made to think or call tools on demand, so the engine's tokens are scripted; the lane's parsing, chunks
and shapes are the real ones)."""

import json

import httpx
import openai
import pytest

from conftest import Script

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
USER = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'


def test_two_tool_calls_streamed_and_merged_by_index(fake_lane):
    """Each call: one delta with id and name, then its arguments; finish_reason tool_calls."""
    fake_lane.runtime.engine.script("Checking both.\n" + CALL % "Paris" + "\n" + CALL % "Oslo")
    chunks = list(fake_lane.openai().chat.completions.create(model="m", messages=USER, tools=TOOLS, stream=True))
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for tc in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = call["id"] or tc.id
            call["name"] += tc.function.name or ""
            call["arguments"] += tc.function.arguments or ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]
    assert all(c["id"].startswith("call_") for c in calls.values()) and calls[0]["id"] != calls[1]["id"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Checking both."
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[0].choices[0].delta.role == "assistant"


def test_stream_helper_accumulates_the_same_message(fake_lane):
    """The SDK's own accumulator (chat.completions.stream) builds a valid final message."""
    fake_lane.runtime.engine.script(CALL % "Paris")
    with fake_lane.openai().chat.completions.stream(model="m", messages=USER, tools=TOOLS) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert final.choices[0].finish_reason == "tool_calls"


def test_non_streamed_tool_call_and_round_trip(fake_lane):
    engine = fake_lane.runtime.engine
    engine.script(CALL % "Paris", "Sunny.")
    client = fake_lane.openai()
    first = client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and message.content is None
    call = message.tool_calls[0]
    second = client.chat.completions.create(model="m", tools=TOOLS, messages=USER + [
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
    assert second.choices[0].message.content == "Sunny." and second.choices[0].finish_reason == "stop"
    prompt = fake_lane.runtime.tokenizer.decode(engine.requests[-1]["prompt"])
    assert "<|im_start|>assistant\n" + CALL % "Paris" + "<|im_end|>" in prompt
    assert "<tool_response>\nsunny\n</tool_response>" in prompt


def test_reasoning_content_streamed_and_whole(fake_lane):
    """Thinking arrives as reasoning_content, apart from content; reasoning_effort opens the block."""
    engine = fake_lane.runtime.engine
    engine.script("Blue is calm.\n</think>\n\nBlue.", "Blue is calm.\n</think>\n\nBlue.")
    client = fake_lane.openai()
    chunks = list(client.chat.completions.create(model="m", messages=USER, reasoning_effort="low", stream=True))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks)
    assert reasoning == "Blue is calm."
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Blue."
    whole = client.chat.completions.create(model="m", messages=USER, reasoning_effort="low")
    assert whole.choices[0].message.content == "Blue."
    assert whole.choices[0].message.reasoning_content == "Blue is calm."
    assert engine.requests[-1]["reasoning"]["budget"] == 1024


def test_usage_chunk_and_count_tokens_agree(fake_lane):
    """include_usage: a last chunk with usage; prompt_tokens is what count_tokens says for the same body."""
    fake_lane.runtime.engine.script(Script("Hello there.", cached_tokens=7))
    body = {"model": "m", "messages": USER, "tools": TOOLS}
    chunks = list(fake_lane.openai().chat.completions.create(**body, stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    counted = fake_lane.post("/v1/chat/completions/count_tokens", body).json()
    assert usage.prompt_tokens == counted["input_tokens"] == len(fake_lane.runtime.engine.requests[-1]["prompt"])
    assert usage.completion_tokens == len(fake_lane.runtime.tokenizer.encode("Hello there."))
    assert usage.prompt_tokens_details.cached_tokens == 7


def test_reasoning_tokens_reported_by_the_engine_reach_the_usage(fake_lane):
    fake_lane.runtime.engine.script(Script("Hmm.\n</think>\n\nYes.", usage_extra={"reasoning_tokens": 4}))
    reply = fake_lane.openai().chat.completions.create(model="m", messages=USER, reasoning_effort="high")
    assert reply.usage.completion_tokens_details.reasoning_tokens == 4


def test_count_is_the_same_for_both_dialects(fake_lane):
    """The same conversation counted through either endpoint: one count."""
    oa = fake_lane.post("/v1/chat/completions/count_tokens", {
        "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]}).json()
    an = fake_lane.post("/v1/messages/count_tokens", {
        "model": "m", "system": "S", "messages": [{"role": "user", "content": "Hi"}]}).json()
    assert oa == an and oa["input_tokens"] > 5


def test_stop_strings_and_length(fake_lane):
    engine = fake_lane.runtime.engine
    engine.script("alpha beta gamma", "one two three four five six")
    client = fake_lane.openai()
    stopped = client.chat.completions.create(model="m", messages=USER, stop=["gamma"])
    assert (stopped.choices[0].message.content, stopped.choices[0].finish_reason) == ("alpha beta ", "stop")
    cut = client.chat.completions.create(model="m", messages=USER, max_completion_tokens=3)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 3


def test_broken_call_is_text_in_openai_too(fake_lane):
    fake_lane.runtime.engine.script('<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>')
    reply = fake_lane.openai().chat.completions.create(model="m", messages=USER, tools=TOOLS)
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content == '<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>'
    assert reply.choices[0].finish_reason == "stop"


def test_engine_failure_mid_stream(fake_lane):
    fake_lane.runtime.engine.script(Script("Half", error="the engine stopped; the next request restarts it"))
    with pytest.raises(openai.APIError) as info:
        list(fake_lane.openai().chat.completions.create(model="m", messages=USER, stream=True))
    assert "the engine stopped" in str(info.value)


def test_sse_ends_with_done_and_carries_the_usage_comment(fake_lane):
    """The gateway's archive reads usage from `: strata-usage`; SDKs ignore the comment."""
    fake_lane.runtime.engine.script("Hi.")
    with httpx.stream("POST", fake_lane.url + "/v1/chat/completions", headers=fake_lane.headers, timeout=30,
                      json={"messages": USER, "stream": True}) as r:
        text = r.read().decode()
    assert text.endswith("data: [DONE]\n\n")
    usage = json.loads(text.split(": strata-usage ")[1].split("\n")[0])
    assert usage["completion_tokens"] == fake_lane.runtime.engine.streams[-1].sent
