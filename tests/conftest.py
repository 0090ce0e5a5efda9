"""Shared fixtures: the real stack (session-wide), and the bundled model's tokenizer and template."""

import pytest

from stack import Stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    """Gateway + lanes fast and normal, each with its llama.cpp engine, on free ports."""
    s = Stack(tmp_path_factory.mktemp("strata-var"))
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def api_key(stack):
    return stack.create_key("pytest")


@pytest.fixture(scope="session")
def model_path():
    from engine.models import smollm2_path

    return str(smollm2_path())


@pytest.fixture(scope="session")
def tokenizer(model_path):
    from lanes.tokenizer import load_tokenizer

    return load_tokenizer(model_path)
