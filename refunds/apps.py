from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import AppConfig

if TYPE_CHECKING:
    from sill.orders.models import Charge


def _is_sills_refund(charge: Charge, provider_refund_id: str) -> bool:
    # Tells the webhooks (sill.orders.outside) a refund the rail reports is Sill's own.
    from refunds.models import Refund

    return Refund.objects.filter(charge=charge, provider_refund_id=provider_refund_id).exists()


class RefundsConfig(AppConfig):
    name = "refunds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the tasks in every process (web too): services enqueue them by name
        # (refunds.queue), so nothing else imports this module.
        import refunds.tasks  # noqa: F401
        from refunds.reasons.services import seed_site_reasons
        from refunds.reconcile.rail_reports import apply_own_refund_report
        from sill.accounts.signals import site_created
        from sill.orders.outside import register_own_refund_finder, register_own_refund_report

        register_own_refund_finder(_is_sills_refund)
        register_own_refund_report(apply_own_refund_report)

        site_created.connect(seed_site_reasons, dispatch_uid="refunds.seed_site_reasons")
