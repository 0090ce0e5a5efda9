"""Head-of-line blocking: short requests arriving while a 3,000-token prompt is being read.

    .venv/bin/python bench/bench_hol.py [--long 3000] [--shorts 4] [--short-new 32]
                                        [--engine-args='--interactive-ms 250'] [--engine-log FILE]

One engine (8 slots, n_ctx 4096, 2 threads, default step policy unless --engine-args), three
scenarios, each with prompts new to the prefix cache:
  alone       the long prompt by itself: its TTFT.
  concurrent  the long prompt at t=0, then the short requests arrive at t=1, 2, 3, 4 s.
  serialized  the same arrivals, but the client lets one request into the engine at a time
              (the source's global FIFO lock): each short waits for everything before it.
TTFT is measured by the client, from a request's arrival to its first token. Goals (issue 3):
the shorts' TTFT with the long prompt in flight >= 5x lower than serialized (mean over the
shorts; the worst short is printed too), and the long prompt's TTFT with the shorts <= 1.3x
its TTFT alone. The machine is noisy: compare the ratios printed by one run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import (  # noqa: E402
    EngineProcess, NoiseMeter, Timed, Tokenizer, fmt_ratio, mean, run_schedule, smollm2_path, start_engine,
)


def scenario(tok: Tokenizer, n_long: int, n_shorts: int, short_new: int, long_new: int,
             with_shorts: bool) -> list[Timed]:
    reqs = [Timed("long", 0.0, tok.long_chat(n_long), long_new, {"ignore_eos": True})]
    if with_shorts:
        for k in range(n_shorts):
            reqs.append(Timed(f"short{k + 1}", 1.0 + k, tok.question("Write a short poem about the sea."),
                              short_new, {"ignore_eos": True}))
    return reqs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: the bundled SmolLM2-135M Q4_1)")
    ap.add_argument("--long", type=int, default=3000, help="tokens in the long prompt")
    ap.add_argument("--long-new", type=int, default=16, help="new tokens for the long request")
    ap.add_argument("--shorts", type=int, default=4)
    ap.add_argument("--short-new", type=int, default=32, help="new tokens per short request")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine-args", default="", help="extra engine options, e.g. --engine-args='--interactive-ms 400'")
    ap.add_argument("--engine-log", default=None,
                    help="append the engine's stderr to this file (with --engine-args=--log-steps: every step)")
    args = ap.parse_args(argv)
    model = args.model or smollm2_path()
    noise = NoiseMeter()
    tok = Tokenizer(model)
    extra = tuple(shlex.split(args.engine_args))

    print(f"head-of-line: a {args.long}-token prompt (+{args.long_new} new), {args.shorts} short requests "
          f"(~{len(tok.question())} tokens, +{args.short_new} new) arriving at t=1..{args.shorts} s; "
          f"8 slots, {args.threads} threads; engine args: {' '.join(extra) or '(defaults)'}; "
          f"load {os.getloadavg()[0]:.1f}")
    with start_engine(model, log=args.engine_log, slots=8, n_ctx=4096, threads=args.threads, extra_args=extra) as eng:
        eng.generate(tok.question(), 4)  # warm-up: first decodes allocate and page the weights in
        alone = scenario(tok, args.long, args.shorts, args.short_new, args.long_new, with_shorts=False)
        run_schedule(eng, alone)
        conc = scenario(tok, args.long, args.shorts, args.short_new, args.long_new, with_shorts=True)
        run_schedule(eng, conc)
        serial = scenario(tok, args.long, args.shorts, args.short_new, args.long_new, with_shorts=True)
        run_schedule(eng, serial, serialized=True)

    print()
    print(f"  {'request':<10}{'arrives':>9}{'TTFT serialized':>17}{'TTFT concurrent':>17}{'ratio':>8}"
          f"{'ITL concurrent':>16}")
    for s, c in zip(serial, conc):
        print(f"  {c.name:<10}{c.at:>8.1f}s{s.ttft:>16.2f}s{c.ttft:>16.2f}s{s.ttft / c.ttft:>8.2f}"
              f"{c.itl * 1000:>13.0f} ms")
    print(f"  {'long alone':<10}{'0.0':>8}s{'':>17}{alone[0].ttft:>16.2f}s")
    shorts_s = [r.ttft for r in serial[1:]]
    shorts_c = [r.ttft for r in conc[1:]]
    ratio = mean(shorts_s) / mean(shorts_c)
    worst = min(s / c for s, c in zip(shorts_s, shorts_c))
    growth = conc[0].ttft / alone[0].ttft
    print()
    print(f"  shorts' mean TTFT: serialized {mean(shorts_s):.2f} s, concurrent {mean(shorts_c):.2f} s -> "
          f"{fmt_ratio(ratio, '>=', 5)}")
    print(f"  worst single short (serialized / concurrent): {fmt_ratio(worst, '>=', 5)}")
    print(f"  long prompt's TTFT: alone {alone[0].ttft:.2f} s, with the shorts {conc[0].ttft:.2f} s -> "
          f"{fmt_ratio(growth, '<=', 1.3)}")
    print(f"  {noise.report()}")
    tok.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
