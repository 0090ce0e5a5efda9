"""`manage.py api_keys list | create --name NAME [--user U] [--staff] | revoke NAME_OR_PREFIX...`: the API keys."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q
from django.utils import timezone

from gateway.config import bump
from gateway.models import ApiKey


class Command(BaseCommand):
    help = "List, create or revoke API keys. A created key is printed once, alone on the last line."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="Every key: name, prefix, user, created, last used, revoked.")
        create = sub.add_parser("create", help="Issue a key; only its hash is stored.")
        create.add_argument("--name", required=True, help="A label for the key (who or what uses it).")
        create.add_argument("--user", help="Username to attach the key to (optional).")
        create.add_argument("--staff", action="store_true",
                            help="A staff key (management API): attached to --user, which must be staff, or else "
                                 "to a new staff user 'apikey-NAME' that cannot log in with a password.")
        revoke = sub.add_parser("revoke", help="Revoke keys by name or by prefix (sk-strata-xxxxxx).")
        revoke.add_argument("keys", nargs="+")

    def handle(self, *args, action, **options):
        getattr(self, f"do_{action}")(**options)

    def do_list(self, **options):
        for key in ApiKey.objects.select_related("user"):
            fields = [key.name, key.prefix + "...", key.user.get_username() if key.user else "-",
                      f"created {key.created_at:%Y-%m-%d %H:%M}",
                      f"last used {key.last_used:%Y-%m-%d %H:%M}" if key.last_used else "never used",
                      f"REVOKED {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"]
            self.stdout.write("\t".join(fields))

    def do_create(self, name, user=None, staff=False, **options):
        owner = None
        if user:
            try:
                owner = get_user_model().objects.get(username=user)
            except get_user_model().DoesNotExist:
                raise CommandError(f"no such user: {user}")
            if staff and not owner.is_staff:
                raise CommandError(f"user {user} is not staff; make them staff in admin first")
        elif staff:
            owner, created = get_user_model().objects.get_or_create(username=f"apikey-{name}", defaults={"is_staff": True})
            if created:
                owner.set_unusable_password()
                owner.save()
            elif not owner.is_staff:
                raise CommandError(f"user apikey-{name} exists and is not staff")
        key, raw = ApiKey.objects.issue(name=name, user=owner)
        self.stderr.write(f"created API key {key.name!r} ({key.prefix}...); it is shown once:")
        self.stdout.write(raw)

    def do_revoke(self, keys, **options):
        query = Q()
        for given in keys:
            query |= Q(name=given) | Q(prefix=given.rstrip(".")) if given.startswith("sk-") else Q(name=given)
        matched = ApiKey.objects.filter(query, revoked_at__isnull=True)
        count = matched.update(revoked_at=timezone.now())
        bump()  # a bulk update sends no signal: tell the gateway's cache directly
        if not count:
            raise CommandError(f"no active key matches {' '.join(keys)}")
        self.stdout.write(f"revoked {count} key(s)")
