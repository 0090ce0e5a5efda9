"""Internal request -> token ids and output budget: sanitize, render, count, window."""

from dataclasses import dataclass

from jinja2 import TemplateError

from .config import LaneRuntime
from .dialects.errors import bad_request
from .dialects.internal import ChatRequest
from .window import output_room


@dataclass
class Prepared:
    request: ChatRequest
    prompt_ids: list[int]
    max_tokens: int


def count_prompt(lane: LaneRuntime, request: ChatRequest) -> list[int]:
    """The one authoritative tokenization of a request's prompt."""
    messages = lane.sanitizer.neutralize_all(request.messages)
    tools = lane.sanitizer.neutralize_all(request.tools)
    try:
        prompt = lane.template.render(messages, tools, request.thinking)
    except (TemplateError, ValueError, TypeError) as exc:
        # The template rejects the conversation's shape (e.g. roles out of order).
        raise bad_request(f"the conversation cannot be rendered by this model's chat template: {exc}")
    return lane.tokenizer.encode(prompt)


def prepare(lane: LaneRuntime, request: ChatRequest) -> Prepared:
    """Count the prompt and settle max_tokens; raises ApiError 400 when it does not fit."""
    ids = count_prompt(lane, request)
    max_tokens = output_room(len(ids), request.max_tokens, lane.max_context, lane.slack, lane.fit_max_tokens)
    return Prepared(request, ids, max_tokens)


def engine_request(lane: LaneRuntime, prepared: Prepared) -> dict:
    """The engine's `generate` message for a prepared request (protocol.py)."""
    req = prepared.request
    return {
        "prompt": prepared.prompt_ids,
        "max_tokens": prepared.max_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "seed": req.seed,
        "stop_ids": [lane.tokenizer.eos_id] if lane.tokenizer.eos_id is not None else [],
    }
