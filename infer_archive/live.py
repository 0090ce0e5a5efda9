"""The live side of the archive: what is in flight now, and the rows that record it.

Every request gets an in-process entry the moment it is opened (what /concurrency shows)
and an InferRecord row (status running) that is completed when it ends. The row writes
leave the request path: they are queued and one writer thread commits whatever has queued
up in one transaction, so a request never waits for the database (or its fsync) and many
concurrent requests share a commit. A row is in the database a few milliseconds after its
request started; `flush()` waits for everything queued so far.

If the process dies, rows still `running` are marked `interrupted` at the next start
(`mark_interrupted`, called by `rungateway`); writes still queued at that moment are lost.
"""

import atexit
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from .models import InferRecord

log = logging.getLogger("strata.archive")


@dataclass
class Entry:
    """One request in flight, as /concurrency shows it."""

    id: uuid.UUID
    model: str
    key: str
    path: str
    dialect: str
    stream: bool
    started: float = field(default_factory=time.monotonic)
    lane: str = ""
    route: str = ""
    state: str = "gates"  # gates -> waiting (sent upstream) -> streaming
    completion_tokens: int = 0  # live: content chunks seen so far; exact once usage arrived

    def as_json(self) -> dict:
        return {
            "id": str(self.id), "model": self.model, "route": self.route, "lane": self.lane, "key": self.key,
            "path": self.path, "dialect": self.dialect, "stream": self.stream, "state": self.state,
            "age_s": round(time.monotonic() - self.started, 3), "completion_tokens": self.completion_tokens,
        }


in_flight: dict[uuid.UUID, Entry] = {}


# -- the writer --------------------------------------------------------------------------------

_OPEN, _CLOSE, _TOUCH, _FLUSH = "open", "close", "touch", "flush"


class _Writer:
    """One daemon thread that commits queued row writes in batches, in the order queued."""

    def __init__(self):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def put(self, item):
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self._run, name="strata-archive-writer", daemon=True)
                    self.thread.start()
        self.queue.put(item)

    def _run(self):
        while True:
            batch = [self.queue.get()]
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            waiters = [item[1] for item in batch if item[0] == _FLUSH]
            writes = [item for item in batch if item[0] != _FLUSH]
            if writes:
                self._write(writes)
            for done in waiters:
                done.set()

    def _write(self, items):
        try:
            self._commit(items)
        except Exception:
            log.exception("archive.batch_failed rows=%d; retrying one by one", len(items))
            close_old_connections()
            connection.close()
            for item in items:
                try:
                    self._commit([item])
                except Exception:
                    log.exception("archive.write_failed op=%s", item[0])

    @staticmethod
    def _commit(items):
        from gateway.models import ApiKey

        with transaction.atomic():
            opens = [InferRecord(**item[1]) for item in items if item[0] == _OPEN]
            if opens:
                InferRecord.objects.bulk_create(opens)
            for op, *args in items:
                if op == _CLOSE:
                    InferRecord.objects.filter(pk=args[0]).update(**args[1])
                elif op == _TOUCH:
                    ApiKey.objects.filter(pk=args[0]).update(last_used=args[1])

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued before this call is committed."""
        if self.thread is None:
            return True
        done = threading.Event()
        self.queue.put((_FLUSH, done))
        return done.wait(timeout)


_writer = _Writer()
atexit.register(_writer.flush, 5.0)


def flush(timeout: float = 30.0) -> bool:
    """Block until the queued row writes are committed (tests, shutdown)."""
    return _writer.flush(timeout)


async def aflush(timeout: float = 30.0) -> bool:
    import asyncio

    return await asyncio.to_thread(_writer.flush, timeout)


# -- the API the gateway uses -----------------------------------------------------------------


def open_record(*, started_at: datetime, path: str, model: str, api_key_id=None, key_name: str = "",
                user_id=None, dialect: str = "", stream: bool = False) -> Entry:
    """A request has started: its in-flight entry now, its row (status running) queued."""
    record_id = uuid.uuid4()
    entry = Entry(record_id, model[:200], key_name, path, dialect, stream)
    in_flight[record_id] = entry
    _writer.put((_OPEN, {
        "id": record_id, "started_at": started_at, "path": path[:100], "model": model[:200],
        "api_key_id": api_key_id, "user_id": user_id, "dialect": dialect, "stream": stream,
    }))
    return entry


def close_record(record_id, started_at: datetime, **fields):
    """A request has ended: drop its entry, queue the row's completion (status, tokens, timings)."""
    in_flight.pop(record_id, None)
    now = timezone.now()
    fields.setdefault("duration_ms", (now - started_at).total_seconds() * 1000)
    fields["finished_at"] = now
    _writer.put((_CLOSE, record_id, fields))


def touch_key(key_id: int, when: datetime):
    """Queue an ApiKey.last_used write."""
    _writer.put((_TOUCH, key_id, when))


def mark_interrupted() -> int:
    """Rows still running when the gateway starts were cut off by a crash: mark them interrupted."""
    return InferRecord.objects.filter(status=InferRecord.Status.RUNNING).update(
        status=InferRecord.Status.INTERRUPTED, finished_at=timezone.now()
    )
