from django.contrib.auth.views import LogoutView
from django.urls import path

from sill.accounts import views, views_invites, views_password, views_two_factor

app_name = "accounts"
urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    # The second step for a user with an authenticator (sill/accounts/views_two_factor.py).
    path("login/code/", views_two_factor.login_code, name="login-code"),
    path("logout/", LogoutView.as_view(), name="logout"),
    path("switch-site/", views.switch_site_view, name="switch_site"),
    # Anyone with the link: an emailed invitation (sill/accounts/invites.py).
    path("invite/<str:token>/", views_invites.invite_accept, name="invite"),
    # Password reset by email (sill/accounts/views_password.py).
    path("password/reset/", views_password.PasswordResetView.as_view(), name="password-reset"),
    path(
        "password/reset/sent/",
        views_password.PasswordResetDoneView.as_view(),
        name="password-reset-done",
    ),
    path(
        "password/reset/done/",
        views_password.PasswordResetCompleteView.as_view(),
        name="password-reset-complete",
    ),
    path(
        "password/reset/<uidb64>/<token>/",
        views_password.PasswordResetConfirmView.as_view(),
        name="password-reset-confirm",
    ),
]
