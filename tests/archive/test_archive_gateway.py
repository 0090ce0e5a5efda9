"""Through the real gateway (one lane with its engine): the bytes a client received are what the archive kept.

Embedded mode (no Redis: tasks inline in the gateway's archive thread) with the S3 server configured,
and segments that rotate after a second, so they are closed and uploaded while the test waits.
"""

import hashlib
import json

import httpx
import pytest

from archive_harness import wait_until
from stack import Stack

pytestmark = pytest.mark.e2e

READ = """
import json
from infer_archive import segments
from infer_archive.models import InferRecord, Segment
out = {}
for r in InferRecord.objects.exclude(segment=""):
    doc = segments.read_record(r)
    out[str(r.pk)] = {"request": segments.body_bytes(doc, "request").decode(), "status": doc["status"],
                      "response_sha": __import__("hashlib").sha256(segments.body_bytes(doc, "response")).hexdigest()}
segs = list(Segment.objects.values("status", "records", "sha256", "object_key"))
print(json.dumps({"records": out, "segments": segs, "rows": InferRecord.objects.count()}))
"""


@pytest.fixture(scope="module")
def archive_stack(tmp_path_factory, s3_server):
    s = Stack(tmp_path_factory.mktemp("archive-gw"), lanes=("fast",))
    s.env.pop("REDIS_URL", None)
    s.env.update({
        "MINIO_ENDPOINT": s3_server.endpoint, "MINIO_ACCESS_KEY": "test", "MINIO_SECRET_KEY": "test",
        "MINIO_BUCKET": "gateway-archive", "ARCHIVE_SEGMENT_MAX_AGE_S": "1", "STRATA_ARCHIVE_ENABLED": "1",
    })
    try:
        s.start()
        yield s
    finally:
        s.stop()


def test_gateway_requests_are_archived_as_the_client_got_them(archive_stack, s3_server):
    """A streamed and a plain completion through the gateway: each row points at a member holding the exact request
    bytes sent and the exact response bytes received; the segments close by age and land in the bucket verified."""
    key = archive_stack.create_key("archive-e2e")
    headers = {"authorization": f"Bearer {key}"}
    sent, got = [], []
    for stream in (True, False):
        body = json.dumps({"model": "strata-fast", "stream": stream, "max_tokens": 8, "temperature": 0,
                           "messages": [{"role": "user", "content": f"Say hi (stream={stream})"}]}).encode()
        with httpx.stream("POST", archive_stack.gateway_url + "/v1/chat/completions", content=body,
                          headers={**headers, "content-type": "application/json"}, timeout=120) as response:
            assert response.status_code == 200
            got.append(b"".join(response.iter_raw()))
        sent.append(body.decode())

    def archived():
        state = archive_stack.django(READ)
        uploaded = state["segments"] and all(s["status"] == "uploaded" for s in state["segments"])
        return state if len(state["records"]) == 2 and uploaded else None

    state = wait_until(archived, 60, "both requests archived and their segments uploaded", every=1.0)
    assert sorted(r["request"] for r in state["records"].values()) == sorted(sent)
    assert sorted(r["response_sha"] for r in state["records"].values()) == sorted(hashlib.sha256(g).hexdigest() for g in got)
    assert all(r["status"] == "ok" for r in state["records"].values())
    client = s3_server.client()
    for segment in state["segments"]:
        data = client.get_object("gateway-archive", segment["object_key"]).read()
        assert hashlib.sha256(data).hexdigest() == segment["sha256"]
    assert sum(s["records"] for s in state["segments"]) == 2


def test_200_requests_through_the_gateway_every_row_readable_every_segment_in_the_bucket(archive_stack, s3_server):
    """200 requests (streamed and plain, 8 at a time) through the real gateway and lane: every row's content reads
    back from its segment, every closed segment is in the bucket with its checksum, and the counts match."""
    from concurrent.futures import ThreadPoolExecutor

    key = archive_stack.create_key("archive-200")
    headers = {"authorization": f"Bearer {key}"}

    def ask(i):
        body = {"model": "strata-fast", "stream": i % 2 == 0, "max_tokens": 1, "temperature": 0,
                "messages": [{"role": "user", "content": f"request number {i}"}]}
        response = httpx.post(archive_stack.gateway_url + "/v1/chat/completions", json=body, headers=headers, timeout=300)
        return response.status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(ask, range(200)))
    assert statuses == [200] * 200

    def archived():
        state = archive_stack.django(READ)
        mine = [r for r in state["records"].values() if "request number " in r["request"]]
        uploaded = [s for s in state["segments"] if s["status"] == "uploaded"]
        # Done when every row's content is archived and every segment holding one has closed (by age) and uploaded.
        done = len(mine) == 200 and len(state["records"]) == state["rows"]
        return state if done and sum(s["records"] for s in uploaded) == state["rows"] else None

    state = wait_until(archived, 180, "200 requests archived and their segments uploaded", every=1.0)
    numbers = sorted(int(json.loads(r["request"])["messages"][0]["content"].split()[-1])
                     for r in state["records"].values() if "request number " in r["request"])
    assert numbers == list(range(200))
    client = s3_server.client()
    uploaded = [s for s in state["segments"] if s["status"] == "uploaded"]
    for segment in uploaded:
        data = client.get_object("gateway-archive", segment["object_key"]).read()
        assert hashlib.sha256(data).hexdigest() == segment["sha256"]
    assert sum(s["records"] for s in uploaded) == state["rows"]
