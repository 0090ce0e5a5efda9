"""`manage.py rungateway`: mark rows a crash left running as interrupted, then serve the gateway with daphne."""

import os

from daphne.cli import CommandLineInterface
from django.core.management.base import BaseCommand

from infer_archive.live import mark_interrupted


class Command(BaseCommand):
    help = "Serve the public gateway (daphne, stratasite.asgi:application)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="0.0.0.0")
        parser.add_argument("--port", type=int, default=int(os.environ.get("STRATA_PORT", "8080")))

    def handle(self, *args, host, port, **options):
        interrupted = mark_interrupted()
        if interrupted:
            self.stderr.write(f"marked {interrupted} request(s) left running by the last stop as interrupted")
        self.stdout.write(f"gateway on http://{host}:{port}")
        CommandLineInterface().run(["--bind", host, "--port", str(port), "--verbosity", "0", "stratasite.asgi:application"])
