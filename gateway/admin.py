from django.contrib import admin, messages
from django.utils import timezone

from .config import bump
from .models import ApiKey, ModelRoute


@admin.register(ModelRoute)
class ModelRouteAdmin(admin.ModelAdmin):
    list_display = ("model_name", "lane", "upstream_url", "is_default", "enabled")
    list_editable = ("enabled",)
    list_filter = ("enabled", "is_default", "lane")
    search_fields = ("model_name",)


@admin.display(boolean=True, description="active")
def _is_active(obj):
    return obj.is_active


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "user", "created_at", "last_used", "revoked_at", _is_active)
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used")
    fields = ("name", "user", "prefix", "created_at", "last_used", "revoked_at")
    actions = ["revoke"]

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        # A new key: generate it and show the raw value once; only its hash is stored.
        key, raw = ApiKey.objects.issue(name=obj.name, user=obj.user)
        obj.pk, obj.prefix, obj.key_hash, obj.created_at = key.pk, key.prefix, key.key_hash, key.created_at
        obj._state.adding = False
        messages.warning(request, f"New API key (shown once, copy it now): {raw}")

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        bump()  # a bulk update sends no signal: drop the gateway's key cache here
        messages.success(request, f"Revoked {revoked} key(s).")
