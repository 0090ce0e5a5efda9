"""Seed the two default lanes of the embedded set-up: fast (:8091) and normal (:8092)."""

from django.db import migrations

DEFAULT_LANES = [
    {"name": "fast", "port": 8091, "slots": 4},
    {"name": "normal", "port": 8092, "slots": 4},
]


def seed(apps, schema_editor):
    Lane = apps.get_model("lanes", "Lane")
    for fields in DEFAULT_LANES:
        Lane.objects.get_or_create(name=fields["name"], defaults=fields)


def unseed(apps, schema_editor):
    apps.get_model("lanes", "Lane").objects.filter(name__in=[f["name"] for f in DEFAULT_LANES]).delete()


class Migration(migrations.Migration):
    dependencies = [("lanes", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
