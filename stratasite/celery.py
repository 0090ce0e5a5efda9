"""The Celery app (`celery -A stratasite worker`): archive uploads and segment rotation."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stratasite.settings")

app = Celery("stratasite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
