from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "Gateway"

    def ready(self):
        # Routes, lanes and keys are cached by the gateway: any save or delete drops the cache
        # (here at once, in other processes on this host through the stamp file; gateway.config).
        from lanes.models import Lane

        from .config import changed
        from .models import ApiKey, ModelRoute

        for model in (ModelRoute, ApiKey, Lane):
            post_save.connect(changed, sender=model, dispatch_uid=f"gateway.config.{model.__name__}.save")
            post_delete.connect(changed, sender=model, dispatch_uid=f"gateway.config.{model.__name__}.delete")
