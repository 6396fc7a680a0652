"""Celery tasks: they only call services. Enqueued on commit (``delay_on_commit``)."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail

from refunds.execution import RefundPending, execute_refund, stuck_refund_ids
from refunds.models import Refund
from sill.rails.base import RailError


@shared_task(bind=True, name="refunds.execute", max_retries=8, acks_late=True)
def execute_refund_task(self, refund_id: str) -> str:  # type: ignore[no-untyped-def]
    try:
        return execute_refund(refund_id)
    except (RailError, RefundPending) as exc:
        # Same refund, same idempotency key: back off and try again.
        raise self.retry(exc=exc, countdown=min(2 ** (self.request.retries + 1), 300)) from exc


@shared_task(name="refunds.recover_stuck")
def recover_stuck_refunds_task() -> int:
    """Re-enqueue processing refunds whose execution died (lease lapsed). Beat: every minute."""
    older = timedelta(seconds=int(getattr(settings, "SILL_RECOVER_AFTER_SECONDS", 60)))
    ids = stuck_refund_ids(older_than=older)
    for refund_id in ids:
        execute_refund_task.delay(refund_id)
    return len(ids)


@shared_task(name="orders.charge", bind=True, max_retries=5, acks_late=True)
def charge_order_task(self, order_id: str, payment_method: str) -> str:  # type: ignore[no-untyped-def]
    from refunds.purchases import charge_order

    try:
        return charge_order(order_id=order_id, payment_method=payment_method)
    except RailError as exc:
        raise self.retry(exc=exc, countdown=min(2 ** (self.request.retries + 1), 120)) from exc


@shared_task(name="refunds.send_confirmation", ignore_result=True)
def send_refund_confirmation_task(refund_id: str) -> None:
    """Tell the buyer their refund went through."""
    refund = Refund.objects.select_related("order", "site").get(pk=refund_id)
    order = refund.order
    if order is None or not order.buyer_email:
        return
    send_mail(
        subject=f"Your refund from {refund.site.name}",
        message=(
            f"Hello {order.buyer_name or ''},\n\n"
            f"We have refunded {refund.amount} for order #{order.number}. "
            "It goes back to the payment method you used; depending on your bank it can take "
            "5-10 business days to appear.\n\n"
            f"{refund.site.name}\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[order.buyer_email],
    )


@shared_task(name="refunds.expire_held")
def expire_held_refunds_task() -> int:
    """Expire held refunds nobody decided within 24 hours. Beat: every minute."""
    from refunds.review import expire_held_refunds

    return expire_held_refunds()


@shared_task(
    name="refunds.notify_held",
    ignore_result=True,
    autoretry_for=(OSError,),  # SMTP errors are OSErrors; the marker was given back
    max_retries=5,
    retry_backoff=30,
)
def notify_held_refund_task(refund_id: str) -> None:
    """Email the site's owners and admins (and Slack) about one held refund, once."""
    from refunds.notifications import notify_held_refund

    notify_held_refund(refund_id=refund_id)


@shared_task(name="refunds.notify_pending_held")
def notify_pending_held_refunds_task() -> int:
    """Notify held refunds the on-commit notification missed. Beat: every minute."""
    from refunds.notifications import notify_pending_held_refunds

    return notify_pending_held_refunds()
