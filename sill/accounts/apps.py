from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "sill.accounts"
    label = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model, user_logged_in
        from django.db.models.signals import post_save, pre_save

        from sill.accounts import sessions
        from sill.accounts.admin_audit import record_superuser_created

        # Session policy (sill/accounts/sessions.py): clocks start at sign-in; a password
        # change or a deactivation ends the user's sessions, whoever saves the user.
        user_logged_in.connect(sessions.start_session_clock, dispatch_uid="sill-session-clock")
        pre_save.connect(
            sessions.end_sessions_on_credential_change,
            sender=get_user_model(),
            dispatch_uid="sill-session-credentials",
        )
        # A superuser made outside the Django admin (createsuperuser, a shell): every site's
        # log says so (sill/accounts/admin_audit.py).
        post_save.connect(
            record_superuser_created,
            sender=get_user_model(),
            dispatch_uid="sill-superuser-created",
        )
