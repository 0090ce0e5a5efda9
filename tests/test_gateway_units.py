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
    key, raw = ApiKey.objects.issue("svc")
    assert key.key_hash == hash_key(raw) and raw not in (key.key_hash, key.prefix)
    assert raw.startswith(key.prefix)


@pytest.mark.django_db
def test_create_api_key_command_prints_key_last(capsys):
    call_command("create_api_key", "--name", "cli")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    assert ApiKey.objects.get(name="cli").key_hash == hash_key(raw)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # keep the seeded routes
async def test_default_routes_are_seeded_and_unknown_models_fall_back():
    assert (await find_route("strata-fast")).lane.name == "fast"
    assert (await find_route("strata")).lane.name == "normal"
    fallback = await find_route("something-else")
    assert fallback.model_name == "strata" and fallback.is_default


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # keep the seeded routes
async def test_disabled_route_is_not_used():
    await ModelRoute.objects.filter(model_name="strata-fast").aupdate(enabled=False)
    assert (await find_route("strata-fast")).model_name == "strata"


@pytest.mark.django_db
def test_rows_left_running_are_marked_interrupted():
    running = InferRecord.objects.create(model="m")
    done = InferRecord.objects.create(model="m", status=InferRecord.Status.OK)
    assert mark_interrupted() == 1
    running.refresh_from_db(), done.refresh_from_db()
    assert running.status == "interrupted" and running.finished_at is not None
    assert done.status == "ok"


def test_tee_reads_usage_from_a_stream_split_anywhere():
    stream = b'data: {"x": 1}\n\n: strata-usage {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}\n\ndata: [DONE]\n\n'
    for cut in range(1, len(stream)):
        tee = Tee(streaming=True)
        tee.feed(stream[:cut]), tee.feed(stream[cut:]), tee.close()
        assert (tee.prompt_tokens, tee.completion_tokens, tee.cached_tokens) == (5, 2, 4)
        assert tee.body == stream


def test_tee_reads_usage_from_a_whole_body():
    tee = Tee(streaming=False)
    tee.feed(b'{"usage": {"prompt_tokens": 7, "completion_tokens": 3}}')
    tee.close()
    assert (tee.prompt_tokens, tee.completion_tokens) == (7, 3)
