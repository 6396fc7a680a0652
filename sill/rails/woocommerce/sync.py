"""Bringing a store's orders into Sill: ``manage.py rails sync-woocommerce`` and the webhooks.

An order is upserted by its WooCommerce id (``WooOrderLink``), so a second sync, or a webhook
after a sync, changes nothing. A delivery older than the state applied (by the order's
``date_modified_gmt``) changes nothing either; one of the same second changes what differs.
Only paid orders with a Stripe payment come in: their charge is on rail ``stripe`` (the
Stripe payment intent and charge ids), so their refunds run on Stripe, and it names the store
its order came from (``provider_account``, the store's URL as connected): once the site is
connected to another store, the order is refunded nowhere until its store is connected again
(sill.rails.registry.account_moved), though reconciliation still reads its payment at Stripe
(sill.rails.registry.readable_with_connected_account).
Each new order, with its items, buyer and charge, is written in one transaction with a
signed ``charge`` audit record. Refunds made in the WooCommerce admin through the Stripe
gateway are Stripe refunds: Stripe's webhooks report them on the charge, so they are not
counted from the Woo order too.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import append_record
from sill.accounts.models import Site
from sill.money import Money
from sill.orders.models import Charge, ChargeStatus, Order, OrderStatus
from sill.orders.services import NewLine, create_order, lines_or_total, set_order_status
from sill.rails.base import RailName, amount_step
from sill.rails.models import RailAccount
from sill.rails.woocommerce.client import WooClient
from sill.rails.woocommerce.connect import woo_credentials
from sill.rails.woocommerce.models import WooOrderLink
from sill.rails.woocommerce.orders import UnreadableOrder, WooOrder, parse_order

logger = logging.getLogger(__name__)


@dataclass
class SyncReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0
    # Orders Sill cannot read (sill.rails.woocommerce.orders.UnreadableOrder): logged with
    # their ids and reasons, and read again by every sync until the store changes them.
    unreadable: int = 0

    def add(self, outcome: str) -> None:
        word = outcome.split(":")[0]
        setattr(self, word, getattr(self, word) + 1)

    def __str__(self) -> str:
        return (
            f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged, "
            f"{self.skipped} skipped (not paid through Stripe)"
            + (f", {self.unreadable} unreadable (see the log)" if self.unreadable else "")
        )


def woo_client_for(site: Site) -> WooClient:
    """A client for the site's store (even while the rail is switched off)."""
    from sill.rails.registry import RailDisabled

    account = RailAccount.objects.filter(site=site, rail=RailName.WOOCOMMERCE).first()
    if account is None or not account.connected_account or not account.has_secret:
        raise RailDisabled("No WooCommerce store is connected to this site.")
    key, secret = woo_credentials(account)
    return WooClient(
        store_url=account.connected_account,
        consumer_key=key,
        consumer_secret=secret,
        timeout=float(getattr(settings, "SILL_WOOCOMMERCE_TIMEOUT_SECONDS", 20)),
    )


# Read again before where the last sync ended: WooCommerce times changes to the second, so a
# page can end between two orders of one second (upserting one again changes nothing).
SYNC_OVERLAP = timedelta(seconds=1)


def sync_orders(*, site: Site, full: bool = False) -> SyncReport:
    """Upsert the store's orders changed since the last sync (``full``: all of them).

    The list comes oldest-modified first, page by page; after each page is upserted, the
    account keeps the newest change it held (``orders_synced_through``), so the next sync
    asks only for orders modified since, and a store too large for one sync is read on by the
    next instead of from the start again.
    """
    report = SyncReport()
    client = woo_client_for(site)
    account = RailAccount.objects.get(site=site, rail=RailName.WOOCOMMERCE)
    through = None if full else account.orders_synced_through
    since = through - SYNC_OVERLAP if through is not None else None
    for page in client.order_pages(modified_after=since):
        orders = _readable(site, page, report)
        for order in orders:
            report.add(upsert_order(site=site, store_url=client.store_url, order=order))
        newest = max((o.modified_at for o in orders if o.modified_at is not None), default=None)
        if newest is not None and (through is None or newest > through):
            through = newest
            # Only while the account still names this store: another connected meanwhile
            # starts from its start (configure_woocommerce), not from where this one is.
            RailAccount.objects.filter(pk=account.pk, connected_account=client.store_url).update(
                orders_synced_through=through
            )
    return report


def _readable(site: Site, page: list[dict[str, Any]], report: SyncReport) -> list[WooOrder]:
    """The page's orders Sill can read. One it cannot is counted and logged, and the sync
    reads on: it used to end the whole sync, so no order after it ever came in."""
    orders = []
    for raw in page:
        try:
            orders.append(parse_order(raw))
        except UnreadableOrder as exc:
            report.unreadable += 1
            logger.warning(
                "WooCommerce order %r of site %s is unreadable, not synced: %s",
                str(raw.get("id"))[:40] if isinstance(raw, dict) else "?", site.pk, exc,
            )  # fmt: skip
    return orders


def upsert_order(*, site: Site, store_url: str, order: WooOrder) -> str:
    """Create or update one order of the store at ``store_url`` (Woo order ids are per store):
    ``created``, ``updated``, ``unchanged`` or ``skipped: …``."""
    if not order.paid:
        return "skipped: not paid through Stripe"
    with transaction.atomic():
        link = (
            WooOrderLink.objects.select_for_update()
            .select_related("order")
            .filter(site=site, store_url=store_url, woo_order_id=order.id)
            .first()
        )
        if link is not None:
            return _update(link, order, store_url)
        if (
            order.stripe_charge
            and Charge.objects.filter(
                rail=RailName.STRIPE, provider_charge_id=order.stripe_charge
            ).exists()
        ):
            return "skipped: its Stripe charge is already another order's"
        _create(site, store_url, order)
    return "created"


def _number(site: Site, order: WooOrder) -> str:
    """The order's own number, or, where the site already uses it, ``<number>-woo<id>``
    (the store's order id), then ``-woo<id>-2``, ``-3``… (the same id at another store the
    site was connected to before), the number cut so that the whole fits the column."""
    orders = Order.objects.filter(site=site)
    if not orders.filter(number=order.number).exists():
        return order.number
    longest = Order._meta.get_field("number").max_length
    assert longest is not None
    for n in itertools.count(1):
        suffix = f"-woo{order.id}" + (f"-{n}" if n > 1 else "")
        candidate = order.number[: longest - len(suffix)] + suffix
        if not orders.filter(number=candidate).exists():
            return candidate
    raise AssertionError("unreachable")  # pragma: no cover


def _create(site: Site, store_url: str, order: WooOrder) -> None:
    lines = lines_or_total(
        [NewLine(line.sku, line.name, line.quantity, line.unit_price) for line in order.lines],
        total=order.total,
    )
    created = create_order(
        site=site,
        lines=lines,
        currency=order.total.currency,
        buyer_name=order.name,
        buyer_email=order.email,
        number=_number(site, order),
    )
    # WooCommerce's total includes shipping, fees and taxes the line items do not.
    Order.objects.filter(pk=created.pk).update(
        total_minor=order.total.amount_minor, created_at=order.created_at
    )
    charged = stripe_charged(order.total)
    charge = Charge.objects.create(
        order=created,
        rail=RailName.STRIPE,
        provider_payment_id=order.stripe_payment_intent,
        provider_charge_id=order.stripe_charge,
        # The order's store: its Woo id (and so its order) is that store's alone.
        provider_account=store_url,
        # The Stripe account the site's key acts on now: the store's payments are taken there
        # (a store paid on another Stripe account cannot be refunded with this key either).
        payment_account=_stripe_payment_account(site),
        amount_minor=charged.amount_minor,
        currency=charged.currency,
        captured_at=order.paid_at,
        status=ChargeStatus.SUCCEEDED,
    )
    set_order_status(order=created, status=OrderStatus.PAID)
    WooOrderLink.objects.create(
        site=site,
        order=created,
        store_url=store_url,
        woo_order_id=order.id,
        woo_modified_at=order.modified_at,
    )
    append_record(
        site=site,
        kind=AuditKind.CHARGE,
        body={
            "order_id": created.pk,
            "charge_id": charge.pk,
            "rail": RailName.STRIPE,
            "provider_payment_id": order.stripe_payment_intent,
            "provider_charge_id": order.stripe_charge,
            "store_url": store_url,
            "amount_minor": charge.amount_minor,
            "currency": charge.currency,
            "woocommerce_order_id": order.id,
            "source": "woocommerce order sync",
        },
    )


def stripe_charged(total: Money) -> Money:
    """What the WooCommerce Stripe gateway charged for an order of ``total``: the total, but in
    a currency Stripe takes only in coarser steps (its three-decimal ones, in steps of 10) with
    the last digit taken down to the step, as the gateway sends it (``get_stripe_amount``): a
    KWD 10.125 order is a KWD 10.120 charge. Recorded as the order's total, the 5 fils were
    refundable in Sill, and a full refund of it went to Stripe off its step and failed."""
    step = amount_step(RailName.STRIPE, total.currency)
    return Money(total.amount_minor - total.amount_minor % step, total.currency)


def _stripe_payment_account(site: Site) -> str:
    """The Stripe account the site's key acts on (sill.rails.payment_account; ``""``:
    unknown)."""
    named = RailAccount.objects.filter(site=site, rail=RailName.STRIPE).values_list(
        "payment_account", flat=True
    )
    return named.first() or ""


def _update(link: WooOrderLink, order: WooOrder, store_url: str) -> str:
    # Held from before charges named their store (orders 0009 names those it can): the
    # store whose link it was just found under.
    Charge.objects.filter(order_id=link.order_id, rail=RailName.STRIPE, provider_account="").update(
        provider_account=store_url
    )
    if link.woo_modified_at and order.modified_at and order.modified_at < link.woo_modified_at:
        return "unchanged"  # an older delivery
    # One of the same second (``date_modified_gmt``'s resolution) may be another state of the
    # order: what it says is compared below, so a repeated one changes nothing.
    row = link.order
    fields = {
        "buyer_email": order.email or row.buyer_email,
        "buyer_name": order.name or row.buyer_name,
    }
    changed = any(getattr(row, k) != v for k, v in fields.items())
    if changed:
        Order.objects.filter(pk=row.pk).update(**fields, updated_at=timezone.now())
    WooOrderLink.objects.filter(pk=link.pk).update(woo_modified_at=order.modified_at)
    return "updated" if changed else "unchanged"
