"""Internal request -> prompt, token ids and output budget: sanitize, render, count, window."""

import json
from dataclasses import dataclass
from functools import lru_cache

from jinja2 import TemplateError

from .config import LaneRuntime
from .dialects.errors import bad_request
from .dialects.internal import ChatRequest
from .events import CALL_OPEN, THINK_CLOSE, THINK_OPEN, ReplyParser
from .window import output_room

THINK_OPENER = THINK_OPEN + "\n"  # how the shipped template opens the reply's think block
# What the engine makes the model say when thinking reaches its budget (then it answers).
WRAP_UP = "\n\nI have to answer now.\n" + THINK_CLOSE + "\n\n"


@dataclass
class Rendered:
    """The prompt text and where it leaves the model (see events.ReplyParser)."""

    text: str
    mode: str
    call_prefix: str = ""


@dataclass
class Prepared:
    request: ChatRequest
    prompt_ids: list[int]
    max_tokens: int
    mode: str = "start"
    call_prefix: str = ""

    def parser(self) -> ReplyParser:
        """A fresh parser for this request's output."""
        req = self.request
        return ReplyParser(
            self.mode,
            stop=req.stop,
            tools=req.parses_tool_calls,
            max_calls=None if req.parallel_tool_calls else 1,
            call_prefix=self.call_prefix,
        )


def render_prompt(lane: LaneRuntime, request: ChatRequest) -> Rendered:
    """The prompt text for a request: every client string neutralised, then the chat template.

    A forced tool call opens the reply with `<tool_call>` (and the tool's name when one is
    named); an Anthropic prefill is appended as written. Both close the think block first.
    """
    sanitize = lane.sanitizer.neutralize_all
    thinking = False if request.forced_tool or request.prefill else request.thinking
    try:
        prompt = lane.template.render(sanitize(request.messages), sanitize(request.tools), thinking)
    except (TemplateError, ValueError, TypeError) as exc:
        # The template rejects the conversation's shape (e.g. roles out of order).
        raise bad_request(f"the conversation cannot be rendered by this model's chat template: {exc}")
    if request.forced_tool:
        choice = request.tool_choice
        prefix = "\n"
        if isinstance(choice, dict):
            prefix += '{"name": ' + json.dumps(sanitize(choice["name"]), ensure_ascii=False) + ', "arguments": '
        return Rendered(prompt + CALL_OPEN + prefix, "call", prefix)
    if request.prefill:
        return Rendered(prompt + lane.sanitizer.neutralize(request.prefill), "continue")
    if prompt.endswith(THINK_OPENER):
        return Rendered(prompt, "thinking")
    # thinking false: the template closed an empty block. None: the model may open one.
    return Rendered(prompt, "text" if thinking is False else "start")


def count_prompt(lane: LaneRuntime, request: ChatRequest) -> list[int]:
    """The one authoritative tokenization of a request's prompt."""
    return lane.tokenizer.encode(render_prompt(lane, request).text)


def count_tokens(lane: LaneRuntime, request: ChatRequest) -> int:
    """len(count_prompt(...)), without building the list: what count_tokens answers."""
    return len(lane.tokenizer.encode_array(render_prompt(lane, request).text))


def prepare(lane: LaneRuntime, request: ChatRequest) -> Prepared:
    """Count the prompt and settle max_tokens; raises ApiError 400 when it does not fit."""
    rendered = render_prompt(lane, request)
    ids = lane.tokenizer.encode(rendered.text)
    max_tokens = output_room(len(ids), request.max_tokens, lane.max_context, lane.slack, lane.fit_max_tokens)
    return Prepared(request, ids, max_tokens, rendered.mode, rendered.call_prefix)


@lru_cache(maxsize=8)
def _reasoning_ids(tokenizer) -> tuple[list[int], list[int], list[int]]:
    """Ids of "<think>", "</think>" and the wrap-up text, as the engine will see them in the output."""
    def plain(text: str) -> list[int]:
        ids = tokenizer.encode(text)
        return ids[1:] if tokenizer.bos_id is not None else ids

    return plain(THINK_OPEN), plain(THINK_CLOSE), plain(WRAP_UP)


def engine_request(lane: LaneRuntime, prepared: Prepared) -> dict:
    """The engine's `generate` message for a prepared request (engine/protocol.py)."""
    req = prepared.request
    message = {
        "prompt": prepared.prompt_ids,
        "max_tokens": prepared.max_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "seed": req.seed,
        "stop_ids": [lane.tokenizer.eos_id] if lane.tokenizer.eos_id is not None else [],
    }
    if req.reasoning_budget_tokens is not None and prepared.mode in ("start", "thinking"):
        start_ids, end_ids, wrap_ids = _reasoning_ids(lane.tokenizer)
        message["reasoning"] = {
            "budget": req.reasoning_budget_tokens,
            "start_ids": start_ids,
            "end_ids": end_ids,
            "wrap_ids": wrap_ids,
            "thinking_at_start": prepared.mode == "thinking",
        }
    return message
