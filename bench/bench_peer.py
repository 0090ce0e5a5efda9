"""The peer: the same workload against llama-cpp-python's own server (`python -m llama_cpp.server`) and our engine.

    make bench-peer-env     # once: bench/.venv-peer with llama-cpp-python[server], same build flags
    .venv/bin/python bench/bench_peer.py --peer-python bench/.venv-peer/bin/python [--new 64] [--streams 8]

The peer runs in its own environment (its server extras are not Strata dependencies) and
serves the same GGUF with the same llama.cpp build, 2 threads, n_ctx 2048. Its requests go
one at a time through the model (it holds a lock around the model); we start it with
`--interrupt_requests False` so a new request waits instead of cutting the running stream
(its default interrupts it). Requests: /v1/completions, streamed, greedy, with the
end-of-turn tokens banned by logit_bias so every answer has `--new` tokens. Ours: the same
prompts as token ids to an 8-slot `python -m engine` over its socket (no HTTP: the lane and
gateway are not part of this comparison), `ignore_eos`.
Printed side by side: single-stream TTFT and tok/s, then `--streams` concurrent requests:
aggregate tok/s (all tokens / wall time) and TTFT p50 / max. The machine is noisy: compare
the ratios printed by one run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import (  # noqa: E402
    EngineProcess, NoiseMeter, Timed, Tokenizer, p50, run_schedule, smollm2_path, start_engine,
)

QUESTION = "Tell me a long story about a lighthouse keeper who finds a message in a bottle."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peer:
    """`python -m llama_cpp.server` from the peer environment, on a free loopback port."""

    def __init__(self, python: str, model: str, threads: int, n_ctx: int = 2048):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [python, "-m", "llama_cpp.server", "--model", model, "--n_ctx", str(n_ctx), "--n_threads", str(threads),
             "--n_threads_batch", str(threads), "--host", "127.0.0.1", "--port", str(self.port),
             "--interrupt_requests", "False", "--verbose", "False"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the peer server exited with {self.proc.returncode}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/v1/models")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the peer server never answered")
            time.sleep(0.2)

    def complete(self, prompt: str, new: int, banned: list[int], out: dict) -> None:
        """One streamed completion; fills out with t_sent, t_first, t_done, tokens."""
        body = json.dumps({"prompt": prompt, "max_tokens": new, "temperature": 0.0, "stream": True,
                           "logit_bias": {str(t): -100.0 for t in banned}})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        out["t_sent"] = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"peer answered {resp.status}: {resp.read()[:200]!r}")
        chunks, finish = 0, None
        for line in resp:
            line = line.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            choice = json.loads(line[5:])["choices"][0]
            if choice.get("text"):
                chunks += 1
                out.setdefault("t_first", time.perf_counter())
            finish = choice.get("finish_reason") or finish
        out["t_done"] = time.perf_counter()
        # One streamed chunk per token; a token that only completes a UTF-8 character later
        # comes with an empty text, so "length" (all `new` tokens made) is the exact count.
        out["tokens"] = new if finish == "length" else chunks
        conn.close()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def peer_run(peer: Peer, prompts: list[str], new: int, banned: list[int]) -> tuple[float, list[float]]:
    """All prompts at once; (aggregate tok/s, TTFTs)."""
    outs = [dict() for _ in prompts]
    threads = [threading.Thread(target=peer.complete, args=(p, new, banned, o)) for p, o in zip(prompts, outs)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(o["t_done"] for o in outs) - t0
    return sum(o["tokens"] for o in outs) / wall, [o["t_first"] - o["t_sent"] for o in outs]


def ours_run(eng: EngineProcess, tok: Tokenizer, prompts: list[str], new: int) -> tuple[float, list[float]]:
    reqs = [Timed(f"s{i}", 0.0, tok.encode(p), new, {"ignore_eos": True}) for i, p in enumerate(prompts)]
    wall = run_schedule(eng, reqs)
    return sum(len(r.tokens) for r in reqs) / wall, [r.ttft for r in reqs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer-python", default=os.path.join("bench", ".venv-peer", "bin", "python"),
                    help="python of the environment that has llama-cpp-python[server] (make bench-peer-env)")
    ap.add_argument("--model", default=None, help="GGUF (default: the bundled SmolLM2-135M Q4_1)")
    ap.add_argument("--new", type=int, default=64, help="new tokens per request")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if not os.path.exists(args.peer_python):
        print(f"no peer environment at {args.peer_python}: run `make bench-peer-env` first", file=sys.stderr)
        return 2
    model = args.model or smollm2_path()
    noise = NoiseMeter()
    tok = Tokenizer(model)
    banned = tok.encode("<|im_end|><|endoftext|>")
    counter = iter(range(1, 1_000_000))

    def prompts(n: int) -> list[str]:  # unique, so neither side reuses a cached prefix
        return [f"<|im_start|>user\n(note {next(counter)}) {QUESTION}<|im_end|>\n<|im_start|>assistant\n"
                for _ in range(n)]

    print(f"peer: llama_cpp.server vs python -m engine ({args.streams} slots); {args.threads} threads, "
          f"{args.new} new tokens, greedy; load {os.getloadavg()[0]:.1f}")
    results = {}
    peer = Peer(args.peer_python, model, args.threads)
    try:
        peer_run(peer, prompts(1), 8, banned)  # warm-up
        results["peer", 1] = peer_run(peer, prompts(1), args.new, banned)
        results["peer", args.streams] = peer_run(peer, prompts(args.streams), args.new, banned)
    finally:
        peer.close()
    with start_engine(model, slots=args.streams, n_ctx=1024, threads=args.threads) as eng:
        ours_run(eng, tok, prompts(1), 8)  # warm-up
        results["ours", 1] = ours_run(eng, tok, prompts(1), args.new)
        results["ours", args.streams] = ours_run(eng, tok, prompts(args.streams), args.new)

    print()
    print(f"  {'':<34}{'llama_cpp.server':>18}{'strata engine':>16}{'ours/peer':>11}")
    (p1, pt1), (o1, ot1) = results["peer", 1], results["ours", 1]
    pn, ptn = results["peer", args.streams]
    on, otn = results["ours", args.streams]
    print(f"  {'1 stream: tok/s':<34}{p1:>18.1f}{o1:>16.1f}{o1 / p1:>11.2f}")
    print(f"  {'1 stream: TTFT':<34}{pt1[0] * 1000:>15.0f} ms{ot1[0] * 1000:>13.0f} ms{pt1[0] / ot1[0]:>10.2f}x faster")
    print(f"  {f'{args.streams} streams: aggregate tok/s':<34}{pn:>18.1f}{on:>16.1f}{on / pn:>11.2f}")
    print(f"  {f'{args.streams} streams: TTFT p50':<34}{p50(ptn) * 1000:>15.0f} ms{p50(otn) * 1000:>13.0f} ms"
          f"{p50(ptn) / p50(otn):>10.2f}x faster")
    print(f"  {f'{args.streams} streams: TTFT max':<34}{max(ptn) * 1000:>15.0f} ms{max(otn) * 1000:>13.0f} ms"
          f"{max(ptn) / max(otn):>10.2f}x faster")
    print(f"  {noise.report()}")
    tok.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
