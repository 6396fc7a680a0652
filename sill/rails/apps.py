from django.apps import AppConfig


class RailsConfig(AppConfig):
    name = "sill.rails"
    label = "rails"
    default_auto_field = "django.db.models.BigAutoField"
