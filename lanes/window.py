"""Window arithmetic: how many output tokens a prompt leaves, by the lane's exact count."""

from .dialects.errors import ApiError


def prompt_too_long(prompt_tokens: int, max_context: int, slack: int) -> ApiError:
    """The 400 for a prompt that leaves no room, with the measured numbers machine-readable."""
    maximum = max_context - slack - 1  # the longest prompt that still leaves one output token
    return ApiError(
        400,
        f"prompt is too long: {prompt_tokens} tokens > {maximum} maximum",
        code="context_length_exceeded",
        extra={"prompt_tokens": prompt_tokens, "max_context": max_context, "max_output_tokens": 0},
    )


def output_room(prompt_tokens: int, requested: int | None, max_context: int, slack: int, fit: bool) -> int:
    """max_tokens to give the engine: `room = max_context - slack - prompt_tokens`.

    No request -> all the room. Too many requested -> clamped to the room when `fit`,
    else a 400 carrying prompt_tokens, max_context and max_output_tokens.
    """
    room = max_context - slack - prompt_tokens
    if room < 1:
        raise prompt_too_long(prompt_tokens, max_context, slack)
    if requested is None:
        return room
    if requested > room and not fit:
        raise ApiError(
            400,
            f"input length and `max_tokens` exceed context limit: {prompt_tokens} + {requested} > "
            f"{max_context - slack}, decrease input length or `max_tokens` and try again",
            code="context_length_exceeded",
            extra={"prompt_tokens": prompt_tokens, "max_context": max_context, "max_output_tokens": room},
        )
    return min(requested, room)
