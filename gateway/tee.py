"""A copy of the response as it passes: usage and the bytes for the archive, without re-encoding."""

import json

USAGE_COMMENT = b": strata-usage "  # written by lanes.serve_openai


class Tee:
    """Watches the bytes going to the client; `usage` is known once the response has ended."""

    def __init__(self, streaming: bool):
        self.streaming = streaming
        self.chunks: list[bytes] = []
        self.usage: dict = {}
        self._line_tail = b""

    def feed(self, chunk: bytes):
        self.chunks.append(chunk)
        if self.streaming:
            lines = (self._line_tail + chunk).split(b"\n")
            self._line_tail = lines.pop()
            for line in lines:
                if line.startswith(USAGE_COMMENT):
                    self._take_usage(line[len(USAGE_COMMENT):])

    def close(self):
        if not self.streaming:
            self._take_usage(b"".join(self.chunks), field="usage")

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def _take_usage(self, raw: bytes, field: str | None = None):
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        usage = data.get(field) if field and isinstance(data, dict) else data
        if isinstance(usage, dict):
            self.usage = usage

    @property
    def prompt_tokens(self):
        return self.usage.get("prompt_tokens", self.usage.get("input_tokens"))

    @property
    def completion_tokens(self):
        return self.usage.get("completion_tokens", self.usage.get("output_tokens"))

    @property
    def cached_tokens(self):
        details = self.usage.get("prompt_tokens_details") or {}
        return details.get("cached_tokens", self.usage.get("cache_read_input_tokens"))
