"""OpenAI Chat Completions: request -> ChatRequest, and the response and chunk shapes back."""

import json
import time
import uuid

from .errors import bad_request
from .internal import ChatRequest

FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "cancelled": "stop"}


def _text_of(content, where: str) -> str:
    """Message content (a string, or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or "type" not in part:
                raise bad_request(f"{where}.content[{i}]: each part must be an object with a type")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise bad_request(f"{where}.content[{i}].text must be a string")
                texts.append(part["text"])
            else:
                raise bad_request(f"{where}.content[{i}]: part type {part['type']!r} is not supported by this model")
        return "".join(texts)
    raise bad_request(f"{where}.content must be a string or a list of parts")


def _tool_calls(calls, where: str) -> list[dict]:
    out = []
    for i, call in enumerate(calls or []):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_request(f"{where}.tool_calls[{i}].function.name is required")
        args = fn.get("arguments") or "{}"
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            pass  # keep the string as the model wrote it
        out.append({"id": call.get("id"), "name": fn["name"], "arguments": args})
    return out


def openai_to_request(body) -> ChatRequest:
    """Validate an OpenAI chat body and turn it into the internal form; bad input -> ApiError 400."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad_request("'messages' is required and must be a non-empty array")
    messages = []
    for i, m in enumerate(raw_messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in {"system", "developer", "user", "assistant", "tool"}:
            raise bad_request(f"{where}.role must be one of system, developer, user, assistant, tool")
        role = "system" if m["role"] == "developer" else m["role"]
        msg = {"role": role, "content": _text_of(m.get("content"), where)}
        if role == "assistant":
            msg["tool_calls"] = _tool_calls(m.get("tool_calls"), where)
            if isinstance(m.get("reasoning_content"), str):
                msg["reasoning"] = m["reasoning_content"]
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
        messages.append(msg)

    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise bad_request("max_tokens must be a positive integer")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise bad_request("stop must be a string or an array of strings")
    stream_options = body.get("stream_options") or {}
    effort = body.get("reasoning_effort")
    return ChatRequest(
        model=str(body.get("model") or ""),
        messages=messages,
        tools=[t for t in body.get("tools") or [] if isinstance(t, dict)],
        tool_choice=body.get("tool_choice"),
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        top_k=int(_number(body, "top_k", 0, 0, 1000)),
        seed=body.get("seed") if isinstance(body.get("seed"), int) else None,
        stop=stop,
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
        thinking=None if effort is None else effort not in ("none", "minimal"),
        reasoning_budget_tokens=body.get("reasoning_budget_tokens"),
    )


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise bad_request(f"{name} must be a number between {low:g} and {high:g}")
    return float(value)


def new_completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion_body(cid: str, model: str, text: str, finish: str, usage: dict) -> dict:
    """A whole (non-streamed) chat.completion object."""
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": FINISH_REASONS.get(finish, "stop"),
            }
        ],
        "usage": usage,
    }


def chunk_body(cid: str, model: str, delta: dict, finish: str | None = None) -> dict:
    """One chat.completion.chunk with a single choice."""
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": FINISH_REASONS.get(finish, "stop") if finish else None,
            }
        ],
    }


def usage_chunk_body(cid: str, model: str, usage: dict) -> dict:
    """The closing chunk sent when stream_options.include_usage is set: no choices, usage only."""
    return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [], "usage": usage}
