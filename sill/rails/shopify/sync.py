"""Bringing a store's orders into Sill: ``manage.py rails sync-shopify`` and the webhooks.

An order is upserted by its Shopify id (the charge's ``provider_payment_id`` on rail
``shopify``), so running a sync twice, or a webhook after a sync, changes nothing the second
time; its charge names the shop it was read from (``provider_account``), since an order is its
shop's alone and the site may later be connected to another. Only orders with a successful sale
or capture are brought in: an unpaid order has nothing to refund, and a webhook brings it once
it is paid. Each order, with its items, buyer, customer (Shopify id and created date, when the
token has ``read_customers``) and its charge, is written in one transaction with a signed
``charge`` audit record. Refunds already on the Shopify order that Sill did not make become
outside refunds, and its disputes are recorded, through :mod:`sill.orders.outside` (their own
transactions and audit records). They are recorded as of the time Sill read the order: the read
is Shopify's current state (what reconciliation records too, sill.rails.charge_sync), so only
what Shopify reports after it, through a later webhook's read, replaces it.

One order's trouble is that order's: an order Shopify sends unreadable, or that Sill cannot
record (its data refused by the database, a refund larger than its charge), is left out with
its reason named in the report and the log, and the sync goes on; Shopify unreachable or
refusing the token still ends it. Shopify's rate limit is no order's trouble: a throttled read
did nothing, so the rail waits as long as Shopify says and reads on from the same cursor
(:meth:`ShopifyRail.orders`), and only throttling past ``SILL_SHOPIFY_SYNC_THROTTLE_SECONDS``
of waiting ends the sync. Waiting, not stopping to resume later: a sync is one command run
with no stored position (Shopify's cursor is good only while it runs), so a stopped run could
only start over from ``--since``. An order with more transactions or refunds than Shopify
lists (``ShopifyOrder.cut``) is never created from the part Shopify lists.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DataError, IntegrityError, transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import append_record
from sill.accounts.models import Site
from sill.errors import SillError
from sill.orders.models import Charge, ChargeStatus, Customer, DisputeStatus, Order, OrderStatus
from sill.orders.outside import (
    ExceedsCharge,
    ReportedDispute,
    record_dispute,
    record_rail_refund,
)
from sill.orders.services import NewLine, create_order, lines_or_total, set_order_status
from sill.rails.base import RailName
from sill.rails.models import RailAccount
from sill.rails.shopify.orders import ShopifyCustomer, ShopifyOrder, SkippedOrder
from sill.rails.shopify.rail import LISTS_MAX, ShopifyRail

logger = logging.getLogger(__name__)

# What one order's data can make its recording fail with: that order is left out, named.
# Not OperationalError (a lost connection): that would fail every order after it too.
ORDER_REFUSED = (IntegrityError, DataError, SillError, ExceedsCharge)
# Order.number's max_length.
NUMBER_MAX = 40


@dataclass
class SyncReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0
    incomplete: int = 0
    failed: int = 0
    outside_refunds: int = 0
    disputes: int = 0
    # Sill's own refunds Shopify now reports failed after Sill settled them: reversed.
    reversed_refunds: int = 0
    # Seconds the sync waited for Shopify's rate limit (each throttled read then went on).
    throttled_seconds: float = 0.0
    # An incomplete or failed order each: the order and why.
    problems: list[str] = field(default_factory=list)

    def add(self, outcome: str) -> None:
        word = outcome.split(":")[0]
        setattr(self, word, getattr(self, word) + 1)
        if word in ("incomplete", "failed"):
            self.problems.append(outcome)

    def __str__(self) -> str:
        summary = (
            f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged, "
            f"{self.skipped} skipped (not paid), {self.incomplete} not recorded whole (more "
            f"than Shopify lists), {self.failed} failed, {self.outside_refunds} outside "
            f"refund(s) and {self.disputes} dispute(s) recorded"
        )
        if self.reversed_refunds:
            summary += f"; {self.reversed_refunds} of Sill's refund(s) reversed (failed at Shopify)"
        if self.throttled_seconds:
            summary += f"; waited {self.throttled_seconds:.1f} s for Shopify's rate limit"
        return "\n".join([summary, *(f"  {problem}" for problem in self.problems)])


def shopify_rail_for(site: Site) -> ShopifyRail:
    """The site's Shopify rail for reading orders (even while refunds on it are off)."""
    from sill.rails.registry import RailDisabled
    from sill.rails.shopify import rail_from_account

    account = RailAccount.objects.filter(site=site, rail=RailName.SHOPIFY).first()
    if account is None:
        raise RailDisabled("No Shopify store is connected to this site.")
    rail = rail_from_account(account)
    assert isinstance(rail, ShopifyRail)
    return rail


def sync_orders(*, site: Site, since: datetime | None = None) -> SyncReport:
    """Upsert every order of the site's store updated since ``since`` (all when None); an
    order that cannot be read or recorded is counted ``failed``, named, and passed over.
    Raises ``RailError`` when Shopify cannot be read on."""
    report = SyncReport()
    read_at = timezone.now()  # each page is read after this: its state is at least this new
    rail = shopify_rail_for(site)
    for order in rail.orders(since=since):
        if isinstance(order, SkippedOrder):
            _fail(site, report, order.reason)  # it names the order
            continue
        try:
            upsert_order(
                site=site,
                shop=rail.client.shop_domain,
                order=order,
                report=report,
                event_id="sync",
                read_at=read_at,
            )
        except ORDER_REFUSED as exc:
            _fail(site, report, f"Shopify order {order.gid} could not be recorded: {exc}")
    report.throttled_seconds = rail.throttled_seconds
    return report


def _fail(site: Site, report: SyncReport, reason: str) -> None:
    logger.warning("Shopify sync of site %s left an order out: %s", site.pk, reason)
    report.add(f"failed: {reason}")


def sync_order(*, site: Site, order_id: str, event_id: str) -> str:
    """Upsert one order, read again from Shopify (what a webhook about it triggers)."""
    read_at = timezone.now()
    rail = shopify_rail_for(site)
    order = rail.order(order_id)
    if order is None:
        return f"order {order_id} not found at Shopify"
    report = SyncReport()
    outcome = upsert_order(
        site=site,
        shop=rail.client.shop_domain,
        order=order,
        report=report,
        event_id=event_id,
        read_at=read_at,
    )
    done = f"{outcome}; {report.outside_refunds} outside refund(s), {report.disputes} dispute(s)"
    if report.reversed_refunds:
        done += f", {report.reversed_refunds} of Sill's refund(s) reversed (failed at Shopify)"
    return done


def upsert_order(
    *,
    site: Site,
    shop: str,
    order: ShopifyOrder,
    report: SyncReport,
    event_id: str,
    read_at: datetime,
) -> str:
    """Create or update one order read from the shop ``shop`` at ``read_at`` (when its read
    started); returns ``created``, ``updated``, ``unchanged``, ``skipped: …`` or
    ``incomplete: …``, and counts what it recorded in ``report``.

    The order is found by its Shopify id alone (Shopify's ids are global: no two shops share
    one); its charge names ``shop``, whose order it is, so that once the site is connected to
    another shop nothing about it is asked of that one (``Charge.provider_account``)."""
    if order.cut:
        return _record_cut(site=site, order=order, report=report, event_id=event_id, at=read_at)
    if order.payment is None:
        report.add("skipped")
        return "skipped: not paid"
    with transaction.atomic():
        charge = (
            Charge.objects.select_for_update()
            .select_related("order")
            .filter(rail=RailName.SHOPIFY, provider_payment_id=order.legacy_id, order__site=site)
            .first()
        )
        customer = _customer(site, order.customer) if order.customer else None
        if charge is None:
            charge = _create(site, shop, order, customer)
            outcome = "created"
        else:
            outcome = _update(charge.order, order, customer)
            if _raise_charge(charge, order):
                outcome = "updated"
            if not charge.provider_account:
                # Held from before charges named their shop, and no shop was connected when
                # they were given one (orders 0007): it is the shop it was just read from.
                Charge.objects.filter(pk=charge.pk).update(provider_account=shop)
                charge.provider_account = shop
    _record_rail_reports(charge, order, report, event_id, read_at)
    report.add(outcome)  # after: an order whose refund cannot be recorded counts as failed
    return outcome


def _record_cut(
    *, site: Site, order: ShopifyOrder, report: SyncReport, event_id: str, at: datetime
) -> str:
    """An order with more transactions or refunds than Shopify lists (``order.cut``).

    Never created: its charge would be what the listed captures sum to, less the listed
    refunds, and Sill would hold refundable what Shopify has refunded past the list. An order
    Sill already holds gets the refunds and disputes read recorded, and nothing else: each is
    Shopify's, and recording it only lowers what Sill holds refundable."""
    what = " and ".join(f"{LISTS_MAX[name]} {name}" for name in order.cut)
    outcome = (
        f"incomplete: Shopify order {order.gid} ({order.name}) has {what} or more, more than "
        "Sill can read of it in one Shopify query; Sill cannot record it whole"
    )
    charge = (
        Charge.objects.select_related("order")
        .filter(rail=RailName.SHOPIFY, provider_payment_id=order.legacy_id, order__site=site)
        .first()
    )
    if charge is not None:
        _record_rail_reports(charge, order, report, event_id, at)
    logger.warning("Shopify order of site %s: %s", site.pk, outcome)
    report.add(outcome)
    return outcome


def _customer(site: Site, found: ShopifyCustomer) -> Customer:
    customer = Customer.objects.select_for_update().filter(site=site, rail_customer_id=found.gid)
    row = customer.first()
    if row is None:
        return Customer.objects.create(
            site=site,
            rail_customer_id=found.gid,
            email=found.email,
            name=found.name[:200],
            provider_created_at=found.created_at,
        )
    changed = (row.email, row.name, row.provider_created_at) != (
        found.email or row.email,
        found.name[:200] or row.name,
        found.created_at or row.provider_created_at,
    )
    if changed:
        row.email = found.email or row.email
        row.name = found.name[:200] or row.name
        row.provider_created_at = found.created_at or row.provider_created_at
        row.save(update_fields=["email", "name", "provider_created_at"])
    return row


def _number(site: Site, order: ShopifyOrder) -> str:
    """The order's Shopify name (``#`` left off), when it fits and no order of the site holds
    it (another rail's #1001); else as much of the name as fits before ``-<Shopify order
    id>``. Shopify's order ids are unique, so two Shopify orders never share the second form:
    cutting the name alone, two long names that begin alike became one number and the second
    order never came in."""
    name = order.name or order.legacy_id
    if len(name) <= NUMBER_MAX and not Order.objects.filter(site=site, number=name).exists():
        return name
    suffix = f"-{order.legacy_id}"
    return name[: NUMBER_MAX - len(suffix)] + suffix


def _create(site: Site, shop: str, order: ShopifyOrder, customer: Customer | None) -> Charge:
    assert order.payment is not None
    lines = lines_or_total(
        [
            NewLine(line.sku, line.name, line.quantity, line.unit_price)
            for line in order.lines
            if line.unit_price.currency == order.total.currency
        ],
        total=order.total,
    )
    buyer_name = order.customer.name if order.customer else ""
    buyer_email = order.email or (order.customer.email if order.customer else "")
    created = create_order(
        site=site,
        lines=lines,
        currency=order.total.currency,
        buyer_name=buyer_name,
        buyer_email=buyer_email,
        number=_number(site, order),
        customer=customer,
    )
    # Shopify's total includes shipping, taxes and discounts the line items do not.
    Order.objects.filter(pk=created.pk).update(
        total_minor=order.total.amount_minor, created_at=order.created_at
    )
    charge = Charge.objects.create(
        order=created,
        rail=RailName.SHOPIFY,
        provider_payment_id=order.legacy_id,
        provider_charge_id=order.payment.gid,
        provider_account=shop,
        amount_minor=order.payment.amount.amount_minor,
        currency=order.payment.amount.currency,
        captured_at=order.payment.captured_at,
        status=ChargeStatus.SUCCEEDED,
    )
    set_order_status(order=created, status=OrderStatus.PAID)
    append_record(
        site=site,
        kind=AuditKind.CHARGE,
        body={
            "order_id": created.pk,
            "charge_id": charge.pk,
            "rail": RailName.SHOPIFY,
            "provider_payment_id": order.legacy_id,
            "provider_charge_id": order.payment.gid,
            "shop": shop,
            "amount_minor": charge.amount_minor,
            "currency": charge.currency,
            "test": order.test,
            "source": "shopify order sync",
        },
    )
    return charge


def _update(row: Order, order: ShopifyOrder, customer: Customer | None) -> str:
    buyer_email = order.email or row.buyer_email
    fields = {
        "buyer_email": buyer_email,
        "customer_id": customer.pk if customer else row.customer_id,
    }
    if all(getattr(row, k) == v for k, v in fields.items()):
        return "unchanged"
    Order.objects.filter(pk=row.pk).update(**fields, updated_at=timezone.now())
    return "updated"


def _raise_charge(charge: Charge, order: ShopifyOrder) -> bool:
    """A later capture of the order (Shopify captures an authorization in parts) adds to the
    charge: its amount is what the order's successful sales and captures sum to. Never
    lowered (a capture that succeeded is not taken back; refunds are counted apart)."""
    assert order.payment is not None
    paid = order.payment.amount
    if paid.currency != charge.currency or paid.amount_minor <= charge.amount_minor:
        return False
    Charge.objects.filter(pk=charge.pk).update(amount_minor=paid.amount_minor)
    append_record(
        site=charge.order.site,
        kind=AuditKind.CHARGE,
        body={
            "order_id": charge.order_id,
            "charge_id": charge.pk,
            "rail": RailName.SHOPIFY,
            "provider_payment_id": order.legacy_id,
            "amount_minor": paid.amount_minor,
            "was_amount_minor": charge.amount_minor,
            "currency": charge.currency,
            "source": "shopify order sync: a later capture",
        },
    )
    charge.amount_minor = paid.amount_minor
    return True


_DISPUTE_STATUS = {s.value: s for s in DisputeStatus}


def _record_rail_reports(
    charge: Charge, order: ShopifyOrder, report: SyncReport, event_id: str, read_at: datetime
) -> None:
    # As of the read, not the refund's ``createdAt``: the read is the refund's state now.
    # Recorded as of its creation, a webhook's later state looked older than what a
    # reconciliation (recorded as of its own read) had applied, and was dropped.
    refused: list[ExceedsCharge] = []
    for refund in order.refunds:
        # One Sill made (its note names the refund) is never an outside refund: its state goes
        # to the refund core, which reverses a settled refund Shopify now reports failed (as a
        # Stripe or PayPal webhook's, and reconciliation's, do).
        try:
            done = record_rail_refund(
                charge=charge, refund=refund, event_id=event_id, event_at=read_at
            )
        except ExceedsCharge as exc:
            # Not beside Sill's books: the order's other refunds and its disputes are facts
            # Shopify reports, recorded all the same; then this one fails the order (below).
            refused.append(exc)
            continue
        if refund.sill_refund_id and done.endswith("failed after settlement, reversed"):
            report.reversed_refunds += 1
        elif done.startswith("external refund"):
            report.outside_refunds += 1
    for dispute in order.disputes:
        done = record_dispute(
            charge=charge,
            dispute=ReportedDispute(
                provider_dispute_id=dispute.provider_dispute_id,
                reason=dispute.reason,
                amount_minor=dispute.amount_minor,
                currency=dispute.currency,
                status=_DISPUTE_STATUS[dispute.status],
                rail_status=dispute.status,
                opened_at=dispute.created_at,
            ),
            event_id=event_id,
            event_at=read_at,
        )
        if done.startswith("dispute recorded") or done.startswith("dispute updated"):
            report.disputes += 1
    if refused:
        # As a Stripe or PayPal event with that one refund fails: the webhook's event is kept
        # and retried, the sync command names the order failed.
        raise refused[0]
