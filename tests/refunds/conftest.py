"""Refund fixtures: agent keys and signed mandates, orders, reasons, staff and held refunds.

Held refunds are made the way the pipeline makes them: the site gets a real
``require_approval`` rule (a policy template, applied through ``policies.services``), then an
agent's signed mandate goes through ``POST /api/v1/mandates``, or a staff refund through
``create_staff_refund``, and the policy holds it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from nacl.signing import SigningKey

from policies.catalog import item_by_id
from policies.services import apply_catalog_item
from refunds.agent.mandates import canonical_json, sign_mandate
from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund, RefundOrigin, RefundReason, RefundStatus
from refunds.quote import charged_charge
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.review.slack import seal_bot_token
from refunds.staff.services import create_staff_refund
from sill.accounts import two_factor
from sill.accounts.models import Agent, AgentKey, Membership, Site
from sill.accounts.services import set_agent_active
from sill.ids import new_ulid
from sill.money import Money
from sill.orders.models import Charge, Dispute, Order, Rail
from sill.orders.outside import OutsideRefund, record_outside_refund
from sill.rails.models import MockLedgerEntry, RailAccount
from sill.rails.registry import ensure_mock_rail
from tests.conftest import site_owner
from tests.refunds import slack_stub

KEY_ID = "test-2026-11"
KEY_SEED = bytes(range(1, 33))
ORIGINAL = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"  # the seed's purchase mandate

# --- agents and mandates ------------------------------------------------------------------


def register_key(agent: Agent) -> AgentKey:
    """``agent``'s test key (``KEY_ID``, public half of ``KEY_SEED``); created once."""
    key, _ = AgentKey.objects.get_or_create(
        agent=agent,
        key_id=KEY_ID,
        defaults={
            "public_key": bytes(SigningKey(KEY_SEED).verify_key),
            "valid_from": datetime(2026, 1, 1, tzinfo=UTC),
        },
    )
    return key


def signed_body(
    intent: dict[str, Any],
    *,
    site_id: str,
    agent_id: str,
    key: SigningKey | None = None,
    **overrides: Any,
) -> bytes:
    """The request body of a fresh, valid mandate of ``agent_id`` (signed fields overridable)."""
    now = datetime.now(UTC).replace(microsecond=0)
    signed = {
        "mandate_id": f"mnd_{new_ulid()}",
        "site_id": site_id,
        "agent_id": agent_id,
        "issued_at": now.isoformat().replace("+00:00", "Z"),
        "expires_at": (now + timedelta(seconds=120)).isoformat().replace("+00:00", "Z"),
        "nonce": secrets.token_urlsafe(16),
        "replay_window_seconds": 120,
        "intent": intent,
    }
    signed.update(overrides)
    return canonical_json(sign_mandate(signed, key or SigningKey(KEY_SEED), KEY_ID))


def switch_agent(agent: Agent, *, active: bool) -> None:
    """The site's owner switches ``agent`` on or off, as Settings → Agents does (with a fresh
    copy of the row: callable from another thread than the one that read ``agent``)."""
    fresh = Agent.objects.select_related("site").get(pk=agent.pk)
    set_agent_active(
        agent=fresh, actor=site_owner(fresh.site), active=active, second_factor=two_factor.OPERATOR
    )


@pytest.fixture
def signing_key() -> SigningKey:
    return SigningKey(KEY_SEED)


@pytest.fixture
def agent_key(agent: Agent) -> AgentKey:
    return register_key(agent)


@pytest.fixture
def mock_rail(site: Site) -> RailAccount:
    return ensure_mock_rail(site)


def refund_intent(original: str, **overrides: Any) -> dict[str, Any]:
    intent = {
        "action": "request_refund",
        "merchant": "roasters.example",
        "original_mandate_id": original,
        "reason_code": "wrong_item",
        "scope": "full",
        "max_amount": Decimal("89.00"),
        "currency": "USD",
    }
    intent.update(overrides)
    return intent


def purchase_intent(**overrides: Any) -> dict[str, Any]:
    intent = {
        "action": "purchase",
        "merchant": "roasters.example",
        "line_items": [
            {
                "sku": "NW-HB-1KG",
                "name": "House Blend",
                "quantity": 2,
                "unit_price": Decimal("24.00"),
            },
            {"sku": "NW-DRIP-01", "name": "Dripper", "quantity": 1, "unit_price": Decimal("29.00")},
            {"sku": "NW-FILT-100", "name": "Filters", "quantity": 2, "unit_price": Decimal("6.00")},
        ],
        "quoted_total": Decimal("89.00"),
        "currency": "USD",
        "buyer": {"name": "Ada Lovelace", "email": "ada@example.com"},
        "payment": {"rail": "mock", "payment_method": "pm_card_visa"},
    }
    intent.update(overrides)
    return intent


@pytest.fixture
def sign(agent_key: AgentKey, site: Site) -> Callable[..., bytes]:
    """``sign(intent, **signed_overrides)`` → the request body of a fresh, valid mandate."""

    def make(intent: dict[str, Any], *, key: SigningKey | None = None, **overrides: Any) -> bytes:
        return signed_body(
            intent, site_id=site.id, agent_id=agent_key.agent.agent_id, key=key, **overrides
        )

    return make


def post(client: Client, body: bytes) -> Any:
    return client.post("/api/v1/mandates", data=body, content_type="application/json")


@pytest.fixture
def api(django_capture_on_commit_callbacks: Any) -> Callable[[bytes], Any]:
    """``api(body)``: POST a mandate, then run what the request enqueued on commit."""
    client = Client()

    def send(body: bytes) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return post(client, body)

    return send


# --- orders, reasons, clients -------------------------------------------------------------


@pytest.fixture
def original(make_order: Callable[..., Order], agent: Agent, mock_rail: RailAccount) -> Order:
    """A paid $89.00 order the agent placed under the seed's mandate ``ORIGINAL``, on mock."""
    return make_order(total="89.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)


@pytest.fixture
def order(make_order: Callable[..., Order], mock_rail: RailAccount) -> Order:
    """A paid $89.00 order on the mock rail, placed by no agent."""
    return make_order(total="89.00")


@pytest.fixture
def leaf(site: Site) -> RefundReason:
    """A merchant's own reason under the seeded ones: "Arrived broken" under "Product problem"."""
    ensure_default_reasons(site)
    product = add_reason(site=site, actor=site_owner(site), name="Product problem")
    return add_reason(site=site, actor=site_owner(site), name="Arrived broken", parent=product)


@pytest.fixture
def as_(client_for: Callable[[str], Client], clerk: Membership) -> Callable[[str], Client]:
    """``client_for`` that also knows ``"clerk"``."""

    def make(persona: str) -> Client:
        if persona == "clerk":
            client = Client()
            client.force_login(clerk.user)
            return client
        return client_for(persona)

    return make


# --- staff refunds ------------------------------------------------------------------------


@pytest.fixture
def staff_refund(
    site: Site,
    members: dict[str, Membership],
    mock_rail: RailAccount,
    django_capture_on_commit_callbacks,
) -> Callable[[Order], Refund]:
    """``staff_refund(order)``: the staff member's full refund (reason Defective), decided and
    reserved; its execution, enqueued on commit, is not run (the test runs it)."""
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()

    def make(order: Order) -> Refund:
        with django_capture_on_commit_callbacks(execute=False):
            return create_staff_refund(
                site=site, order=order, actor=members["staff"].user, kind="full", reason=reason
            )

    return make


# --- held refunds -------------------------------------------------------------------------

# The template that holds each kind of refund: the seed's r07 (every agent refund), and for
# staff refunds (r07 leaves them alone) the conservative template from $0.00 (every refund).
HOLDING_TEMPLATES: dict[str, tuple[str, dict[str, str] | None]] = {
    RefundOrigin.AGENT: ("r07", None),
    RefundOrigin.STAFF: ("conservative", {"holdOverUsd": "0.00"}),
}


def require_approval(site: Site, *, origin: str) -> None:
    """Give ``site`` the policy rule that holds refunds of ``origin`` (once; idempotent)."""
    template, params = HOLDING_TEMPLATES[origin]
    item = item_by_id(template)
    assert item is not None
    apply_catalog_item(site=site, actor=site_owner(site), item=item, params=params)


def hold_refund(
    *,
    order: Order,
    agent: Agent | None = None,
    requested_by: Any | None = None,
    amount_minor: int | None = None,
    reason_code: str = "wrong_item",
    reason_label: str = "",
    held_at: datetime | None = None,
) -> Refund:
    """A refund of ``order`` held for review by its site's policy, asked for by ``agent``
    (a signed mandate) or by the user ``requested_by`` (a staff refund), at ``held_at``.

    ``amount_minor`` defaults to everything left to refund. An agent sends ``reason_code``; a
    staff member picks the seeded reason of that code, or, with ``reason_label``, the
    merchant's own (uncoded) reason of that name.
    """
    assert (agent is None) != (requested_by is None), "an agent or a user asks for it"
    origin = RefundOrigin.AGENT if agent is not None else RefundOrigin.STAFF
    require_approval(order.site, origin=origin)
    charge = charged_charge(order)
    assert charge is not None, "hold_refund needs a charged order"
    if charge.rail == Rail.MOCK:
        ensure_mock_rail(order.site)
    amount = Money(
        charge.remaining.amount_minor if amount_minor is None else amount_minor, order.currency
    )
    with time_machine.travel(held_at, tick=False) if held_at is not None else nullcontext():
        if agent is not None:
            refund = _agent_asks(order=order, agent=agent, amount=amount, reason_code=reason_code)
        else:
            refund = create_staff_refund(
                site=order.site,
                order=order,
                actor=requested_by,
                kind="full" if amount_minor is None else "amount",
                amount=amount,
                reason=_staff_reason(order.site, code=reason_code, name=reason_label),
            )
    assert refund.status == RefundStatus.HELD, (refund.status, refund.outcome_code, refund.rules)
    return Refund.objects.get(pk=refund.pk)


def _agent_asks(*, order: Order, agent: Agent, amount: Money, reason_code: str) -> Refund:
    if not order.source_mandate_id:
        # An agent's refund names the purchase mandate of its order: give the order one.
        order.source_mandate_id = f"mnd_{new_ulid()}"
        Order.objects.filter(pk=order.pk).update(source_mandate_id=order.source_mandate_id)
    register_key(agent)
    intent = refund_intent(
        order.source_mandate_id,
        merchant=order.site.merchant_domain,
        reason_code=reason_code,
        max_amount=Decimal(amount.major_str()),
        currency=amount.currency,
    )
    response = post(Client(), signed_body(intent, site_id=order.site_id, agent_id=agent.agent_id))
    assert response.status_code == 201, response.content
    return Refund.objects.get(pk=response.json()["refund_id"])


def _staff_reason(site: Site, *, code: str, name: str) -> RefundReason:
    ensure_default_reasons(site)
    if not name:
        return RefundReason.objects.get(site=site, code=code)
    mine = RefundReason.objects.filter(site=site, name=name).first()
    return mine or add_reason(site=site, actor=site_owner(site), name=name)


def outside_refund(
    order: Order, *, status: str = "succeeded", provider_refund_id: str = "re_dashboard"
) -> str:
    """The rail reports a refund of all of ``order`` made in its dashboard (a webhook)."""
    charge = Charge.objects.get(order=order)
    now = timezone.now()
    return record_outside_refund(
        charge=charge,
        refund=OutsideRefund(
            provider_refund_id=provider_refund_id, amount_minor=charge.amount_minor,
            currency=charge.currency, status=status, created_at_rail=now,
        ),
        event_id=f"evt_{provider_refund_id}_{status}", event_at=now,
    )  # fmt: skip


def made_but_unrecordable(
    mock_rail: RailAccount, send: Callable[[], Refund]
) -> tuple[Refund, MockLedgerEntry]:
    """The refund ``send()`` sends (decided, not yet executed) made at the mock rail, its
    answer lost; then a dashboard refund of the whole charge is reported: the retry finds
    Sill's refund and cannot record it (needs attention, ``exceeds_charge_at_rail``)."""
    mock_rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
    mock_rail.save()
    refund = send()
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    order = refund.order
    assert order is not None
    assert outside_refund(order, status="succeeded") == "external refund recorded"
    made = MockLedgerEntry.objects.get(kind="refund")
    assert execute_refund(refund.id) == "needs_attention"  # no retry of an answer it has
    refund.refresh_from_db()
    return refund, made


def open_dispute(refund: Refund) -> Dispute:
    """The buyer's bank opens a dispute of ``refund``'s charge (as its webhook records one)."""
    return Dispute.objects.create(
        charge_id=refund.charge_id,
        reason="fraudulent",
        amount_minor=refund.amount_minor,
        currency=refund.currency,
        status="needs_response",
        opened_at=timezone.now(),
    )


@pytest.fixture
def held(original: Order, agent: Agent) -> Refund:
    """The seed's case: the agent's full refund of the $89.00 order, held by r07."""
    return hold_refund(order=original, agent=agent)


# --- Slack --------------------------------------------------------------------------------


@pytest.fixture
def slack_api(site: Site, settings: Any) -> Iterator[slack_stub.SlackStub]:
    """A loopback Slack Web API (``tests/refunds/slack_stub.py``) as ``site``'s workspace: its
    bot token is set on the site, and Slack knows the members' users by these ids, each with
    the member's email (``U0OTHER`` is ``admin2@roasters.example``)."""
    with slack_stub.StubServer() as stub:
        settings.SILL_SLACK_API_URL = stub.url
        site.slack_bot_token_sealed = seal_bot_token(site, stub.token)
        site.save(update_fields=["slack_bot_token_sealed"])
        for slack_user_id, email in SLACK_USERS.items():
            stub.add_user(slack_user_id, email)
        yield stub


SLACK_USERS = {
    "U0OWNER": "owner@roasters.example",
    "U0ADMIN": "admin@roasters.example",
    "U0OTHER": "admin2@roasters.example",
    "U0REVIEW": "reviewer@roasters.example",
    "U0STAFF": "staff@roasters.example",
}


from tests.localstripe import localstripe_url  # noqa: E402, F401
