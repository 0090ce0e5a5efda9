"""Gate 6, forward: stream the upstream's bytes to the client unchanged, teeing a copy."""

import json
import logging
import time

import httpx

from lanes.dialects.errors import ApiError

from .state import RequestState
from .tee import Tee
from .upstream import client

log = logging.getLogger("strata.gateway")

PASSED_HEADERS = {b"content-type", b"cache-control"}


class Forwarded:
    """What the forward saw: status, tee, time to first byte."""

    def __init__(self, status: int, tee: Tee, ttft_ms: float | None):
        self.status, self.tee, self.ttft_ms = status, tee, ttft_ms


async def forward(consumer, state: RequestState) -> Forwarded:
    """Send the request upstream (key swapped) and relay the answer chunk by chunk."""
    content = json.dumps(state.body).encode() if state.body_changed else state.raw_body
    headers = {"content-type": "application/json", "authorization": f"Bearer {state.upstream_key}"}
    if state.dialect == "anthropic":
        headers["x-api-key"] = state.upstream_key
        headers["anthropic-version"] = state.header(b"anthropic-version") or "2023-06-01"
    request = client().build_request("POST", state.upstream_url, content=content, headers=headers)
    started = time.perf_counter()
    try:
        response = await client().send(request, stream=True)
    except httpx.TransportError as exc:
        where = f"lane {state.lane.name!r}" if state.lane else "the upstream"
        log.warning("forward.unreachable url=%s error=%r", state.upstream_url, exc)
        raise ApiError(503, f"{where} is not reachable; try again shortly")
    try:
        streaming = response.headers.get("content-type", "").startswith("text/event-stream")
        tee, ttft_ms = Tee(streaming), None
        await consumer.send_headers(
            status=response.status_code,
            headers=[(k, v) for k, v in response.headers.raw if k.lower() in PASSED_HEADERS],
        )
        if streaming:
            # daphne holds the headers until the first body write; an empty one sends them now,
            # so the client knows at once that the request was accepted.
            await consumer.send_body(b"", more_body=True)
        async for chunk in response.aiter_raw():
            if ttft_ms is None:
                ttft_ms = (time.perf_counter() - started) * 1000
            tee.feed(chunk)
            await consumer.send_body(chunk, more_body=True)
        tee.close()
        consumer.response_complete = True
        await consumer.send_body(b"", more_body=False)
        return Forwarded(response.status_code, tee, ttft_ms)
    finally:
        await response.aclose()
