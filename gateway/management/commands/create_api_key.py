"""`manage.py create_api_key --name NAME`: issue a key; the raw key is the last line printed.

The same as `manage.py api_keys create`; `api_keys list` and `api_keys revoke` do the rest.
"""

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create an API key. The key is printed once, alone on the last line; only its hash is stored."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True, help="A label for the key (who or what uses it).")
        parser.add_argument("--user", help="Username to attach the key to (optional).")
        parser.add_argument("--staff", action="store_true", help="A staff key for the management API (/api/).")

    def handle(self, *args, name, user=None, staff=False, **options):
        call_command("api_keys", "create", "--name", name, *(["--user", user] if user else []),
                     *(["--staff"] if staff else []), stdout=self.stdout, stderr=self.stderr)
