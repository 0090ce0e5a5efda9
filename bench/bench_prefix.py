"""Prefix cache: a growing conversation's turn 5, warm (the slot holds turn 4) vs cold.

    .venv/bin/python bench/bench_prefix.py [--doc 2700] [--turns 5] [--answer 24]

Turn 1 is a user message with a ~2,700-token document and a question; every later turn is
the previous prompt + the model's answer (as ids) + `<|im_end|>` + a new short user message,
as a chat client sends it, so turn 5 is about 3,000 tokens. Warm: the same engine answered
turns 1-4, so one slot holds turn 4's prompt and answer and only the tail is read. Cold: a
fresh engine (after a small warm-up request) gets the identical turn-5 prompt. TTFT is
measured by the client (send -> first token); the engine's own ttft_ms and cached_tokens
are printed beside it. Goal (issue 3): cold / warm >= 20x. The machine is noisy: compare
the ratios printed by one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import (  # noqa: E402
    EngineProcess, NoiseMeter, Tokenizer, fmt_ratio, smollm2_path, start_engine,
)

FOLLOW_UPS = ["Which part of it matters most?", "Why?", "Give one example from the log.",
              "Now say it in five words.", "Thanks. Anything else?", "And the ship?"]


def ask(eng: EngineProcess, prompt: list[int], n_new: int):
    """One request; returns (result, client TTFT seconds)."""
    t0 = time.perf_counter()
    res = eng.generate(prompt, n_new, timeout=600)
    if res.error:
        raise RuntimeError(res.error["message"])
    return res, res.token_times[0] - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: the bundled SmolLM2-135M Q4_1)")
    ap.add_argument("--doc", type=int, default=2700, help="tokens of the document in turn 1")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--answer", type=int, default=24, help="max new tokens per answer")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    model = args.model or smollm2_path()
    noise = NoiseMeter()
    tok = Tokenizer(model)
    print(f"prefix cache: {args.turns}-turn conversation, turn 1 = {args.doc}-token document + question, "
          f"answers <= {args.answer} tokens; 4 slots, {args.threads} threads; load {os.getloadavg()[0]:.1f}")

    end_turn = tok.encode("<|im_end|>\n")
    prompt = tok.long_chat(args.doc, "Read this log, then answer my questions about it.")
    rows = []
    with start_engine(model, slots=4, n_ctx=4096, threads=args.threads) as eng:
        eng.generate(tok.question(), 4)  # warm-up
        for turn in range(1, args.turns + 1):
            res, ttft = ask(eng, prompt, args.answer)
            rows.append((turn, len(prompt), res.usage["cached_tokens"], ttft, res.done["timings"]["ttft_ms"]))
            if turn == args.turns:
                break
            prompt = prompt + res.tokens + end_turn + tok.encode(
                f"<|im_start|>user\n{FOLLOW_UPS[(turn - 1) % len(FOLLOW_UPS)]}<|im_end|>\n<|im_start|>assistant\n")
    warm = rows[-1]
    with start_engine(model, slots=4, n_ctx=4096, threads=args.threads) as eng:
        eng.generate(tok.question(), 4)  # warm-up, nothing in common with the conversation
        res, cold_ttft = ask(eng, prompt, args.answer)
        cold = (args.turns, len(prompt), res.usage["cached_tokens"], cold_ttft, res.done["timings"]["ttft_ms"])

    print()
    print(f"  {'turn':<12}{'prompt':>8}{'cached':>8}{'TTFT client':>13}{'TTFT engine':>13}")
    for turn, n, cached, ttft, eng_ms in rows:
        print(f"  {turn:<12}{n:>8}{cached:>8}{ttft * 1000:>10.0f} ms{eng_ms:>10.0f} ms")
    print(f"  {f'{cold[0]} cold':<12}{cold[1]:>8}{cold[2]:>8}{cold[3] * 1000:>10.0f} ms{cold[4]:>10.0f} ms")
    ratio = cold[3] / warm[3]
    print()
    print(f"  turn {args.turns}: cold {cold[3] * 1000:.0f} ms / warm {warm[3] * 1000:.0f} ms -> "
          f"{fmt_ratio(ratio, '>=', 20)}   (engine-side: {cold[4] / warm[4]:.1f}x)")
    print(f"  {noise.report()}")
    tok.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
