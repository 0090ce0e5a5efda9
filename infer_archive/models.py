"""One row per request through the gateway, written when it starts and completed when it ends."""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class InferRecord(models.Model):
    """The index entry of one request (SPEC section 5)."""

    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        ERROR = "error"
        REJECTED = "rejected"
        DISCONNECTED = "disconnected"
        INTERRUPTED = "interrupted"

    class Dialect(models.TextChoices):
        OPENAI = "openai"
        ANTHROPIC = "anthropic"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING, db_index=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    path = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True, db_index=True)
    route = models.CharField(max_length=200, blank=True)
    lane = models.CharField(max_length=50, blank=True, db_index=True)
    api_key = models.ForeignKey("gateway.ApiKey", null=True, blank=True, on_delete=models.SET_NULL)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    dialect = models.CharField(max_length=16, choices=Dialect.choices, blank=True)
    stream = models.BooleanField(default=False)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    ttft_ms = models.FloatField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    # Where the full content lies (filled by the archive writer): one gzip member.
    segment = models.CharField(max_length=200, blank=True)
    offset = models.BigIntegerField(null=True, blank=True)
    length = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self):
        return f"{self.started_at:%Y-%m-%d %H:%M:%S} {self.model} {self.status}"


class Segment(models.Model):
    """One segment file of the archive: gzip members, one per record, appended until it rotates.

    Life: open (being written) -> closed (sha256 known, waiting for upload) -> uploaded
    (object verified in MinIO); `corrupt` when the local file no longer matches its sha256.
    The local file is deleted only after a verified upload and the retention delay.
    """

    class Status(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"
        UPLOADED = "uploaded"
        CORRUPT = "corrupt"

    name = models.CharField(max_length=200, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN, db_index=True)
    opened_at = models.DateTimeField(default=timezone.now, db_index=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    size = models.BigIntegerField(default=0)
    records = models.PositiveIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    md5 = models.CharField(max_length=32, blank=True, help_text="What the object store's ETag must equal.")
    object_key = models.CharField(max_length=300, blank=True)
    upload_attempts = models.PositiveIntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    uploaded_at = models.DateTimeField(null=True, blank=True)
    uploads_marked = models.PositiveIntegerField(default=0, help_text="Times a verified upload was recorded (must be 1).")
    etag = models.CharField(max_length=100, blank=True)
    local_deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]

    def __str__(self):
        return self.name
