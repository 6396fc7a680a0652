"""Orders of a WooCommerce store the site is no longer connected to.

A merchant connects the site to store A, Sill brings A's orders in, then the merchant connects
store B on Settings → Rails. A's orders stay in Sill. Woo order ids are per store, so B's
order 1001 is another order (someone else's) than A's 1001. A refund of A's order went on as
if nothing had changed: Stripe refunded A's payment, and the record of it on the Woo order
then gave up (it is never written on B's 1001), so the money moved for an order of a store
Sill no longer speaks to, and A's order never said so. Charges now name their store
(``Charge.provider_account``), and A's orders are not refunded, nor written on either store,
until A is connected again (the Shopify rule, tests/rails/test_shopify_shop_switch.py). Unlike
an earlier Shopify shop's, their payments are still on the site's Stripe account, so
reconciliation keeps reading them there: what Stripe reports (a refund made in its dashboard)
is recorded.

Two loopback stores (tests/rails/woo_stub.py), both numbering their orders from 1001, and
localstripe for the payments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from django.test import Client
from django.utils import timezone

from audit.models import AuditRecord
from policies.facts import prefetch_rail_facts
from refunds.execution import execute_refund
from refunds.models import IdempotencyRecord, ReconciliationItem, Refund, RefundReason
from refunds.reconcile.attention import check_refund_at_rail
from refunds.reconcile.inbox import catch_up_charge
from refunds.reconcile.runs import run_reconciliation
from refunds.review.decisions import DecisionRefused, approve_refund
from sill.accounts import two_factor
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.base import RefundFacts
from sill.rails.left_behind import left_behind
from sill.rails.models import RailAccount
from sill.rails.woocommerce.connect import configure_woocommerce
from sill.rails.woocommerce.models import WooOrderLink, WooRecordState
from sill.rails.woocommerce.record import woocommerce_records_for
from sill.rails.woocommerce.sync import sync_orders
from tests.rails.stripe_events import stripe_account
from tests.rails.test_shopify_agent_refunds import shopify_intent
from tests.rails.test_shopify_shop_switch import _staff_refund
from tests.rails.test_woocommerce_refunds import _paid_at_localstripe
from tests.rails.woo_fixtures import woo_headers
from tests.rails.woo_stub import CONSUMER_KEY, CONSUMER_SECRET, StubOrder, StubServer, WooStub
from tests.refunds.conftest import post
from tests.refunds.staff_api import post_full_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def other() -> Iterator[WooStub]:
    """Store B: its first order is 1001, as store A's is."""
    with StubServer() as stub:
        yield stub


@pytest.fixture
def stripe_on(site, localstripe_url) -> RailAccount:
    return stripe_account(site, enabled=True, api_base=localstripe_url)


@pytest.fixture
def connect(site, members, woo_account) -> Callable[[WooStub], None]:
    """``connect(other)``: the owner connects the site to store B on the rails page (or to A
    again: ``connect(woo)``), its keys checked against that store."""

    def to(store: WooStub) -> None:
        configure_woocommerce(
            site=site,
            actor=members["owner"].user,
            store_url=store.url,
            consumer_key=CONSUMER_KEY,
            consumer_secret=CONSUMER_SECRET,
            webhook_secret=webhook_secret_of(store),
            second_factor=two_factor.OPERATOR,
        )

    return to


def webhook_secret_of(store: WooStub) -> str:
    """The secret of ``store``'s webhook (another store takes one of its own)."""
    return f"webhook-secret-of-{store.url}"


def _synced(site, store: WooStub, sdk) -> tuple[Order, StubOrder, str]:
    """An order of ``store`` paid at localstripe and synced: Sill's order, the store's, and
    the Stripe charge id."""
    intent, charge = _paid_at_localstripe(sdk)
    placed = store.add_order(total="89.00", stripe_intent=intent, stripe_charge=charge)
    sync_orders(site=site)
    link = WooOrderLink.objects.get(site=site, store_url=store.url, woo_order_id=placed.id)
    return link.order, placed, charge


class _Quiet:
    """Whether a store was asked anything since: the stub notes every request it is sent."""

    def __init__(self, *stores: WooStub) -> None:
        self.stores = stores
        self.seen = [len(s.auth_seen) for s in stores]

    def __bool__(self) -> bool:
        return all(
            len(s.auth_seen) == seen and not s.refund_posts
            for s, seen in zip(self.stores, self.seen, strict=True)
        )


def _names_both(message: str, woo: WooStub, other: WooStub) -> bool:
    return woo.url in message and other.url in message and "WooCommerce store" in message


def _stripe_refunded(sdk, charge: str) -> int:
    return sdk.v1.charges.retrieve(charge).amount_refunded


def test_charges_name_the_store_their_order_came_from(
    site, woo, other, woo_account, stripe_on, connect, sdk, django_capture_on_commit_callbacks
):
    order_a, _placed_a, _ = _synced(site, woo, sdk)
    connect(other)
    order_b, placed_b, _ = _synced(site, other, sdk)
    assert placed_b.id == 1001  # Woo order ids are per store
    # And one that store B's webhook brings in (filed under its sender).
    intent, charge = _paid_at_localstripe(sdk)
    hooked = other.add_order(total="30.00", stripe_intent=intent, stripe_charge=charge)
    body = json.dumps(hooked.json()).encode()
    with django_capture_on_commit_callbacks(execute=True):
        answer = Client().post(
            f"/webhooks/woocommerce/{site.pk}",
            body,
            content_type="application/json",
            **woo_headers(
                body, url=other.url, topic="order.created", secret=webhook_secret_of(other)
            ),
        )
    assert answer.status_code == 200, answer.content
    order_c = WooOrderLink.objects.get(store_url=other.url, woo_order_id=hooked.id).order
    stores = {
        o.pk: Charge.objects.get(order=o).provider_account for o in (order_a, order_b, order_c)
    }
    assert stores == {order_a.pk: woo.url, order_b.pk: other.url, order_c.pk: other.url}
    # The signed charge record names the store too.
    bodies = [json.loads(r.payload)["body"] for r in AuditRecord.objects.filter(kind="charge")]
    assert sorted(b["store_url"] for b in bodies) == sorted([woo.url, other.url, other.url])


def test_a_charge_held_without_its_store_is_given_its_orders_store_at_the_next_read(
    site, woo, woo_account, stripe_on, sdk
):
    order, placed, _ = _synced(site, woo, sdk)
    Charge.objects.filter(order=order).update(provider_account="")
    placed.email = "changed@example.com"
    placed.modified_at = timezone.now()
    sync_orders(site=site)
    assert Charge.objects.get(order=order).provider_account == woo.url


def test_a_staff_refund_of_the_old_stores_order_is_refused_and_nothing_is_sent_anywhere(
    site,
    members,
    woo,
    other,
    stripe_on,
    connect,
    sdk,
    client_for,
    django_capture_on_commit_callbacks,
):
    """It was refunded at Stripe as if nothing had changed, and its record on the Woo order
    then gave up: the money moved for an order of a store the site no longer speaks to."""
    order, _placed, charge = _synced(site, woo, sdk)
    other.add_order(total="89.00", stripe_charge="ch_someone_else")  # B's own order 1001
    connect(other)
    quiet = _Quiet(woo, other)
    with pytest.raises(SillError) as refused:
        _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    assert (refused.value.code, refused.value.status) == ("rail_disabled", 409)
    assert _names_both(refused.value.message, woo, other)
    assert "no longer connected" in refused.value.message
    # The staff API answers the same, and keeps no answer under the key: connecting A again
    # makes the order refundable, and a retry under the key must then run.
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    with django_capture_on_commit_callbacks(execute=True):
        answer = post_full_refund(
            client_for("staff"), order.pk, reason_id=reason.pk, key="switched-1"
        )
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "rail_disabled"
    assert _names_both(answer.json()["error"]["message"], woo, other)
    assert not IdempotencyRecord.objects.exists() and not Refund.objects.exists()
    assert _stripe_refunded(sdk, charge) == 0 and quiet
    assert woocommerce_records_for(order) == []


def test_the_order_page_says_the_order_came_from_a_store_no_longer_connected(
    site, woo, other, stripe_on, connect, sdk, client_for
):
    order, _placed, _ = _synced(site, woo, sdk)
    connect(other)
    quiet = _Quiet(woo, other)
    for persona in ("staff", "reviewer"):  # who may refund, and who may only look
        body = client_for(persona).get(f"/orders/{order.pk}/").content.decode()
        assert woo.url in body and "no longer connected" in body, persona
        assert "cannot be refunded through Sill" in body, persona
        assert "<dt>Store</dt>" in body, persona
    staff_page = client_for("staff").get(f"/orders/{order.pk}/").content.decode()
    assert 'name="idempotency_key"' not in staff_page  # no refund form: the refusal instead
    assert quiet
    assert client_for("outsider").get(f"/orders/{order.pk}/").status_code == 404


def test_the_connected_stores_order_page_names_its_store_and_nothing_more(
    site, woo, woo_account, stripe_on, sdk, client_for
):
    order, _placed, _ = _synced(site, woo, sdk)
    body = client_for("reviewer").get(f"/orders/{order.pk}/").content.decode()
    assert "<dt>Store</dt>" in body and woo.url in body and "no longer connected" not in body


def test_a_refund_decided_before_the_switch_fails_unsent_when_no_attempt_was_made(
    site, members, woo, other, stripe_on, connect, sdk, django_capture_on_commit_callbacks
):
    """Executed after the switch, Stripe refunded it and the Woo record gave up."""
    order, _placed, charge = _synced(site, woo, sdk)
    refund = _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    assert refund.status == "processing"
    connect(other)
    quiet = _Quiet(woo, other)
    assert execute_refund(refund.pk) == "failed"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "rail_disabled")
    assert _names_both(refund.failure_message, woo, other)
    assert _stripe_refunded(sdk, charge) == 0 and quiet
    assert Charge.objects.get(order=order).amount_reserved_minor == 0


def test_a_refund_whose_attempt_may_have_reached_stripe_needs_attention_never_fails(
    site, members, woo, other, stripe_on, connect, sdk, django_capture_on_commit_callbacks
):
    """Its first attempt reached Stripe, which refunded, and its answer was lost (a worker
    killed after the call). Retried after the switch: it needs attention (never failed), asks
    nothing until A is connected again, and then Stripe's answer settles it, recorded on A's
    order."""
    order, placed, charge = _synced(site, woo, sdk)
    other.add_order(total="89.00", stripe_charge="ch_someone_else")  # B's own order 1001
    refund = _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    # What the lost attempt did: Stripe refunded under the refund's key, and Sill had marked
    # the refund attempted before calling.
    sdk.v1.refunds.create(
        params={"charge": charge, "amount": 8900, "metadata": {"sill_refund_id": refund.pk}},
        options={"idempotency_key": f"sill-refund-{refund.pk}"},
    )
    Refund.objects.filter(pk=refund.pk).update(rail_attempted_at=timezone.now())
    connect(other)
    quiet = _Quiet(woo, other)
    assert execute_refund(refund.pk) == "needs_attention"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("needs_attention", "rail_disabled")
    assert _names_both(refund.failure_message, woo, other)
    assert Charge.objects.get(order=order).amount_reserved_minor == refund.amount_minor
    # The beat task's lookups leave it as it is.
    assert check_refund_at_rail(refund.pk) == "unknown"
    assert Refund.objects.get(pk=refund.pk).status == "needs_attention" and quiet
    # A connected again: Stripe's answer (the refund made under the key) settles it, and it
    # is written on A's order 1001, never on B's.
    connect(woo)
    with django_capture_on_commit_callbacks(execute=True):
        assert check_refund_at_rail(refund.pk) == "succeeded"
    assert _stripe_refunded(sdk, charge) == 8900  # once
    [record] = woocommerce_records_for(order)
    assert record.state == WooRecordState.RECORDED and len(placed.refunds) == 1
    assert other.refund_posts == []


def test_approving_a_held_refund_after_the_switch_refuses_it_and_sends_nothing(
    site, members, woo, other, stripe_on, connect, sdk, django_capture_on_commit_callbacks
):
    from policies.catalog import TEMPLATES
    from policies.services import apply_catalog_item

    apply_catalog_item(
        site=site, actor=members["owner"].user, item=TEMPLATES["conservative"],
        params={"holdOverUsd": "5.00"},
    )  # fmt: skip
    order, _placed, charge = _synced(site, woo, sdk)
    held = _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    assert held.status == "held"
    connect(other)
    quiet = _Quiet(woo, other)
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(DecisionRefused) as refused,
    ):
        approve_refund(refund=held, actor=members["owner"].user)
    assert refused.value.code == "rail_disabled"
    assert _names_both(refused.value.message, woo, other)
    held.refresh_from_db()
    assert (held.status, held.outcome_code) == ("rejected", "rail_disabled")
    assert _stripe_refunded(sdk, charge) == 0 and quiet
    assert Charge.objects.get(order=order).amount_reserved_minor == 0


def test_an_agents_refund_of_the_old_stores_order(
    site, woo, other, stripe_on, connect, sdk, sign, django_capture_on_commit_callbacks
):
    """Approved while A was connected and executed after the switch, it was refunded at
    Stripe; named after the switch, the mandate means B's order 1001 (its store's), and a site
    whose store B has no such order has nothing to refund."""
    order, placed, charge = _synced(site, woo, sdk)
    intent = shopify_intent(str(placed.id))
    intent["original_order"] = {"rail": "woocommerce", "id": str(placed.id)}
    with django_capture_on_commit_callbacks(execute=False):  # executed below, after the switch
        answer = post(Client(), sign(intent)).json()
    assert (answer["decision"], answer["status"]) == ("approved", "processing"), answer
    connect(other)
    quiet = _Quiet(woo, other)
    assert execute_refund(answer["refund_id"]) == "failed"
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert (refund.status, refund.outcome_code, refund.order_id) == (
        "failed",
        "rail_disabled",
        order.pk,
    )
    assert _names_both(refund.failure_message, woo, other)
    again = shopify_intent(str(placed.id))
    again["original_order"] = {"rail": "woocommerce", "id": str(placed.id)}
    with django_capture_on_commit_callbacks(execute=True):
        later = post(Client(), sign(again)).json()
    assert (later["decision"], later["reason"]) == ("rejected", "original_not_charged"), later
    assert _stripe_refunded(sdk, charge) == 0 and quiet


def test_connecting_the_old_store_again_makes_its_order_refundable_again(
    site, members, woo, other, stripe_on, connect, sdk, django_capture_on_commit_callbacks
):
    order, placed, charge = _synced(site, woo, sdk)
    other.add_order(total="89.00", stripe_charge="ch_someone_else")  # B's own order 1001
    connect(other)
    with pytest.raises(SillError, match="no longer connected"):
        _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    connect(woo)
    refund = _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.pk) == "succeeded"
    assert _stripe_refunded(sdk, charge) == 8900
    [record] = woocommerce_records_for(order)
    assert record.state == WooRecordState.RECORDED
    assert len(placed.refunds) == 1 and other.refund_posts == []


def test_the_stripe_facts_of_the_old_stores_order_are_not_read(
    site, woo, other, stripe_on, connect, sdk
):
    """The refund facts of an order of a store the site no longer connects are not read: they
    are unknown (the refund is refused anyway; reconciliation still reads its payment at
    Stripe, below); the connected store's are read."""
    order, _placed, _charge = _synced(site, woo, sdk)
    charge = Charge.objects.get(order=order)

    def facts() -> RefundFacts:
        return prefetch_rail_facts(
            site_id=site.pk, order=order, charge=charge, now=timezone.now(),
            catch_up=catch_up_charge,
        )  # fmt: skip

    assert facts().charge_refunded_minor == 0  # read at Stripe while A is connected
    connect(other)
    assert facts() == RefundFacts()
    assert prefetch_rail_facts(
        site_id=site.pk, order=order, charge=charge, now=timezone.now(),
        catch_up=catch_up_charge, account=stripe_on,
    ) == RefundFacts()  # fmt: skip


def test_reconciliation_checks_the_old_stores_charges_too(
    site, woo, other, stripe_on, connect, sdk
):
    """Their payments are still on the Stripe account connected now: the run reads them as it
    reads the connected store's (tests below: what it finds is recorded)."""
    _synced(site, woo, sdk)
    run = run_reconciliation(account_id=stripe_on.pk, force=True)
    assert run is not None and (run.charges_checked, run.charges_unreadable) == (1, 0)
    connect(other)
    _synced(site, other, sdk)
    quiet = _Quiet(woo, other)
    run = run_reconciliation(account_id=stripe_on.pk, force=True)
    assert run is not None and run.error == ""
    assert (run.charges_checked, run.charges_unreadable, run.items_opened) == (2, 0, 0)
    assert quiet  # Stripe alone is read: neither store is asked anything


def test_a_refund_made_at_stripe_on_the_old_stores_order_is_reconciled(
    site, members, woo, other, woo_account, stripe_on, connect, sdk, client_for,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    """Refunded in Stripe's dashboard after the switch, with no webhook: the run left A's
    charge out, so the refund was never recorded, the charge and the order page went on
    saying nothing was refunded, and the rails card counted the refunded money as still
    refundable. Now the run records it and opens its inbox item; the order stays
    unrefundable through Sill, and nothing is written on either store."""
    order, _placed, charge_id = _synced(site, woo, sdk)
    other.add_order(total="89.00", stripe_charge="ch_someone_else")  # B's own order 1001
    connect(other)
    quiet = _Quiet(woo, other)
    outside = sdk.v1.refunds.create(params={"charge": charge_id, "amount": 3000})
    run = run_reconciliation(account_id=stripe_on.pk, force=True)
    assert run is not None and run.error == ""
    assert (run.charges_checked, run.charges_unreadable, run.items_opened) == (1, 0, 1)
    charge = Charge.objects.get(order=order)
    assert charge.amount_refunded_outside_minor == 3000
    [recorded] = ExternalRefund.objects.filter(charge=charge)
    assert (recorded.provider_refund_id, recorded.amount_minor) == (outside.id, 3000)
    [item] = ReconciliationItem.objects.filter(charge=charge, resolved_at__isnull=True)
    assert item.order_id == order.pk
    # The order page says so; the rails card counts what is left, and so does left_behind.
    page = client_for("reviewer").get(f"/orders/{order.pk}/").content.decode()
    assert "+ $30.00 outside Sill" in page and "<dt>Refundable</dt><dd>$59.00" in page
    rails = client_for("owner").get("/settings/rails/").content.decode()
    assert f"1 order from {woo.url} ($59.00 still refundable)" in rails
    [behind] = left_behind(site_id=site.pk, rail="woocommerce", connected=other.url)
    assert (behind.account, behind.orders) == (woo.url, 1)
    assert behind.refundable == (Money(8900 - 3000, "USD"),)
    # Reading is not refunding: the order is still refused, and nothing else moved.
    with pytest.raises(SillError) as refused:
        _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    assert refused.value.code == "rail_disabled"
    assert _stripe_refunded(sdk, charge_id) == 3000 and quiet
    assert woocommerce_records_for(order) == []
    # Refunded in full at Stripe, the order is no longer left behind with money to refund.
    sdk.v1.refunds.create(params={"charge": charge_id, "amount": 5900})
    run = run_reconciliation(account_id=stripe_on.pk, force=True)
    assert run is not None and run.items_opened == 1
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 8900
    assert left_behind(site_id=site.pk, rail="woocommerce", connected=other.url) == []
    rails = client_for("owner").get("/settings/rails/").content.decode()
    assert "Orders of an earlier store" not in rails
    assert quiet


def test_the_rails_page_says_which_of_the_earlier_stores_orders_are_left_behind(
    site, woo, other, woo_account, stripe_on, connect, sdk, client_for
):
    """Their charges are Stripe's (rail ``stripe``), naming the store: the WooCommerce card
    counts them, not the Stripe card."""
    _synced(site, woo, sdk)
    connect(other)
    page = client_for("owner").get("/settings/rails/").content.decode()
    said = f"1 order from {woo.url} ($89.00 still refundable)"
    assert "Orders of an earlier store" in page and said in page
    assert page.count(said) == 1  # on the WooCommerce card only
    connect(woo)
    assert (
        "Orders of an earlier store"
        not in client_for("owner").get("/settings/rails/").content.decode()
    )
