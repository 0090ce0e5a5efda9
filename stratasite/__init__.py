"""The Strata Django project: settings, ASGI entry point, URLs and the Celery app."""
