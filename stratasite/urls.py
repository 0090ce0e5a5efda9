"""Django URLs (admin, login, health, models, concurrency, metrics). The streaming API POST endpoints
are Channels consumers in asgi.py."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path
from django.urls import include  # noqa: I001 (the archive API)

from gateway import views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="gateway/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("health", views.health, name="health"),
    path("v1/models", views.models, name="models"),
    path("concurrency", views.concurrency, name="concurrency"),
    path("metrics", views.prometheus, name="metrics"),
    path("api/", include("infer_archive.urls")),  # the archive's management API (staff)
]
