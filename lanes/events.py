"""From engine token ids to what a client may see: text, thinking and tool calls, as they arrive.

`TokenDecoder` (lanes.tokenizer) turns ids into text without splitting a UTF-8 character;
`ReplyParser` turns that text into events following the markup of the chat template:
`<think>...</think>` is thinking, `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
a tool call, the rest text. Stop strings end the reply in text (never inside thinking or
a tool call's JSON). Anything that could still turn into markup or a stop string is held
back until it is decided; nothing else waits.
"""

import json
from dataclasses import dataclass

from .tokenizer import LaneTokenizer, TokenDecoder

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


@dataclass
class Text:
    text: str


@dataclass
class Thinking:
    text: str


@dataclass
class ToolCall:
    """A complete, valid tool call: `arguments` is a JSON object, serialised."""

    index: int
    name: str
    arguments: str


def _held_suffix(text: str, markers: list[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of one of `markers`."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best


def _trailing_space(text: str) -> int:
    return len(text) - len(text.rstrip())


def _earliest(text: str, markers: list[str]) -> tuple[int, str | None]:
    """(index, marker) of the marker that occurs first in `text`, or (-1, None)."""
    best, which = -1, None
    for marker in markers:
        i = text.find(marker)
        if i >= 0 and (best < 0 or i < best):
            best, which = i, marker
    return best, which


def parse_tool_call(body: str) -> tuple[str, dict] | None:
    """The JSON between <tool_call> tags -> (name, arguments), or None when it is not a valid call."""
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return None
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return call["name"], args


class ReplyParser:
    """Decoded text in, `Text` / `Thinking` / `ToolCall` events out, incrementally.

    `mode` is where the prompt left the model: "start" (it may open a think block first),
    "thinking" (the prompt opened it), "text" (after a closed or pre-filled think block),
    "continue" (text that continues a client's prefill, kept as is), or "call" with
    `call_prefix` (the prompt opened a tool call: tool_choice forced one).
    A malformed or unfinished tool call is given back as text, as the model wrote it.
    """

    def __init__(self, mode: str = "start", stop: list[str] = (), tools: bool = False,
                 max_calls: int | None = None, call_prefix: str = ""):
        self._stops = [s for s in stop if s]
        self._tools = tools
        self._max_calls = max_calls
        self._mode = "text" if mode == "continue" else mode
        self._lstrip = mode != "continue"  # the first text of a block drops the template's separators
        self._buf = ""
        self._call_text = call_prefix
        self._gap = ""
        self._scanned = 0
        self.calls = 0
        self.stop_sequence: str | None = None
        self.done = False  # a stop string or the tool-call limit ended the reply

    def feed(self, text: str) -> list:
        if self.done or not text:
            return []
        self._buf += text
        return self._run(final=False)

    def finish(self) -> list:
        """End of output: release what was held back; an open tool call becomes text."""
        if self.done:
            return []
        out = self._run(final=True)
        if self._mode == "call" and not self.done:
            out.append(Text(self._gap + CALL_OPEN + self._call_text))
        elif self._buf and not self.done:
            kind = Thinking if self._mode == "thinking" else Text
            text = self._buf.rstrip() if self._mode == "thinking" else self._buf
            if text:
                out.append(kind(text))
        self._buf, self._call_text = "", ""
        return out

    def _run(self, final: bool) -> list:
        out: list = []
        while not self.done:
            step = getattr(self, "_on_" + self._mode)(out, final)
            if not step:
                return out
        return out

    # Each state handler consumes what it can and returns True to go on (the mode changed).

    def _on_start(self, out, final) -> bool:
        head = self._buf.lstrip()
        if head.startswith(THINK_OPEN):
            self._buf = head[len(THINK_OPEN):]
            self._mode, self._lstrip = "thinking", True
            return True
        if not final and THINK_OPEN.startswith(head):
            return False  # nothing, or the beginning of "<think>": wait for more
        self._mode = "text"
        return True

    def _on_thinking(self, out, final) -> bool:
        if self._lstrip:
            self._buf = self._buf.lstrip()
            if not final and THINK_OPEN.startswith(self._buf):
                return False  # nothing yet, or a "<think>" the prompt already wrote, repeated
            if self._buf.startswith(THINK_OPEN):
                self._buf = self._buf[len(THINK_OPEN):].lstrip()
            self._lstrip = False
        end = self._buf.find(THINK_CLOSE)
        if end >= 0:
            thought = self._buf[:end].rstrip()
            if thought:
                out.append(Thinking(thought))
            self._buf = self._buf[end + len(THINK_CLOSE):]
            self._mode, self._lstrip = "text", True
            return True
        if not final:
            self._release(out, Thinking, _held_suffix(self._buf, [THINK_CLOSE]), always_hold_space=True)
        return False

    def _on_text(self, out, final) -> bool:
        if self._lstrip:
            self._buf = self._buf.lstrip()
            if not self._buf:
                return False
            self._lstrip = False
        stop_at, stop = _earliest(self._buf, self._stops)
        call_at = self._buf.find(CALL_OPEN) if self._tools else -1
        if stop_at >= 0 and (call_at < 0 or stop_at < call_at):
            if stop_at:
                out.append(Text(self._buf[:stop_at]))
            self._buf, self.stop_sequence, self.done = "", stop, True
            return False
        if call_at >= 0:
            before = self._buf[:call_at].rstrip()
            if before:
                out.append(Text(before))
            self._gap = self._buf[len(before):call_at]  # given back if the call proves malformed
            self._call_text, self._scanned = self._buf[call_at + len(CALL_OPEN):], 0
            self._buf, self._mode = "", "call"
            return True
        if not final:
            markers = self._stops + [CALL_OPEN] if self._tools else self._stops
            self._release(out, Text, _held_suffix(self._buf, markers), always_hold_space=self._tools)
        return False

    def _on_call(self, out, final) -> bool:
        self._call_text += self._buf
        self._buf = ""
        end = self._call_text.find(CALL_CLOSE, self._scanned)
        if end < 0:
            self._scanned = max(0, len(self._call_text) - len(CALL_CLOSE) + 1)
            return False
        body, self._buf = self._call_text[:end], self._call_text[end + len(CALL_CLOSE):]
        self._call_text = ""
        parsed = parse_tool_call(body)
        if parsed is None:
            out.append(Text(self._gap + CALL_OPEN + body + CALL_CLOSE))
        else:
            name, args = parsed
            out.append(ToolCall(self.calls, name, json.dumps(args, ensure_ascii=False)))
            self.calls += 1
            if self._max_calls is not None and self.calls >= self._max_calls:
                self._buf, self.done = "", True
                return False
        self._mode, self._lstrip = "text", True
        return True

    def _release(self, out, kind, hold: int, always_hold_space: bool):
        """Emit the buffer but its last `hold` characters (and trailing space, which may precede markup)."""
        keep = self._buf[len(self._buf) - hold:] if hold else ""
        ready = self._buf[: len(self._buf) - hold]
        if always_hold_space:
            space = _trailing_space(ready)
            if space:
                keep, ready = ready[len(ready) - space:] + keep, ready[: len(ready) - space]
        if ready:
            out.append(kind(ready))
        self._buf = keep


class TextStream:
    """Feed token ids; get plain text deltas with stop strings honoured (no markup parsing).

    Text that could still turn out to be the start of a stop string is held back until
    it is decided; once a stop string appears, everything from it on is dropped and
    `stopped` is set.
    """

    def __init__(self, tokenizer: LaneTokenizer, stop: list[str]):
        self._decoder = TokenDecoder(tokenizer)
        self._parser = ReplyParser("continue", stop=stop)
        self.text = ""

    @property
    def stopped(self) -> bool:
        return self._parser.done

    def feed(self, ids: list[int]) -> str:
        return self._take(self._parser.feed(self._decoder.feed(ids)))

    def flush(self) -> str:
        return self._take(self._parser.feed(self._decoder.flush()) + self._parser.finish())

    def _take(self, events: list) -> str:
        delta = "".join(e.text for e in events)
        self.text += delta
        return delta
