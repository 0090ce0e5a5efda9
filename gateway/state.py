"""The state one API request carries through the gates."""

import json
import time
from dataclasses import dataclass, field


def dumps(body) -> bytes:
    """JSON bytes of a body; lone surrogates (which JSON may carry) stay escaped."""
    try:
        return json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(body).encode()


@dataclass
class RequestState:
    """Built by the consumer, filled in gate by gate, read by forward."""

    scope: dict
    path: str
    dialect: str           # lanes.dialects.errors.OPENAI / ANTHROPIC
    raw_body: bytes
    body: dict | None = None
    api_key: object = None  # gateway.config.CachedKey
    user: object = None     # a logged-in user (browser session)
    model: str = ""
    route: object = None    # gateway.ModelRoute
    lane: object = None     # lanes.Lane, None for an external upstream
    upstream_url: str = ""
    upstream_key: str = ""
    record_id: object = None
    entry: object = None    # infer_archive.live.Entry: the live registry's view of this request
    body_changed: bool = False  # a gate rewrote the body: forward re-serialises it
    t0: float = field(default_factory=time.perf_counter)
    timings: dict = field(default_factory=dict)  # name -> milliseconds (Server-Timing)
    extra: dict = field(default_factory=dict)
    _content: bytes | None = None

    def header(self, name: bytes) -> str:
        for key, value in self.scope.get("headers", []):
            if key == name:
                return value.decode("latin-1")
        return ""

    def changed(self):
        """A gate rewrote `body`: forward (and counting) must send the new one."""
        self.body_changed = True
        self._content = None

    def content(self) -> bytes:
        """The body as it goes upstream: the client's bytes untouched, or the rewritten body."""
        if not self.body_changed:
            return self.raw_body
        if self._content is None:
            self._content = dumps(self.body)
        return self._content

    @property
    def counting(self) -> bool:
        """A count_tokens request: it passes the gates up to the pre-check only."""
        return self.path.endswith("/count_tokens")

    # Field names of the output limit in each dialect.
    def max_tokens(self) -> int | None:
        body = self.body or {}
        value = body.get("max_completion_tokens", body.get("max_tokens")) if self.dialect == "openai" else body.get("max_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def set_max_tokens(self, value: int):
        if self.dialect == "openai" and "max_completion_tokens" in self.body:
            self.body["max_completion_tokens"] = value
        else:
            self.body["max_tokens"] = value
        thinking = self.body.get("thinking")
        if isinstance(thinking, dict) and isinstance(thinking.get("budget_tokens"), int) and thinking["budget_tokens"] >= value:
            # Anthropic requires budget_tokens < max_tokens: shrink the thinking budget with it.
            if value >= 2:
                thinking["budget_tokens"] = value - 1
            else:
                self.body["thinking"] = {"type": "disabled"}
        self.changed()
