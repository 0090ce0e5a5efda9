"""Decode speed, side by side in one run: a raw llama.cpp loop vs the same work through `python -m engine`.

    .venv/bin/python bench/bench_decode.py [--new 128] [--repeats 3] [--streams 1,2,4,8] [--no-multi]

Columns are meant to be added: each way of running is a function returning a `Run`
(tokens per stream, decode seconds), so a third column (through the HTTP gateway) only
needs another function with the same shape. Greedy, same model, same prompt, end of
generation ignored; decode tok/s counts the tokens after the first one, over the time
from the first token to the last, so prefill and connection setup stay out of it.
The machine is noisy: compare the ratios printed by one run, not numbers across runs.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from dataclasses import dataclass

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import llama_cpp  # noqa: E402

from engine.client import EngineProcess  # noqa: E402
from engine.models import smollm2_path  # noqa: E402

PROMPT_TEXT = ("<|im_start|>user\nTell me a long story about a lighthouse keeper who finds a message "
               "in a bottle.<|im_end|>\n<|im_start|>assistant\n")


@dataclass
class Run:
    """One measurement: the tokens of each stream and the decode window they were produced in."""

    tokens: list[list[int]]
    decode_s: float
    decode_tokens: int  # tokens produced inside the window (all streams)

    @property
    def tok_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0


# ----- (a) raw: llama-cpp-python's C API in this process, nothing else

class RawLlama:
    """The model and a context for n_seqs sequences, driven directly through `llama_cpp`."""

    def __init__(self, model_path: str, *, n_seqs: int = 1, n_ctx: int = 2048, n_threads: int = 2, n_batch: int = 512):
        llama_cpp.llama_log_set(_SILENT, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        self.model = llama_cpp.llama_model_load_from_file(model_path.encode(), llama_cpp.llama_model_default_params())
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        p = llama_cpp.llama_context_default_params()
        # Same shape as the engine's context: n_ctx per sequence, one KV stream each.
        p.n_ctx, p.n_seq_max, p.kv_unified = n_ctx * n_seqs, n_seqs, False
        p.n_batch = p.n_ubatch = max(n_batch, n_seqs)
        p.n_threads = p.n_threads_batch = n_threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, p)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.n_seqs = n_seqs
        self.n_batch = p.n_batch
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), False, True)
        return list(buf[:n])

    def _put(self, i: int, token: int, pos: int, seq: int, logits: bool) -> None:
        b = self.batch
        b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
        b.seq_id[i][0] = seq

    def run(self, prompt: list[int], n_new: int, n_seqs: int = 1) -> Run:
        """Greedy-decode n_new tokens for n_seqs copies of prompt, one batch per step; eos ignored."""
        assert n_seqs <= self.n_seqs and len(prompt) <= self.n_batch
        llama_cpp.llama_memory_clear(self.mem, True)
        samplers = [llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
                    for _ in range(n_seqs)]
        for s in samplers:
            llama_cpp.llama_sampler_chain_add(s, llama_cpp.llama_sampler_init_greedy())
        out: list[list[int]] = [[] for _ in range(n_seqs)]
        idx = [0] * n_seqs
        for seq in range(n_seqs):  # prefill each copy (one decode each: keeps batches under n_batch)
            for i, tok in enumerate(prompt):
                self._put(i, tok, i, seq, i == len(prompt) - 1)
            self.batch.n_tokens = len(prompt)
            assert llama_cpp.llama_decode(self.ctx, self.batch) == 0
            out[seq].append(llama_cpp.llama_sampler_sample(samplers[seq], self.ctx, len(prompt) - 1))
        t0 = time.perf_counter()
        pos = len(prompt)
        for _ in range(n_new - 1):
            for seq in range(n_seqs):
                self._put(seq, out[seq][-1], pos, seq, True)
            self.batch.n_tokens = n_seqs
            assert llama_cpp.llama_decode(self.ctx, self.batch) == 0
            for seq in range(n_seqs):
                out[seq].append(llama_cpp.llama_sampler_sample(samplers[seq], self.ctx, seq))
            pos += 1
        elapsed = time.perf_counter() - t0
        for s in samplers:
            llama_cpp.llama_sampler_free(s)
        return Run(out, elapsed, n_seqs * (n_new - 1))

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)


_SILENT = llama_cpp.llama_log_callback(lambda level, text, user: None)


def raw_decode(model_path: str, prompt: list[int], n_new: int = 128, n_seqs: int = 1, **ctx_kwargs) -> Run:
    """One raw measurement (loads and frees the model); see RawLlama.run."""
    raw = RawLlama(model_path, n_seqs=n_seqs, **ctx_kwargs)
    try:
        raw.run(prompt, 8, n_seqs)  # warm-up: first decodes allocate and page the weights in
        return raw.run(prompt, n_new, n_seqs)
    finally:
        raw.close()


# ----- (b) engine: the same through `python -m engine` over its Unix socket

def engine_run(engine: EngineProcess, prompt: list[int], n_new: int, n_streams: int = 1) -> Run:
    """n_streams concurrent greedy requests (eos ignored); the window runs while all streams decode."""
    ids = [engine.start(prompt, n_new, ignore_eos=True) for _ in range(n_streams)]
    res = engine.collect(ids)
    for rid in ids:
        if res[rid].error or len(res[rid].tokens) != n_new:
            raise RuntimeError(f"engine run failed: {res[rid].error or res[rid].done}")
    start = max(res[r].token_times[0] for r in ids)   # every stream is decoding from here
    end = min(res[r].token_times[-1] for r in ids)    # ... until the first one ends
    n = sum(1 for r in ids for t in res[r].token_times if start < t <= end)
    return Run([res[r].tokens for r in ids], end - start, n)


# ----- the table

def _median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.tok_s)[len(runs) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: the bundled SmolLM2-135M Q4_1)")
    ap.add_argument("--new", type=int, default=128, help="new tokens per stream")
    ap.add_argument("--repeats", type=int, default=3, help="runs per cell; the median is shown")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=2048, help="context per sequence")
    ap.add_argument("--streams", default="1,2,4,8", help="concurrent streams for the batching table")
    ap.add_argument("--no-multi", action="store_true", help="single stream only")
    args = ap.parse_args(argv)
    model = args.model or smollm2_path()
    ctx_kw = dict(n_ctx=args.n_ctx, n_threads=args.threads)

    print(f"model {os.path.basename(model)}, {args.threads} threads, n_ctx {args.n_ctx}/seq, "
          f"{args.new} new tokens, greedy, eos ignored, median of {args.repeats}")

    # Single stream: raw (1 sequence) vs engine (1 slot), interleaved so drift hits both.
    raw = RawLlama(model, n_seqs=1, **ctx_kw)
    prompt = raw.tokenize(PROMPT_TEXT)
    raw.run(prompt, 8)
    raw_runs, eng_runs = [], []
    with EngineProcess(model, slots=1, n_ctx=args.n_ctx, threads=args.threads) as eng:
        engine_run(eng, prompt, 8)
        for _ in range(args.repeats):
            raw_runs.append(raw.run(prompt, args.new))
            eng_runs.append(engine_run(eng, prompt, args.new))
    raw.close()
    a, b = _median_run(raw_runs), _median_run(eng_runs)
    same = all(r.tokens[0] == raw_runs[0].tokens[0] for r in raw_runs + eng_runs)
    print()
    print("single stream decode")
    print(f"  {'path':<28}{'tok/s':>10}{'ms/tok':>10}{'b/a':>8}")
    print(f"  {'(a) raw llama-cpp loop':<28}{a.tok_s:>10.1f}{1000 / a.tok_s:>10.2f}{'':>8}")
    print(f"  {'(b) python -m engine':<28}{b.tok_s:>10.1f}{1000 / b.tok_s:>10.2f}{b.tok_s / a.tok_s:>8.3f}")
    print(f"  prompt {len(prompt)} tokens; same greedy tokens in every run: {'yes' if same else 'NO'}")

    if not args.no_multi:
        streams = [int(s) for s in args.streams.split(",") if s]
        top = max(streams)
        print()
        print(f"aggregate decode, {top}-slot engine vs raw {top}-sequence batch (tok/s, all streams)")
        print(f"  {'streams':<10}{'raw batch':>12}{'engine':>12}{'b/a':>8}{'per stream':>12}")
        raw = RawLlama(model, n_seqs=top, **ctx_kw)
        raw.run(prompt, 8, top)
        with EngineProcess(model, slots=top, n_ctx=args.n_ctx, threads=args.threads) as eng:
            engine_run(eng, prompt, 8, top)
            for n in streams:
                ra, eb = [], []
                for _ in range(args.repeats):
                    ra.append(raw.run(prompt, args.new, n))
                    eb.append(engine_run(eng, prompt, args.new, n))
                a, b = _median_run(ra), _median_run(eb)
                print(f"  {n:<10}{a.tok_s:>12.1f}{b.tok_s:>12.1f}{b.tok_s / a.tok_s:>8.3f}{b.tok_s / n:>12.1f}")
        raw.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
