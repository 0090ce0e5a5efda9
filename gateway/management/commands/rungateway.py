"""`manage.py rungateway`: mark rows a crash left running as interrupted, then serve the gateway with daphne."""

import os

from daphne.cli import CommandLineInterface
from django.core.management.base import BaseCommand

from infer_archive.live import mark_interrupted


def use_wal():
    """SQLite: write-ahead log, so the archive's writes never block a reader (a key or route read on a
    request's path) and a commit costs one fsync. The mode is kept in the database file, for every process."""
    from django.db import OperationalError, connection

    if connection.vendor == "sqlite":
        try:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA journal_mode=WAL")
        except OperationalError:
            pass  # another process holds a lock now; the next start tries again
        connection.close()


def fast_json_content_type():
    """Twisted parses every request's Content-Type with the email package (tens of microseconds) only to
    find form posts; a JSON body, every API request, is told apart by a split instead."""
    from twisted.web import http

    parse = http._parseContentType
    if getattr(parse, "strata_fast", False):
        return

    def parse_content_type(line: bytes) -> bytes:
        key = line.split(b";", 1)[0].strip().lower()
        return key if key == b"application/json" else parse(line)

    parse_content_type.strata_fast = True
    http._parseContentType = parse_content_type


class Command(BaseCommand):
    help = "Serve the public gateway (daphne, stratasite.asgi:application)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="0.0.0.0")
        parser.add_argument("--port", type=int, default=int(os.environ.get("STRATA_PORT", "8080")))

    def handle(self, *args, host, port, **options):
        use_wal()
        fast_json_content_type()
        interrupted = mark_interrupted()
        if interrupted:
            self.stderr.write(f"marked {interrupted} request(s) left running by the last stop as interrupted")
        self.stdout.write(f"gateway on http://{host}:{port}")
        CommandLineInterface().run(["--bind", host, "--port", str(port), "--verbosity", "0", "stratasite.asgi:application"])
