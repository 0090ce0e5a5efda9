"""The archive with its real parts: redis-server, `celery -A stratasite worker` processes and an S3 server
(moto's server mode) on loopback. The code under test runs in `manage.py shell` subprocesses with the
same settings environment as the worker; assertions read the SQLite file and the bucket directly.
"""

import hashlib
import zlib

from archive_harness import wait_until

# Appends N records through the writer path the gateway uses (writer.append), then closes the segment.
APPEND = """
import json
from infer_archive import writer
from infer_archive.models import InferRecord
ids = []
for i in range({n}):
    r = InferRecord.objects.create(model="strata", status="ok", lane="fast")
    body = json.dumps({{"model": "strata", "messages": [{{"role": "user", "content": "question %d %s" % (i, "x" * (i % 97))}}]}})
    writer.append(r.pk, body.encode(), ("data: {{\\"n\\": %d}}\\n\\ndata: [DONE]\\n\\n" % i).encode())
    ids.append(str(r.pk))
writer.rotate()
assert writer.flush(120)
writer.writer().stop()
print(json.dumps(ids))
"""

# Reads every record back through the reader (local file if present, else a range GET from MinIO).
READ_ALL = """
import json
from infer_archive import segments
from infer_archive.models import InferRecord
good = 0
for r in InferRecord.objects.all():
    doc = segments.read_record(r)
    req = json.loads(segments.body_bytes(doc, "request"))
    n = int(req["messages"][0]["content"].split()[1])
    good += doc["id"] == str(r.pk) and segments.body_bytes(doc, "response").startswith(b'data: {"n": %d}' % n)
print(json.dumps(good))
"""

SWEEP = """
import json
from infer_archive.tasks import sweep
print(json.dumps(sweep()))
"""


def members(data: bytes) -> int:
    """How many intact gzip members a segment's bytes hold."""
    count, pos = 0, 0
    while pos < len(data):
        d = zlib.decompressobj(31)
        d.decompress(data[pos:])
        assert d.eof, "object ends inside a member"
        pos = len(data) - len(d.unused_data)
        count += 1
    return count


def assert_bucket_matches(env, expected_records: int):
    """Every closed segment is uploaded once, its object has the row's sha256 and size, and the counts add up."""
    rows = env.segments()
    assert rows and all(r["status"] == "uploaded" and r["uploads_marked"] == 1 for r in rows), rows
    objects = {o.object_name: o for o in env.objects()}
    assert set(objects) == {r["object_key"] for r in rows}
    client, total = env.s3.client(), 0
    for row in rows:
        response = client.get_object(env.bucket, row["object_key"])
        data = response.read()
        response.close(), response.release_conn()
        assert len(data) == row["size"] and hashlib.sha256(data).hexdigest() == row["sha256"]
        assert members(data) == row["records"]
        total += row["records"]
    assert total == expected_records == sum(1 for r in env.records() if r["segment"])


def test_200_records_through_the_writer_all_uploaded_and_readable_from_minio(archive_env):
    """200 records appended the gateway's way, several segments, a real worker uploads each; with retention 0 the
    local files go after verification, so every record is then read back by a range GET from the bucket."""
    env = archive_env(ARCHIVE_LOCAL_RETENTION_S=0)
    env.worker()
    ids = env.run(APPEND.format(n=200))
    assert len(ids) == 200
    wait_until(lambda: all(r["status"] == "uploaded" and r["local_deleted_at"] for r in env.segments()), 60,
               "every segment uploaded and its local file deleted")
    assert len(env.segments()) >= 3  # 12 kB segments: the size trigger rotated
    assert not list((env.var / "archive").glob("*.jsonl.gz"))
    assert_bucket_matches(env, 200)
    assert env.run(READ_ALL) == 200


def test_s3_down_while_segments_close_nothing_lost_and_the_sweep_uploads_them(archive_env):
    """The S3 server is down while segments close: they stay closed and local, every record readable; uploads
    fail and are recorded. Back up (empty, no bucket), the sweep re-queues them and the worker uploads all.
    The task's own retry backoff is set long, so it is the sweep that gets them there."""
    env = archive_env(ARCHIVE_UPLOAD_RETRY_BASE_S=600, ARCHIVE_UPLOAD_RETRY_MAX_S=600)
    env.worker()
    env.s3.stop()
    try:
        env.run(APPEND.format(n=120))
        rows = wait_until(lambda: (rs := env.segments()) and all(r["last_error"] for r in rs) and rs, 60,
                          "each upload tried and failed")
        assert len(rows) >= 2 and all(r["status"] == "closed" for r in rows)
        assert all((env.var / "archive" / r["name"]).exists() for r in rows)
        assert env.run(READ_ALL) == 120  # nothing lost meanwhile
    finally:
        env.s3.start()
    assert env.segments()[0]["status"] == "closed"
    queued = wait_until(lambda: env.run(SWEEP)["queued"], 30, "the sweep queues the waiting segments")
    assert queued == len(env.segments())
    wait_until(lambda: all(r["status"] == "uploaded" for r in env.segments()), 60, "all uploaded after the sweep")
    assert_bucket_matches(env, 120)


def test_worker_killed_mid_upload_the_segment_is_uploaded_exactly_once(archive_env):
    """SIGKILL of the worker (its whole process group) while an upload is in progress (the object already PUT,
    the row not yet marked), then a restarted worker and the sweep: one object with the right content, not
    sent again (same Last-Modified), the row marked uploaded exactly once."""
    env = archive_env()
    first = env.worker(ARCHIVE_FAULT_PAUSE="after_put:120")
    env.run(APPEND.format(n=30))
    (row,) = env.segments()
    key = row["object_key"]
    wait_until(lambda: [o for o in env.objects() if o.object_name == key], 60, "the object is PUT")
    assert "archive.fault_pause where=after_put" in env.worker_log()
    assert env.segments()[0]["status"] == "closed"  # not marked: the worker is paused mid-upload
    env.kill(first)
    before = env.s3.client().stat_object(env.bucket, key)

    env.worker()
    wait_until(lambda: env.run(SWEEP)["queued"], 30, "the sweep re-queues the segment")
    wait_until(lambda: env.segments()[0]["status"] == "uploaded", 60, "uploaded after the restart")
    (row,) = env.segments()
    assert row["uploads_marked"] == 1 and row["upload_attempts"] >= 2
    (obj,) = env.objects()
    after = env.s3.client().stat_object(env.bucket, key)
    assert obj.object_name == key and after.last_modified == before.last_modified and after.etag == before.etag
    assert_bucket_matches(env, 30)
    env.run(SWEEP)  # a further sweep (or a redelivered task) changes nothing
    assert env.segments()[0]["uploads_marked"] == 1 and len(env.objects()) == 1


def test_worker_killed_before_the_put_uploads_once_after_restart(archive_env):
    """SIGKILL while the upload has started but nothing is sent yet: after restart the sweep uploads it, once."""
    env = archive_env()
    first = env.worker(ARCHIVE_FAULT_PAUSE="before_put:120")
    env.run(APPEND.format(n=10))
    wait_until(lambda: "archive.fault_pause where=before_put" in env.worker_log(), 60, "the upload started")
    env.kill(first)
    assert env.objects() == [] and env.segments()[0]["status"] == "closed"
    env.worker()
    wait_until(lambda: env.run(SWEEP)["queued"], 30, "the sweep re-queues the segment")
    wait_until(lambda: env.segments()[0]["status"] == "uploaded", 60, "uploaded after the restart")
    assert_bucket_matches(env, 10)
