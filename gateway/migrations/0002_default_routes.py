"""Seed the default routes: strata-fast -> fast lane, strata -> normal lane (the default)."""

from django.db import migrations

DEFAULT_ROUTES = [
    {"model_name": "strata-fast", "lane": "fast", "is_default": False},
    {"model_name": "strata", "lane": "normal", "is_default": True},
]


def seed(apps, schema_editor):
    Lane = apps.get_model("lanes", "Lane")
    ModelRoute = apps.get_model("gateway", "ModelRoute")
    for fields in DEFAULT_ROUTES:
        lane = Lane.objects.filter(name=fields["lane"]).first()
        if lane:
            ModelRoute.objects.get_or_create(
                model_name=fields["model_name"], defaults={"lane": lane, "is_default": fields["is_default"]}
            )


def unseed(apps, schema_editor):
    apps.get_model("gateway", "ModelRoute").objects.filter(model_name__in=[r["model_name"] for r in DEFAULT_ROUTES]).delete()


class Migration(migrations.Migration):
    dependencies = [("gateway", "0001_initial"), ("lanes", "0002_default_lanes")]
    operations = [migrations.RunPython(seed, unseed)]
