"""Gate 7, the 400 rewrite net: what to do when the upstream answers "over the window".

A lane's window 400 carries its measured numbers (lanes.window): `prompt_tokens`,
`max_context` and `max_output_tokens` (the room left for output; 0 when the prompt alone
is too long).
- only the output is too long (room >= 1): clamp max_tokens to the room and retry once;
  the client never sees the first answer;
- the prompt is too long: no retry; the client gets the dialect's structured 400 with the
  three numbers (whatever shape the upstream wrote it in);
- any other 400: not ours to rewrite, passed through as it came.
"""

import json

from gateway.state import RequestState
from lanes.dialects.errors import ApiError

from . import thinking

RETRY = "retry"
FIELDS = ("prompt_tokens", "max_context", "max_output_tokens")


def window_numbers(body: bytes) -> dict | None:
    """The three numbers of a window error body in either dialect's shape, else None."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict) or not all(isinstance(error.get(f), int) for f in FIELDS):
        return None
    return {f: error[f] for f in FIELDS} | {"message": str(error.get("message") or "")}


def examine(state: RequestState, body: bytes, retried: bool):
    """-> RETRY (the body was clamped), an ApiError to answer, or None (pass the 400 through)."""
    numbers = window_numbers(body)
    if numbers is None:
        return None
    room = numbers["max_output_tokens"]
    if room >= 1 and not retried:
        state.set_max_tokens(room)
        state.extra["clamped_max_tokens"] = room
        thinking.reapply(state)
        return RETRY
    message = numbers["message"]
    if room < 1 and not message.startswith("prompt is too long"):
        slack = state.lane.slack if state.lane is not None else 0
        message = f"prompt is too long: {numbers['prompt_tokens']} tokens > {numbers['max_context'] - slack - 1} maximum"
    state.extra["prompt_tokens"] = numbers["prompt_tokens"]
    return ApiError(400, message or "the request does not fit the model's context window",
                    code="context_length_exceeded", extra={f: numbers[f] for f in FIELDS})
