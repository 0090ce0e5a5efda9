"""The live side of the archive: a row when a request starts, completed when it ends."""

from django.utils import timezone

from .models import InferRecord


async def open_record(**fields) -> InferRecord:
    """Write the row of a request that has just started (status running)."""
    return await InferRecord.objects.acreate(**fields)


async def close_record(record_id, started_at, **fields):
    """Complete a request's row: status, tokens, timings (duration from `started_at`)."""
    now = timezone.now()
    fields.setdefault("duration_ms", (now - started_at).total_seconds() * 1000)
    await InferRecord.objects.filter(pk=record_id).aupdate(finished_at=now, **fields)


def mark_interrupted() -> int:
    """Rows still running when the gateway starts were cut off by a crash: mark them interrupted."""
    return InferRecord.objects.filter(status=InferRecord.Status.RUNNING).update(
        status=InferRecord.Status.INTERRUPTED, finished_at=timezone.now()
    )
