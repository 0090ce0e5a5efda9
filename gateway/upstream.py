"""One pooled async HTTP client per gateway process, for lanes and upstream URLs."""

import httpx
from django.conf import settings

_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    """The shared client (created on first use, inside the server's event loop)."""
    global _client
    if _client is None:
        _client = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.STRATA_UPSTREAM_TIMEOUT, connect=5.0),
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
        )
    return _client
