"""Admin: the request records (read back from their segment) and the segments with their upload state."""

import json

from django.contrib import admin, messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from . import segments, storage
from .conversation import conversation
from .models import InferRecord, Segment


def load_content(record: InferRecord) -> dict:
    """For the detail page and the API: the archived document and its conversation, or why there is none."""
    try:
        doc = segments.read_record(record)
    except segments.ArchiveReadError as exc:
        return {"error": str(exc), "reason": exc.reason}
    request, response = segments.body_bytes(doc, "request"), segments.body_bytes(doc, "response")
    return {"doc": doc, "request": request, "response": response, "conversation": conversation(request, response)}


@admin.register(InferRecord)
class InferRecordAdmin(admin.ModelAdmin):
    list_display = (
        "started_at", "status", "http_status", "model", "lane", "key_name", "dialect", "stream",
        "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_ms", "duration_ms", "archived",
    )
    list_filter = ("status", "model", "lane", "api_key", "dialect", "stream", "started_at")
    search_fields = ("id", "api_key__name", "model", "error")
    date_hierarchy = "started_at"
    list_select_related = ("api_key",)
    change_form_template = "admin/infer_archive/inferrecord/change_form.html"

    @admin.display(description="key", ordering="api_key__name")
    def key_name(self, obj):
        return obj.api_key.name if obj.api_key else ""

    @admin.display(description="content", boolean=True)
    def archived(self, obj):
        return bool(obj.segment)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def get_urls(self):
        raw = path("<path:object_id>/raw/", self.admin_site.admin_view(self.raw_view), name="infer_archive_inferrecord_raw")
        return [raw, *super().get_urls()]

    def raw_view(self, request, object_id):
        """The stored record: the whole JSON document, or `?part=request|response` as the exact bytes."""
        record = get_object_or_404(InferRecord, pk=object_id)
        try:
            doc = segments.read_record(record)
        except segments.ArchiveReadError as exc:
            return HttpResponse(f"{exc.reason}: {exc}", status=410 if exc.reason != "unavailable" else 503,
                                content_type="text/plain")
        part = request.GET.get("part")
        if part in ("request", "response"):
            body, name = segments.body_bytes(doc, part), f"{record.pk}-{part}.txt"
            content_type = "application/octet-stream"
        else:
            body, name = json.dumps(segments.document(doc), ensure_ascii=False, indent=1).encode(), f"{record.pk}.json"
            content_type = "application/json"
        response = HttpResponse(body, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = dict(extra_context or {})
        record = InferRecord.objects.filter(pk=object_id).first()
        if record is not None:
            extra["archive"] = load_content(record)
            extra["raw_url"] = reverse("admin:infer_archive_inferrecord_raw", args=[record.pk])
        return super().change_view(request, object_id, form_url, extra_context=extra)


@admin.register(Segment)
class SegmentAdmin(admin.ModelAdmin):
    list_display = (
        "name", "status", "size", "records", "opened_at", "closed_at", "uploaded_at", "upload_attempts",
        "local_file", "short_error",
    )
    list_filter = ("status",)
    search_fields = ("name",)
    actions = ["retry_upload", "verify_checksum"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    @admin.display(description="local file")
    def local_file(self, obj):
        if obj.local_deleted_at:
            return "deleted (uploaded)"
        return "present" if segments.local_path(obj.name).exists() else format_html("<b>{}</b>", "missing")

    @admin.display(description="last error")
    def short_error(self, obj):
        return obj.last_error[:120]

    def changelist_view(self, request, extra_context=None):
        if not storage.configured():
            self.message_user(request, storage.describe(), messages.WARNING)
        corrupt = Segment.objects.filter(status=Segment.Status.CORRUPT).count()
        if corrupt:
            self.message_user(request, f"{corrupt} segment(s) failed their checksum: their records are not served "
                                       "from the local file.", messages.ERROR)
        return super().changelist_view(request, extra_context)

    @admin.action(description="Retry upload of the selected segments")
    def retry_upload(self, request, queryset):
        from .writer import queue_upload

        if not storage.configured():
            self.message_user(request, storage.describe(), messages.WARNING)
            return
        ids = list(queryset.filter(status=Segment.Status.CLOSED).values_list("pk", flat=True))
        for segment_id in ids:
            queue_upload(segment_id)
        self.message_user(request, f"queued {len(ids)} upload(s); segments already uploaded, open or corrupt were skipped")

    @admin.action(description="Verify the local files' checksums")
    def verify_checksum(self, request, queryset):
        bad = 0
        for segment in queryset:
            ok = segments.verify_local(segment)
            if ok is False:
                bad += 1
                segments.mark_corrupt(segment, "local file checksum mismatch (verified from admin)")
        level = messages.ERROR if bad else messages.SUCCESS
        self.message_user(request, f"{bad} of {queryset.count()} segment(s) do not match their sha256", level)
