from django.contrib import admin

from .models import InferRecord


@admin.register(InferRecord)
class InferRecordAdmin(admin.ModelAdmin):
    list_display = (
        "started_at", "status", "http_status", "model", "lane", "dialect", "stream",
        "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_ms", "duration_ms",
    )
    list_filter = ("status", "lane", "dialect", "stream")
    search_fields = ("id", "model", "error")
    date_hierarchy = "started_at"

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False
