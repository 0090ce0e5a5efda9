"""The gateway's Django side in this process: the route/key cache, the pages behind auth, the key commands,
and the lane client against a small local server."""

import asyncio

import pytest
from django.core.management import call_command
from django.test import AsyncClient, Client

from gateway.config import cache
from gateway.gates.auth import csrf_ok, is_public
from gateway.gates.route import find_route
from gateway.models import ApiKey, ModelRoute, hash_key
from gateway.upstream import LaneClient, LaneResponse

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)  # keep the seeded lanes/routes


@pytest.fixture(autouse=True)
def fresh_cache(settings, tmp_path):
    settings.STRATA_CONFIG_STAMP = tmp_path / "config.stamp"
    settings.STRATA_CONFIG_TTL = 3600  # nothing is re-read by age in these tests
    cache.clear()
    yield
    cache.clear()


@pytest.mark.anyio
async def test_a_route_saved_is_seen_by_the_next_lookup_despite_the_cache():
    """Routes are cached (an hour here); a save clears the cache through its signal, so the edit is seen at once."""
    assert (await find_route("strata-fast")).lane.name == "fast"
    route = await ModelRoute.objects.select_related("lane").aget(model_name="strata-fast")
    route.lane = await route.lane.__class__.objects.aget(name="normal")
    await route.asave()
    await asyncio.sleep(0)  # on_commit ran in the save's thread
    assert (await find_route("strata-fast")).lane.name == "normal"


@pytest.mark.anyio
async def test_a_queryset_update_elsewhere_is_seen_through_the_stamp_or_the_ttl(settings):
    """A bulk update sends no signal: the stale route is served until the stamp moves (or the TTL ends)."""
    assert (await find_route("strata-fast")).enabled
    await ModelRoute.objects.filter(model_name="strata-fast").aupdate(enabled=False)
    assert (await find_route("strata-fast")).model_name == "strata-fast"  # cached, as documented
    from gateway.config import bump

    bump()
    cache._stamp_checked = -1  # skip the 50 ms between stamp checks
    assert (await find_route("strata-fast")).model_name == "strata"  # the default route


@pytest.mark.anyio
async def test_concurrent_misses_share_one_database_read(monkeypatch):
    """Twenty requests arriving on an empty cache cause one routes read, not twenty."""
    import gateway.config as config

    reads = []
    real = config._load_routes

    def counting():
        reads.append(1)
        return real()

    monkeypatch.setattr(config, "_load_routes", counting)
    results = await asyncio.gather(*(find_route("strata") for _ in range(20)))
    assert len(reads) == 1 and {r.model_name for r in results} == {"strata"}


def test_api_keys_command_lists_and_revokes(capsys):
    """`api_keys create/list/revoke`: the list names the key, a revoked key is marked and cannot authenticate."""
    call_command("api_keys", "create", "--name", "ci-bot")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    call_command("api_keys", "list")
    assert "ci-bot" in capsys.readouterr().out
    call_command("api_keys", "revoke", "ci-bot")
    call_command("api_keys", "list")
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ci-bot")]
    assert "REVOKED" in listed[0]
    assert ApiKey.objects.get(key_hash=hash_key(raw)).revoked_at is not None


def test_public_paths_are_an_explicit_short_list(settings):
    """Only the listed paths (exact, or a prefix when the entry ends in /) skip auth."""
    assert settings.STRATA_PUBLIC_PATHS == ["/health", "/login/", "/admin/login/", "/static/"]
    assert is_public("/health") and is_public("/static/admin/css/base.css") and is_public("/login/")
    assert not is_public("/health/extra") and not is_public("/v1/models") and not is_public("/concurrency")


def test_csrf_token_check_matches_djangos():
    """A session's API call is accepted only with the csrftoken cookie's secret, masked or not."""
    from django.middleware.csrf import _get_new_csrf_string, _mask_cipher_secret

    secret = _get_new_csrf_string()
    assert csrf_ok(_mask_cipher_secret(secret), secret) and csrf_ok(secret, secret)
    assert not csrf_ok(_mask_cipher_secret(_get_new_csrf_string()), secret)
    assert not csrf_ok("", secret) and not csrf_ok("short", secret)


@pytest.mark.parametrize("path", ["/v1/models", "/concurrency", "/metrics", "/"])
def test_django_pages_need_a_session_or_a_key(path):
    """Without a key or session: 401 NOT_LOGGED_IN in OpenAI's shape; a wrong key too."""
    client = Client()
    for headers in ({}, {"authorization": "Bearer sk-strata-wrong"}):
        response = client.get(path, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "NOT_LOGGED_IN"


def test_a_browser_is_sent_to_the_login_page():
    """A browser asking for a page without a session is redirected to /login/ with next=."""
    response = Client().get("/", headers={"accept": "text/html"})
    assert response.status_code == 302 and response["location"].startswith("/login/?next=/")


def test_anthropic_clients_get_the_anthropic_error_shape():
    """With anthropic-version, the 401 is in Anthropic's error shape."""
    body = Client().get("/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert body["error"]["code"] == "NOT_LOGGED_IN"


@pytest.mark.anyio
async def test_models_lists_enabled_routes_in_both_shapes():
    """/v1/models: OpenAI's list shape, or Anthropic's when anthropic-version is sent."""
    from asgiref.sync import sync_to_async

    _, raw = await sync_to_async(ApiKey.objects.issue)("models")
    client = AsyncClient()
    openai_shape = (await client.get("/v1/models", headers={"authorization": f"Bearer {raw}"})).json()
    assert openai_shape["object"] == "list"
    assert {m["id"] for m in openai_shape["data"]} >= {"strata", "strata-fast"}
    assert all(m["object"] == "model" and m["owned_by"] == "strata" for m in openai_shape["data"])
    anthropic_shape = (await client.get("/v1/models", headers={"x-api-key": raw, "anthropic-version": "2023-06-01"})).json()
    assert {m["id"] for m in anthropic_shape["data"]} >= {"strata", "strata-fast"}
    assert anthropic_shape["has_more"] is False and all(m["type"] == "model" for m in anthropic_shape["data"])


@pytest.mark.anyio
async def test_metrics_are_prometheus_text():
    """/metrics answers Prometheus text with the request counter and TTFT histogram."""
    from asgiref.sync import sync_to_async

    _, raw = await sync_to_async(ApiKey.objects.issue)("metrics")
    response = await AsyncClient().get("/metrics", headers={"authorization": f"Bearer {raw}"})
    assert response.status_code == 200 and response["content-type"].startswith("text/plain")
    text = response.content.decode()
    assert "# TYPE strata_requests_total counter" in text and "# TYPE strata_ttft_seconds histogram" in text


# -- the lane client ----------------------------------------------------------------------------


class TinyServer:
    """An HTTP/1.1 server answering each request with a canned response; counts connections."""

    def __init__(self, responses: list[bytes], close_after_each: bool = False):
        self.responses, self.close_after_each = responses, close_after_each
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while self.responses:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int([line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0])
                self.requests.append(head + await reader.readexactly(length))
                writer.write(self.responses.pop(0))
                await writer.drain()
                if self.close_after_each:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.url = "http://127.0.0.1:%d/v1/x" % self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()


CHUNKED = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
           b"7\r\ndata: a\r\n7\r\ndata: b\r\n0\r\n\r\n")
JSON = b'HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"error":1}'


@pytest.mark.anyio
async def test_lane_client_reads_chunked_and_sized_bodies_over_one_pooled_connection():
    """The lane client de-chunks a stream, reads a sized body, and reuses the one connection."""
    async with TinyServer([CHUNKED, JSON]) as server:
        client = LaneClient()
        response = await client.send("POST", server.url, {"authorization": "Bearer k"}, b'{"a": 1}')
        assert response.status_code == 200 and response.headers.get("content-type") == "text/event-stream"
        assert b"".join([c async for c in response.aiter_raw()]) == b"data: adata: b"
        await response.aclose()
        second = await client.send("POST", server.url, {}, b"{}")
        assert second.status_code == 400 and await second.aread() == b'{"error":1}'
        await second.aclose()
        assert server.connections == 1
        assert server.requests[0].startswith(b"POST /v1/x HTTP/1.1\r\n") and server.requests[0].endswith(b'{"a": 1}')


@pytest.mark.anyio
async def test_lane_client_replaces_a_connection_the_lane_closed():
    """An idle connection the lane closed is not used again: a new one is opened."""
    async with TinyServer([JSON, JSON], close_after_each=True) as server:
        client = LaneClient()
        for _ in range(2):
            response = await client.send("POST", server.url, {}, b"{}")
            assert await response.aread() == b'{"error":1}'
            await response.aclose()
            await asyncio.sleep(0.05)
        assert server.connections == 2


def test_chunk_parser_takes_chunks_split_anywhere():
    """Chunked framing split at any byte gives the same payload, and the end is seen."""
    stream = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n"
    for cut in range(len(stream) + 1):
        response = LaneResponse.__new__(LaneResponse)
        response._done, response._keep = False, True
        buffer, out = bytearray(), []
        for piece in (stream[:cut], stream[cut:]):
            buffer += piece
            out.append(response._take_chunks(buffer))
        assert b"".join(out) == b"helloabc" and response._done and response._keep and not buffer
