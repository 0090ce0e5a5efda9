"""Lane pieces alone: window arithmetic, stop strings, the OpenAI dialect, the chat template."""

import pytest

from lanes.dialects.errors import ANTHROPIC, OPENAI, ApiError
from lanes.dialects.openai import openai_to_request
from lanes.events import TextStream
from lanes.template import ChatTemplate
from lanes.window import output_room


class TestWindow:
    def test_no_max_tokens_takes_all_the_room(self):
        assert output_room(1000, None, 8192, 16, fit=True) == 8192 - 16 - 1000

    def test_fitting_request_is_unchanged(self):
        assert output_room(1000, 200, 8192, 16, fit=False) == 200

    def test_too_much_output_is_clamped_when_fit_is_on(self):
        assert output_room(8000, 4096, 8192, 16, fit=True) == 176

    def test_too_much_output_is_a_400_with_numbers_when_fit_is_off(self):
        with pytest.raises(ApiError) as info:
            output_room(8000, 4096, 8192, 16, fit=False)
        assert info.value.status == 400
        assert info.value.extra == {"prompt_tokens": 8000, "max_context": 8192, "max_output_tokens": 176}

    @pytest.mark.parametrize("prompt", [8176, 8177, 9000])
    def test_prompt_without_room_is_too_long(self, prompt):
        with pytest.raises(ApiError) as info:
            output_room(prompt, 10, 8192, 16, fit=True)
        assert info.value.message == f"prompt is too long: {prompt} tokens > 8175 maximum"
        assert info.value.extra["prompt_tokens"] == prompt

    def test_one_token_of_room_is_enough(self):
        assert output_room(8175, 10, 8192, 16, fit=True) == 1


class TestStopStrings:
    def feed_all(self, tokenizer, text, stop, step=1):
        ids = tokenizer.encode(text)
        stream = TextStream(tokenizer, stop)
        out = [stream.feed(ids[i:i + step]) for i in range(0, len(ids), step)] + [stream.flush()]
        return "".join(out), stream

    def test_without_stop_everything_passes(self, tokenizer):
        text, stream = self.feed_all(tokenizer, "Hello there, general.", [])
        assert text == "Hello there, general." and not stream.stopped

    def test_stop_string_split_across_tokens_is_cut(self, tokenizer):
        text, stream = self.feed_all(tokenizer, "one two STOPWORD three", ["STOPWORD"])
        assert text == "one two " and stream.stopped

    def test_held_back_prefix_is_released_when_it_is_not_a_stop(self, tokenizer):
        text, stream = self.feed_all(tokenizer, "a STO b STOP", ["STOP!"])
        assert text == "a STO b STOP" and not stream.stopped


class TestOpenAIDialect:
    def test_parts_and_developer_role(self):
        req = openai_to_request({"model": "m", "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ], "max_completion_tokens": 5, "stop": "x", "stream": True, "stream_options": {"include_usage": True}})
        assert req.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"}]
        assert (req.max_tokens, req.stop, req.stream, req.include_usage) == (5, ["x"], True, True)

    def test_tool_call_arguments_are_parsed(self):
        req = openai_to_request({"messages": [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}]})
        assert req.messages[0]["tool_calls"] == [{"id": "c1", "name": "f", "arguments": {"a": 1}}]

    @pytest.mark.parametrize("body", [
        {}, {"messages": []}, {"messages": "hi"}, {"messages": [{"role": "user", "content": 3}]},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
        {"messages": [{"role": "user", "content": "x"}], "top_p": 2},
        {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
    ])
    def test_bad_bodies_are_400(self, body):
        with pytest.raises(ApiError) as info:
            openai_to_request(body)
        assert info.value.status == 400

    def test_error_shapes(self):
        err = ApiError(401, "no", code="NOT_LOGGED_IN")
        assert err.body(OPENAI) == {"error": {"message": "no", "type": "authentication_error", "param": None, "code": "NOT_LOGGED_IN"}}
        assert err.body(ANTHROPIC) == {"type": "error", "error": {"type": "authentication_error", "message": "no", "code": "NOT_LOGGED_IN"}}


class TestTemplate:
    def test_shipped_template_matches_the_models_own_for_plain_chat(self, model_path):
        messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                    {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}]
        ours = ChatTemplate.load("chatml-tools", model_path).render(messages)
        theirs = ChatTemplate.load("model", model_path).render(messages)
        assert ours == theirs

    def test_tools_and_tool_results_are_rendered(self, model_path):
        prompt = ChatTemplate.load("chatml-tools", model_path).render(
            [{"role": "user", "content": "weather?"},
             {"role": "assistant", "content": "", "tool_calls": [{"name": "w", "arguments": {"city": "<Paris>"}}]},
             {"role": "tool", "content": "sunny"}],
            tools=[{"type": "function", "function": {"name": "w"}}],
        )
        assert '<tools>\n{"type": "function", "function": {"name": "w"}}\n</tools>' in prompt
        assert '<tool_call>\n{"name": "w", "arguments": {"city": "<Paris>"}}\n</tool_call>' in prompt
        assert "<tool_response>\nsunny\n</tool_response>" in prompt
        assert prompt.endswith("<|im_start|>assistant\n")

    def test_sandbox_refuses_unsafe_templates(self):
        from jinja2.exceptions import SecurityError

        evil = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
        with pytest.raises(SecurityError):
            evil.render([{"role": "user", "content": "x"}])


def test_lane_engine_options_reach_the_engine_command_line():
    """A lane's engine_options setting (e.g. MoE offload) is passed through to `python -m engine`."""
    from lanes.engine_client import EngineOptions

    argv = EngineOptions(model_path="m.gguf", kv_type="q8_0", extra="--n-cpu-moe 8 --override-tensor 'blk\\.0\\.=CPU'").argv("s")
    assert argv[argv.index("--kv-type") + 1] == "q8_0"
    assert argv[-4:] == ["--n-cpu-moe", "8", "--override-tensor", "blk\\.0\\.=CPU"]


def test_engine_accepts_every_option_the_lane_help_text_names():
    """The options named in Lane.engine_options' help text exist in `python -m engine --help`."""
    import re
    import subprocess
    import sys

    from lanes.models import Lane

    named = re.findall(r"`(--[a-z-]+)", Lane._meta.get_field("engine_options").help_text)
    usage = subprocess.run([sys.executable, "-m", "engine", "--help"], capture_output=True, text=True, check=True).stdout
    assert named and all(option in usage for option in named)
