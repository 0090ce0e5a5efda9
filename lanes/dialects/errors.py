"""Error bodies in each dialect's own shape; raised as `ApiError`, rendered at the boundary."""

import json
from dataclasses import dataclass, field

OPENAI = "openai"
ANTHROPIC = "anthropic"

# Anthropic names the error type by status; OpenAI clients read `type` and `code`.
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "overloaded_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
}


@dataclass
class ApiError(Exception):
    """An error meant for the client: HTTP status, message, optional code and extra fields."""

    status: int
    message: str
    code: str | None = None
    type: str | None = None
    extra: dict = field(default_factory=dict)

    def __str__(self):
        return f"{self.status} {self.message}"

    @property
    def error_type(self) -> str:
        return self.type or _TYPE_BY_STATUS.get(self.status, "api_error")

    def body(self, dialect: str) -> dict:
        """The error as the dialect's JSON body."""
        if dialect == ANTHROPIC:
            error = {"type": self.error_type, "message": self.message}
            if self.code:
                error["code"] = self.code
            error.update(self.extra)
            return {"type": "error", "error": error}
        error = {"message": self.message, "type": self.error_type, "param": None, "code": self.code}
        error.update(self.extra)
        return {"error": error}

    def to_bytes(self, dialect: str) -> bytes:
        return json.dumps(self.body(dialect)).encode()


def bad_request(message: str, **extra) -> ApiError:
    return ApiError(400, message, extra=extra)
