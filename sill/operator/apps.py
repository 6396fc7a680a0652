from django.apps import AppConfig


class OperatorConfig(AppConfig):
    name = "sill.operator"
    label = "sill_operator"
