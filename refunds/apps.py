from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.apps import AppConfig

if TYPE_CHECKING:
    from sill.orders.models import Charge


def _is_sills_refund(charge: Charge, provider_refund_id: str) -> str:
    # Tells the webhooks (sill.orders.outside) which of Sill's refunds a refund the rail
    # reports is, if any ("").
    from refunds.models import Refund

    found = (
        Refund.objects.filter(charge=charge, provider_refund_id=provider_refund_id)
        .values_list("pk", flat=True)
        .first()
    )
    return found or ""


def _mandate_bytes(site: Any, refund_id: str) -> bytes | None:
    """The mandate of an agent refund, as the agent sent it (for its evidence bundle)."""
    from refunds.models import Refund

    raw = (
        Refund.objects.filter(site=site, pk=refund_id, mandate__isnull=False)
        .values_list("mandate__raw", flat=True)
        .first()
    )
    return bytes(raw) if raw is not None else None


def _purchase_mandate_bytes(site: Any, order_id: str) -> bytes | None:
    """The mandate an agent placed the order with, as the agent sent it (mandate ids are
    unique per site; the verifier checks the bytes against the SHA-256 the decision names)."""
    from refunds.models import Mandate
    from sill.orders.models import Order

    mandate_id = (
        Order.objects.filter(site=site, pk=order_id)
        .exclude(source_mandate_id="")
        .values_list("source_mandate_id", flat=True)
        .first()
    )
    if mandate_id is None:
        return None
    raw = (
        Mandate.objects.filter(site=site, mandate_id=mandate_id)
        .values_list("raw", flat=True)
        .first()
    )
    return bytes(raw) if raw is not None else None


class RefundsConfig(AppConfig):
    name = "refunds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the tasks in every process (web too): services enqueue them by name
        # (sill.queue), so nothing else imports this module.
        import refunds.tasks  # noqa: F401
        from refunds.reasons.services import seed_site_reasons
        from refunds.reconcile.rail_reports import apply_own_refund_report
        from sill.accounts.signals import site_created
        from sill.orders.outside import register_own_refund_finder, register_own_refund_report

        register_own_refund_finder(_is_sills_refund)
        register_own_refund_report(apply_own_refund_report)
        from audit.bundles import register_mandate_source

        register_mandate_source("refund", _mandate_bytes)
        register_mandate_source("order", _purchase_mandate_bytes)

        site_created.connect(seed_site_reasons, dispatch_uid="refunds.seed_site_reasons")
        _register_slack_secrets()


def _register_slack_secrets() -> None:
    """Slack's webhook, signing secret and bot token are sealed with SECRET_KEY: re-encrypted
    after a rotation by ``manage.py rails reencrypt-secrets`` with the rails' own."""
    from refunds.review.slack import bot_token_binding, signing_secret_binding, webhook_binding
    from sill.accounts.models import Site
    from sill.rails.secrets import SealedField, register_sealed_field

    def named(what: str) -> Callable[[Site], str]:
        return lambda site: f"site {site.pk} {what}"

    again = "paste it again on Settings → Slack"
    for field, binding, what in (
        ("slack_webhook_sealed", webhook_binding, "Slack webhook"),
        ("slack_signing_secret", signing_secret_binding, "Slack signing secret"),
        ("slack_bot_token_sealed", bot_token_binding, "Slack bot token"),
    ):
        register_sealed_field(
            SealedField(
                model=Site, field=field, binding=binding, name=named(what), site_field="pk",
                what_to_do=again,
            )
        )  # fmt: skip
