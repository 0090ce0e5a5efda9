"""Management API (DRF) for operators' scripts: records (with content read back) and segments.

Staff only: a staff login session, or an API key attached to a staff user
(`manage.py create_api_key --name ops --user STAFF_USERNAME`).
"""

import json
from dataclasses import asdict
from datetime import datetime, time, timezone as dt_timezone

from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from rest_framework import authentication, exceptions, pagination, permissions, serializers, viewsets

from gateway.models import ApiKey, hash_key

from .admin import load_content
from .models import InferRecord, Segment


class StaffApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer KEY` or `x-api-key: KEY`: the key's user (IsAdminUser then wants is_staff)."""

    def authenticate(self, request):
        header = request.headers.get("authorization", "")
        raw = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "").strip()
        if not raw:
            return None
        # The gateway's middleware has already checked the key (and recorded its use): reuse that.
        key = getattr(request._request, "api_key", None)
        if key is None:
            key = ApiKey.objects.filter(key_hash=hash_key(raw), revoked_at__isnull=True).first()
        if key is None:
            raise exceptions.AuthenticationFailed("invalid or revoked API key")
        user = get_user_model().objects.filter(pk=key.user_id, is_active=True).first() if key.user_id else None
        if user is None:
            raise exceptions.AuthenticationFailed("this API key belongs to no user; the management API needs a staff user's key")
        return user, key

    def authenticate_header(self, request):
        return "Bearer"


class Pages(pagination.PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class RecordSerializer(serializers.ModelSerializer):
    key_name = serializers.CharField(source="api_key.name", default=None, read_only=True)

    class Meta:
        model = InferRecord
        fields = [
            "id", "started_at", "finished_at", "status", "http_status", "error", "path", "model", "route", "lane",
            "api_key", "key_name", "user", "dialect", "stream", "prompt_tokens", "completion_tokens",
            "cached_tokens", "ttft_ms", "duration_ms", "segment", "offset", "length",
        ]


class RecordDetailSerializer(RecordSerializer):
    content = serializers.SerializerMethodField()

    class Meta(RecordSerializer.Meta):
        fields = RecordSerializer.Meta.fields + ["content"]

    def get_content(self, record):
        loaded = load_content(record)
        if "error" in loaded:
            return {"available": False, "reason": loaded["reason"], "error": loaded["error"]}
        request = loaded["request"].decode("utf-8", "replace")
        try:
            request = json.loads(request)
        except ValueError:
            pass
        return {
            "available": True,
            "request": request,
            "response": loaded["response"].decode("utf-8", "replace"),
            "conversation": asdict(loaded["conversation"]),
        }


class SegmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Segment
        fields = "__all__"


class StaffOnly:
    authentication_classes = [StaffApiKeyAuthentication, authentication.SessionAuthentication]
    permission_classes = [permissions.IsAdminUser]
    pagination_class = Pages


class RecordViewSet(StaffOnly, viewsets.ReadOnlyModelViewSet):
    """GET /api/records/?status=&model=&lane=&since= (newest first), GET /api/records/<id>/ with content."""

    def get_serializer_class(self):
        return RecordDetailSerializer if self.action == "retrieve" else RecordSerializer

    def get_queryset(self):
        qs = InferRecord.objects.select_related("api_key").order_by("-started_at")
        params = self.request.query_params
        for name in ("status", "model", "lane"):
            if params.get(name):
                qs = qs.filter(**{name: params[name]})
        if params.get("since"):
            since = parse_datetime(params["since"]) or parse_date(params["since"])
            if since is None:
                raise exceptions.ValidationError({"since": "an ISO date or date-time"})
            if not hasattr(since, "hour"):
                since = datetime.combine(since, time.min)
            if timezone.is_naive(since):
                since = timezone.make_aware(since, dt_timezone.utc)
            qs = qs.filter(started_at__gte=since)
        return qs


class SegmentViewSet(StaffOnly, viewsets.ReadOnlyModelViewSet):
    """GET /api/segments/ (newest first), GET /api/segments/<id>/."""

    serializer_class = SegmentSerializer
    queryset = Segment.objects.order_by("-opened_at")
