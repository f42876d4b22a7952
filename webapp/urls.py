from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("health/", views.health, name="health"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("tasks_authoring.urls")),
]
