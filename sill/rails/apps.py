from django.apps import AppConfig


class RailsConfig(AppConfig):
    name = "sill.rails"
    label = "rails"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the tasks in every process (web too): the webhooks and the settings
        # enqueue them by name (sill.queue).
        import sill.rails.tasks  # noqa: F401
        from sill.rails.models import RailAccount
        from sill.rails.secrets import WHAT_TO_DO, SealedField, register_sealed_field

        register_sealed_field(
            SealedField(
                model=RailAccount, field="secret_encrypted",
                binding=RailAccount.secret_binding,
                name=lambda account: f"site {account.site_id} {account.rail}",
                site_field="site_id", what_to_do=WHAT_TO_DO,
            )
        )  # fmt: skip
        register_sealed_field(
            SealedField(
                model=RailAccount, field="webhook_secrets_encrypted",
                binding=RailAccount.webhook_secrets_binding,
                name=lambda row: f"site {row.site_id} {row.rail} webhook signing secrets",
                site_field="site_id",
                what_to_do="enter the webhook signing secret again on Settings → Rails",
            )
        )  # fmt: skip
