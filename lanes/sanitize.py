"""Neutralise special-token literals in client text so they tokenize as plain text.

A literal such as `<|im_end|>` typed by a user must never end the turn. Before the chat
template is rendered, every client string passes `neutralize`, which breaks each literal
with the marker U+E000 after its first character; the template's own special tokens stay
whole. The tokenizer (`lanes.tokenizer`) splits the rendered prompt at whole special
tokens only, then removes the markers with `restore` and encodes the client's text
exactly as written, special parsing off. A marker already in client text is doubled,
so nothing the client wrote is changed or lost.
"""

import re

MARK = "\ue000"
_RESTORE = re.compile(MARK + "(" + MARK + ")?")


class Sanitizer:
    """Knows the model's special-token literals; escapes them in client strings."""

    def __init__(self, special_literals: list[str]):
        literals = sorted(set(special_literals), key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in literals)) if literals else None

    def neutralize(self, text: str) -> str:
        """Client text -> text in which no special-token literal is whole (reversible by `restore`)."""
        if MARK in text:
            text = text.replace(MARK, MARK + MARK)
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: m.group(0)[0] + MARK + m.group(0)[1:], text)

    def neutralize_all(self, value):
        """`neutralize` applied to every string inside nested dicts and lists (messages, tools),
        keys included (a tool schema's property names reach the prompt too)."""
        if isinstance(value, str):
            return self.neutralize(value)
        if isinstance(value, list):
            return [self.neutralize_all(v) for v in value]
        if isinstance(value, dict):
            return {self.neutralize(k) if isinstance(k, str) else k: self.neutralize_all(v) for k, v in value.items()}
        return value


def restore(text: str) -> str:
    """Undo `neutralize`: drop single markers, turn doubled ones back into one."""
    if MARK not in text:
        return text
    return _RESTORE.sub(lambda m: m.group(1) or "", text)
