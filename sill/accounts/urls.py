from django.contrib.auth.views import LogoutView
from django.urls import path

from sill.accounts import views

app_name = "accounts"
urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", LogoutView.as_view(), name="logout"),
    path("switch-site/", views.switch_site_view, name="switch_site"),
]
