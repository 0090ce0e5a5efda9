"""Gate 4, thinking guard: keep room for the answer when the client states no thinking preference.

With no Anthropic `thinking` (nor `output_config.effort`) and no OpenAI `reasoning_effort`,
the lane gets a per-request `reasoning_budget_tokens` = max_tokens - reserve, where
reserve = max(STRATA_ANSWER_RESERVE_TOKENS, max_tokens / 3); when thinking reaches it, the
engine makes the model wrap up and answer. Nothing is sent when that budget is <= 0. With
no max_tokens, the room the window leaves after the estimated prompt stands for it.
Only our lanes take the field; upstream URLs never see it.
"""

import math

from django.conf import settings

from gateway.state import RequestState
from lanes.dialects.errors import ANTHROPIC

FIELD = "reasoning_budget_tokens"


def states_preference(state: RequestState) -> bool:
    body = state.body
    if state.dialect == ANTHROPIC:
        config = body.get("output_config")
        return body.get("thinking") is not None or (isinstance(config, dict) and config.get("effort") is not None)
    return body.get("reasoning_effort") is not None


def budget_for(max_tokens: int) -> int:
    reserve = max(settings.STRATA_ANSWER_RESERVE_TOKENS, math.ceil(max_tokens / 3))
    return max_tokens - reserve


def apply(state: RequestState):
    """Set (or reset, after max_tokens changed) the guard's budget on the body."""
    max_tokens = state.max_tokens()
    if max_tokens is None:
        from .precheck import estimate

        max_tokens = state.lane.max_context - state.lane.slack - estimate(state)
    budget = budget_for(max_tokens)
    if budget > 0:
        if state.body.get(FIELD) != budget:
            state.body[FIELD] = budget
            state.changed()
        state.extra["guarded"] = True
    elif state.extra.pop("guarded", False):
        state.body.pop(FIELD, None)
        state.changed()


def reapply(state: RequestState):
    """max_tokens was clamped (pre-check, rewrite net): the guard's budget follows it."""
    if state.extra.get("guarded"):
        apply(state)


async def guard(state: RequestState) -> RequestState:
    if state.lane is None or state.counting or FIELD in state.body or states_preference(state):
        return state
    apply(state)
    return state
