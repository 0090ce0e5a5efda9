"""The one internal form both dialects are turned into before rendering and generation."""

from dataclasses import dataclass, field


@dataclass
class ChatRequest:
    """What the lane needs from a client request, whatever its dialect."""

    model: str
    messages: list[dict]          # {"role", "content": str, "reasoning"?, "tool_calls"?, "tool_call_id"?}
    tools: list[dict] = field(default_factory=list)
    tool_choice: object = None
    max_tokens: int | None = None  # None: as many as the window leaves
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    thinking: bool | None = None   # None: the client expressed no preference
    reasoning_budget_tokens: int | None = None
