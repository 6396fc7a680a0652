from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the tasks in every process (web too): checkpoints enqueue one by name.
        import audit.tasks  # noqa: F401
        from audit.keys import register_sealed_seeds

        register_sealed_seeds()
