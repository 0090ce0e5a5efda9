from django.contrib import admin

from .models import Lane


@admin.register(Lane)
class LaneAdmin(admin.ModelAdmin):
    list_display = ("name", "port", "max_context", "slots", "fit_max_tokens", "chat_template", "enabled")
    list_filter = ("enabled",)
