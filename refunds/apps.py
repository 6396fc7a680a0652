from django.apps import AppConfig


class RefundsConfig(AppConfig):
    name = "refunds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the tasks in every process (web too): services enqueue them by name
        # (refunds.queue), so nothing else imports this module.
        import refunds.tasks  # noqa: F401
        from refunds.reasons.services import seed_site_reasons
        from sill.accounts.signals import site_created

        site_created.connect(seed_site_reasons, dispatch_uid="refunds.seed_site_reasons")
