"""Orders of a Shopify shop the site is no longer connected to.

A merchant connects the site to shop A, Sill brings A's orders in, then the merchant connects
shop B on Settings → Rails. A's orders stay in Sill. Shopify's order ids are global, so B
never holds one of them: every question about A's order put to B (with B's token) was
answered "no order", and a refund sent there failed in words that sent the merchant looking
for a missing order. Charges now name their shop (``Charge.provider_account``), and nothing
about A's orders is asked of B, or refunded anywhere, until A is connected again.

Two loopback shops (tests/rails/shopify_stub.py), the second with ids far from the first's
(Shopify's ids are global; the stub counts from the same number in every instance).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest
from django.utils import timezone

from audit.models import AuditRecord
from policies.facts import prefetch_rail_facts
from refunds.execution import RetryLater, execute_refund
from refunds.models import IdempotencyRecord, Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.reconcile.attention import check_refund_at_rail
from refunds.reconcile.inbox import catch_up_charge
from refunds.reconcile.runs import run_reconciliation
from refunds.review.decisions import DecisionRefused, approve_refund
from refunds.review.selectors import charge_link
from refunds.staff.services import create_staff_refund
from sill.accounts import two_factor
from sill.errors import SillError
from sill.orders.models import Charge, Order
from sill.rails.base import RefundFacts
from sill.rails.shopify.connect import configure_shopify
from sill.rails.shopify.sync import sync_order, sync_orders
from tests.rails.shopify_stub import SHOP, TOKEN, ShopifyStub, StubOrder, StubServer
from tests.rails.test_shopify_agent_refunds import shopify_intent
from tests.refunds.staff_api import post_full_refund

pytestmark = pytest.mark.django_db

OTHER = "other-shop.myshopify.com"


@pytest.fixture
def other() -> Iterator[ShopifyStub]:
    """Shop B, its ids far from shop A's (as Shopify's, which are global)."""
    with StubServer() as stub:
        stub._next_id = 500_000
        yield stub


@pytest.fixture
def connect(site, members, shopify, shopify_account, other, settings) -> Callable[[str], None]:
    """``connect(OTHER)``: the owner connects the site to shop B on the rails page (or to A
    again: ``connect(SHOP)``)."""
    settings.DEBUG = True  # the API address override (the loopback shops) needs DEBUG
    bases = {SHOP: shopify.url, OTHER: other.url}

    def to(shop: str) -> None:
        configure_shopify(
            site=site,
            actor=members["owner"].user,
            shop_domain=shop,
            access_token=TOKEN,
            api_base=bases[shop],
            second_factor=two_factor.OPERATOR,
        )

    return to


def _synced(site, shop: ShopifyStub, **placed) -> tuple[Order, StubOrder]:
    order = shop.add_order(**placed)
    sync_orders(site=site)
    return Order.objects.get(site=site, charges__provider_payment_id=str(order.id)), order


def _staff_refund(site, members, order, capture, **kind) -> Refund:
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    with capture(execute=False):  # executed by the test, when it says
        return create_staff_refund(
            site=site,
            order=order,
            actor=members[kind.pop("actor", "staff")].user,
            kind=kind.pop("kind", "full"),
            reason=reason,
            **kind,
        )


def _names_both(message: str) -> bool:
    return SHOP in message and OTHER in message


def test_orders_and_charges_name_the_shop_they_came_from(site, shopify, other, connect):
    order_a, placed_a = _synced(site, shopify)
    connect(OTHER)
    placed_b = other.add_order(total="20.00")
    sync_orders(site=site)
    late_b = other.add_order(total="30.00")
    sync_order(site=site, order_id=str(late_b.id), event_id="wh-late")  # what a webhook runs
    shops = dict(Charge.objects.values_list("provider_payment_id", "provider_account"))
    assert shops == {str(placed_a.id): SHOP, str(placed_b.id): OTHER, str(late_b.id): OTHER}
    # The signed charge record names the shop too.
    bodies = [json.loads(r.payload)["body"] for r in AuditRecord.objects.filter(kind="charge")]
    assert sorted(b["shop"] for b in bodies) == [OTHER, OTHER, SHOP]
    assert Charge.objects.get(order=order_a).provider_account == SHOP


def test_a_charge_held_without_its_shop_is_given_the_shop_it_is_read_from(
    site, shopify, shopify_account
):
    """A charge the migration could give no shop (none was connected then) is read as the
    connected shop's; the next read of its order from a shop names that shop."""
    order, _placed = _synced(site, shopify)
    Charge.objects.filter(order=order).update(provider_account="")
    assert sync_orders(site=site).unchanged == 1
    assert Charge.objects.get(order=order).provider_account == SHOP


def test_a_staff_refund_of_the_old_shops_order_is_refused_and_nothing_is_asked_or_sent(
    site, members, shopify, other, connect, client_for, django_capture_on_commit_callbacks
):
    """It was decided as a refund of B's: B's facts read "no order", so it was refused
    ``order_not_refundable`` in words about live money (or, allowed live, sent to B)."""
    order, placed = _synced(site, shopify)
    connect(OTHER)
    calls_a = len(shopify.calls)
    with pytest.raises(SillError) as refused:
        _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    assert (refused.value.code, refused.value.status) == ("rail_disabled", 409)
    assert _names_both(refused.value.message) and "no longer connected" in refused.value.message
    # The staff API answers the same, and keeps no answer under the key: connecting A again
    # makes the order refundable, and a retry under the key must then run.
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    with django_capture_on_commit_callbacks(execute=False):
        answer = post_full_refund(
            client_for("staff"), order.pk, reason_id=reason.pk, key="switched-1"
        )
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "rail_disabled"
    assert _names_both(answer.json()["error"]["message"])
    assert not IdempotencyRecord.objects.exists() and not Refund.objects.exists()
    assert other.calls == [] and len(shopify.calls) == calls_a and not placed.refunds


def test_the_order_page_says_the_order_came_from_a_shop_no_longer_connected(
    site, shopify, other, connect, client_for
):
    order, _placed = _synced(site, shopify)
    connect(OTHER)
    calls_a = len(shopify.calls)
    for persona in ("staff", "reviewer"):  # who may refund, and who may only look
        body = client_for(persona).get(f"/orders/{order.pk}/").content.decode()
        assert SHOP in body and "no longer connected" in body, persona
        assert "cannot be refunded through Sill" in body, persona
    staff_page = client_for("staff").get(f"/orders/{order.pk}/").content.decode()
    assert 'name="idempotency_key"' not in staff_page  # no refund form: the refusal instead
    assert other.calls == [] and len(shopify.calls) == calls_a
    assert client_for("outsider").get(f"/orders/{order.pk}/").status_code == 404


def test_the_connected_shops_order_page_names_its_shop_and_nothing_more(
    site, shopify, shopify_account, client_for
):
    order, _placed = _synced(site, shopify)
    body = client_for("reviewer").get(f"/orders/{order.pk}/").content.decode()
    assert SHOP in body and "no longer connected" not in body


def test_a_refund_decided_before_the_switch_fails_unsent_when_no_attempt_was_made(
    site, members, shopify, other, connect, django_capture_on_commit_callbacks
):
    """Executed after the switch, it was sent to B, which answered "no order": failed as
    declined by the rail, in words about a missing order."""
    order, placed = _synced(site, shopify)
    refund = _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    assert refund.status == "processing"
    connect(OTHER)
    assert execute_refund(refund.pk) == "failed"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "rail_disabled")
    assert _names_both(refund.failure_message)
    assert other.calls == [] and shopify.refund_creates() == [] and not placed.refunds
    assert Charge.objects.get(order=order).amount_reserved_minor == 0


def test_a_refund_whose_attempt_may_have_reached_the_old_shop_needs_attention_never_fails(
    site, members, shopify, other, connect, settings, django_capture_on_commit_callbacks
):
    """Its first attempt timed out after A made the refund. Retried after the switch, its
    lookup asked B, which has no such order: never failed (that rule held), but B was asked,
    and the words said B had no order. Now nothing is asked of B; once A is connected again,
    A's answer settles it."""
    order, placed = _synced(site, shopify)
    refund = _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    settings.SILL_SHOPIFY_TIMEOUT_SECONDS = 0.5
    shopify.slow_after_refund_seconds = 2.0  # made at A, then answered too late
    with pytest.raises(RetryLater) as lost:
        execute_refund(refund.pk)
    assert lost.value.ambiguous and len(placed.refunds) == 1
    settings.SILL_SHOPIFY_TIMEOUT_SECONDS = 5
    connect(OTHER)
    Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    assert execute_refund(refund.pk) == "needs_attention"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("needs_attention", "rail_disabled")
    assert _names_both(refund.failure_message)
    assert Charge.objects.get(order=order).amount_reserved_minor == refund.amount_minor
    # The beat task's lookups leave it as it is, asking B nothing.
    assert check_refund_at_rail(refund.pk) == "unknown"
    assert other.calls == [] and len(shopify.refund_creates()) == 1
    assert Refund.objects.get(pk=refund.pk).status == "needs_attention"
    # A connected again: its answer (the refund made under the key) settles the refund.
    connect(SHOP)
    assert check_refund_at_rail(refund.pk) == "succeeded"
    refund.refresh_from_db()
    assert refund.provider_refund_id == placed.refunds[0]["id"]
    assert len(shopify.refund_creates()) == 1 and len(placed.refunds) == 1


def test_the_rails_facts_of_the_old_shops_order_are_not_asked_of_the_new_shop(
    site, shopify, other, connect
):
    order, _placed = _synced(site, shopify)
    connect(OTHER)
    charge = Charge.objects.get(order=order)
    facts = prefetch_rail_facts(
        site_id=site.pk, order=order, charge=charge, now=timezone.now(), catch_up=catch_up_charge
    )
    assert facts == RefundFacts() and other.calls == []


def test_approving_a_held_refund_after_the_switch_refuses_it_and_sends_nothing(
    site, members, shopify, other, connect, django_capture_on_commit_callbacks
):
    """The approval caught up with B (asking it about A's order) and approved: the refund
    then failed at execution, sent to B."""
    from policies.catalog import TEMPLATES
    from policies.services import apply_catalog_item

    apply_catalog_item(
        site=site, actor=members["owner"].user, item=TEMPLATES["conservative"],
        params={"holdOverUsd": "5.00"},
    )  # fmt: skip
    order, placed = _synced(site, shopify)
    held = _staff_refund(site, members, order, django_capture_on_commit_callbacks)
    assert held.status == "held"
    connect(OTHER)
    calls_a = len(shopify.calls)
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(DecisionRefused) as refused,
    ):
        approve_refund(refund=held, actor=members["owner"].user)
    assert refused.value.code == "rail_disabled" and _names_both(refused.value.message)
    held.refresh_from_db()
    assert (held.status, held.outcome_code) == ("rejected", "rail_disabled")
    assert other.calls == [] and len(shopify.calls) == calls_a and not placed.refunds
    assert Charge.objects.get(order=order).amount_reserved_minor == 0


def test_reconciliation_leaves_the_old_shops_charges_out_and_checks_the_new_ones(
    site, shopify, shopify_account, other, connect
):
    """A's charges were compared with B, which has no such orders: each counted unreadable,
    every run, and B asked about each of them."""
    _synced(site, shopify)
    connect(OTHER)
    run = run_reconciliation(account_id=shopify_account.pk, force=True)
    assert run is not None and run.error == ""
    assert (run.charges_checked, run.charges_unreadable, run.items_opened) == (0, 0, 0)
    assert other.calls == []
    placed_b = other.add_order(total="20.00")
    sync_orders(site=site)
    other._make_refund(placed_b, Decimal("5.00"), note="from B's admin")
    run = run_reconciliation(account_id=shopify_account.pk, force=True)
    assert run is not None
    assert (run.charges_checked, run.charges_unreadable, run.items_opened) == (1, 0, 1)


def test_an_agent_naming_the_old_shops_order_finds_no_order(
    site, shopify, other, connect, api, sign
):
    """A mandate names a Shopify order by its id alone: the connected shop's. A's order was
    found, its facts asked of B ("no order"), and it was rejected ``live_not_allowed``."""
    _order, placed = _synced(site, shopify)
    connect(OTHER)
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "original_not_charged")
    assert other.calls == [] and shopify.refund_creates() == []


def test_the_held_pages_link_opens_the_order_in_its_own_shops_admin(site, shopify, other, connect):
    order, placed = _synced(site, shopify)
    connect(OTHER)
    link = charge_link(Charge.objects.select_related("order").get(order=order))
    assert link is not None and link.url == f"https://{SHOP}/admin/orders/{placed.id}"


def test_the_rails_page_says_which_orders_a_switch_leaves_behind(
    site, shopify, other, connect, client_for, settings
):
    """The merchant learns it from the switch and the card, not one refused refund at a time:
    per earlier shop, how many orders still have money to refund, and how much."""
    _synced(site, shopify, total="40.00")
    _synced(site, shopify, total="25.00", refunded="5.00")
    _synced(site, shopify, total="10.00", refunded="10.00")  # nothing left: not counted
    client = client_for("owner")
    assert "Orders of an earlier shop" not in client.get("/settings/rails/").content.decode()

    switched = client.post(
        "/settings/rails/shopify/",
        {"shop_domain": OTHER, "access_token": TOKEN, "api_base": other.url},
        follow=True,
    )

    said = f"2 orders from {SHOP} ($60.00 still refundable)"
    page = switched.content.decode()
    assert f"Store {OTHER} saved. {said}" in page  # the message after the switch
    assert "Orders of an earlier shop" in page and said in page  # and the card
    assert f"until {SHOP} is connected again" in page
    connect(SHOP)  # back to A: nothing is left behind
    assert "Orders of an earlier shop" not in client.get("/settings/rails/").content.decode()
