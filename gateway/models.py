"""Gateway state that must survive a restart: model routes and API keys."""

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

KEY_PREFIX = "sk-strata-"


def hash_key(raw_key: str) -> str:
    """The stored form of an API key: SHA-256 hex (keys are long random tokens, so no salt is needed)."""
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ModelRoute(models.Model):
    """Where a request's `model` goes: one of our lanes, or an external upstream URL."""

    model_name = models.CharField(max_length=200, unique=True)
    lane = models.ForeignKey("lanes.Lane", null=True, blank=True, on_delete=models.PROTECT)
    upstream_url = models.URLField(blank=True, help_text="An OpenAI/Anthropic-compatible base URL, used when no lane is set.")
    upstream_key = models.CharField(max_length=500, blank=True, help_text="Sent to the upstream URL; never to clients.")
    is_default = models.BooleanField(default=False, help_text="Takes models with no route of their own.")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["model_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True), name="one_default_route"
            )
        ]

    def __str__(self):
        return f"{self.model_name} -> {self.lane or self.upstream_url}"

    def clean(self):
        from django.core.exceptions import ValidationError

        if not self.lane_id and not self.upstream_url:
            raise ValidationError("A route needs a lane or an upstream URL.")
        if self.lane_id and self.upstream_url:
            raise ValidationError("A route goes to a lane or to an upstream URL, not both.")


class ApiKeyManager(models.Manager):
    def issue(self, name: str, user=None) -> tuple["ApiKey", str]:
        """Create a key; returns the row and the raw key, which is shown once and never stored."""
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        key = self.create(name=name, user=user, prefix=raw[: len(KEY_PREFIX) + 6], key_hash=hash_key(raw))
        return key, raw


class ApiKey(models.Model):
    """A client's API key, stored hashed; `prefix` lets an operator recognise it."""

    name = models.CharField(max_length=200)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    prefix = models.CharField(max_length=32, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyManager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self):
        return f"{self.name} ({self.prefix}...)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
