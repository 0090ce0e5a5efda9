"""Gateway pieces against the test database: API keys, routes, the tee, interrupted rows."""

import pytest
from django.core.management import call_command

from gateway.gates.route import find_route
from gateway.models import ApiKey, ModelRoute, hash_key
from gateway.tee import Tee
from infer_archive.live import mark_interrupted
from infer_archive.models import InferRecord


@pytest.mark.django_db
def test_issued_key_is_stored_hashed():
    """Only the key's SHA-256 is stored; the raw key starts with the kept prefix."""
    key, raw = ApiKey.objects.issue("svc")
    assert key.key_hash == hash_key(raw) and raw not in (key.key_hash, key.prefix)
    assert raw.startswith(key.prefix)


@pytest.mark.django_db
def test_create_api_key_command_prints_key_last(capsys):
    """create_api_key prints the raw key alone on its last line; its hash is stored."""
    call_command("create_api_key", "--name", "cli")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    assert ApiKey.objects.get(name="cli").key_hash == hash_key(raw)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # keep the seeded routes
async def test_default_routes_are_seeded_and_unknown_models_fall_back():
    """The seeded routes resolve, and an unknown model goes to the default route."""
    assert (await find_route("strata-fast")).lane.name == "fast"
    assert (await find_route("strata")).lane.name == "normal"
    fallback = await find_route("something-else")
    assert fallback.model_name == "strata" and fallback.is_default


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # keep the seeded routes
async def test_disabled_route_is_not_used():
    """A disabled route is skipped: its model goes to the default route."""
    await ModelRoute.objects.filter(model_name="strata-fast").aupdate(enabled=False)
    assert (await find_route("strata-fast")).model_name == "strata"


@pytest.mark.django_db
def test_rows_left_running_are_marked_interrupted():
    """Rows still running at start-up are marked interrupted; finished rows are left alone."""
    running = InferRecord.objects.create(model="m")
    done = InferRecord.objects.create(model="m", status=InferRecord.Status.OK)
    assert mark_interrupted() == 1
    running.refresh_from_db(), done.refresh_from_db()
    assert running.status == "interrupted" and running.finished_at is not None
    assert done.status == "ok"


def test_tee_reads_usage_from_a_stream_split_anywhere():
    """The lane's usage comment is found however the stream is split, and the bytes are kept as sent."""
    stream = b'data: {"x": 1}\n\n: strata-usage {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}\n\ndata: [DONE]\n\n'
    for cut in range(1, len(stream)):
        tee = Tee(streaming=True)
        tee.feed(stream[:cut]), tee.feed(stream[cut:]), tee.close()
        assert (tee.prompt_tokens, tee.completion_tokens, tee.cached_tokens) == (5, 2, 4)
        assert tee.body == stream


def test_tee_reads_usage_from_a_whole_body():
    """A non-streamed body's usage is read once it has ended."""
    tee = Tee(streaming=False)
    tee.feed(b'{"usage": {"prompt_tokens": 7, "completion_tokens": 3}}')
    tee.close()
    assert (tee.prompt_tokens, tee.completion_tokens) == (7, 3)


@pytest.fixture(autouse=True)
def _fresh_route_cache():
    """Routes and keys are cached per process (gateway.config); each test here starts from the database."""
    from gateway.config import cache

    cache.clear()
    yield
    cache.clear()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # like every transactional test here
def test_a_new_key_authenticates_and_a_revoked_one_stops_at_once():
    """The key cache never hides a revocation made through the model or the command (the signal/stamp clears it)."""
    import asyncio

    from gateway.gates.auth import check_key
    from lanes.dialects.errors import ApiError

    key, raw = ApiKey.objects.issue("cached")
    assert asyncio.run(check_key(raw)).id == key.pk
    call_command("api_keys", "revoke", "cached")
    with pytest.raises(ApiError) as info:
        asyncio.run(check_key(raw))
    assert info.value.status == 401 and info.value.code == "NOT_LOGGED_IN"
    from infer_archive.live import flush

    assert flush()  # the last_used write (queued by check_key) is done before the test database goes


@pytest.mark.parametrize("stream, ended", [
    (b'data: {"choices": []}\n\ndata: [DONE]\n\n', True),
    (b'event: message_delta\ndata: {"type": "message_delta"}\n\nevent: message_stop\ndata: {"type": "message_stop"}\n\n', True),
    (b'data: {"choices": [{"delta": {"content": "[DONE]"}}]}\n\n', False),
    (b'event: message_delta\ndata: {"type": "message_delta"}\n\n', False),
])
def test_tee_knows_when_the_stream_has_ended(stream, ended):
    """A client that hangs up after the closing event got everything: the tee marks that point."""
    tee = Tee(streaming=True)
    for i in range(0, len(stream), 7):
        tee.feed(stream[i:i + 7])
    assert tee.ended is ended
