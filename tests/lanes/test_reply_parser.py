"""The incremental reply parser: model text -> thinking, text and tool calls, whatever way it is cut."""

import json

import pytest

from lanes.events import ReplyParser, Text, Thinking, ToolCall
from lanes.tokenizer import TokenDecoder

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}\n</tool_call>'


def parse(text: str, step: int = 1, **kwargs):
    """Feed `text` in pieces of `step` characters; returns (events merged by kind, parser)."""
    parser = ReplyParser(**kwargs)
    events = []
    for i in range(0, len(text), step):
        events += parser.feed(text[i:i + step])
    events += parser.finish()
    return merge(events), parser


def merge(events):
    """Adjacent Text (or Thinking) deltas joined: what a client accumulates."""
    out = []
    for e in events:
        if out and type(e) is type(out[-1]) and isinstance(e, (Text, Thinking)):
            out[-1] = type(e)(out[-1].text + e.text)
        else:
            out.append(e)
    return out


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_thinking_text_and_two_calls_in_any_cut(step):
    """However the text is cut, the same blocks come out, with the template's separators removed."""
    text = "<think>\nI should look it up.\n</think>\n\nLet me check.\n" + CALL + "\n" + CALL.replace("Paris", "Oslo")
    events, parser = parse(text, step, tools=True)
    assert events == [
        Thinking("I should look it up."),
        Text("Let me check."),
        ToolCall(0, "get_weather", '{"city": "Paris", "days": [1, 2]}'),
        ToolCall(1, "get_weather", '{"city": "Oslo", "days": [1, 2]}'),
    ]
    assert parser.calls == 2 and not parser.done


def test_deltas_arrive_before_the_end():
    """Text and thinking are released as they come, not at the end (only a possible tag is held)."""
    parser = ReplyParser(mode="thinking", tools=True)
    assert parser.feed("Considering") == [Thinking("Considering")]
    assert parser.feed(" options </th") == [Thinking(" options")]  # " </th" might be the closing tag
    assert parser.feed("ink>\n\nDone") == [Text("Done")]
    assert parser.feed(" now <tool") == [Text(" now")]
    assert parser.feed("box>") == [Text(" <toolbox>")]


def test_malformed_call_becomes_text():
    """Broken JSON inside the tags is given back as the text the model wrote; nothing raises."""
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>'
    events, parser = parse("Checking.\n" + broken + "\nSorry.", tools=True)
    assert events == [Text("Checking.\n" + broken + "Sorry.")]
    assert parser.calls == 0


@pytest.mark.parametrize("body", [
    '{"arguments": {"a": 1}}',                 # no name
    '{"name": "", "arguments": {}}',           # empty name
    '{"name": "f", "arguments": [1, 2]}',      # arguments not an object
    '{"name": "f", "arguments": "{not json"}',  # arguments string that is not JSON
    '["f", {}]',
])
def test_calls_that_are_not_valid_stay_text(body):
    events, _ = parse(f"<tool_call>{body}</tool_call>", tools=True)
    assert events == [Text(f"<tool_call>{body}</tool_call>")]


def test_arguments_as_a_json_string_are_accepted():
    events, _ = parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', tools=True)
    assert events == [ToolCall(0, "f", '{"a": 1}')]


def test_unfinished_call_at_the_end_is_text():
    """Cut off by max_tokens: never a half call a client might run."""
    events, _ = parse('Hi\n<tool_call>\n{"name": "rm", "arguments": {"path": "/tmp/a', tools=True)
    assert events == [Text('Hi\n<tool_call>\n{"name": "rm", "arguments": {"path": "/tmp/a')]


def test_without_tools_call_markup_is_text():
    events, _ = parse("Look: " + CALL, tools=False)
    assert events == [Text("Look: " + CALL)]


def test_stop_string_ends_text_and_is_reported():
    events, parser = parse("one two STOP three", stop=["STOP"])
    assert events == [Text("one two ")]
    assert parser.done and parser.stop_sequence == "STOP"


def test_stop_strings_do_not_cut_thinking_or_call_json():
    text = "<think>\nmaybe END here\n</think>\n\n" + CALL.replace("Paris", "END") + "\nafter END rest"
    events, parser = parse(text, stop=["END"], tools=True)
    assert events == [Thinking("maybe END here"), ToolCall(0, "get_weather", '{"city": "END", "days": [1, 2]}'),
                      Text("after ")]
    assert parser.stop_sequence == "END"


def test_a_held_prefix_of_a_stop_string_is_released_when_it_is_not_one():
    events, parser = parse("a STO b STOP", stop=["STOP!"])
    assert events == [Text("a STO b STOP")] and parser.stop_sequence is None


def test_one_call_allowed_ends_the_reply_after_it():
    events, parser = parse(CALL + "\n" + CALL, tools=True, max_calls=1)
    assert events == [ToolCall(0, "get_weather", '{"city": "Paris", "days": [1, 2]}')]
    assert parser.done


def test_forced_call_continues_the_prompts_prefix():
    """tool_choice named a tool: the prompt wrote `<tool_call>\\n{"name": "f", "arguments": `."""
    events, _ = parse('{"x": 1}}\n</tool_call>', mode="call", tools=True, call_prefix='\n{"name": "f", "arguments": ')
    assert events == [ToolCall(0, "f", '{"x": 1}')]


def test_start_mode_opens_thinking_only_at_the_start():
    events, _ = parse("\n<think>\nhmm\n</think>\n\nYes. <think> is a tag.")
    assert events == [Thinking("hmm"), Text("Yes. <think> is a tag.")]
    events, _ = parse("<thin")
    assert events == [Text("<thin")]


def test_a_repeated_think_tag_after_the_prompt_opened_it_is_dropped():
    events, _ = parse("<think>\nhmm\n</think>\n\nok", mode="thinking")
    assert events == [Thinking("hmm"), Text("ok")]


def test_continue_mode_keeps_leading_space():
    """An Anthropic prefill "The answer is" continues with " 42", space and all."""
    events, _ = parse(" 42", mode="continue")
    assert events == [Text(" 42")]


def test_thinking_cut_by_the_window_still_ends_cleanly():
    events, _ = parse("half a thou", mode="thinking")
    assert events == [Thinking("half a thou")]


def test_tool_call_split_into_single_tokens_with_multibyte_text(tokenizer):
    """Token by token through the real decoder: emoji and CJK arrive whole, the call is found."""
    text = "<think>\n想一想 🙂\n</think>\n\n好的 👍🏽\n" + CALL.replace("Paris", "巴黎 🗼")
    decoder, parser, events = TokenDecoder(tokenizer), ReplyParser(tools=True), []
    for token in tokenizer.encode(text):
        piece = decoder.feed([token])
        assert "\ufffd" not in piece
        events += parser.feed(piece)
    events += parser.feed(decoder.flush()) + parser.finish()
    events = merge(events)
    assert events == [Thinking("想一想 🙂"), Text("好的 👍🏽"),
                      ToolCall(0, "get_weather", json.dumps({"city": "巴黎 🗼", "days": [1, 2]}, ensure_ascii=False))]
