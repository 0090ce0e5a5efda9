"""Segment files: the record format, reading one record back, checking and recovering a file.

A segment is a multi-member gzip file: each record is one complete gzip member whose content is
a JSON header line (the row's facts, the two body lengths) followed by the request and response
bytes exactly as they passed, so `zcat SEGMENT` prints every record in order, and one record is
read back with one range read (the row's offset and length) and one decompress.
The gzip trailer's CRC-32 catches a damaged member; the segment's sha256 catches the rest.
"""

import base64
import hashlib
import json
import os
import re
import secrets
import socket
import zlib
from datetime import datetime, timezone as dt_timezone
from pathlib import Path

from django.conf import settings

from . import storage
from .models import InferRecord, Segment

FORMAT_VERSION = 1


class ArchiveReadError(Exception):
    """A record's content cannot be served; `reason` says why (missing, corrupt, unavailable)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class CorruptRecord(ArchiveReadError):
    def __init__(self, message: str):
        super().__init__("corrupt", message)


def archive_dir() -> Path:
    path = Path(settings.ARCHIVE_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_segment_name(now: datetime | None = None) -> str:
    """`20261129T221500Z-host-pid-a1b2c3.jsonl.gz`: sortable by time, unique across processes and hosts."""
    now = now or datetime.now(dt_timezone.utc)
    host = re.sub(r"[^A-Za-z0-9]+", "", socket.gethostname())[:20] or "host"
    return f"{now:%Y%m%dT%H%M%SZ}-{host}-{os.getpid()}-{secrets.token_hex(3)}.jsonl.gz"


def object_key(name: str) -> str:
    """The segment's object key: fixed by its name, so uploading twice writes the same object."""
    return f"segments/{name[0:4]}/{name[4:6]}/{name[6:8]}/{name}"


def local_path(name: str) -> Path:
    return Path(settings.ARCHIVE_DIR) / name


def _text_or_b64(prefix: str, data: bytes) -> dict:
    try:
        return {prefix: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {prefix + "_b64": base64.b64encode(data).decode("ascii")}


ROW_FIELDS = ("status", "http_status", "path", "model", "route", "lane", "dialect", "stream", "prompt_tokens",
              "completion_tokens", "cached_tokens", "ttft_ms", "duration_ms", "error", "api_key_id", "started_at",
              "finished_at")


def record_header(record, record_id) -> dict:
    """The row's facts, so a segment explains itself without the database.

    `record` is the InferRecord, or a dict of its ROW_FIELDS, or None (row not found)."""
    header = {"v": FORMAT_VERSION, "id": str(record_id)}
    if record is not None:
        get = record.get if isinstance(record, dict) else (lambda name: getattr(record, name))
        for name in ROW_FIELDS:
            value = get(name)
            header[name] = value.isoformat() if hasattr(value, "isoformat") else value
    return header


def encode_member(header: dict, request: bytes, response: bytes, level: int = 1) -> bytes:
    """One gzip member: a JSON header line, then the request and response bytes exactly as they passed.

    The header carries both lengths; the bodies are not re-encoded (no JSON escaping, no base64), so
    writing costs one small json.dumps and one deflate, and reading gives back the very bytes.
    """
    head = dict(header, request_bytes=len(request), response_bytes=len(response))
    data = json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.compress(request) + compressor.compress(response) + compressor.flush()


def decode_member(blob: bytes) -> dict:
    """The header of one gzip member, with `request` and `response` as bytes; CorruptRecord unless the bytes
    are exactly one intact member of this format."""
    d = zlib.decompressobj(31)
    try:
        data = d.decompress(blob) + d.flush()
    except zlib.error as exc:
        raise CorruptRecord(f"the record's gzip member is damaged ({exc})") from None
    if not d.eof or d.unused_data:
        raise CorruptRecord("the record's bytes are not one complete gzip member")
    head, _, bodies = data.partition(b"\n")
    try:
        doc = json.loads(head)
        n_req, n_resp = int(doc["request_bytes"]), int(doc["response_bytes"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRecord(f"the record's header is not valid ({exc})") from None
    if len(bodies) != n_req + n_resp:
        raise CorruptRecord("the record's length does not match its header")
    doc["request"], doc["response"] = bodies[:n_req], bodies[n_req:]
    return doc


def body_bytes(doc: dict, part: str) -> bytes:
    """The request or response body of a decoded record, as the bytes that passed."""
    return doc.get(part, b"")


def document(doc: dict) -> dict:
    """A decoded record as JSON-ready data: bodies as text (or base64 when not UTF-8)."""
    out = {k: v for k, v in doc.items() if k not in ("request", "response")}
    out.update(_text_or_b64("request", doc.get("request", b"")))
    out.update(_text_or_b64("response", doc.get("response", b"")))
    return out


def scan(path: Path) -> tuple[list[tuple[int, int]], int]:
    """Walk a segment member by member: the intact members' (offset, length), and where intact data ends."""
    data = Path(path).read_bytes()
    members, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(31)
        try:
            d.decompress(data[pos:])
            d.flush()
        except zlib.error:
            break
        if not d.eof:
            break  # a member cut short (a crash mid-write)
        length = len(data) - pos - len(d.unused_data)
        members.append((pos, length))
        pos += length
    return members, pos


def file_digests(path: Path) -> tuple[str, str, int]:
    """sha256 and md5 (hex) and size of a file."""
    sha, md5, size = hashlib.sha256(), hashlib.md5(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
            md5.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), md5.hexdigest(), size


def verify_local(segment: Segment) -> bool | None:
    """Does the local file still match the sha256 taken when it closed? None: no local file or not closed."""
    path = local_path(segment.name)
    if not segment.sha256 or not path.exists():
        return None
    return file_digests(path)[0] == segment.sha256


def mark_corrupt(segment: Segment, why: str):
    Segment.objects.filter(pk=segment.pk).exclude(status=Segment.Status.UPLOADED).update(
        status=Segment.Status.CORRUPT, last_error=why[:2000]
    )


def read_member(record: InferRecord) -> bytes:
    """The record's gzip member: from the local file when it is there and intact, else a range GET from MinIO."""
    if not record.segment or record.offset is None or not record.length:
        raise ArchiveReadError("missing", "this record has no archived content (archive off, or not written yet)")
    segment = Segment.objects.filter(name=record.segment).first()
    path = local_path(record.segment)
    local_error = None
    if path.exists():
        with open(path, "rb") as f:
            f.seek(record.offset)
            blob = f.read(record.length)
        try:
            decode_member(blob)
            if segment is not None and segment.status == Segment.Status.CORRUPT:
                raise CorruptRecord(f"segment {record.segment} failed its checksum: {segment.last_error}")
            return blob
        except CorruptRecord as exc:
            local_error = exc
    if segment is not None and segment.status == Segment.Status.UPLOADED and storage.configured():
        try:
            blob = storage.read_range(segment.object_key or object_key(segment.name), record.offset, record.length)
        except storage.TRANSIENT as exc:
            raise ArchiveReadError("unavailable", f"MinIO is not reachable ({exc.__class__.__name__})") from None
        except Exception as exc:  # S3Error and the like
            raise ArchiveReadError("unavailable", f"MinIO could not serve the record ({exc})") from None
        decode_member(blob)  # CorruptRecord if even the verified copy is damaged
        return blob
    if local_error is not None:
        if segment is not None and segment.status == Segment.Status.CLOSED:
            mark_corrupt(segment, f"record {record.pk} at offset {record.offset}: {local_error}")
        raise local_error
    raise ArchiveReadError("missing", f"segment {record.segment} is neither on local disk nor uploaded")


def read_record(record: InferRecord) -> dict:
    """The record's archived document (see `record_document`), checked."""
    return decode_member(read_member(record))
