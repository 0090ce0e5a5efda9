"""Gate 5, window pre-check (SPEC 2.5): answer a prompt that cannot fit before the engine sees it.

`est` is an upper bound of the prompt's tokens by character class, over the body as it
goes upstream (CJK 1.05 tokens/char, digits 1.05, everything else 0.70); the JSON syntax
around the text and STRATA_PRECHECK_MARGIN cover what the chat template adds.
- est + margin <= max_context - slack: pass through, no counting cost;
- otherwise the lane counts (tokenize only): a prompt longer than the lane's maximum
  (max_context - slack - 1, as lanes.window says) is answered 400 at once; one that fits
  but leaves less room than max_tokens asks for gets max_tokens clamped to the room;
- counting unavailable (lane unreachable, an error): pass through unchanged; the lane's
  own 400 and the rewrite net catch it.
Only routes to our lanes are checked: an upstream URL's window is not known here.
"""

import logging
import math
import re
import time

import httpx
from django.conf import settings

from gateway.metrics import PRECHECK
from gateway.state import RequestState
from gateway.upstream import client
from lanes.dialects.errors import ANTHROPIC
from lanes.window import prompt_too_long

from . import thinking

log = logging.getLogger("strata.gateway")

CJK_TOKENS_PER_CHAR = 1.05
DIGIT_TOKENS_PER_CHAR = 1.05
OTHER_TOKENS_PER_CHAR = 0.70
_DIGITS = b"0123456789"
_CJK_RUN = re.compile(
    "[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002ffff]+"
)
# The lane's count endpoint for each dialect's body (lanes/server.py).
COUNT_PATHS = {ANTHROPIC: "/v1/messages/count_tokens", "openai": "/v1/chat/completions/count_tokens"}


def estimate_tokens(data: bytes | str) -> int:
    """Upper bound of the tokens in `data` by character class (SPEC 2.5)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    digits = len(raw) - len(raw.translate(None, _DIGITS))
    if raw.isascii():
        chars, cjk = len(raw), 0
    else:
        text = data if isinstance(data, str) else raw.decode("utf-8", "replace")
        chars = len(text)
        cjk = sum(map(len, _CJK_RUN.findall(text)))
    other = chars - digits - cjk
    return math.ceil(CJK_TOKENS_PER_CHAR * cjk + DIGIT_TOKENS_PER_CHAR * digits + OTHER_TOKENS_PER_CHAR * other)


def estimate(state: RequestState) -> int:
    """The estimate of the body as it is now (kept until a gate changes the body)."""
    content = state.content()
    cached = state.extra.get("estimate")
    if cached is None or cached[0] is not content:
        cached = (content, estimate_tokens(content))
        state.extra["estimate"] = cached
    return cached[1]


async def count_at_lane(lane, dialect: str, content: bytes, timings: dict | None = None) -> int | None:
    """The lane's exact count of a body's prompt (tokenize only), or None when it cannot be had."""
    url = lane.base_url + COUNT_PATHS[dialect]
    headers = {"content-type": "application/json", "authorization": f"Bearer {settings.STRATA_LANE_KEY}"}
    started = time.perf_counter()
    try:
        response = await client().post(url, content=content, headers=headers, timeout=settings.STRATA_COUNT_TIMEOUT)
        counted = response.json().get("input_tokens") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        log.warning("precheck.count_unavailable lane=%s error=%r", lane.name, exc)
        return None
    finally:
        if timings is not None:
            timings["count"] = timings.get("count", 0.0) + (time.perf_counter() - started) * 1000
    if not isinstance(counted, int) or isinstance(counted, bool):
        log.info("precheck.count_unavailable lane=%s status=%s", lane.name, response.status_code)
        return None
    return counted


async def lane_count(state: RequestState) -> int | None:
    """The lane's count of the request's body as it is now."""
    return await count_at_lane(state.lane, state.dialect, state.content(), state.timings)


async def check(state: RequestState) -> RequestState:
    lane = state.lane
    if lane is None or state.counting:
        return state
    limit = lane.max_context - lane.slack
    if estimate(state) + settings.STRATA_PRECHECK_MARGIN <= limit:
        PRECHECK.labels("estimate_fits").inc()
        return state
    counted = await lane_count(state)
    if counted is None:
        PRECHECK.labels("count_unavailable").inc()
        return state  # counting unavailable: the lane's own 400 and the rewrite net catch it
    state.extra["prompt_tokens"] = counted
    if counted > limit - 1:
        PRECHECK.labels("rejected").inc()
        raise prompt_too_long(counted, lane.max_context, lane.slack)
    room = limit - counted
    requested = state.max_tokens()
    if requested is not None and requested > room:
        state.set_max_tokens(room)
        state.extra["clamped_max_tokens"] = room
        thinking.reapply(state)
        PRECHECK.labels("clamped").inc()
    else:
        PRECHECK.labels("count_fits").inc()
    return state
