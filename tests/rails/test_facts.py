"""Rails reading refund facts: the mock from Sill's records, Stripe through localstripe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import stripe
from django.utils import timezone

from sill.money import Money
from sill.orders.models import Charge, ChargeStatus, Customer, Dispute, Order
from sill.orders.services import NewLine, create_order
from sill.rails.base import Rail, RefundFacts, RefundFactsReader, RefundFactsRequest
from sill.rails.mock import MockRail
from sill.rails.stripe import StripeRail

KEY = "sk_test_51SillFactsKeyThatMustNeverLeak"


def since(days: int = 90) -> datetime:
    return timezone.now() - timedelta(days=days)


# --- the mock rail: Sill's records are its provider database ------------------------------------


@pytest.fixture
def customer(site) -> Customer:
    return Customer.objects.create(
        site=site,
        email="ada@example.com",
        rail_customer_id="cus_mock_ada",
        provider_created_at=datetime(2025, 1, 2, tzinfo=UTC),
    )


def charge_for(
    site, customer: Customer | None, *, refunded: int = 0, currency: str = "USD", days_ago: int = 1
) -> Charge:
    order = create_order(
        site=site,
        lines=[NewLine(sku="S", name="Item", quantity=1, unit_price=Money(5000, currency))],
        currency=currency,
        buyer_name="Ada",
        buyer_email="ada@example.com",
        customer=customer,
    )
    return Charge.objects.create(
        order=order,
        rail="mock",
        provider_charge_id=f"mock_ch_{order.pk}",
        amount_minor=5000,
        amount_refunded_minor=refunded,
        currency=currency,
        status=ChargeStatus.SUCCEEDED,
        captured_at=timezone.now() - timedelta(days=days_ago),
    )


def ask(rail: MockRail, charge: Charge, **overrides) -> RefundFacts:
    order = Order.objects.get(pk=charge.order_id)
    fields = {
        "provider_charge_id": charge.provider_charge_id,
        "currency": charge.currency,
        "history_since": since(),
        "sill_charge_id": charge.pk,
        "sill_customer_id": order.customer_id,
        **overrides,
    }
    request = RefundFactsRequest(**fields)
    return rail.read_refund_facts(request)


def test_both_rails_read_facts_and_stay_rails():
    assert isinstance(MockRail(site_id="s"), RefundFactsReader)
    stripe_rail = StripeRail(secret_key=KEY)
    assert isinstance(stripe_rail, RefundFactsReader) and isinstance(stripe_rail, Rail)


@pytest.mark.django_db
def test_the_mock_rail_reads_the_charge_the_customer_and_the_history(site, customer):
    charge = charge_for(site, customer, refunded=100, days_ago=3)
    charge_for(site, customer, refunded=2000, days_ago=10)
    charge_for(site, customer, refunded=0, days_ago=11)
    charge_for(site, customer, refunded=300, currency="EUR")
    charge_for(site, customer, refunded=700, days_ago=120)
    charge_for(site, None, refunded=900)  # a guest's charge: someone else
    facts = ask(MockRail(site_id=site.pk), charge)
    assert facts.charge_created_at == charge.captured_at
    assert facts.charge_disputed is False
    assert facts.customer_created_at == datetime(2025, 1, 2, tzinfo=UTC)
    history = facts.history
    assert history is not None
    assert (history.refunded_charges, history.refunded_minor, history.truncated) == (2, 2100, False)


@pytest.mark.django_db
def test_the_mock_rail_finds_the_customer_by_its_provider_id_too(site, customer):
    charge = charge_for(site, customer, refunded=100)
    facts = ask(MockRail(site_id=site.pk), charge, sill_customer_id=None,
                provider_customer_id="cus_mock_ada")  # fmt: skip
    assert facts.history is not None and facts.history.refunded_charges == 1


@pytest.mark.django_db
def test_the_mock_rail_pages_the_history_like_stripe(site, customer):
    charges = [charge_for(site, customer, refunded=10, days_ago=d) for d in range(1, 5)]
    facts = ask(MockRail(site_id=site.pk), charges[0], history_limit=3)
    assert facts.history is not None
    assert (facts.history.refunded_charges, facts.history.truncated) == (3, True)
    facts = ask(MockRail(site_id=site.pk), charges[0], history_limit=4)
    assert facts.history is not None and not facts.history.truncated


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "disputed"), [("under_review", True), ("lost", True), ("won", False)]
)
def test_the_mock_rail_sees_open_and_lost_disputes(site, status, disputed):
    """A lost dispute: the buyer's bank already gave the money back, so the charge stays
    disputed for the rules; a won one does not."""
    charge = charge_for(site, None)
    Dispute.objects.create(
        charge=charge, reason="fraudulent", amount_minor=5000, currency="USD",
        status=status, opened_at=timezone.now(),
    )  # fmt: skip
    facts = ask(MockRail(site_id=site.pk), charge)
    assert facts.charge_disputed is disputed
    assert facts.customer_created_at is None and facts.history is None


@pytest.mark.django_db
def test_the_mock_rail_stays_on_its_site(site, other_site, customer):
    charge = charge_for(site, customer, refunded=100)
    facts = ask(MockRail(site_id=other_site.pk), charge)
    assert facts == RefundFacts()


@pytest.mark.django_db
def test_the_mock_rail_can_be_scripted_to_fail(site, customer):
    from sill.rails.base import RetryableRailError

    charge = charge_for(site, customer, refunded=100)
    with pytest.raises(RetryableRailError):
        ask(MockRail(site_id=site.pk, config={"facts": "fail"}), charge)
    facts = ask(MockRail(site_id=site.pk, config={"facts": "no_customers"}), charge)
    assert facts.charge_created_at is not None
    assert facts.customer_created_at is None and facts.history is None


# --- Stripe through localstripe ------------------------------------------------------------------


@pytest.fixture
def stripe_rail(localstripe_url: str) -> StripeRail:
    return StripeRail(secret_key=KEY, api_base=localstripe_url)


@pytest.fixture
def sdk(localstripe_url: str) -> stripe.StripeClient:
    return stripe.StripeClient(KEY, base_addresses={"api": localstripe_url}, max_network_retries=0)


def pay(sdk: stripe.StripeClient, customer: str | None, amount: int, currency: str = "usd") -> str:
    params = {
        "amount": amount,
        "currency": currency,
        "payment_method": "pm_card_visa",
        "payment_method_types": ["card"],
        "confirm": True,
    }
    if customer:
        params["customer"] = customer
    intent = sdk.v1.payment_intents.create(params=params)
    charge = intent.latest_charge
    return charge if isinstance(charge, str) else charge.id


def refund(sdk: stripe.StripeClient, charge_id: str, amount: int) -> None:
    sdk.v1.refunds.create(params={"charge": charge_id, "amount": amount})


def stripe_request(charge_id: str, **overrides) -> RefundFactsRequest:
    return RefundFactsRequest(
        provider_charge_id=charge_id, currency="USD", history_since=since(), **overrides
    )


def test_stripe_reads_the_charge_the_customer_and_the_history(stripe_rail, sdk):
    customer = sdk.v1.customers.create(params={"email": "ada@example.com"})
    first = pay(sdk, customer.id, 8900)
    refund(sdk, first, 1000)
    refund(sdk, first, 500)  # refunded twice: one charge
    second = pay(sdk, customer.id, 3000)
    refund(sdk, second, 3000)
    pay(sdk, customer.id, 1000)  # not refunded
    euro = pay(sdk, customer.id, 2000, currency="eur")
    refund(sdk, euro, 2000)  # another currency
    facts = stripe_rail.read_refund_facts(stripe_request(first, provider_customer_id=customer.id))
    assert facts.charge_created_at is not None
    assert abs(facts.charge_created_at - timezone.now()) < timedelta(minutes=5)
    assert facts.customer_created_at == datetime.fromtimestamp(customer.created, tz=UTC)
    assert facts.history is not None
    assert (facts.history.refunded_charges, facts.history.refunded_minor) == (2, 4500)
    assert not facts.history.truncated
    # localstripe's charges carry no "disputed" field: Stripe did not say, so unknown.
    assert facts.charge_disputed is None


def test_stripe_finds_the_customer_on_the_charge(stripe_rail, sdk):
    customer = sdk.v1.customers.create(params={"email": "ada@example.com"})
    charge = pay(sdk, customer.id, 1000)
    refund(sdk, charge, 100)
    facts = stripe_rail.read_refund_facts(stripe_request(charge))
    assert facts.history is not None and facts.history.refunded_charges == 1


def test_stripe_reports_a_full_page_as_truncated(stripe_rail, sdk):
    customer = sdk.v1.customers.create(params={"email": "ada@example.com"})
    charges = [pay(sdk, customer.id, 1000) for _ in range(3)]
    for charge in charges:
        refund(sdk, charge, 100)
    facts = stripe_rail.read_refund_facts(
        stripe_request(charges[0], provider_customer_id=customer.id, history_limit=2)
    )
    assert facts.history is not None
    assert (facts.history.refunded_charges, facts.history.truncated) == (2, True)


def test_stripe_leaves_what_it_cannot_read_unknown(stripe_rail, sdk, caplog):
    charge = pay(sdk, None, 1000)
    # A guest charge: no customer, so no customer facts at all.
    facts = stripe_rail.read_refund_facts(stripe_request(charge))
    assert facts.charge_created_at is not None
    assert facts.customer_created_at is None and facts.history is None
    # A deleted (or unreadable) customer and a missing charge: unknown, never an exception.
    facts = stripe_rail.read_refund_facts(
        stripe_request("ch_missing", provider_customer_id="cus_missing")
    )
    assert facts == RefundFacts()
    assert KEY not in caplog.text


def test_stripe_never_lets_the_key_out_of_a_failed_read(caplog):
    rail = StripeRail(secret_key=KEY, api_base="http://127.0.0.1:9", timeout=1)
    facts = rail.read_refund_facts(stripe_request("ch_1", provider_customer_id="cus_1"))
    assert facts == RefundFacts()
    assert KEY not in caplog.text
