"""`manage.py runlane NAME`: serve one lane on loopback, with its engine as a child process."""

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from lanes.config import LaneRuntime
from lanes.models import Lane
from lanes.server import LaneApp


class Command(BaseCommand):
    help = "Serve one lane (OpenAI/Anthropic endpoints for the gateway) on 127.0.0.1."

    def add_arguments(self, parser):
        parser.add_argument("name", help="The lane's name (lanes.Lane).")
        parser.add_argument("--port", type=int, help="Override the lane's port.")
        parser.add_argument("--host", default=settings.STRATA_LANE_HOST)

    def handle(self, *args, name, port=None, host, **options):
        try:
            lane = Lane.objects.get(name=name)
        except Lane.DoesNotExist:
            raise CommandError(f"no lane named {name!r}; lanes: {', '.join(Lane.objects.values_list('name', flat=True))}")
        runtime = LaneRuntime.build(
            lane, settings.STRATA_LANE_KEY, model_file=settings.STRATA_MODEL_FILE, threads=settings.STRATA_ENGINE_THREADS
        )
        port = port or lane.port
        self.stdout.write(f"lane {name} on http://{host}:{port}")
        uvicorn.run(LaneApp(runtime), host=host, port=port, lifespan="on", log_level="warning", access_log=False)
