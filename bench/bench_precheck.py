"""Window pre-check cost: a 1,000,000-character request rejected with the exact count, timed at the gateway.

    .venv/bin/python bench/bench_precheck.py [--chars 1000000] [--repeats 5]

The request has the shape of the source's real one (SPEC section 1: 326 messages, 55 tool
schemas, ~1.07M characters; here mixed English, code, digits and some Chinese). The lane is
the real lane server (its exact count: render + tokenizer; the count never touches the
engine, which is scripted here) in its own process; the gateway is the real one. Each
request is answered 400 `prompt is too long: N tokens > M maximum`; N is checked against
the lane's own count_tokens. From the gateway's Server-Timing header: `gateway` is the
gateway's own time (body parse, the gates, the character-class estimate, the rewrite), `count` the
lane's count call (HTTP + render + tokenize). Also timed in this process: the estimate alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO_ROOT, os.path.join(REPO_ROOT, "tests"), os.path.join(REPO_ROOT, "tests", "gateway")]

import httpx  # noqa: E402

from stack import gateway_over_fake_lane  # noqa: E402

PIECES = [
    "The gateway reads the whole conversation on every call and must answer quickly. ",
    "def handler(event, context):\n    return {'status': 200, 'items': [x * 2 for x in event['items']]}\n",
    "Order 48213 shipped on 2026-11-29 at 14:05, invoice 000917, total 1234.56 EUR. ",
    "网关在每次调用时都会读取整个对话，并且必须迅速作答。",
]


def big_request(chars: int, tag: str = "") -> dict:
    """~`chars` characters in 326 messages with 55 tools, as a coding agent sends them. Every message is
    different (and differs with `tag`), so the lane's piece cache cannot answer from an earlier count."""
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": "Reads or edits a file in the workspace; returns its new content.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                       "required": ["path"]}}} for i in range(55)]
    budget = chars - len(json.dumps(tools))
    per_message = budget // 326
    messages = []
    for i in range(326):
        text, k = [], i
        while sum(map(len, text)) < per_message:
            text.append(f"({tag}{i}.{k}) " + PIECES[k % len(PIECES)])
            k += 1
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": "".join(text)[:per_message]})
    return {"model": "strata-fast", "messages": messages, "tools": tools, "max_tokens": 1024}


def timing(header: str) -> dict:
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name] = float(dur)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chars", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    body = big_request(args.chars)
    raw = json.dumps(body, ensure_ascii=False).encode()
    text_chars = sum(len(m["content"]) for m in body["messages"]) + len(json.dumps(body["tools"]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stratasite.settings")
    import django

    django.setup()
    from gateway.gates.precheck import estimate_tokens

    started = time.perf_counter()
    est = estimate_tokens(raw)
    est_ms = (time.perf_counter() - started) * 1000

    with tempfile.TemporaryDirectory() as var, gateway_over_fake_lane(var) as (stack, lane_url):
        lane_key = stack.lane_key
        key = stack.create_key("bench")
        lane_headers = {"authorization": f"Bearer {lane_key}", "content-type": "application/json"}
        bodies = [json.dumps(big_request(args.chars, f"r{r}-"), ensure_ascii=False).encode()
                  for r in range(args.repeats + 1)]
        rows, answered = [], []
        with httpx.Client(timeout=120) as http:
            for i, content in enumerate(bodies):
                started = time.perf_counter()
                response = http.post(stack.gateway_url + "/v1/chat/completions", content=content,
                                     headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
                wall = (time.perf_counter() - started) * 1000
                error = response.json()["error"]
                assert response.status_code == 400, error
                answered.append(error["prompt_tokens"])
                if i:  # the first one warms the gateway's caches (key, routes, connections)
                    rows.append((wall, timing(response.headers["server-timing"])))
        # The lane's own count of the same bodies (after: its piece cache must not serve the gateway's).
        exact = [httpx.post(lane_url + "/v1/chat/completions/count_tokens", content=b, headers=lane_headers,
                            timeout=120).json()["input_tokens"] for b in bodies]
        assert answered == exact, (answered, exact)
        print(f"request: {len(raw):,} bytes of JSON, {text_chars:,} characters of text, 326 messages, 55 tools; "
              f"load average {os.getloadavg()[0]:.2f}")
        print(f"estimate (character classes): {est:,} tokens in {est_ms:.2f} ms (this process); "
              f"the lane's exact count: {exact[0]:,} tokens")
        print(f"answer: HTTP 400 {error['message']!r} (the lane's exact count, every time)")
        print(f"{'':>28} {'median ms':>10} {'min ms':>10}")
        for name, values in (("client wall (whole request)", [w for w, _ in rows]),
                             ("gateway's own time", [t["gateway"] for _, t in rows]),
                             ("lane count call", [t["count"] for _, t in rows])):
            print(f"{name:>28} {statistics.median(values):>10.1f} {min(values):>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
