"""`manage.py create_api_key --name NAME`: issue a key; the raw key is the last line printed."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from gateway.models import ApiKey


class Command(BaseCommand):
    help = "Create an API key. The key is printed once, alone on the last line; only its hash is stored."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True, help="A label for the key (who or what uses it).")
        parser.add_argument("--user", help="Username to attach the key to (optional).")

    def handle(self, *args, name, user=None, **options):
        owner = None
        if user:
            try:
                owner = get_user_model().objects.get(username=user)
            except get_user_model().DoesNotExist:
                raise CommandError(f"no such user: {user}")
        key, raw = ApiKey.objects.issue(name=name, user=owner)
        self.stderr.write(f"created API key {key.name!r} ({key.prefix}...); it is shown once:")
        self.stdout.write(raw)
