"""The archive in one process: record format, writer, rotation, reading back, corruption, admin, API.

Tasks run eager here (the embedded default); the S3 server is moto's real HTTP server.
"""

import gzip
import json
import os
import time

import pytest
from django.contrib.auth import get_user_model

from archive_harness import wait_until
from gateway.models import ApiKey
from infer_archive import live, segments, storage, tasks, writer
from infer_archive.conversation import conversation
from infer_archive.models import InferRecord, Segment

# Transactional (the archive thread has its own connection); serialized_rollback keeps the seeded rows
# (routes, lanes) for the tests after these, and spares them a post_migrate re-run on flush.
db = pytest.mark.django_db(transaction=True, serialized_rollback=True)

OPENAI_REQUEST = {
    "model": "strata", "stream": True,
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}]},
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
}


def sse(*payloads) -> bytes:
    return b"".join(b"data: " + (p if isinstance(p, bytes) else json.dumps(p).encode()) + b"\n\n" for p in payloads)


OPENAI_STREAM = sse(
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "User wants "}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"reasoning_content": "weather."}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Let me check."}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":"}}]}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": " \"Paris\"}"}}]}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
     "usage": {"prompt_tokens": 40, "completion_tokens": 12}},
    b"[DONE]",
)

ANTHROPIC_STREAM = (
    b"event: message_start\ndata: " + json.dumps({"type": "message_start", "message": {"usage": {"input_tokens": 9}}}).encode() + b"\n\n"
    + sse(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm, tools."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking "}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "now."}},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"q\": "}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"x\"}"}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    )
)


def make_records(n: int, **fields) -> list:
    return [InferRecord.objects.create(model="strata", status="ok", lane="fast", **fields) for _ in range(n)]


def append_all(records, request=b'{"messages": []}', response=b"{}"):
    for i, record in enumerate(records):
        writer.append(record.pk, request.replace(b"[]", f'[{{"role":"user","content":"n{i}"}}]'.encode()), response)
    assert writer.flush(60)


# --- record format and reading back ---------------------------------------------------------


def test_member_roundtrip_and_damage_is_detected():
    """One member decodes to the document it was made from; one flipped byte is a CorruptRecord, never data."""
    member = segments.encode_member(segments.record_header(None, "abc"), b'{"x": 1}', b"\xff\xfe not utf-8\n")
    doc = segments.decode_member(member)
    assert doc["id"] == "abc" and segments.body_bytes(doc, "request") == b'{"x": 1}'
    assert segments.body_bytes(doc, "response") == b"\xff\xfe not utf-8\n"
    assert segments.document(doc)["response_b64"]  # not UTF-8: base64 in the JSON download
    damaged = bytearray(member)
    damaged[len(member) // 2] ^= 0x55
    with pytest.raises(segments.CorruptRecord):
        segments.decode_member(bytes(damaged))
    with pytest.raises(segments.CorruptRecord):
        segments.decode_member(member[:-3])


@db
def test_writer_appends_each_record_as_one_member_the_row_points_to(archive_settings):
    """Each row gets segment/offset/length; the range read gives back its own bodies; the file is valid JSON Lines gzip."""
    records = make_records(30)
    append_all(records, response=OPENAI_STREAM)
    rows = {r.pk: r for r in InferRecord.objects.all()}
    for i, record in enumerate(records):
        row = rows[record.pk]
        assert row.segment and row.length > 0
        doc = segments.read_record(row)
        assert doc["id"] == str(record.pk) and doc["lane"] == "fast"
        assert json.loads(segments.body_bytes(doc, "request"))["messages"][0]["content"] == f"n{i}"
        assert segments.body_bytes(doc, "response") == OPENAI_STREAM
    (name,) = {r.segment for r in rows.values()}
    text = gzip.decompress(segments.local_path(name).read_bytes()).decode()  # zcat shows every record in order
    headers = [json.loads(line) for line in text.splitlines() if line.startswith('{"v":')]
    assert [h["id"] for h in headers] == [str(r.pk) for r in records]


@db
def test_segments_rotate_by_size(archive_settings):
    """With a small size limit the writer opens new segments; each closed one has its sha256 and record count."""
    archive_settings.ARCHIVE_SEGMENT_MAX_BYTES = 3000
    records = make_records(60)
    append_all(records, response=os.urandom(200).hex().encode())  # ~300 bytes after gzip
    writer.rotate()
    assert writer.flush(60)
    closed = list(Segment.objects.filter(status=Segment.Status.CLOSED))
    assert len(closed) >= 5
    assert sum(s.records for s in closed) == 60
    for seg in closed:
        assert seg.size <= 3000 and segments.verify_local(seg) is True
    assert InferRecord.objects.filter(segment="").count() == 0


@db
def test_segments_rotate_by_age_without_traffic(archive_settings):
    """A quiet writer still closes its segment once it is ARCHIVE_SEGMENT_MAX_AGE_S old (timer, no new append)."""
    archive_settings.ARCHIVE_SEGMENT_MAX_AGE_S = 0.3
    append_all(make_records(1))
    seg = wait_until(lambda: Segment.objects.filter(status=Segment.Status.CLOSED).first(), 15, "segment closed by age")
    assert seg.records == 1 and seg.sha256


@db
def test_archive_off_keeps_rows_only(archive_settings):
    """STRATA_ARCHIVE_ENABLED off: append does nothing (the bench's 'off' side), rows keep no content."""
    archive_settings.STRATA_ARCHIVE_ENABLED = False
    append_all(make_records(3))
    assert not Segment.objects.exists() and InferRecord.objects.exclude(segment="").count() == 0


@db
def test_embedded_default_keeps_segments_local_and_admin_says_so(archive_settings, admin_client):
    """No MinIO: a closed segment stays local (upload answers 'local') and the segments page says why."""
    append_all(make_records(2))
    writer.rotate()
    assert writer.flush()
    seg = Segment.objects.get()
    assert seg.status == Segment.Status.CLOSED and tasks.upload(seg.pk) == "local"
    page = admin_client.get("/admin/infer_archive/segment/").content.decode()
    assert "MinIO is not configured" in page and seg.name in page


@db
def test_abandoned_open_segment_is_recovered_by_the_sweep(archive_settings):
    """A segment left open by a crash, with a half-written tail, is cut back to its intact members and closed."""
    records = make_records(3)
    path = segments.archive_dir() / "20200101T000000Z-crashed-1-abcdef.jsonl.gz"
    members = [segments.encode_member(segments.record_header(r, r.pk), b"{}", b"{}") for r in records]
    path.write_bytes(b"".join(members) + members[0][:25])
    seg = Segment.objects.create(name=path.name, object_key=segments.object_key(path.name))
    Segment.objects.filter(pk=seg.pk).update(opened_at=seg.opened_at - __import__("datetime").timedelta(hours=2))
    os.utime(path, (time.time() - 7200, time.time() - 7200))
    assert tasks.sweep()["closed"] == 1
    seg.refresh_from_db()
    assert seg.status == Segment.Status.CLOSED and seg.records == 3
    assert path.stat().st_size == sum(map(len, members)) and segments.verify_local(seg) is True


# --- upload to the S3 server (moto), eager -------------------------------------------------


@db
def test_verified_upload_then_local_delete_then_range_get(with_s3):
    """Upload is verified (size, MD5 ETag, sha256 metadata), marked once, idempotent; with retention 0 the local
    file goes and every record is read back from MinIO with a range GET."""
    with_s3.ARCHIVE_LOCAL_RETENTION_S = 0
    records = make_records(20)
    append_all(records, response=ANTHROPIC_STREAM)
    writer.rotate()
    assert writer.flush()
    seg = Segment.objects.get()
    assert seg.status == Segment.Status.UPLOADED and seg.uploads_marked == 1 and seg.local_deleted_at
    assert not segments.local_path(seg.name).exists()
    stat = storage.stat(seg.object_key)
    assert stat.size == seg.size and stat.metadata["x-amz-meta-sha256"] == seg.sha256
    assert tasks.upload(seg.pk) == "already"
    seg.refresh_from_db()
    assert seg.uploads_marked == 1
    for record in InferRecord.objects.all():
        assert segments.body_bytes(segments.read_record(record), "response") == ANTHROPIC_STREAM


@db
def test_corrupted_local_segment_is_detected_reported_and_not_served(with_s3, admin_client):
    """A byte flipped in a closed segment: the upload refuses it (checksum), the segment is marked corrupt, admin
    reports it, and neither the detail page, the raw download nor the API serves the damaged content."""
    endpoint, with_s3.MINIO_ENDPOINT = with_s3.MINIO_ENDPOINT, ""  # closes while MinIO is not configured
    records = make_records(5)
    append_all(records, request=b'{"messages": [], "secret_marker": "PAYLOAD-TEXT"}')
    writer.rotate()
    assert writer.flush()
    seg = Segment.objects.get()
    path = segments.local_path(seg.name)
    data = bytearray(path.read_bytes())
    victim = InferRecord.objects.get(pk=records[2].pk)
    data[victim.offset + victim.length // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    with_s3.MINIO_ENDPOINT = endpoint
    assert tasks.upload(seg.pk) == "corrupt"
    seg.refresh_from_db()
    assert seg.status == Segment.Status.CORRUPT and "checksum" in seg.last_error
    client = storage.client()
    assert not client.bucket_exists(with_s3.MINIO_BUCKET) or not list(client.list_objects(with_s3.MINIO_BUCKET, recursive=True))

    for record in (victim, InferRecord.objects.get(pk=records[0].pk)):  # the damaged member, and an intact one
        with pytest.raises(segments.CorruptRecord):
            segments.read_record(record)
        page = admin_client.get(f"/admin/infer_archive/inferrecord/{record.pk}/change/").content.decode()
        assert "Content not available (corrupt)" in page and "PAYLOAD-TEXT" not in page
        assert admin_client.get(f"/admin/infer_archive/inferrecord/{record.pk}/raw/").status_code == 410
        content = admin_client.get(f"/api/records/{record.pk}/").json()["content"]
        assert content["available"] is False and content["reason"] == "corrupt"
    listing = admin_client.get("/admin/infer_archive/segment/").content.decode()
    assert "failed their checksum" in listing and "corrupt" in listing


# --- reading the conversation -----------------------------------------------------------------


def test_conversation_from_openai_stream():
    """OpenAI chunks: thinking and text in order, tool-call deltas merged by index, finish reason and usage."""
    conv = conversation(json.dumps(OPENAI_REQUEST).encode(), OPENAI_STREAM)
    assert [t.role for t in conv.turns] == ["system", "user"] and conv.tools == ["get_weather"]
    kinds = [(b.kind, b.text, b.name) for b in conv.answer.blocks]
    assert kinds == [("thinking", "User wants weather.", ""), ("text", "Let me check.", ""),
                     ("tool_call", '{"city": "Paris"}', "get_weather")]
    assert conv.finish_reason == "tool_calls" and conv.usage["prompt_tokens"] == 40


def test_conversation_from_anthropic_stream_and_request():
    """Anthropic events: thinking, text, tool_use input assembled from input_json_delta; system and tool_result turns."""
    request = {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "find x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t0", "name": "lookup", "input": {"q": "y"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "nothing"}]},
        ],
        "tools": [{"name": "lookup", "input_schema": {}}],
    }
    conv = conversation(json.dumps(request).encode(), ANTHROPIC_STREAM)
    assert conv.turns[0].role == "system" and conv.turns[2].blocks[0].name == "lookup"
    assert conv.turns[3].blocks[0].kind == "tool_result" and conv.turns[3].blocks[0].text == "nothing"
    kinds = [(b.kind, b.text, b.name) for b in conv.answer.blocks]
    assert kinds == [("thinking", "Hmm, tools.", ""), ("text", "Checking now.", ""), ("tool_call", '{"q": "x"}', "lookup")]
    assert conv.finish_reason == "tool_use" and conv.usage == {"input_tokens": 9, "output_tokens": 7}


def test_conversation_from_json_bodies_and_errors():
    """Non-streamed answers of both dialects, both error shapes, and a body that is not JSON at all."""
    openai = {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": "Hi",
              "reasoning_content": "greet", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
              "finish_reason": "stop"}]}
    conv = conversation(b'{"messages": [{"role": "user", "content": "hey"}]}', json.dumps(openai).encode())
    assert [(b.kind, b.text) for b in conv.answer.blocks] == [("thinking", "greet"), ("text", "Hi"), ("tool_call", "{}")]
    anthropic = {"type": "message", "content": [{"type": "text", "text": "Yo"}], "stop_reason": "end_turn"}
    assert conversation(b"{}", json.dumps(anthropic).encode()).answer.blocks[0].text == "Yo"
    for error in ({"error": {"message": "prompt is too long: 9000 tokens > 8192 maximum"}},
                  {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}):
        block = conversation(b"{}", json.dumps(error).encode()).answer.blocks[0]
        assert block.kind == "error" and "prompt is too long" in block.text
    odd = conversation(b"not json", b"")
    assert odd.notes and odd.answer is None


# --- admin and API ----------------------------------------------------------------------------


@db
def test_admin_detail_shows_the_conversation_and_raw_download(archive_settings, admin_client):
    """The detail page shows messages, thinking, tool calls and the answer; the raw download gives the exact bytes."""
    (record,) = make_records(1, dialect="openai", stream=True)
    writer.append(record.pk, json.dumps(OPENAI_REQUEST).encode(), OPENAI_STREAM)
    assert writer.flush()
    page = admin_client.get(f"/admin/infer_archive/inferrecord/{record.pk}/change/").content.decode()
    for text in ("What is the weather in Paris?", "You are terse.", "User wants weather.", "Let me check.",
                 "get_weather", "&quot;Paris&quot;", "finish: tool_calls"):
        assert text in page, text
    raw = admin_client.get(f"/admin/infer_archive/inferrecord/{record.pk}/raw/?part=response")
    assert raw.status_code == 200 and b"".join(raw.streaming_content if raw.streaming else [raw.content]) == OPENAI_STREAM
    listing = admin_client.get("/admin/infer_archive/inferrecord/?status=ok&o=10").content.decode()
    assert str(record.pk) in listing or "strata" in listing


@db
def test_management_api_filters_content_and_staff_auth(archive_settings, client, admin_user):
    """/api/records/ filters and pages newest first, the detail reads content back, /api/segments/ lists segments;
    only staff get in: a session or a key whose user is staff (a plain key is refused)."""
    ok = make_records(3)
    bad = InferRecord.objects.create(model="other", status="error", lane="normal")
    for record in ok + [bad]:
        writer.append(record.pk, json.dumps(OPENAI_REQUEST).encode(), OPENAI_STREAM)
    assert writer.flush()

    plain_user = get_user_model().objects.create_user("plain", password="x")
    _, plain_key = ApiKey.objects.issue("plain", user=plain_user)
    _, orphan_key = ApiKey.objects.issue("nobody")
    _, staff_key = ApiKey.objects.issue("ops", user=admin_user)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {staff_key}"}

    def status(**headers) -> int:
        code = client.get("/api/records/", **headers).status_code
        live.flush()  # the gateway records a key's use on its own thread: let it land before the next request
        return code

    assert status() == 401
    assert status(HTTP_AUTHORIZATION=f"Bearer {plain_key}") == 403  # a key, but not a staff user's
    assert status(HTTP_AUTHORIZATION=f"Bearer {orphan_key}") == 401  # a key with no user at all
    assert status(**auth) == 200

    listing = client.get("/api/records/?status=ok&lane=fast", **auth).json()
    assert listing["count"] == 3 and {r["id"] for r in listing["results"]} == {str(r.pk) for r in ok}
    started = [r["started_at"] for r in listing["results"]]
    assert started == sorted(started, reverse=True)
    assert client.get("/api/records/?model=other", **auth).json()["count"] == 1
    assert client.get("/api/records/?since=2999-01-01", **auth).json()["count"] == 0
    assert client.get("/api/records/?page_size=2", **auth).json()["next"]

    detail = client.get(f"/api/records/{bad.pk}/", **auth).json()
    assert detail["content"]["available"] and detail["content"]["request"]["model"] == "strata"
    assert detail["content"]["conversation"]["answer"]["blocks"][0]["text"] == "User wants weather."

    client.force_login(admin_user)
    assert client.get("/api/segments/").json()["count"] == 1


@db
def test_create_api_key_staff_flag_gives_a_key_the_management_api_accepts(archive_settings, client, capsys):
    """`create_api_key --name N --staff` attaches the key to a new staff user that cannot log in by password;
    the management API accepts that key, and refuses a plain key made the same way without --staff."""
    from django.core.management import call_command

    call_command("create_api_key", "--name", "ops-script", "--staff")
    staff_key = capsys.readouterr().out.strip().splitlines()[-1]
    call_command("create_api_key", "--name", "plain-script")
    plain_key = capsys.readouterr().out.strip().splitlines()[-1]
    owner = ApiKey.objects.get(name="ops-script").user
    assert owner.username == "apikey-ops-script" and owner.is_staff and not owner.has_usable_password()
    assert client.get("/api/records/", HTTP_AUTHORIZATION=f"Bearer {staff_key}").status_code == 200
    live.flush()
    assert client.get("/api/records/", HTTP_AUTHORIZATION=f"Bearer {plain_key}").status_code == 401
    live.flush()
