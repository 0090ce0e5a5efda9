"""Both dialects into the one internal form: what each field becomes, and what is refused (400)."""

import pytest

from lanes.dialects.anthropic import anthropic_to_request
from lanes.dialects.errors import ApiError
from lanes.dialects.openai import openai_to_request

USER = [{"role": "user", "content": "hi"}]
WEATHER = {"name": "get_weather", "description": "Weather now", "input_schema": {"type": "object"}}


def anthropic(**body):
    return anthropic_to_request({"model": "m", "max_tokens": 100, "messages": USER, **body})


def openai(**body):
    return openai_to_request({"model": "m", "messages": USER, **body})


class TestAnthropic:
    def test_system_blocks_and_user_blocks_are_joined(self):
        req = anthropic(system=[{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}},
                                {"type": "text", "text": "B"}],
                        messages=[{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}])
        assert req.messages == [{"role": "system", "content": "A\n\nB"}, {"role": "user", "content": "x\n\ny"}]

    def test_a_conversation_with_thinking_tool_use_and_results(self):
        """Assistant blocks become reasoning + content + tool_calls; tool_result blocks become tool
        messages, in block order, with the text after them as a user message."""
        req = anthropic(messages=[
            {"role": "user", "content": "weather in Paris and Oslo?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "two lookups", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "rain"}], "is_error": True},
                {"type": "text", "text": "thanks"}]},
        ], tools=[WEATHER])
        assert req.messages == [
            {"role": "user", "content": "weather in Paris and Oslo?"},
            {"role": "assistant", "content": "Checking.", "reasoning": "two lookups", "tool_calls": [
                {"id": "t1", "name": "get_weather", "arguments": {"city": "Paris"}},
                {"id": "t2", "name": "get_weather", "arguments": {"city": "Oslo"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "sunny", "is_error": False},
            {"role": "tool", "tool_call_id": "t2", "content": "rain", "is_error": True},
            {"role": "user", "content": "thanks"},
        ]
        assert req.tools == [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather now", "parameters": {"type": "object"}}}]

    def test_final_assistant_message_is_a_prefill(self):
        req = anthropic(messages=USER + [{"role": "assistant", "content": "The answer is"}])
        assert req.prefill == "The answer is" and req.messages == USER

    def test_text_documents_are_read(self):
        req = anthropic(messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "DOC"}},
            {"type": "text", "text": "summarise"}]}])
        assert req.messages == [{"role": "user", "content": "DOC\n\nsummarise"}]

    @pytest.mark.parametrize("thinking, expected", [
        (None, (None, None)),
        ({"type": "enabled", "budget_tokens": 50}, (True, 50)),
        ({"type": "disabled"}, (False, None)),
        ({"type": "adaptive"}, (True, None)),
    ])
    def test_thinking(self, thinking, expected):
        req = anthropic(**({"thinking": thinking} if thinking else {}))
        assert (req.thinking, req.reasoning_budget_tokens) == expected

    def test_adaptive_thinking_takes_its_budget_from_the_effort(self):
        req = anthropic(thinking={"type": "adaptive"}, output_config={"effort": "low"})
        assert (req.thinking, req.reasoning_budget_tokens) == (True, 1024)
        assert anthropic(thinking={"type": "between_tools"}).thinking is True
        assert anthropic(thinking={"type": "adaptive"}, output_config={"effort": "max"}).reasoning_budget_tokens is None

    def test_the_gateways_budget_applies_when_the_client_gave_none(self):
        assert anthropic(reasoning_budget_tokens=4096).reasoning_budget_tokens == 4096
        assert anthropic(thinking={"type": "enabled", "budget_tokens": 64},
                         reasoning_budget_tokens=4096).reasoning_budget_tokens == 64

    @pytest.mark.parametrize("choice, internal, parallel", [
        ({"type": "auto"}, "auto", True),
        ({"type": "any"}, "required", True),
        ({"type": "tool", "name": "get_weather"}, {"name": "get_weather"}, True),
        ({"type": "none"}, "none", True),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
    ])
    def test_tool_choice(self, choice, internal, parallel):
        req = anthropic(tools=[WEATHER], tool_choice=choice)
        assert (req.tool_choice, req.parallel_tool_calls) == (internal, parallel)

    def test_sampling_stop_and_stream(self):
        req = anthropic(temperature=0.2, top_p=0.9, top_k=5, stop_sequences=["END"], stream=True)
        assert (req.temperature, req.top_p, req.top_k, req.stop, req.stream) == (0.2, 0.9, 5, ["END"], True)

    def test_count_tokens_needs_no_max_tokens(self):
        req = anthropic_to_request({"model": "m", "messages": USER}, counting=True)
        assert req.max_tokens is None

    @pytest.mark.parametrize("body, fragment", [
        ({"messages": USER}, "max_tokens"),
        ({"max_tokens": 10, "messages": []}, "messages"),
        ({"max_tokens": 10, "messages": [{"role": "system", "content": "x"}]}, "role"),
        ({"max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
        ({"max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "video"}]}]}, "video"),
        ({"max_tokens": 10, "messages": USER, "temperature": 1.5}, "temperature"),
        ({"max_tokens": 10, "messages": USER, "thinking": {"type": "enabled"}}, "budget_tokens"),
        ({"max_tokens": 10, "messages": USER, "thinking": {"type": "sometimes"}}, "thinking.type"),
        ({"max_tokens": 10, "messages": USER, "output_config": {"effort": "huge"}}, "effort"),
        ({"max_tokens": 10, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 10}}, "max_tokens"),
        ({"max_tokens": 10, "messages": USER, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
        ({"max_tokens": 10, "messages": USER, "tools": [WEATHER], "tool_choice": {"type": "any"},
          "thinking": {"type": "enabled", "budget_tokens": 5}}, "Thinking may not be enabled"),
        ({"max_tokens": 10, "messages": USER + [{"role": "assistant", "content": "ends with space "}]}, "trailing whitespace"),
        ({"max_tokens": 10, "messages": USER, "tools": [{"description": "no name"}]}, "name"),
    ])
    def test_bad_bodies_are_400(self, body, fragment):
        with pytest.raises(ApiError) as info:
            anthropic_to_request({"model": "m", **body})
        assert info.value.status == 400 and fragment in info.value.message


class TestOpenAI:
    def test_tools_are_normalised_and_tool_messages_kept(self):
        req = openai(messages=[
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
        ], tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "strict": True}}])
        assert req.messages[1] == {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}]}
        assert req.messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}
        assert req.tools == [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]

    @pytest.mark.parametrize("effort, expected", [
        (None, (None, None)), ("none", (False, None)), ("minimal", (False, None)),
        ("low", (True, 1024)), ("medium", (True, 4096)), ("high", (True, 16384)), ("max", (True, None)),
    ])
    def test_reasoning_effort(self, effort, expected):
        req = openai(**({"reasoning_effort": effort} if effort else {}))
        assert (req.thinking, req.reasoning_budget_tokens) == expected

    @pytest.mark.parametrize("choice, internal", [
        (None, "auto"), ("none", "none"), ("required", "required"),
        ({"type": "function", "function": {"name": "f"}}, {"name": "f"}),
    ])
    def test_tool_choice(self, choice, internal):
        tools = [{"type": "function", "function": {"name": "f"}}]
        assert openai(tools=tools, **({"tool_choice": choice} if choice else {})).tool_choice == internal

    def test_parallel_tool_calls_off(self):
        assert openai(parallel_tool_calls=False).parallel_tool_calls is False

    @pytest.mark.parametrize("body, fragment", [
        ({"n": 2}, "n must be 1"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"tool_choice": "required"}, "no tools"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "function"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}}, "'g'"),
        ({"stop": [1]}, "stop"),
        ({"top_k": -1}, "top_k"),
        ({"reasoning_budget_tokens": "lots"}, "reasoning_budget_tokens"),
    ])
    def test_bad_bodies_are_400(self, body, fragment):
        with pytest.raises(ApiError) as info:
            openai(**body)
        assert info.value.status == 400 and fragment in info.value.message
