from django.apps import AppConfig


class LanesConfig(AppConfig):
    name = "lanes"
    verbose_name = "Lanes"
