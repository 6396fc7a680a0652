"""Telling the buyer their refund went through (a credit's customer, that it was credited).

At most once per settled refund, and not missed for a lost message. Two paths lead here:
``refunds.services.settle_refund`` enqueues ``refunds.send_confirmation`` on the commit that
settled the refund, and the every-minute sweep (:func:`send_missed_confirmations`, run by
``refunds.notify_missed_outcomes``) sends one that message missed: lost with the broker down or
a worker killed, retries used up, refused. Both claim the refund's ``confirmation_sent_at`` with
a conditional UPDATE before sending, so the buyer never gets two (a task delivered twice, or a
task and the sweep, send one) and a flushed cache changes nothing. The claim is given back
only when the server did not take the message: it is down (an ``OSError``, raised for the
task's retries) or it refused it (a 5xx reply: the buyer's mailbox, the content).

A refused confirmation waits (:func:`sill.accounts.notices.back_off`: 5 minutes, doubling up to
6 hours) before the sweep tries it again, so a server whose policy is fixed still sends it; the
sweep gives up on a refund settled more than ``CONFIRMATION_WINDOW`` ago, by then the buyer's
bank statement has told them, and a mailbox that does not exist is not tried for good. A
refund reversed before its confirmation left is not confirmed. The log names the refund and the
error's class, never the buyer's address or the server's reply.
"""

from __future__ import annotations

import logging
import smtplib
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from refunds.models import Refund, RefundStatus
from sill.accounts.notices import (
    Delivery,
    MessageRefused,
    message_refused,
    not_backing_off,
    send_claimed,
)

logger = logging.getLogger(__name__)

NOTICE = "refund-confirmation"
CONFIRMATION_WINDOW = timedelta(days=3)
# How many unsent confirmations one sweep sends, oldest first (the rest on the next).
SWEEP_LIMIT = 500


def send_confirmation(*, refund_id: str) -> bool:
    """Email the buyer (a credit's customer) that ``refund_id`` went through, once. False when
    not sent: the refund is not settled (or was reversed), was confirmed, or the server
    refused the message (the claim given back, the refund waits for the sweep: not raised).
    A server that is down is raised, the claim given back. True also when there is no address
    to send to: nobody a retry would reach."""
    claimed = Refund.objects.filter(
        pk=refund_id, status=RefundStatus.SUCCEEDED, confirmation_sent_at__isnull=True
    ).update(confirmation_sent_at=timezone.now())
    if claimed != 1:
        return False
    refund = Refund.objects.select_related("order", "site", "customer").get(pk=refund_id)
    return send_claimed(
        notice=f"{NOTICE}:{refund.pk}",
        what=f"refund {refund.pk}: buyer's confirmation email",
        send=lambda: _send(refund),
        give_back=lambda: Refund.objects.filter(pk=refund.pk).update(confirmation_sent_at=None),
        log=logger,
    )


def send_missed_confirmations(*, now: datetime | None = None) -> int:
    """The sweep: confirm each refund settled within ``CONFIRMATION_WINDOW`` whose buyer was
    not sent one; how many. One the server refused is skipped while it waits; a mail server
    that is down ends the run, raised."""
    now = now or timezone.now()
    unsent = (
        Refund.objects.filter(
            status=RefundStatus.SUCCEEDED,
            confirmation_sent_at__isnull=True,
            settled_at__gt=now - CONFIRMATION_WINDOW,
        )
        .order_by("settled_at", "id")
        .values_list("pk", flat=True)
    )
    due = not_backing_off(unsent.iterator(chunk_size=SWEEP_LIMIT), notice=NOTICE, limit=SWEEP_LIMIT)
    return sum(send_confirmation(refund_id=pk) for pk in due)


def _send(refund: Refund) -> Delivery:
    """Send the message; :class:`MessageRefused` when the server refused it for good (5xx).
    A 4xx reply (greylisting) or a server that is down is raised as it is: tried again."""
    to, subject, body = _message(refund)
    if not to:
        return Delivery(sent_to=())
    try:
        send_mail(
            subject=subject,
            message=body,
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[to],
        )
    except (smtplib.SMTPRecipientsRefused, smtplib.SMTPDataError) as exc:
        if not message_refused(exc):
            raise
        # Not chained: the server's error carries the buyer's address and its reply.
        raise MessageRefused(type(exc).__name__) from None
    return Delivery(sent_to=(to,))


def _message(refund: Refund) -> tuple[str, str, str]:
    """The address, subject and body of ``refund``'s confirmation; no address, none to send."""
    site = refund.site.name
    if refund.is_credit:
        customer = refund.customer
        if customer is None or not customer.email:
            return "", "", ""
        return (
            customer.email,
            f"A credit from {site}: {refund.amount}",
            f"{_greeting(customer.name)}\n\n"
            f"We have added {refund.amount} to your account balance with {site}. "
            "It is taken off your next invoices automatically.\n\n"
            f"{site}\n",
        )
    order = refund.order
    if order is None or not order.buyer_email:
        return "", "", ""
    return (
        order.buyer_email,
        f"Your refund from {site}: {refund.amount} for order #{order.number}",
        f"{_greeting(order.buyer_name)}\n\n"
        f"We have refunded {refund.amount} for order #{order.number}. "
        "It goes back to the payment method you used; depending on your bank it can take "
        "5-10 business days to appear.\n\n"
        f"{site}\n",
    )


def _greeting(name: str) -> str:
    """``Hello Ada,``; ``Hello,`` to a buyer whose name is not known (never ``Hello ,``)."""
    name = " ".join((name or "").split())
    return f"Hello {name}," if name else "Hello,"
