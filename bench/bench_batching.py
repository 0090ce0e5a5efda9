"""Continuous batching: aggregate decode tok/s at 1/2/4/8 streams vs serialized vs a raw 8-sequence batch; TTFT.

    .venv/bin/python bench/bench_batching.py [--new 96] [--streams 1,2,4,8] [--rounds 3]

One 8-slot engine (n_ctx 1024, 2 threads), greedy, end of generation ignored, every prompt
a ~30-token chat question new to the prefix cache.
  concurrent  N requests sent at once. Decode tok/s counts the tokens produced while all N
              streams decode (from the last first token to the first last token), so
              prefill stays out, as in the raw loop. End-to-end tok/s = N * new / wall time.
  serialized  the same N requests one at a time through the same engine (the source's
              global lock): end-to-end tok/s = N * new / wall time.
  raw         a llama-cpp-python loop in this process decoding N sequences in one batch per
              step (bench_decode.RawLlama): the limit for this model, machine and batch size.
TTFT, client-side (send -> first token):
  single      one request alone (median of `--rounds`).
  burst       8 requests sent at once: their median.
  steady      8 clients in a closed loop (each sends its next request when its last one is
              done; answers of 32-128 tokens so they fall out of step): the median over all
              requests after the first round.
Goals (issue 3): 8-stream decode >= 85% of the raw 8-sequence batch; TTFT p50 at 8 streams
<= 2x single-stream TTFT. The machine is noisy: compare the ratios printed by one run.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.bench_decode import RawLlama  # noqa: E402
from bench.common import (  # noqa: E402
    EngineProcess, NoiseMeter, Timed, Tokenizer, fmt_ratio, p50, run_schedule, smollm2_path, start_engine,
)


def concurrent(eng: EngineProcess, tok: Tokenizer, n: int, new: int) -> tuple[float, float, list[float]]:
    """(decode tok/s while all decode, end-to-end tok/s, TTFTs) for n requests sent at once."""
    reqs = [Timed(f"s{i}", 0.0, tok.question(), new, {"ignore_eos": True}) for i in range(n)]
    wall = run_schedule(eng, reqs)
    start = max(r.token_times[0] for r in reqs)
    end = min(r.token_times[-1] for r in reqs)
    produced = sum(1 for r in reqs for t in r.token_times if start < t <= end)
    decode = produced / (end - start) if end > start else 0.0
    return decode, n * new / wall, [r.ttft for r in reqs]


def serialized(eng: EngineProcess, tok: Tokenizer, n: int, new: int) -> float:
    reqs = [Timed(f"s{i}", 0.0, tok.question(), new, {"ignore_eos": True}) for i in range(n)]
    wall = run_schedule(eng, reqs, serialized=True)
    return n * new / wall


def steady_ttft(eng: EngineProcess, tok: Tokenizer, clients: int, rounds: int, seed: int = 7) -> list[float]:
    """TTFTs of a closed loop: `clients` requests in flight, each replaced by a new one when done."""
    rng = random.Random(seed)
    open_reqs: dict[str, tuple[int, int, float]] = {}  # id -> (client, round, sent)
    ttfts: list[float] = []

    def send(client: int, rnd: int) -> None:
        rid = eng.start(tok.question(), rng.randint(32, 128), ignore_eos=True)
        open_reqs[rid] = (client, rnd, time.perf_counter())

    for c in range(clients):
        send(c, 0)
    first_seen: set[str] = set()
    while open_reqs:
        msg = eng.recv(timeout=600)
        rid = msg.get("id")
        if rid not in open_reqs:
            continue
        client, rnd, sent = open_reqs[rid]
        if msg["op"] == "tokens" and rid not in first_seen:
            first_seen.add(rid)
            if rnd > 0:
                ttfts.append(time.perf_counter() - sent)
        elif msg["op"] in ("done", "error"):
            del open_reqs[rid]
            if rnd + 1 < rounds:
                send(client, rnd + 1)
    return ttfts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: the bundled SmolLM2-135M Q4_1)")
    ap.add_argument("--new", type=int, default=96, help="new tokens per stream")
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=3, help="single-stream TTFT samples; closed-loop rounds")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    model = args.model or smollm2_path()
    noise = NoiseMeter()
    streams = [int(s) for s in args.streams.split(",") if s]
    top = max(streams)
    tok = Tokenizer(model)
    print(f"batching: {top}-slot engine, {args.threads} threads, ~{len(tok.question())}-token prompts, "
          f"{args.new} new tokens per stream, greedy, eos ignored; load {os.getloadavg()[0]:.1f}")

    raw = RawLlama(model, n_seqs=top, n_ctx=1024, n_threads=args.threads)
    rows = []
    with start_engine(model, slots=top, n_ctx=1024, threads=args.threads) as eng:
        eng.generate(tok.question(), 8)  # warm-up
        raw.run(tok.question(), 8, top)
        for n in streams:
            r = raw.run(tok.question(), args.new, n).tok_s
            dec, e2e, _ = concurrent(eng, tok, n, args.new)
            ser = serialized(eng, tok, n, args.new)
            rows.append((n, r, dec, e2e, ser))
        single = [concurrent(eng, tok, 1, 8)[2][0] for _ in range(args.rounds)]
        burst = concurrent(eng, tok, top, 8)[2]
        steady = steady_ttft(eng, tok, top, args.rounds + 1)
    raw.close()

    print()
    print("aggregate tok/s (all streams)")
    print(f"  {'streams':<9}{'raw batch':>11}{'engine decode':>15}{'vs raw':>8}{'engine e2e':>12}"
          f"{'serialized e2e':>16}{'e2e/serial':>12}")
    for n, r, dec, e2e, ser in rows:
        print(f"  {n:<9}{r:>11.1f}{dec:>15.1f}{dec / r:>8.3f}{e2e:>12.1f}{ser:>16.1f}{e2e / ser:>12.2f}")
    n, r, dec, _, _ = rows[-1]
    share = dec / r
    print(f"  {n} streams decode vs raw {n}-sequence batch: {share * 100:.1f}%  goal >= 85%: "
          f"{'met' if share >= 0.85 else 'NOT met'}")
    print()
    print("TTFT, client-side")
    s1 = p50(single)
    print(f"  single stream p50 ({len(single)} runs): {s1 * 1000:.0f} ms")
    print(f"  {top} sent at once (burst), p50: {p50(burst) * 1000:.0f} ms -> "
          f"{fmt_ratio(p50(burst) / s1, '<=', 2)}")
    print(f"  {top} clients, closed loop (steady), p50 of {len(steady)}: {p50(steady) * 1000:.0f} ms -> "
          f"{fmt_ratio(p50(steady) / s1, '<=', 2)}")
    print(f"  {noise.report()}")
    tok.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
