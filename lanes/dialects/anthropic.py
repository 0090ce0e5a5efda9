"""Anthropic Messages: request -> ChatRequest, and the message, stream event and usage shapes back."""

import base64
import hashlib
import hmac
import json
import secrets
import string

from .errors import bad_request
from .internal import (
    EFFORT_BUDGETS, ChatRequest, budget, check_tool_choice, function_tool, is_int, number, positive_int, string_list,
    top_k,
)

# Internal finish reasons (generate.Finish.reason) -> Anthropic's stop_reason.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "stop_sequence": "stop_sequence",
                "tool_calls": "tool_use", "cancelled": "end_turn"}
BLOCK_JOIN = "\n\n"  # text blocks of one message (or of the system prompt) are joined with a blank line
_ALPHABET = string.ascii_letters + string.digits


def _text_blocks(blocks, where: str) -> str:
    """Text blocks (system, tool_result content) as one string; other block types are refused."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise bad_request(f"{where} must be a string or an array of content blocks")
    texts = []
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_string(block, "text", f"{where}[{i}]"))
        elif kind == "document":
            texts.append(_document(block, f"{where}[{i}]"))
        elif kind == "image":
            raise bad_request(f"{where}[{i}]: image content is not supported by this model")
        else:
            raise bad_request(f"{where}[{i}]: content block type {kind!r} is not supported here")
    return BLOCK_JOIN.join(texts)


def _string(block: dict, key: str, where: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise bad_request(f"{where}.{key} must be a string")
    return value


def _document(block: dict, where: str) -> str:
    """A document that is already text (the gateway extracts PDF, DOCX... into text sources)."""
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "text":
        return _string(source, "data", f"{where}.source")
    if isinstance(source, dict) and source.get("type") == "content":
        return _text_blocks(source.get("content"), f"{where}.source.content")
    kind = source.get("type") if isinstance(source, dict) else None
    raise bad_request(f"{where}: a document with a {kind!r} source is not supported by this model; send its text")


def _user_message(content, where: str) -> list[dict]:
    """One user message -> internal user and tool messages, in the order of its blocks."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or an array of content blocks")
    out, texts = [], []

    def flush_text():
        if texts:
            out.append({"role": "user", "content": BLOCK_JOIN.join(texts)})
            texts.clear()

    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_string(block, "text", at))
        elif kind == "document":
            texts.append(_document(block, at))
        elif kind == "tool_result":
            flush_text()
            result = block.get("content")
            out.append({
                "role": "tool",
                "tool_call_id": block.get("tool_use_id"),
                "content": "" if result is None else _text_blocks(result, f"{at}.content"),
                "is_error": block.get("is_error") is True,
            })
        elif kind == "image":
            raise bad_request(f"{at}: image content is not supported by this model")
        else:
            raise bad_request(f"{at}: content block type {kind!r} is not supported in a user message")
    flush_text()
    return out


def _assistant_message(content, where: str) -> dict:
    if isinstance(content, str):
        return {"role": "assistant", "content": content, "tool_calls": []}
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or an array of content blocks")
    texts, thoughts, calls = [], [], []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_string(block, "text", at))
        elif kind == "thinking":
            thoughts.append(_string(block, "thinking", at))
        elif kind == "redacted_thinking":
            continue  # opaque by definition: nothing of it can be shown to this model
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                raise bad_request(f"{at}: a tool_use block needs a name and an input object")
            calls.append({"id": block.get("id"), "name": block["name"], "arguments": block.get("input", {})})
        else:
            raise bad_request(f"{at}: content block type {kind!r} is not supported in an assistant message")
    msg = {"role": "assistant", "content": BLOCK_JOIN.join(texts), "tool_calls": calls}
    if thoughts:
        msg["reasoning"] = BLOCK_JOIN.join(thoughts)
    return msg


def _tools(raw) -> list[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request("tools must be an array")
    tools = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise bad_request(f"tools[{i}] must be an object")
        # Client tools carry input_schema; typed tools (bash_..., text_editor_...) are shown by name.
        tools.append(function_tool(tool.get("name"), tool.get("description"), tool.get("input_schema"), f"tools[{i}]"))
    return tools


def _tool_choice(choice, tools: list[dict]) -> tuple[str | dict, bool]:
    """-> (internal tool_choice, parallel tool calls allowed)."""
    if choice is None:
        return "auto", True
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise bad_request("tool_choice.type must be one of auto, any, tool, none")
    parallel = choice.get("disable_parallel_tool_use") is not True
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise bad_request("tool_choice.name is required when tool_choice.type is 'tool'")
        internal = {"name": choice["name"]}
    else:
        internal = {"any": "required"}.get(kind, kind)
    check_tool_choice(internal, tools)
    return internal, parallel


def _thinking(value, max_tokens: int | None, effort) -> tuple[bool | None, int | None]:
    """-> (thinking on/off/no preference, budget). Adaptive thinking takes its budget from the effort."""
    if effort is not None and effort not in EFFORT_BUDGETS:
        raise bad_request(f"output_config.effort must be one of {', '.join(EFFORT_BUDGETS)}")
    if value is None:
        return None, None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "disabled":
        return False, None
    if kind in ("adaptive", "between_tools"):
        return True, EFFORT_BUDGETS.get(effort)
    if kind != "enabled":
        raise bad_request("thinking.type must be one of enabled, disabled, adaptive, between_tools")
    budget_tokens = value.get("budget_tokens")
    if not is_int(budget_tokens) or budget_tokens < 1:
        raise bad_request("thinking.budget_tokens must be a positive integer when thinking is enabled")
    if max_tokens is not None and budget_tokens >= max_tokens:
        raise bad_request("`max_tokens` must be greater than `thinking.budget_tokens`")
    return True, budget_tokens


def anthropic_to_request(body, counting: bool = False) -> ChatRequest:
    """Validate an Anthropic Messages body (count_tokens: `counting`, no max_tokens) into the internal form."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad_request("messages: field required, a non-empty array")
    messages = []
    system = body.get("system")
    if system is not None:
        text = _text_blocks(system, "system")
        if text:
            messages.append({"role": "system", "content": text})
    prefill = ""
    for i, m in enumerate(raw_messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad_request(f"{where}.role must be 'user' or 'assistant'")
        if m["role"] == "user":
            messages.extend(_user_message(m.get("content"), where))
            continue
        msg = _assistant_message(m.get("content"), where)
        if i == len(raw_messages) - 1 and not msg["tool_calls"]:
            # A final assistant message is a prefill: the reply continues it.
            if msg["content"] != msg["content"].rstrip():
                raise bad_request("final assistant content cannot end with trailing whitespace")
            prefill = msg["content"]
        else:
            messages.append(msg)
    max_tokens = positive_int(body, "max_tokens", required=not counting)
    output_config = body.get("output_config")
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    thinking, thinking_budget = _thinking(body.get("thinking"), max_tokens, effort)
    tools = _tools(body.get("tools"))
    tool_choice, parallel = _tool_choice(body.get("tool_choice"), tools)
    request = ChatRequest(
        model=str(body.get("model") or ""),
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        max_tokens=max_tokens,
        temperature=number(body, "temperature", 1.0, 0.0, 1.0),
        top_p=number(body, "top_p", 1.0, 0.0, 1.0),
        top_k=top_k(body),
        stop=string_list(body.get("stop_sequences"), "stop_sequences"),
        stream=bool(body.get("stream")),
        thinking=thinking,
        reasoning_budget_tokens=thinking_budget if thinking_budget is not None else budget(body),
        prefill=prefill,
    )
    if thinking and request.forced_tool:
        raise bad_request("Thinking may not be enabled when tool_choice forces tool use.")
    return request


def new_message_id() -> str:
    return "msg_" + "".join(secrets.choice(_ALPHABET) for _ in range(24))


def new_tool_use_id() -> str:
    return "toolu_" + "".join(secrets.choice(_ALPHABET) for _ in range(24))


def thinking_signature(key: str, thinking: str) -> str:
    """An opaque signature for a thinking block (HMAC of its text with the lane key), as the real API sends."""
    digest = hmac.new(key.encode(), thinking.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def usage_body(input_tokens: int, output_tokens: int) -> dict:
    """Usage by the lane's one count: input_tokens is the whole prompt (what count_tokens says).

    The engine's prefix cache is not Anthropic's prompt cache: reporting its hits as
    cache_read_input_tokens would make clients that add the three input fields count them twice.
    """
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def message_body(mid: str, model: str, content: list[dict], stop_reason: str | None, stop_sequence: str | None,
                 usage: dict) -> dict:
    """A whole message object (the non-streamed answer, or the shell inside message_start)."""
    return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage}


def event(data: dict) -> bytes:
    """One SSE event named by its type, as the Messages API streams them."""
    return f"event: {data['type']}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
