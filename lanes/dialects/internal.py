"""The one internal form both dialects are turned into before rendering and generation.

Messages: {"role": "system" | "user" | "assistant" | "tool", "content": str}, plus on
assistant messages "reasoning" (thinking text) and "tool_calls" ([{"id", "name",
"arguments"}]), and on tool messages "tool_call_id" and "is_error".
Tools: {"type": "function", "function": {"name", "description"?, "parameters"?}}.
tool_choice: "auto" | "none" | "required" | {"name": str} (that one tool, forced).

The field checks both dialects share live here too, so a bad value reads the same in both.
"""

import math
from dataclasses import dataclass, field

from .errors import bad_request


@dataclass
class ChatRequest:
    """What the lane needs from a client request, whatever its dialect."""

    model: str
    messages: list[dict]
    tools: list[dict] = field(default_factory=list)
    tool_choice: str | dict = "auto"
    parallel_tool_calls: bool = True
    max_tokens: int | None = None  # None: as many as the window leaves
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    thinking: bool | None = None   # None: the client expressed no preference
    reasoning_budget_tokens: int | None = None  # thinking tokens before the engine makes the model wrap up
    prefill: str = ""              # Anthropic: a final assistant message the reply continues

    @property
    def forced_tool(self) -> bool:
        """The client requires a tool call (any tool, or one named tool)."""
        return self.tools != [] and (self.tool_choice == "required" or isinstance(self.tool_choice, dict))

    @property
    def parses_tool_calls(self) -> bool:
        """Whether `<tool_call>` markup in the output becomes tool calls (else it stays text)."""
        return bool(self.tools) and self.tool_choice != "none"


# Effort levels (OpenAI reasoning_effort, Anthropic output_config.effort) -> thinking budget in tokens.
# Neither API states budgets; these are the lane's, so that thinking always leaves room to answer.
EFFORT_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768, "max": None}


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(body: dict, name: str, required: bool = False) -> int | None:
    value = body.get(name)
    if value is None:
        if required:
            raise bad_request(f"{name}: field required")
        return None
    if not is_int(value) or value < 1:
        raise bad_request(f"{name} must be a positive integer")
    return value


def number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or not low <= value <= high:
        raise bad_request(f"{name} must be a number between {low:g} and {high:g}")
    return float(value)


def top_k(body: dict) -> int:
    value = body.get("top_k")
    if value is None:
        return 0
    if not is_int(value) or value < 0:
        raise bad_request("top_k must be a non-negative integer")
    return value


def string_list(value, name: str) -> list[str]:
    """A stop list: one string or an array of strings (empty strings dropped)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise bad_request(f"{name} must be a string or an array of strings")
    return [s for s in value if s]


def function_tool(name, description, parameters, where: str) -> dict:
    """One tool in the internal (OpenAI function) shape; only the fields the prompt shows."""
    if not isinstance(name, str) or not name:
        raise bad_request(f"{where}.name must be a non-empty string")
    fn = {"name": name}
    if description is not None:
        if not isinstance(description, str):
            raise bad_request(f"{where}.description must be a string")
        fn["description"] = description
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise bad_request(f"{where} parameters must be a JSON schema object")
        fn["parameters"] = parameters
    return {"type": "function", "function": fn}


def check_tool_choice(choice, tools: list[dict]) -> None:
    """A forced tool must exist; forcing a call without tools is an error."""
    if choice == "required" and not tools:
        raise bad_request("tool_choice requires a tool call, but no tools were given")
    if isinstance(choice, dict):
        names = {t["function"]["name"] for t in tools}
        if choice["name"] not in names:
            raise bad_request(f"tool_choice names the tool {choice['name']!r}, which is not among the tools")


def budget(body: dict) -> int | None:
    """The gateway's per-request thinking budget (`reasoning_budget_tokens`), if any."""
    value = body.get("reasoning_budget_tokens")
    if value is None:
        return None
    if not is_int(value) or value < 0:
        raise bad_request("reasoning_budget_tokens must be a non-negative integer")
    return value
