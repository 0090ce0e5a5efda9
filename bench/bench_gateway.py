"""Gateway overhead, side by side in one run: the same streaming requests straight to a lane and through the gateway.

    .venv/bin/python bench/bench_gateway.py [--runs 1:22,32:110,32:20] [--bursts 32:20] [--tokens 32]

The lane is the real lane server (lanes.server.LaneApp: dialect, template, exact count,
window, events, SSE) in its own process, on a scripted engine that emits `--tokens`
tokens per request at a set pace per run (the real engine decodes ~45 tok/s for one stream
and ~290 tok/s over 8 on this machine; the scripted one isolates the gateway from the
model's noise and cost). The gateway is the real one (`manage.py rungateway`, daphne) in
its own process: API key, cached routes, the archive rows and segments, the tee. The
client is this process.

A run (STREAMS:MS_PER_TOKEN) keeps STREAMS requests in flight: each client sends its
requests one after another, the clients' starts spread over one request's duration
(steady arrivals). A burst run sends STREAMS requests at the same instant instead (every
request queues behind the others' set-up, on both paths). Phases alternate between the
lane straight (lane key) and the gateway (API key), so both share the machine's noise.
TTFT is request sent -> first SSE data line; throughput is completion tokens / phase wall
time. Reported: TTFT p50/p99 of each path and their difference (the gateway's added
latency), and the throughput ratio gateway/direct. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO_ROOT, os.path.join(REPO_ROOT, "tests"), os.path.join(REPO_ROOT, "tests", "gateway")]

import httpx  # noqa: E402

from stack import gateway_over_fake_lane  # noqa: E402

MESSAGES = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]
# What the scripted engine says (longer than any --tokens, so every request gets exactly --tokens).
STORY = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, counting the one hundred and "
         "twelve steps as his father had taught him, and lit the great lamp that swept its beam across the dark "
         "water. One stormy night in late November a small green bottle washed up on the rocks below the tower, "
         "and inside it he found a letter written in a careful, old-fashioned hand. ") * 4


async def one_stream(http: httpx.AsyncClient, url: str, key: str, tokens: int) -> tuple[float, int]:
    """(TTFT seconds, completion tokens) of one streamed chat completion."""
    body = {"model": "strata-fast", "messages": MESSAGES, "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    ttft, usage = None, 0
    async with http.stream("POST", url + "/v1/chat/completions", json=body,
                           headers={"authorization": f"Bearer {key}"}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                if ttft is None:
                    ttft = time.perf_counter() - started
                if '"usage"' in line and '"choices": []' in line:
                    import json

                    usage = json.loads(line[6:])["usage"]["completion_tokens"]
    return ttft, usage


async def round_of(http, url, key, streams: int, tokens: int) -> tuple[list[float], int, float]:
    """`streams` requests sent at the same instant (a burst)."""
    started = time.perf_counter()
    results = await asyncio.gather(*(one_stream(http, url, key, tokens) for _ in range(streams)))
    wall = time.perf_counter() - started
    return [r[0] for r in results], sum(r[1] for r in results), wall


async def steady(http, url, key, streams: int, per_stream: int, tokens: int, request_s: float):
    """`streams` clients, each sending `per_stream` requests one after another; their starts are spread
    over one request's duration, so `streams` requests are in flight at any time, arriving at random."""
    ttfts, counts = [], []

    async def client(i: int):
        await asyncio.sleep(i * request_s / streams)
        for _ in range(per_stream):
            ttft, n = await one_stream(http, url, key, tokens)
            ttfts.append(ttft)
            counts.append(n)

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(streams)))
    return ttfts, sum(counts), time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


async def measure(paths, streams, phases, per_stream, tokens, request_s, burst=False):
    """Alternate the paths phase by phase (they share the machine's noise); per path: (ttfts, tokens, wall)."""
    limits = httpx.Limits(max_connections=streams * 2, max_keepalive_connections=streams * 2)
    rows = {name: ([], 0, 0.0) for name, _, _ in paths}
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        for name, url, key in paths:  # warm-up: connections, caches
            await round_of(http, url, key, min(streams, 4), tokens)
        for _ in range(phases):
            for name, url, key in paths:
                if burst:
                    ttfts, n, wall = await round_of(http, url, key, streams, tokens)
                else:
                    ttfts, n, wall = await steady(http, url, key, streams, per_stream, tokens, request_s)
                old = rows[name]
                rows[name] = (old[0] + ttfts, old[1] + n, old[2] + wall)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phases", type=int, default=4, help="alternating phases per run (each path)")
    ap.add_argument("--single-requests", type=int, default=100, help="requests per path with one stream")
    ap.add_argument("--requests-per-stream", type=int, default=3, help="requests per client and phase, many streams")
    ap.add_argument("--bursts", default="32:20", help="STREAMS:MS_PER_TOKEN runs whose requests all start at once")
    ap.add_argument("--tokens", type=int, default=32, help="completion tokens per request")
    ap.add_argument("--runs", default="1:22,32:110,32:20",
                    help="STREAMS:MS_PER_TOKEN,... (22 ms: the real engine's single-stream pace here; 110 ms at 32 "
                         "streams: its ~290 tok/s with 8 slots; 20 ms at 32 streams: a stress run that saturates the CPU)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as var, gateway_over_fake_lane(var, "--text", STORY) as (stack, lane_url):
        lane_key = stack.lane_key
        api_key = stack.create_key("bench")
        print(f"lane: LaneApp on a scripted engine, {args.tokens} tokens/request; gateway: rungateway (daphne); "
              f"load average {os.getloadavg()[0]:.2f}")
        print(f"{'streams':>7} {'ms/token':>8} {'arrivals':>8} {'path':>8} {'requests':>8} {'TTFT p50 ms':>11} "
              f"{'TTFT p99 ms':>11} {'tok/s':>8}")
        paths = [("direct", lane_url, lane_key), ("gateway", stack.gateway_url, api_key)]
        summary = []
        runs = [(r, False) for r in args.runs.split(",")] + [(r, True) for r in args.bursts.split(",") if r]
        for run, burst in runs:
            streams, pace = int(run.split(":")[0]), float(run.split(":")[1])
            httpx.post(lane_url + f"/_pace?ms={pace}")
            request_s = args.tokens * pace / 1000
            if streams == 1:
                phases, per_stream = args.phases, args.single_requests // args.phases
            else:
                phases, per_stream = args.phases, args.requests_per_stream
            rows = asyncio.run(measure(paths, streams, phases, per_stream, args.tokens, request_s, burst))
            figures = {}
            arrivals = "burst" if burst else "steady"
            for name, (ttfts, tokens, wall) in rows.items():
                p50, p99, rate = pct(ttfts, 50) * 1000, pct(ttfts, 99) * 1000, tokens / wall
                figures[name] = (p50, p99, rate)
                print(f"{streams:>7} {pace:>8g} {arrivals:>8} {name:>8} {len(ttfts):>8} {p50:>11.2f} {p99:>11.2f} "
                      f"{rate:>8.1f}", flush=True)
            d, g = figures["direct"], figures["gateway"]
            summary.append((streams, pace, arrivals, g[0] - d[0], g[1] - d[1], g[2] / d[2]))
        print()
        print(f"{'streams':>7} {'ms/token':>8} {'arrivals':>8} {'added TTFT p50 ms':>17} {'added TTFT p99 ms':>17} "
              f"{'throughput ratio':>16}   goals: <3, <15, >=0.97")
        for streams, pace, arrivals, a50, a99, ratio in summary:
            verdicts = ["p50 " + ("met" if a50 < 3 else "NOT met"), "p99 " + ("met" if a99 < 15 else "NOT met"),
                        "ratio " + ("met" if ratio >= 0.97 else "NOT met")]
            print(f"{streams:>7} {pace:>8g} {arrivals:>8} {a50:>17.2f} {a99:>17.2f} {ratio:>16.4f}   "
                  f"{', '.join(verdicts)}")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
