"""Single-stream decode speed, one run, side by side: raw llama.cpp loop, engine socket, lane HTTP, gateway HTTP.

    .venv/bin/python bench/bench_through_gateway.py [--new 128] [--repeats 3]

Same model, same greedy prompt, same machine. The HTTP columns stream a chat completion
(through the lane directly, then through the public gateway with an API key) and count
decode tokens/s as (completion_tokens - 1) / (last content chunk - first content chunk),
so prefill and connection set-up stay out of it, as in bench_decode.py. The machine is
noisy: compare the ratios printed by one run, not numbers across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO_ROOT, os.path.join(REPO_ROOT, "tests")]

import httpx  # noqa: E402

from bench.bench_decode import RawLlama, engine_run  # noqa: E402
from engine.client import EngineProcess  # noqa: E402
from engine.models import smollm2_path  # noqa: E402
from stack import Stack  # noqa: E402

USER_TEXT = "Tell me a long story about a lighthouse keeper who finds a message in a bottle."


def http_decode(url: str, key: str, n_new: int) -> tuple[float, int]:
    """Stream one greedy completion; returns (decode tok/s, completion tokens)."""
    body = {"model": "strata-fast", "messages": [{"role": "user", "content": USER_TEXT}], "max_tokens": n_new,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    times, usage = [], None
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300,
                      headers={"authorization": f"Bearer {key}"}) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                if '"content"' in line:
                    times.append(time.perf_counter())
                if '"usage"' in line and '"choices": []' in line:
                    usage = json.loads(line[6:])["usage"]
    tokens = usage["completion_tokens"]
    return (tokens - 1) / (times[-1] - times[0]), tokens


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    model = smollm2_path()

    with tempfile.TemporaryDirectory() as var:
        stack = Stack(var, lanes=("fast",), lane_settings={"fast": {"slots": 1, "max_context": 2048}}).start()
        try:
            key = stack.create_key("bench")
            raw = RawLlama(model, n_seqs=1, n_ctx=2048)
            # The chat prompt as the lane renders it, so every column decodes from the same tokens.
            from lanes.template import ChatTemplate
            from lanes.tokenizer import load_tokenizer

            prompt = load_tokenizer(model).encode(
                ChatTemplate.load("chatml-tools", model).render([{"role": "user", "content": USER_TEXT}]))
            raw.run(prompt, 8)
            rows = {"raw": [], "engine": [], "lane": [], "gateway": []}
            with EngineProcess(model, slots=1, n_ctx=2048) as eng:
                engine_run(eng, prompt, 8)
                http_decode(stack.gateway_url, key, 8)  # warm-up
                for _ in range(args.repeats):
                    lane_rate, n = http_decode(stack.lane_url("fast"), stack.lane_key, args.new)
                    gw_rate, n_gw = http_decode(stack.gateway_url, key, args.new)
                    rows["lane"].append(lane_rate)
                    rows["gateway"].append(gw_rate)
                    rows["raw"].append(raw.run(prompt, n).tok_s)
                    rows["engine"].append(engine_run(eng, prompt, n).tok_s)
            raw.close()
        finally:
            stack.stop()

    med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
    print(f"single-stream decode, {n} new tokens, greedy, median of {args.repeats} (tok/s; ratio to raw)")
    labels = {"raw": "(a) raw llama-cpp loop", "engine": "(b) python -m engine", "lane": "(c) lane HTTP (SSE)",
              "gateway": "(d) gateway HTTP (SSE)"}
    for k, label in labels.items():
        print(f"  {label:<28}{med[k]:>8.1f}{med[k] / med['raw']:>8.3f}")
    print(f"  gateway / lane: {med['gateway'] / med['lane']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
