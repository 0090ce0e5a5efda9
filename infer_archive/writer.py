"""The archive writer: one thread per process appends records to the current segment, off the event loop.

`append()` only puts the record on a queue and returns, so the gateway's stream never waits
on the disk, gzip or the database. The thread takes what is queued in batches (it lets records
gather for up to GATHER_S first: group commit): one gzip member per record appended to the
segment file, then one transaction that fills the rows' segment, offset and length. A segment rotates when the next member would pass
ARCHIVE_SEGMENT_MAX_BYTES or when it is ARCHIVE_SEGMENT_MAX_AGE_S old (checked on a timer
too, so a quiet gateway still closes it); a closed segment gets its sha256 and is handed to
the upload task. Without Redis (tasks eager) this thread also runs the sweep now and then.
"""

import atexit
import hashlib
import logging
import os
import queue
import threading
import time
import uuid

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from . import live, segments
from .models import InferRecord, Segment

log = logging.getLogger("strata.archive")

_ROTATE, _STOP = object(), object()
BATCH = 256
UNINDEXED_GIVE_UP_S = 120.0
GATHER_S = 0.5
ROW_FIELDS = ("id", *segments.ROW_FIELDS)


def _key(record_id) -> uuid.UUID:
    return record_id if isinstance(record_id, uuid.UUID) else uuid.UUID(str(record_id))


def _index_sql() -> str:
    """One statement for executemany: point a row at its member (cheaper than an ORM update per row)."""
    q = connection.ops.quote_name
    return (f"UPDATE {q(InferRecord._meta.db_table)} SET {q('segment')} = %s, {q('offset')} = %s, "
            f"{q('length')} = %s WHERE {q('id')} = %s")


class _OpenSegment:
    """The segment being written: its file, running digests and size."""

    def __init__(self):
        self.name = segments.new_segment_name()
        self.path = segments.archive_dir() / self.name
        self.row = Segment.objects.create(name=self.name, object_key=segments.object_key(self.name))
        self.file = open(self.path, "ab")
        self.sha, self.md5 = hashlib.sha256(), hashlib.md5()
        self.size, self.records = 0, 0
        self.opened = time.monotonic()

    def write(self, member: bytes) -> int:
        offset = self.size
        self.file.write(member)
        self.sha.update(member)
        self.md5.update(member)
        self.size += len(member)
        self.records += 1
        return offset

    def close(self) -> Segment:
        self.file.flush()
        try:
            os.fsync(self.file.fileno())
        finally:
            self.file.close()
        Segment.objects.filter(pk=self.row.pk).update(
            status=Segment.Status.CLOSED, closed_at=timezone.now(), size=self.size, records=self.records,
            sha256=self.sha.hexdigest(), md5=self.md5.hexdigest(),
        )
        return self.row


class ArchiveWriter:
    """A queue and the thread that drains it into segment files."""

    def __init__(self):
        self.queue: queue.Queue = queue.Queue()
        self.current: _OpenSegment | None = None
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.last_sweep = time.monotonic()
        self.written = 0
        self.unindexed: list = []  # ((record_id, segment, offset, length), since): rows not there yet
        self.hurry = threading.Event()  # set: write what is queued now, without the gathering pause

    # --- called from any thread (the event loop included): never blocks on I/O ---

    def append(self, record_id, request: bytes, response: bytes):
        self._ensure_thread()
        self.queue.put((record_id, bytes(request or b""), bytes(response or b"")))

    def rotate(self):
        """Close the current segment now (it is then uploaded)."""
        self._ensure_thread()
        self.queue.put(_ROTATE)
        self.hurry.set()

    def flush(self, timeout: float = 60) -> bool:
        """Wait until everything appended so far is written and indexed; False on timeout."""
        if self.thread is None:
            return True
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks:
            self.hurry.set()  # no gathering pause while someone waits
            if time.monotonic() > deadline or not self.thread.is_alive():
                return False
            time.sleep(0.005)
        return True

    def stop(self, timeout: float = 30):
        """Write what is queued, close the current segment (the sweep uploads it) and end the thread."""
        with self.lock:
            thread = self.thread
            if thread is None or not thread.is_alive():
                return
            self.queue.put(_STOP)
            self.hurry.set()
        thread.join(timeout)
        self.thread = None

    def _ensure_thread(self):
        if self.thread is None or not self.thread.is_alive():
            with self.lock:
                if self.thread is None or not self.thread.is_alive():
                    self.thread = threading.Thread(target=self._run, name="strata-archive-segments", daemon=True)
                    self.thread.start()

    # --- the writer thread ---

    def _tick(self) -> float:
        return max(0.05, min(5.0, settings.ARCHIVE_SEGMENT_MAX_AGE_S / 4))

    def _run(self):
        stopping = False
        while not stopping:
            try:
                first = self.queue.get(timeout=self._tick())
            except queue.Empty:
                first = None
            items = [] if first is None else [first]
            if first is not None:
                # Group commit: let records gather for a moment (flush/rotate/stop cut it short), so a
                # busy gateway pays one wake-up, one file flush and one transaction for many records.
                if self.queue.qsize() < BATCH and first not in (_ROTATE, _STOP):
                    self.hurry.wait(GATHER_S)
                self.hurry.clear()
                while len(items) < BATCH:
                    try:
                        items.append(self.queue.get_nowait())
                    except queue.Empty:
                        break
            try:
                close_old_connections()
                stopping = self._handle(items)
                self._maintain()
            except Exception:
                log.exception("archive.writer_failed items=%d", len(items))
            finally:
                for _ in items:
                    self.queue.task_done()
        close_old_connections()

    def _handle(self, items) -> bool:
        records, stopping = [], False
        for item in items:
            if item is _ROTATE or item is _STOP:
                self._write(records)
                records = []
                self._close_current(upload=item is _ROTATE)
                stopping = stopping or item is _STOP
            else:
                records.append(item)
        self._write(records)
        return stopping

    def _write(self, records):
        if not records:
            self._index([])
            return
        # The rows' own writes (infer_archive.live) are queued too: let them land first, so the
        # member carries the final status and the index update finds its row.
        flush_rows = getattr(live, "flush", None)
        if flush_rows is not None:
            flush_rows(30)
        rows = {_key(r["id"]): r for r in InferRecord.objects.filter(pk__in=[r[0] for r in records]).values(*ROW_FIELDS)}
        level = settings.ARCHIVE_GZIP_LEVEL
        placed = []
        for record_id, request, response in records:
            member = segments.encode_member(segments.record_header(rows.get(_key(record_id)), record_id),
                                            request, response, level)
            seg = self._segment_for(len(member))
            placed.append((record_id, seg.name, seg.write(member), len(member)))
        self.current.file.flush()
        self._index(placed, known=set(rows))

    def _index(self, placed, known: set = frozenset()):
        """Point the rows at their members (the content is in the file before any row points at it).

        A row not in the database yet (its own write still queued elsewhere) is tried again on the
        next rounds for a while; the member itself is kept either way and names its record id.
        """
        now = time.monotonic()
        todo = [(p, now) for p in placed] + self.unindexed
        self.unindexed = []
        if not todo:
            return
        pk = InferRecord._meta.pk
        with transaction.atomic():
            there = set(known)  # rows just read for the headers exist; look up only the others
            others = [p[0] for p, _ in todo if _key(p[0]) not in there]
            if others:
                there.update(_key(i) for i in InferRecord.objects.filter(pk__in=others).values_list("pk", flat=True))
            params = []
            for (record_id, name, offset, length), since in todo:
                if _key(record_id) in there:
                    params.append((name, offset, length, pk.get_db_prep_value(record_id, connection)))
                elif now - since < UNINDEXED_GIVE_UP_S:
                    self.unindexed.append(((record_id, name, offset, length), since))
                else:
                    log.warning("archive.row_missing record=%s segment=%s offset=%d", record_id, name, offset)
            if params:
                with connection.cursor() as cursor:
                    cursor.executemany(_index_sql(), params)
                self.written += len(params)

    def _segment_for(self, member_size: int) -> _OpenSegment:
        seg = self.current
        if seg is not None and seg.records and (
            seg.size + member_size > settings.ARCHIVE_SEGMENT_MAX_BYTES
            or time.monotonic() - seg.opened >= settings.ARCHIVE_SEGMENT_MAX_AGE_S
        ):
            self.current.file.flush()
            self._close_current(upload=True)
            seg = None
        if seg is None:
            seg = self.current = _OpenSegment()
        return seg

    def _close_current(self, upload: bool):
        seg, self.current = self.current, None
        if seg is None:
            return
        row = seg.close()
        log.info("archive.segment_closed name=%s size=%d records=%d", seg.name, seg.size, seg.records)
        if upload:
            queue_upload(row.pk)

    def _maintain(self):
        seg = self.current
        if seg is not None and time.monotonic() - seg.opened >= settings.ARCHIVE_SEGMENT_MAX_AGE_S:
            self._close_current(upload=True)
        if settings.CELERY_TASK_ALWAYS_EAGER and time.monotonic() - self.last_sweep >= settings.ARCHIVE_SWEEP_INTERVAL_S:
            self.last_sweep = time.monotonic()
            from .tasks import sweep

            sweep(exclude=self.current.name if self.current else None)


def queue_upload(segment_id: int):
    """Hand a closed segment to the upload task; if the broker is down the sweep will do it later."""
    from .tasks import upload_segment

    try:
        upload_segment.delay(segment_id)
    except Exception as exc:
        log.warning("archive.upload_not_queued segment=%s error=%r", segment_id, exc)


_writer = ArchiveWriter()


def writer() -> ArchiveWriter:
    return _writer


def append(record_id, request: bytes, response: bytes):
    """Archive one finished request: returns at once; the writer thread does the work. Never raises."""
    if not settings.STRATA_ARCHIVE_ENABLED or record_id is None:
        return
    try:
        _writer.append(record_id, request, response)
    except Exception:
        log.exception("archive.append_failed record=%s", record_id)


def flush(timeout: float = 60) -> bool:
    return _writer.flush(timeout)


def rotate():
    _writer.rotate()


atexit.register(_writer.stop)
