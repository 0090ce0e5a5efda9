"""The archive's management API: /api/records/, /api/segments/."""

from rest_framework.routers import DefaultRouter

from .api import RecordViewSet, SegmentViewSet

router = DefaultRouter()
router.register("records", RecordViewSet, basename="record")
router.register("segments", SegmentViewSet, basename="segment")
urlpatterns = router.urls
