from django.contrib.auth.views import LogoutView
from django.urls import path

from sill.accounts import views, views_two_factor

app_name = "accounts"
urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    # The second step for a user with an authenticator (sill/accounts/views_two_factor.py).
    path("login/code/", views_two_factor.login_code, name="login-code"),
    path("logout/", LogoutView.as_view(), name="logout"),
    path("switch-site/", views.switch_site_view, name="switch_site"),
]
