"""Django URLs (admin, login, health). The streaming API endpoints are Channels consumers in asgi.py."""

from django.contrib import admin
from django.urls import path

from gateway.views import health

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", health, name="health"),
]
