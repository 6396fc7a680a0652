from django.apps import AppConfig


class RefundsConfig(AppConfig):
    name = "refunds"
    default_auto_field = "django.db.models.BigAutoField"
