"""Gate 6, forward: stream the upstream's bytes to the client unchanged, teeing a copy.

The lane key (or the route's upstream key) is swapped in for the client's. Headers go to
the client as soon as the upstream answers, the body chunk by chunk as it comes; the tee
reads usage on the side. A 400 is held back and shown to the rewrite net first (gate 7),
which may retry once with a clamped max_tokens. Cancelling the task (client disconnect)
closes the upstream response, which tells the lane to stop generating.
"""

import logging
import time

import httpx

from lanes.dialects.errors import ApiError

from .gates import rewrite
from .state import RequestState
from .tee import Tee
from .upstream import UpstreamError, client, lane_client

log = logging.getLogger("strata.gateway")

PASSED_HEADERS = {b"content-type", b"cache-control"}


class Forwarded:
    """What the forward saw: status, tee, time to first byte (ms from the request's start)."""

    def __init__(self, status: int, tee: Tee, ttft_ms: float | None, retried: bool = False):
        self.status, self.tee, self.ttft_ms, self.retried = status, tee, ttft_ms, retried


def upstream_headers(state: RequestState) -> dict:
    headers = {"content-type": "application/json", "authorization": f"Bearer {state.upstream_key}"}
    if state.dialect == "anthropic":
        headers["x-api-key"] = state.upstream_key
        headers["anthropic-version"] = state.header(b"anthropic-version") or "2023-06-01"
        beta = state.header(b"anthropic-beta")
        if beta:
            headers["anthropic-beta"] = beta
    return headers


async def open_upstream(state: RequestState):
    """The upstream's response, its body not yet read (a LaneResponse for lanes, else an httpx.Response)."""
    try:
        if state.lane is not None:
            return await lane_client().send("POST", state.upstream_url, upstream_headers(state), state.content())
        request = client().build_request("POST", state.upstream_url, content=state.content(),
                                         headers=upstream_headers(state))
        return await client().send(request, stream=True)
    except (httpx.TransportError, UpstreamError) as exc:
        where = f"lane {state.lane.name!r}" if state.lane else "the upstream"
        log.warning("forward.unreachable url=%s error=%r", state.upstream_url, exc)
        raise ApiError(503, f"{where} is not reachable; try again shortly")


async def forward(consumer, state: RequestState) -> Forwarded:
    """Send the request upstream and relay the answer chunk by chunk."""
    retried = False
    if state.entry is not None:
        state.entry.state = "waiting"
    state.timings["gateway"] = (time.perf_counter() - state.t0) * 1000 - state.timings.get("count", 0.0)
    while True:
        response = await open_upstream(state)
        if response.status_code != 400:
            break
        held = await response.aread()
        await response.aclose()
        verdict = rewrite.examine(state, held, retried)
        if verdict == rewrite.RETRY:
            retried = True
            log.info("forward.retry_clamped lane=%s max_tokens=%s", state.lane.name if state.lane else "-",
                     state.extra.get("clamped_max_tokens"))
            continue
        if isinstance(verdict, ApiError):
            raise verdict
        tee = Tee(False)
        tee.feed(held)
        tee.close()
        await consumer.send_headers(status=400, headers=_passed(response, state))
        consumer.response_complete = True
        await consumer.send_body(held, more_body=False)
        return Forwarded(400, tee, None, retried)
    try:
        streaming = response.headers.get("content-type", "").startswith("text/event-stream")
        tee, ttft_ms = Tee(streaming, state.entry), None
        await consumer.send_headers(status=response.status_code, headers=_passed(response, state))
        if streaming:
            # daphne holds the headers until the first body write; an empty one sends them now,
            # so the client knows at once that the request was accepted.
            await consumer.send_body(b"", more_body=True)
        async for chunk in response.aiter_raw():
            if ttft_ms is None:
                ttft_ms = (time.perf_counter() - state.t0) * 1000
                if state.entry is not None:
                    state.entry.state = "streaming"
            tee.feed(chunk)
            if tee.ended:
                # The client has the whole answer once this chunk is out; SDKs hang up at once,
                # and that is a normal end, not a disconnect.
                consumer.response_complete = True
            await consumer.send_body(chunk, more_body=True)
        tee.close()
        consumer.response_complete = True
        await consumer.send_body(b"", more_body=False)
        return Forwarded(response.status_code, tee, ttft_ms, retried)
    finally:
        await response.aclose()


def _passed(response, state: RequestState) -> list:
    headers = [(k, v) for k, v in response.headers.raw if k.lower() in PASSED_HEADERS]
    headers.append((b"server-timing", server_timing(state).encode()))
    return headers


def server_timing(state: RequestState) -> str:
    """The gateway's own time before forwarding, and the lane's counting time, for clients and benchmarks."""
    return ", ".join(f"{name};dur={ms:.2f}" for name, ms in state.timings.items())
