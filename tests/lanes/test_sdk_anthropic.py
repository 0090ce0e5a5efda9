"""The official `anthropic` SDK against a lane on a scripted engine (see conftest: a 135M model cannot
be made to think or call tools on demand, so the engine's tokens are scripted; the lane's parsing,
events and shapes are the real ones)."""

import json

import anthropic
import httpx
import pytest

from conftest import Script

WEATHER = {"name": "get_weather", "description": "Current weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def raw_events(lane, body: dict) -> list[tuple[str, dict]]:
    """The SSE events exactly as sent: (event name, data)."""
    with httpx.stream("POST", lane.url + "/v1/messages", json={**body, "stream": True}, headers=lane.headers,
                      timeout=60) as r:
        text = r.read().decode()
    events = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":") and ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_streamed_thinking_text_and_tool_use(fake_lane):
    """Thinking (closed by a signature), text, then a tool_use whose input arrives as JSON; stop_reason tool_use."""
    fake_lane.runtime.engine.script("The user wants Paris.\n</think>\n\nLet me check.\n" + CALL)
    client = fake_lane.anthropic()
    with client.messages.stream(model="strata", max_tokens=300, messages=USER, tools=[WEATHER],
                                thinking={"type": "enabled", "budget_tokens": 100}) as stream:
        kinds = [e.type for e in stream]
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = message.content
    assert thinking.thinking == "The user wants Paris." and thinking.signature
    assert text.text == "Let me check."
    assert (tool.name, tool.input) == ("get_weather", {"city": "Paris"}) and tool.id.startswith("toolu_")
    assert message.stop_reason == "tool_use"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    request = fake_lane.runtime.engine.requests[-1]
    assert request["reasoning"]["budget"] == 100 and request["reasoning"]["thinking_at_start"] is True


def test_event_order_as_the_real_api(fake_lane):
    """message_start then ping before any block; thinking ends with signature_delta before its stop;
    no empty leading text block; cumulative usage in message_delta."""
    fake_lane.runtime.engine.script("Plan.\n</think>\n\n\n" + CALL)
    events = raw_events(fake_lane, {"model": "m", "max_tokens": 200, "messages": USER, "tools": [WEATHER],
                                    "thinking": {"type": "enabled", "budget_tokens": 50}})
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert events[2][1]["content_block"]["type"] == "thinking"
    stop_of_thinking = names.index("content_block_stop")
    assert events[stop_of_thinking - 1][1]["delta"]["type"] == "signature_delta"
    starts = [data["content_block"]["type"] for name, data in events if name == "content_block_start"]
    assert starts == ["thinking", "tool_use"]  # the whitespace between them opened no text block
    delta = next(data for name, data in events if name == "message_delta")
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] > 0 and delta["usage"]["input_tokens"] > 0
    assert [d["index"] for n, d in events if n == "content_block_start"] == [0, 1]


def test_tool_call_split_into_single_tokens(fake_lane, tokenizer):
    """A call whose markup and JSON come one token at a time (the fake sends one id per message)."""
    text = "Sure.\n" + CALL.replace("Paris", "Saint-Étienne 🗼")
    assert len(tokenizer.encode(CALL)) > 20
    fake_lane.runtime.engine.script(text)
    message = fake_lane.anthropic().messages.create(model="m", max_tokens=200, messages=USER, tools=[WEATHER])
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"city": "Saint-Étienne 🗼"}


def test_broken_tool_call_becomes_text(fake_lane):
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n</tool_call>'
    fake_lane.runtime.engine.script("Trying.\n" + broken)
    client = fake_lane.anthropic()
    with client.messages.stream(model="m", max_tokens=200, messages=USER, tools=[WEATHER]) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Trying.\n" + broken
    assert message.stop_reason == "end_turn"


def test_tool_round_trip(fake_lane):
    """The model calls a tool; the client sends the result back; the next prompt holds call and result."""
    engine = fake_lane.runtime.engine
    engine.script(CALL, "It is sunny in Paris.")
    client = fake_lane.anthropic()
    first = client.messages.create(model="m", max_tokens=200, messages=USER, tools=[WEATHER])
    call = first.content[0]
    assert first.stop_reason == "tool_use" and call.type == "tool_use"
    second = client.messages.create(model="m", max_tokens=200, tools=[WEATHER], messages=USER + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 24°C"}]},
    ])
    assert second.content[0].text == "It is sunny in Paris." and second.stop_reason == "end_turn"
    prompt = fake_lane.runtime.tokenizer.decode(engine.requests[-1]["prompt"])
    assert CALL + "<|im_end|>" in prompt
    assert "<|im_start|>user\n<tool_response>\nsunny, 24°C\n</tool_response><|im_end|>" in prompt


def test_thinking_blocks_sent_back_are_rendered(fake_lane):
    engine = fake_lane.runtime.engine
    engine.script("Deciding.\n</think>\n\nBlue.", "Green.")
    client = fake_lane.anthropic()
    thinking = {"type": "enabled", "budget_tokens": 100}
    first = client.messages.create(model="m", max_tokens=200, messages=USER, thinking=thinking)
    client.messages.create(model="m", max_tokens=200, thinking=thinking, messages=USER + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": "And tomorrow?"}])
    prompt = fake_lane.runtime.tokenizer.decode(engine.requests[-1]["prompt"])
    assert "<|im_start|>assistant\n<think>\nDeciding.\n</think>\n\nBlue.<|im_end|>" in prompt


def test_disabled_thinking_prefills_an_empty_block(fake_lane):
    fake_lane.runtime.engine.script("Hello!")
    message = fake_lane.anthropic().messages.create(model="m", max_tokens=50, messages=USER,
                                                    thinking={"type": "disabled"})
    assert [b.type for b in message.content] == ["text"]
    prompt = fake_lane.runtime.tokenizer.decode(fake_lane.runtime.engine.requests[-1]["prompt"])
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "reasoning" not in fake_lane.runtime.engine.requests[-1]


def test_stop_sequence(fake_lane):
    fake_lane.runtime.engine.script("one two END three")
    client = fake_lane.anthropic()
    message = client.messages.create(model="m", max_tokens=50, messages=USER, stop_sequences=["END"])
    assert message.content[0].text == "one two "
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "END")
    assert fake_lane.runtime.engine.streams[-1].cancelled  # the engine was told to stop at once
    fake_lane.runtime.engine.script("one two END three")
    with client.messages.stream(model="m", max_tokens=50, messages=USER, stop_sequences=["END"]) as stream:
        streamed = stream.get_final_message()
    assert (streamed.stop_reason, streamed.stop_sequence, streamed.content[0].text) == ("stop_sequence", "END", "one two ")


def test_max_tokens_reason_and_usage_equal_count_tokens(fake_lane):
    """usage.input_tokens is the lane's count: what count_tokens answers for the same body."""
    fake_lane.runtime.engine.script(Script("word " * 50))
    client = fake_lane.anthropic()
    body = dict(model="m", messages=USER, tools=[WEATHER], system="Be brief.")
    message = client.messages.create(max_tokens=5, **body)
    counted = client.messages.count_tokens(**body)
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 5
    assert message.usage.input_tokens == counted.input_tokens == len(fake_lane.runtime.engine.requests[-1]["prompt"])
    assert message.usage.cache_read_input_tokens == 0


def test_pings_keep_a_long_prefill_alive(fake_lane):
    """Before the first token, message_start and pings flow at the lane's ping interval."""
    fake_lane.runtime.ping_seconds = 0.05
    try:
        fake_lane.runtime.engine.script(Script("Done.", delay_s=0.4))
        events = raw_events(fake_lane, {"model": "m", "max_tokens": 20, "messages": USER})
    finally:
        fake_lane.runtime.ping_seconds = 10.0
    names = [name for name, _ in events]
    assert names[0] == "message_start"
    assert names.index("content_block_start") >= 3 and names[1:3] == ["ping", "ping"]


def test_prefill_is_continued(fake_lane):
    fake_lane.runtime.engine.script(" 42.")
    message = fake_lane.anthropic().messages.create(model="m", max_tokens=20, messages=USER + [
        {"role": "assistant", "content": "The answer is"}])
    assert message.content[0].text == " 42."
    prompt = fake_lane.runtime.tokenizer.decode(fake_lane.runtime.engine.requests[-1]["prompt"])
    assert prompt.endswith("\n\nThe answer is")


def test_forced_tool_choice(fake_lane):
    """tool_choice names the tool: the prompt opens the call, the model writes only the arguments."""
    fake_lane.runtime.engine.script('{"city": "Oslo"}}\n</tool_call>')
    message = fake_lane.anthropic().messages.create(model="m", max_tokens=50, messages=USER, tools=[WEATHER],
                                                    tool_choice={"type": "tool", "name": "get_weather"})
    assert message.content[0].type == "tool_use" and message.content[0].input == {"city": "Oslo"}
    assert message.stop_reason == "tool_use"


def test_one_tool_call_when_parallel_use_is_disabled(fake_lane):
    fake_lane.runtime.engine.script(CALL + "\n" + CALL.replace("Paris", "Oslo"))
    message = fake_lane.anthropic().messages.create(
        model="m", max_tokens=200, messages=USER, tools=[WEATHER],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert [b.type for b in message.content] == ["tool_use"] and message.stop_reason == "tool_use"


def test_engine_failure_mid_stream_is_an_error_event(fake_lane):
    fake_lane.runtime.engine.script(Script("Partial answ", error="the engine stopped; the next request restarts it"))
    client = fake_lane.anthropic()
    with pytest.raises(anthropic.APIStatusError) as info:
        with client.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
            for _ in stream:
                pass
    assert "the engine stopped" in str(info.value)
