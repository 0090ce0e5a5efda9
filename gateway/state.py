"""The state one API request carries through the gates."""

from dataclasses import dataclass, field


@dataclass
class RequestState:
    """Built by the consumer, filled in gate by gate, read by forward."""

    scope: dict
    path: str
    dialect: str           # lanes.dialects.errors.OPENAI / ANTHROPIC
    raw_body: bytes
    body: dict | None = None
    api_key: object = None  # gateway.ApiKey
    user: object = None     # a logged-in user (browser session)
    model: str = ""
    route: object = None    # gateway.ModelRoute
    lane: object = None     # lanes.Lane, None for an external upstream
    upstream_url: str = ""
    upstream_key: str = ""
    record_id: object = None
    body_changed: bool = False  # a gate rewrote the body: forward re-serialises it
    extra: dict = field(default_factory=dict)

    def header(self, name: bytes) -> str:
        for key, value in self.scope.get("headers", []):
            if key == name:
                return value.decode("latin-1")
        return ""
