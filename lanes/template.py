"""Render the chat template (Jinja in an immutable sandbox) from the internal message form."""

import json
from functools import lru_cache
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment

from .gguf_meta import read_metadata

TEMPLATE_DIR = Path(__file__).parent / "templates"
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def _tojson(value) -> str:
    # Jinja's own tojson escapes <, > and & for HTML; a prompt must keep them as written.
    return json.dumps(value, ensure_ascii=False)


def _raise(message: str):
    raise ValueError(message)


@lru_cache(maxsize=8)
def _compile(source: str):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env.from_string(source)


class ChatTemplate:
    """A compiled chat template; `render` turns messages + tools into the prompt text."""

    def __init__(self, source: str):
        self.source = source
        self._template = _compile(source)

    @classmethod
    def load(cls, choice: str, model_file: str | Path) -> "ChatTemplate":
        """The lane's template: a shipped one by name, or `model` for the GGUF file's own."""
        if choice == "model":
            return cls(read_metadata(model_file)["tokenizer.chat_template"])
        path = TEMPLATE_DIR / f"{choice}.jinja"
        if not path.is_file():
            raise ValueError(f"unknown chat template {choice!r}")
        return cls(path.read_text())

    def render(self, messages: list[dict], tools: list[dict] | None = None, thinking: bool | None = None) -> str:
        """Prompt text ending with the assistant's turn opener."""
        return self._template.render(
            messages=messages,
            tools=tools or None,
            thinking=thinking,
            add_generation_prompt=True,
            default_system=DEFAULT_SYSTEM,
            bos_token="",
            eos_token="<|im_end|>",
        )
