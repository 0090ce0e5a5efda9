"""Celery tasks of the archive: upload a closed segment (idempotent, keyed by segment id) and the sweep.

Without Redis the tasks run inline (CELERY_TASK_ALWAYS_EAGER); with REDIS_URL set, a
`celery -A stratasite worker -B` runs them, the sweep on the beat schedule.
"""

import io
import logging
import time

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone
from minio.error import S3Error

from stratasite.celery import app

from . import segments, storage
from .models import Segment

log = logging.getLogger("strata.archive")

# Single PUT up to this size: then the ETag is the object's MD5, which the verification checks.
SINGLE_PUT_MAX = 5 << 30


class UploadFailed(Exception):
    """The object in the store does not match the segment (size or checksum)."""


def _fault_pause(where: str):
    """Test-only fault injection (ARCHIVE_FAULT_PAUSE="after_put:30"): pause at a named point of an upload."""
    spec = settings.ARCHIVE_FAULT_PAUSE
    if spec and spec.split(":")[0] == where:
        log.warning("archive.fault_pause where=%s", where)
        time.sleep(float(spec.split(":")[1]))


def _matches(stat, segment: Segment) -> bool:
    if stat is None or stat.size != segment.size:
        return False
    meta = {k.lower(): v for k, v in (stat.metadata or {}).items()}
    sha = meta.get("x-amz-meta-sha256") or meta.get("sha256")
    return sha == segment.sha256 and (stat.etag or "").strip('"') == segment.md5


def upload(segment_id: int) -> str:
    """Upload a closed segment and verify the object (size, MD5 ETag, sha256 metadata) before marking it.

    Safe to run twice or concurrently: the object key is fixed by the segment, an object that
    already matches is not sent again, and the row is marked uploaded only once. Returns what
    happened; raises storage.TRANSIENT errors (and UploadFailed) for the caller to retry.
    """
    segment = Segment.objects.filter(pk=segment_id).first()
    if segment is None:
        return "unknown"
    if segment.status == Segment.Status.UPLOADED:
        return "already"
    if segment.status != Segment.Status.CLOSED:
        return segment.status  # open (not ready) or corrupt (never uploaded)
    if not storage.configured():
        return "local"
    Segment.objects.filter(pk=segment.pk).update(upload_attempts=F("upload_attempts") + 1, last_attempt_at=timezone.now())
    key = segment.object_key or segments.object_key(segment.name)
    path = segments.local_path(segment.name)
    existing = storage.stat(key)
    if not _matches(existing, segment):
        if not path.exists():
            segments.mark_corrupt(segment, "the local file is missing and no verified copy is in the store")
            return "corrupt"
        sha, md5, size = segments.file_digests(path)
        if (sha, size) != (segment.sha256, segment.size):
            why = f"local file checksum mismatch: sha256 {sha} size {size}, expected {segment.sha256} size {segment.size}"
            segments.mark_corrupt(segment, why)
            log.error("archive.segment_corrupt name=%s %s", segment.name, why)
            return "corrupt"
        _fault_pause("before_put")
        data = path.read_bytes()
        client = storage.client()
        client.put_object(
            storage.ensure_bucket(client), key, io.BytesIO(data), len(data),
            content_type="application/gzip", metadata={"sha256": segment.sha256, "records": str(segment.records)},
            part_size=max(5 << 20, min(len(data), SINGLE_PUT_MAX)),
        )
        _fault_pause("after_put")
        existing = storage.stat(key)
        if not _matches(existing, segment):
            raise UploadFailed(f"object {key} does not match after upload: {existing and (existing.size, existing.etag)}")
    marked = Segment.objects.filter(pk=segment.pk, status=Segment.Status.CLOSED).update(
        status=Segment.Status.UPLOADED, uploaded_at=timezone.now(), etag=(existing.etag or "").strip('"'),
        object_key=key, last_error="", uploads_marked=F("uploads_marked") + 1,
    )
    log.info("archive.segment_uploaded name=%s key=%s size=%d marked=%d", segment.name, key, segment.size, marked)
    if marked and settings.ARCHIVE_LOCAL_RETENTION_S <= 0:
        delete_local(Segment.objects.get(pk=segment.pk))
    return "uploaded" if marked else "already"


@app.task(bind=True, name="infer_archive.tasks.upload_segment", max_retries=None, acks_late=True)
def upload_segment(self, segment_id: int) -> str:
    """Celery: upload one segment; retries with exponential backoff while MinIO is down."""
    try:
        return upload(segment_id)
    except (*storage.TRANSIENT, UploadFailed, S3Error) as exc:  # transient: the store is down or erring
        Segment.objects.filter(pk=segment_id).update(last_error=f"{exc.__class__.__name__}: {exc}"[:2000])
        log.warning("archive.upload_failed segment=%s attempt=%d error=%r", segment_id, self.request.retries, exc)
        if self.request.is_eager:
            return "failed"  # inline: do not block the caller; the sweep tries again
        countdown = min(settings.ARCHIVE_UPLOAD_RETRY_MAX_S, settings.ARCHIVE_UPLOAD_RETRY_BASE_S * 2 ** self.request.retries)
        raise self.retry(exc=exc, countdown=countdown)


def delete_local(segment: Segment) -> bool:
    """Delete a segment's local file: only once its upload is verified."""
    if segment.status != Segment.Status.UPLOADED or segment.local_deleted_at:
        return False
    segments.local_path(segment.name).unlink(missing_ok=True)
    Segment.objects.filter(pk=segment.pk).update(local_deleted_at=timezone.now())
    return True


def close_abandoned(segment: Segment) -> str:
    """An open segment whose writer is gone (a crash): cut a half-written tail, take its digests, close it."""
    path = segments.local_path(segment.name)
    if not path.exists():
        Segment.objects.filter(pk=segment.pk, status=Segment.Status.OPEN).update(
            status=Segment.Status.CORRUPT, last_error="the open segment's file is missing", closed_at=timezone.now()
        )
        return "missing"
    members, end = segments.scan(path)
    if end < path.stat().st_size:
        log.warning("archive.segment_truncated name=%s from=%d to=%d", segment.name, path.stat().st_size, end)
        with open(path, "r+b") as f:
            f.truncate(end)
    sha, md5, size = segments.file_digests(path)
    Segment.objects.filter(pk=segment.pk, status=Segment.Status.OPEN).update(
        status=Segment.Status.CLOSED, closed_at=timezone.now(), size=size, records=len(members), sha256=sha, md5=md5
    )
    return "closed"


def sweep(exclude: str | None = None) -> dict:
    """Close abandoned open segments, queue every closed segment not yet uploaded, apply retention."""
    from .writer import queue_upload, writer

    now = timezone.now()
    done = {"closed": 0, "queued": 0, "deleted": 0}
    current = writer().current
    skip = {n for n in (exclude, current.name if current else None) if n}
    grace = settings.ARCHIVE_SEGMENT_MAX_AGE_S + max(60.0, settings.ARCHIVE_SEGMENT_MAX_AGE_S)
    for segment in Segment.objects.filter(status=Segment.Status.OPEN, opened_at__lt=now - timezone.timedelta(seconds=grace)):
        path = segments.local_path(segment.name)
        if segment.name in skip or (path.exists() and time.time() - path.stat().st_mtime < grace):
            continue
        done["closed"] += close_abandoned(segment) == "closed"
    if storage.configured():
        # Not re-queued while an attempt is recent: the task's own retries are still at work.
        recent = now - timezone.timedelta(seconds=min(settings.ARCHIVE_SWEEP_INTERVAL_S, settings.ARCHIVE_UPLOAD_RETRY_MAX_S))
        waiting = Segment.objects.filter(status=Segment.Status.CLOSED).filter(
            Q(last_attempt_at__isnull=True) | Q(last_attempt_at__lt=recent)
        )
        for segment_id in waiting.values_list("pk", flat=True):
            queue_upload(segment_id)
            done["queued"] += 1
        expired = Segment.objects.filter(
            status=Segment.Status.UPLOADED, local_deleted_at__isnull=True,
            uploaded_at__lte=now - timezone.timedelta(seconds=settings.ARCHIVE_LOCAL_RETENTION_S),
        )
        for segment in expired:
            done["deleted"] += delete_local(segment)
    log.info("archive.sweep %s", done)
    return done


@app.task(name="infer_archive.tasks.sweep_segments")
def sweep_segments() -> dict:
    """Celery (beat): the sweep."""
    return sweep()
