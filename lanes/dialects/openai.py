"""OpenAI Chat Completions: request -> ChatRequest, and the response and chunk shapes back."""

import json
import time
import uuid

from .errors import bad_request
from .internal import (
    EFFORT_BUDGETS, ChatRequest, budget, check_tool_choice, function_tool, is_int, number, string_list, top_k,
)

# Internal finish reasons (generate.Finish.reason) -> OpenAI's.
FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "stop_sequence": "stop",
                  "cancelled": "stop"}
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
# reasoning_effort -> (thinking, budget).
EFFORTS = {"none": (False, None), "minimal": (False, None), **{e: (True, b) for e, b in EFFORT_BUDGETS.items()}}


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
            kind = part["type"]
            key = "refusal" if kind == "refusal" else "text"
            if kind not in ("text", "refusal"):
                raise bad_request(f"{where}.content[{i}]: part type {kind!r} is not supported by this model")
            if not isinstance(part.get(key), str):
                raise bad_request(f"{where}.content[{i}].{key} must be a string")
            texts.append(part[key])
        return "".join(texts)
    raise bad_request(f"{where}.content must be a string or a list of parts")


def _tool_calls(calls, where: str) -> list[dict]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise bad_request(f"{where}.tool_calls must be an array")
    out = []
    for i, call in enumerate(calls):
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


def _message(m, i: int) -> dict:
    where = f"messages[{i}]"
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise bad_request(f"{where}.role must be one of system, developer, user, assistant, tool")
    role = {"developer": "system", "function": "tool"}.get(m["role"], m["role"])
    msg = {"role": role, "content": _text_of(m.get("content"), where)}
    if role == "assistant":
        msg["tool_calls"] = _tool_calls(m.get("tool_calls"), where)
        if isinstance(m.get("reasoning_content"), str):
            msg["reasoning"] = m["reasoning_content"]
    elif role == "tool":
        msg["tool_call_id"] = m.get("tool_call_id")
    return msg


def _tools(raw) -> list[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request("tools must be an array")
    tools = []
    for i, tool in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(tool.get("function"), dict):
            raise bad_request(f"{where}: only tools of type 'function' with a 'function' object are supported")
        fn = tool["function"]
        tools.append(function_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), f"{where}.function"))
    return tools


def _tool_choice(choice, tools: list[dict]):
    if choice is None:
        choice = "auto"
    elif isinstance(choice, dict):
        fn = choice.get("function")
        if choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_request("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}")
        choice = {"name": fn["name"]}
    elif choice not in ("none", "auto", "required"):
        raise bad_request("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}")
    check_tool_choice(choice, tools)
    return choice


def openai_to_request(body) -> ChatRequest:
    """Validate an OpenAI chat body and turn it into the internal form; bad input -> ApiError 400."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad_request("'messages' is required and must be a non-empty array")
    messages = [_message(m, i) for i, m in enumerate(raw_messages)]
    if body.get("n") not in (None, 1):
        raise bad_request("n must be 1: this lane returns one choice")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not is_int(max_tokens) or max_tokens < 1):
        raise bad_request("max_tokens must be a positive integer")
    stream_options = body.get("stream_options") or {}
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise bad_request(f"reasoning_effort must be one of {', '.join(EFFORTS)}")
    thinking, effort_budget = EFFORTS.get(effort, (None, None))
    gateway_budget = budget(body)
    tools = _tools(body.get("tools"))
    seed = body.get("seed")
    return ChatRequest(
        model=str(body.get("model") or ""),
        messages=messages,
        tools=tools,
        tool_choice=_tool_choice(body.get("tool_choice"), tools),
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        max_tokens=max_tokens,
        temperature=number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=number(body, "top_p", 1.0, 0.0, 1.0),
        top_k=top_k(body),
        seed=seed if is_int(seed) else None,
        stop=string_list(body.get("stop"), "stop"),
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
        thinking=thinking,
        reasoning_budget_tokens=gateway_budget if gateway_budget is not None else effort_budget,
    )


def new_completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int | None = None) -> dict:
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


def tool_call_body(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion_body(cid: str, model: str, text: str, finish: str, usage: dict, *, reasoning: str = "",
                    tool_calls: list[dict] = ()) -> dict:
    """A whole (non-streamed) chat.completion object."""
    message = {"role": "assistant", "content": text if text or not tool_calls else None, "refusal": None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": FINISH_REASONS.get(finish, "stop")}],
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
