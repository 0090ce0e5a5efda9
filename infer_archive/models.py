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
