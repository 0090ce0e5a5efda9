"""The conversation as it was: a stored request and response turned into turns an operator can read.

Request: OpenAI chat (`messages`, `tools`) or Anthropic messages (`system`, content blocks).
Response: a JSON body or an SSE stream of either dialect: OpenAI `chat.completion` /
`chat.completion.chunk` (content, reasoning_content, tool_calls merged by index) or Anthropic
message events (text_delta, thinking_delta, input_json_delta), or an error in either shape.
"""

import json
from dataclasses import dataclass, field


@dataclass
class Block:
    kind: str   # text, thinking, tool_call, tool_result, image, document, error, other
    text: str = ""
    name: str = ""  # tool name, or what kind of part it was


@dataclass
class Turn:
    role: str
    blocks: list = field(default_factory=list)


@dataclass
class Conversation:
    turns: list            # the request's messages (system included), then the answer's turn
    answer: Turn | None
    tools: list            # names of the tools offered
    finish_reason: str = ""
    usage: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # what could not be parsed


def _dump(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)


def _content_blocks(content) -> list:
    """Blocks of one message's content, either dialect (string, OpenAI parts, Anthropic blocks)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [Block("text", content)]
    blocks = []
    for part in content if isinstance(content, list) else [content]:
        if not isinstance(part, dict):
            blocks.append(Block("other", _dump(part)))
            continue
        kind = part.get("type")
        if kind in ("text", "input_text"):
            blocks.append(Block("text", part.get("text", "")))
        elif kind in ("thinking", "redacted_thinking"):
            blocks.append(Block("thinking", part.get("thinking", part.get("data", ""))))
        elif kind == "tool_use":
            blocks.append(Block("tool_call", _dump(part.get("input", {})), part.get("name", "")))
        elif kind == "tool_result":
            inner = part.get("content")
            text = "\n".join(b.text for b in _content_blocks(inner)) if isinstance(inner, list) else _dump(inner or "")
            blocks.append(Block("tool_result", text, part.get("tool_use_id", "")))
        elif kind in ("image", "image_url"):
            blocks.append(Block("image", "", kind))
        elif kind in ("document", "file"):
            source = part.get("source") or part.get("file") or {}
            text = source.get("data", "") if source.get("type") == "text" else ""
            blocks.append(Block("document", text[:2000], part.get("title") or source.get("filename") or kind))
        else:
            blocks.append(Block("other", _dump(part)[:2000], str(kind)))
    return blocks


def request_turns(request: dict) -> tuple[list, list]:
    """The turns and offered tool names of a request body of either dialect."""
    turns = []
    system = request.get("system")
    if system:
        turns.append(Turn("system", _content_blocks(system)))
    for message in request.get("messages") or []:
        if not isinstance(message, dict):
            continue
        turn = Turn(message.get("role", "?"), _content_blocks(message.get("content")))
        if message.get("reasoning_content"):
            turn.blocks.insert(0, Block("thinking", message["reasoning_content"]))
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            turn.blocks.append(Block("tool_call", fn.get("arguments", ""), fn.get("name", "")))
        if message.get("role") == "tool":
            turn.blocks = [Block("tool_result", b.text, message.get("tool_call_id", "")) for b in turn.blocks]
        turns.append(turn)
    tools = []
    for tool in request.get("tools") or []:
        if isinstance(tool, dict):
            tools.append(tool.get("name") or tool.get("function", {}).get("name", "?"))
    return turns, tools


class _Answer:
    """Collects an answer's parts in order: text and thinking merged while they run on, tool calls by index."""

    def __init__(self):
        self.blocks: list[Block] = []
        self.calls: dict = {}  # index -> Block
        self.finish_reason = ""
        self.usage: dict = {}

    def add(self, kind: str, text: str, name: str = ""):
        if not text and kind in ("text", "thinking"):
            return
        if self.blocks and self.blocks[-1].kind == kind and kind in ("text", "thinking"):
            self.blocks[-1].text += text
        else:
            self.blocks.append(Block(kind, text, name))

    def tool_delta(self, index, name: str, arguments: str):
        block = self.calls.get(index)
        if block is None:
            block = self.calls[index] = Block("tool_call", "", name or "")
            self.blocks.append(block)
        if name and not block.name:
            block.name = name
        block.text += arguments or ""

    def openai_message(self, message: dict):
        self.add("thinking", message.get("reasoning_content") or message.get("reasoning") or "")
        self.add("text", message.get("content") or "")
        for i, call in enumerate(message.get("tool_calls") or []):
            fn = call.get("function", {})
            self.tool_delta(("m", i), fn.get("name", ""), fn.get("arguments", ""))

    def openai_chunk(self, chunk: dict):
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            self.add("thinking", delta.get("reasoning_content") or delta.get("reasoning") or "")
            self.add("text", delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                fn = call.get("function") or {}
                self.tool_delta(call.get("index", 0), fn.get("name", ""), fn.get("arguments", ""))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]

    def anthropic_event(self, event: dict):
        kind = event.get("type")
        if kind == "message_start":
            self.usage.update((event.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.tool_delta(("a", event.get("index")), block.get("name", ""), "")
            elif block.get("type") in ("text", "thinking"):
                self.blocks.append(Block(block["type"], block.get("text") or block.get("thinking") or ""))
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.add("text", delta.get("text", ""))
            elif delta.get("type") == "thinking_delta":
                self.add("thinking", delta.get("thinking", ""))
            elif delta.get("type") == "input_json_delta":
                self.tool_delta(("a", event.get("index")), "", delta.get("partial_json", ""))
        elif kind == "message_delta":
            self.finish_reason = (event.get("delta") or {}).get("stop_reason") or self.finish_reason
            self.usage.update(event.get("usage") or {})
        elif kind == "error":
            self.blocks.append(Block("error", _dump(event.get("error", event))))

    def anthropic_message(self, message: dict):
        for block in _content_blocks(message.get("content")):
            self.blocks.append(block)
        self.finish_reason = message.get("stop_reason") or ""
        self.usage = message.get("usage") or {}

    def any_json(self, data: dict):
        if "error" in data and not data.get("choices"):
            self.blocks.append(Block("error", _dump(data["error"])))
        elif data.get("object") == "chat.completion.chunk":
            self.openai_chunk(data)
        elif data.get("object") == "chat.completion" or "choices" in data:
            for choice in data.get("choices") or []:
                self.openai_message(choice.get("message") or {})
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
            self.usage = data.get("usage") or self.usage
        elif data.get("type") == "message":
            self.anthropic_message(data)
        elif isinstance(data.get("type"), str):
            self.anthropic_event(data)
        else:
            self.blocks.append(Block("other", _dump(data)[:4000]))


def sse_events(text: str):
    """The `data:` payloads of an SSE stream (comments and event names skipped)."""
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip(" ") for line in event.split("\n") if line.startswith("data:"))
        if data:
            yield data


def parse_response(body: bytes) -> _Answer:
    answer = _Answer()
    text = body.decode("utf-8", "replace")
    stripped = text.lstrip()
    if not stripped:
        return answer
    if stripped.startswith("{"):
        try:
            answer.any_json(json.loads(stripped))
            return answer
        except ValueError:
            pass
    for data in sse_events(text):
        if data.strip() == "[DONE]":
            continue
        try:
            parsed = json.loads(data)
        except ValueError:
            answer.add("other", data[:2000])
            continue
        if isinstance(parsed, dict):
            answer.any_json(parsed)
    if not answer.blocks and not stripped.startswith(("data:", "event:", ":")):
        answer.add("other", text[:4000])
    return answer


def conversation(request: bytes, response: bytes) -> Conversation:
    """The conversation of a stored request/response pair; never raises on odd input."""
    notes = []
    try:
        parsed = json.loads(request) if request else {}
        if not isinstance(parsed, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        parsed = {}
        notes.append(f"the request body is not JSON ({exc}); see the raw download")
    turns, tools = request_turns(parsed)
    answer = parse_response(response)
    answer_turn = Turn("assistant (answer)", answer.blocks) if answer.blocks else None
    return Conversation(turns, answer_turn, tools, answer.finish_reason, answer.usage, notes)
