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


@pytest.fixture(scope="session")
def prompt_tokens(model_path):
    """The lane's count for OpenAI `messages`, computed here from the same template and tokenizer files."""
    from lanes.dialects.openai import openai_to_request
    from lanes.sanitize import Sanitizer
    from lanes.template import ChatTemplate
    from lanes.tokenizer import load_tokenizer

    tok = load_tokenizer(model_path)
    sanitizer = Sanitizer(tok.special_literals)
    template = ChatTemplate.load("chatml-tools", model_path)

    def count(messages) -> int:
        request = openai_to_request({"messages": messages})
        return len(tok.encode(template.render(sanitizer.neutralize_all(request.messages))))

    return count
