"""Shared fixtures for the engine tests: the real SmolLM2 model, an in-process reference loop, engine processes."""

from __future__ import annotations

import os
import sys

import pytest

# The engine is started as `python -m engine` from the repository root; make the same
# package importable here whatever directory pytest was started from.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from engine.binding import Batch, LoadOptions, Model, Sampler, SamplingParams  # noqa: E402
from engine.client import EngineProcess  # noqa: E402
from engine.models import smollm2_path  # noqa: E402

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain recursion in one sentence.",
    "List three prime numbers.",
    "Who wrote Hamlet?",
    "Describe a cat.",
]


class Reference:
    """The model in this process: tokenizer, and a plain greedy loop to compare the engine against."""

    def __init__(self, path: str):
        self.model = Model(LoadOptions(path, n_ctx=1024, n_seq_max=1))
        self.batch = Batch(self.model.n_batch)

    def chat(self, question: str) -> list[int]:
        """A ChatML prompt for one user turn, tokenized by llama.cpp itself."""
        return self.model.tokenize(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n")

    def greedy(self, prompt: list[int], max_tokens: int, ignore_eos: bool = False) -> tuple[list[int], bool]:
        """Greedy tokens for prompt (eog not included) and whether generation ended on eog."""
        m, b = self.model, self.batch
        m.seq_rm(0, -1, -1)
        sampler = Sampler(SamplingParams(temperature=0.0))
        try:
            b.clear()
            idx = b.add_many(prompt, 0, 0, logits_last=True)
            m.decode(b)
            out: list[int] = []
            pos = len(prompt)
            while True:
                tok = sampler.sample(m, idx)
                if not ignore_eos and m.is_eog(tok):
                    return out, True
                out.append(tok)
                if len(out) >= max_tokens:
                    return out, False
                b.clear()
                idx = b.add(tok, pos, 0, True)
                pos += 1
                m.decode(b)
        finally:
            sampler.free()


@pytest.fixture(scope="session")
def questions() -> list[str]:
    """Short user questions; [0] and [3] end by themselves within 16 greedy tokens, [2] does not."""
    return list(QUESTIONS)


@pytest.fixture(scope="session")
def model_path() -> str:
    return smollm2_path()


@pytest.fixture(scope="session")
def ref(model_path) -> Reference:
    r = Reference(model_path)
    yield r
    r.batch.free()
    r.model.close()


@pytest.fixture(scope="module")
def engine(model_path):
    """One engine with 4 slots shared by a test module (tests must not depend on slot order)."""
    with EngineProcess(model_path, slots=4, n_ctx=1024) as e:
        yield e


@pytest.fixture
def fresh_engine(model_path):
    """A factory for engines private to one test, closed afterwards."""
    started = []

    def start(**kwargs) -> EngineProcess:
        kwargs.setdefault("n_ctx", 1024)
        e = EngineProcess(model_path, **kwargs)
        started.append(e)
        return e

    yield start
    for e in started:
        e.close()
