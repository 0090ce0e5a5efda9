"""A copy of the response as it passes: usage and the bytes for the archive, without re-encoding.

Usage comes, by preference, from the lane's SSE comment `: strata-usage {json}` (both
dialects; it carries the engine's cached tokens), else from the dialect's own events:
Anthropic `message_start` (input tokens) and `message_delta` (output tokens), or an
OpenAI chunk with `usage` (stream_options.include_usage); for a whole body, its `usage`.
While a stream runs, content chunks are counted into the live entry (/concurrency).
"""

import json

from lanes.generate import USAGE_COMMENT  # the lanes write it; one definition for writer and reader


class Tee:
    """Watches the bytes going to the client; `usage` is known once the response has ended."""

    def __init__(self, streaming: bool, entry=None):
        self.streaming = streaming
        self.entry = entry  # infer_archive.live.Entry: completion_tokens counted live
        self.chunks: list[bytes] = []
        self.usage: dict = {}
        self.lane_usage: dict | None = None
        self.content_chunks = 0
        self.ended = False  # the stream's closing event ([DONE] / message_stop) has passed
        self._line_tail = b""

    def feed(self, chunk: bytes):
        self.chunks.append(chunk)
        if not self.streaming:
            return
        lines = (self._line_tail + chunk).split(b"\n")
        self._line_tail = lines.pop()
        for line in lines:
            if line.startswith(b"data: "):
                self._data_line(line)
            elif line.startswith(USAGE_COMMENT):
                usage = _json(line[len(USAGE_COMMENT):])
                if isinstance(usage, dict):
                    self.lane_usage = usage
        if self.entry is not None:
            self.entry.completion_tokens = self.content_chunks

    def _data_line(self, line: bytes):
        head = line[:48]
        if line.startswith(b"data: [DONE]") or b'"message_stop"' in head:
            self.ended = True
            return
        if b"content_block_delta" in head:
            self.content_chunks += 1  # one token or a few: a live figure; the exact one comes with usage
            return
        if b"message_start" in head or b"message_delta" in head:
            data = _json(line[6:])
            if isinstance(data, dict):
                usage = (data.get("message") or {}).get("usage") if data.get("type") == "message_start" else data.get("usage")
                if isinstance(usage, dict):
                    self.usage.update({k: v for k, v in usage.items() if v is not None})
            return
        if b'"delta": {"' in line or b'"delta":{"' in line:
            self.content_chunks += 1
        if b'"usage"' in line and b'"usage": null' not in line and b'"usage":null' not in line:
            data = _json(line[6:])
            if isinstance(data, dict) and isinstance(data.get("usage"), dict):
                self.usage = data["usage"]

    def close(self):
        if self.lane_usage is not None:
            self.usage = self.lane_usage
        elif not self.streaming:
            data = _json(b"".join(self.chunks))
            if isinstance(data, dict) and isinstance(data.get("usage"), dict):
                self.usage = data["usage"]
        if self.entry is not None and self.completion_tokens is not None:
            self.entry.completion_tokens = self.completion_tokens

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

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


def _json(raw: bytes):
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
