"""Demo data for `manage.py demo`: idempotent, on the mock rail, printed logins.

Running it twice changes nothing the second time: every object is found by a stable key
(site id, email, agent id, order number) before anything is created.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from nacl.signing import SigningKey

from refunds.models import Refund, RefundReason
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.services import RefundKind, create_staff_refund
from sill.accounts import two_factor
from sill.accounts.models import Agent, AgentKey, Role, Site
from sill.accounts.services import (
    add_agent_key,
    add_member,
    b64url_decode,
    b64url_encode,
    create_site,
    record_key_change,
)
from sill.money import Money, parse_major
from sill.orders.models import Charge, ChargeStatus, Customer, Order, OrderStatus
from sill.orders.services import NewLine, create_order
from sill.rails.base import RailName
from sill.rails.registry import ensure_mock_rail

DEMO_SITE_ID = "01JDEMOSITE00000000000MAIN"
DEMO_TEA_SITE_ID = "01JDEMOSITE000000000000TEA"
DEMO_DOMAIN = "northwind-coffee.example"
DEMO_PASSWORD = "sill-demo-2026"
DEMO_AGENT_ID = "agent_acme_shopper"
DEMO_KEY_ID = "acme-2026-10"
DEMO_ORDER_MANDATE = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"

DEMO_USERS: tuple[tuple[str, str, bool], ...] = (
    ("owner@northwind-coffee.example", Role.OWNER, True),
    ("admin@northwind-coffee.example", Role.ADMIN, True),
    ("reviewer@northwind-coffee.example", Role.REVIEWER, False),
    ("staff@northwind-coffee.example", Role.STAFF, True),
)

# number, mandate, buyer, email, currency, status, [(sku, name, qty, unit price)], days ago
_ORDERS: tuple[tuple[str, str, str, str, str, str, list[tuple[str, str, int, str]], int], ...] = (
    ("1001", DEMO_ORDER_MANDATE, "Ada Lovelace", "ada@example.com", "USD", OrderStatus.PAID,
     [("NW-HB-1KG", "House Blend Coffee, 1 kg", 2, "24.00"),
      ("NW-DRIP-01", "Ceramic Pour-Over Dripper", 1, "29.00"),
      ("NW-FILT-100", "Paper Filters (100)", 2, "6.00")], 3),
    ("1002", "", "Grace Hopper", "grace@example.com", "USD", OrderStatus.SHIPPED,
     [("NW-ESP-500", "Espresso Roast, 500 g", 1, "16.50"),
      ("NW-MUG-BLK", "Stoneware Mug, black", 2, "12.00")], 6),
    ("1003", "", "Émilie du Châtelet", "emilie@example.fr", "EUR", OrderStatus.DELIVERED,
     [("NW-HB-1KG", "House Blend Coffee, 1 kg", 1, "22.90"),
      ("NW-GRIND-M", "Manual Burr Grinder", 1, "64.00")], 12),
    ("1004", "", "Katsuko Saruhashi", "katsuko@example.jp", "JPY", OrderStatus.PAID,
     [("NW-SENCHA", "Sencha Blend, 200 g", 2, "1800"),
      ("NW-KETTLE", "Gooseneck Kettle", 1, "6400")], 2),
    ("1005", "", "Alan Turing", "alan@example.com", "USD", OrderStatus.PENDING,
     [("NW-SUB-3M", "Coffee subscription, 3 months", 1, "57.00")], 0),
    ("1006", "", "Hedy Lamarr", "hedy@example.com", "USD", OrderStatus.CANCELLED,
     [("NW-DECAF", "Swiss Water Decaf, 500 g", 1, "18.00")], 20),
    ("1007", "", "Ada Lovelace", "ada@example.com", "EUR", OrderStatus.PAID,
     [("NW-CHEMEX", "Glass Brewer, 6 cup", 1, "49.50")], 40),
)  # fmt: skip


@dataclass(frozen=True)
class DemoResult:
    site: Site
    logins: tuple[tuple[str, str], ...]
    key_file: Path


def demo_key_file() -> Path:
    return Path(settings.SILL_DATA_DIR) / "demo-agent-key.json"


def _demo_signing_key() -> SigningKey:
    """The demo agent's private key, generated once and kept under the data dir."""
    path = demo_key_file()
    if path.exists():
        data = json.loads(path.read_text())
        return SigningKey(b64url_decode(data["private_key"]))
    key = SigningKey.generate()
    path.write_text(
        json.dumps(
            {
                "site_id": DEMO_SITE_ID,
                "agent_id": DEMO_AGENT_ID,
                "key_id": DEMO_KEY_ID,
                "private_key": b64url_encode(bytes(key)),
                "public_key": b64url_encode(bytes(key.verify_key)),
            },
            indent=2,
        )
        + "\n"
    )
    path.chmod(0o600)
    return key


def _ensure_agent(site: Site) -> Agent:
    key = _demo_signing_key()
    public = bytes(key.verify_key)
    agent, _ = Agent.objects.get_or_create(
        site=site,
        agent_id=DEMO_AGENT_ID,
        # The demo agent may ask for refunds (new agents start with the refund method off).
        defaults={"name": "Acme Shopper (demo agent)", "refund_enabled": True},
    )
    existing = AgentKey.objects.filter(agent=agent, key_id=DEMO_KEY_ID).first()
    if existing is not None and bytes(existing.public_key) != public:
        # The key file under the data dir was replaced: follow it, it is the dev key.
        existing.public_key = public
        existing.save(update_fields=["public_key"])
        record_key_change(key=existing, action="replace", actor=None, system=True)
    elif existing is None:
        add_agent_key(
            site=site,
            agent_id=DEMO_AGENT_ID,
            key_id=DEMO_KEY_ID,
            public_key=public,
            valid_from=datetime(2026, 1, 1, tzinfo=UTC),
            actor=None,
            system=True,
            second_factor=two_factor.OPERATOR,
        )
    return agent


def _password_for(email: str) -> str | None:
    """The demo password for ``email``, or None when it is the login's password already.

    Setting it again (a new hash) ends the user's sessions: every `make run` signed the
    merchant out. One changed since is put back, so the logins `make run` prints work.
    """
    user = get_user_model().objects.filter(username=email).first()
    if user is not None and user.check_password(DEMO_PASSWORD):
        return None
    return DEMO_PASSWORD


@transaction.atomic
def load_demo() -> DemoResult:
    site = Site.objects.filter(pk=DEMO_SITE_ID).first() or create_site(
        site_id=DEMO_SITE_ID,
        name="Northwind Coffee",
        merchant_domain=DEMO_DOMAIN,
        default_currency="USD",
        timezone_name="America/New_York",
    )
    tea = Site.objects.filter(pk=DEMO_TEA_SITE_ID).first() or create_site(
        site_id=DEMO_TEA_SITE_ID,
        name="Northwind Tea House",
        merchant_domain="northwind-tea.example",
        default_currency="EUR",
        timezone_name="Europe/Berlin",
    )
    for email, role, can_refund in DEMO_USERS:
        add_member(
            site=site, email=email, role=role, can_refund=can_refund, password=_password_for(email)
        )
    owner_email = DEMO_USERS[0][0]
    add_member(site=tea, email=owner_email, role=Role.OWNER, password=_password_for(owner_email))
    agent = _ensure_agent(site)
    ensure_mock_rail(site)
    ensure_mock_rail(tea)
    # Sites made before reasons were seeded at creation get theirs here (idempotent).
    ensure_default_reasons(tea)

    now = timezone.now()
    for number, mandate, buyer, email, currency, status, lines, days_ago in _ORDERS:
        if Order.objects.filter(site=site, number=number).exists():
            continue
        customer, _ = Customer.objects.get_or_create(
            site=site,
            rail_customer_id=f"cus_demo_{email.split('@')[0]}",
            defaults={
                "email": email,
                "name": buyer,
                "provider_created_at": now - timedelta(days=400),
            },
        )
        order = create_order(
            site=site,
            number=number,
            source_mandate_id=mandate,
            placed_by_agent=agent if mandate else None,
            customer=customer,
            buyer_name=buyer,
            buyer_email=email,
            currency=currency,
            lines=[
                NewLine(sku=s, name=n, quantity=q, unit_price=parse_major(p, currency))
                for s, n, q, p in lines
            ],
        )
        placed = now - timedelta(days=days_ago, hours=2)
        Order.objects.filter(pk=order.pk).update(created_at=placed, status=status)
        if status not in (OrderStatus.PENDING, OrderStatus.CANCELLED):
            Charge.objects.create(
                order=order,
                rail=RailName.MOCK,
                provider_payment_id=f"mock_pi_{number}",
                provider_charge_id=f"mock_ch_{number}",
                amount_minor=order.total_minor,
                currency=order.currency,
                captured_at=placed + timedelta(minutes=1),
                status=ChargeStatus.SUCCEEDED,
            )
    _demo_reasons_and_refunds(site)
    logins = tuple((email, DEMO_PASSWORD) for email, _, _ in DEMO_USERS)
    return DemoResult(site=site, logins=logins, key_file=demo_key_file())


def _demo_reasons_and_refunds(site: Site) -> None:
    """A small reason tree and two staff refunds through the real pipeline (once).

    The refunds are decided and reserved here; their execution is enqueued on commit, so the
    worker `make run` starts settles them on the mock rail a moment later.
    """
    ensure_default_reasons(site)

    def under_defective(name: str) -> RefundReason | None:
        # Found where the demo puts it, as add_reason compares names (whatever the case): the
        # merchant may have renamed it, or used its name elsewhere in the tree; a look-up by
        # name alone then added a twin (refused) or found two, and every `make run` failed.
        defective = RefundReason.objects.get(site=site, code="defective")
        return RefundReason.objects.get_children(defective).filter(name__iexact=name).first()

    users = get_user_model().objects
    # The demo's owner adds them, as on Settings → Reasons (the service checks who acts).
    owner = users.get(username="owner@northwind-coffee.example")
    for name in ("Damaged in transit", "Stopped working"):
        if under_defective(name) is None:
            # Fetched afresh: adding a child rewrites the parent's tree bookkeeping.
            defective = RefundReason.objects.get(site=site, code="defective")
            add_reason(site=site, actor=owner, name=name, parent=defective)
    staff = users.get(username="staff@northwind-coffee.example")
    admin = users.get(username="admin@northwind-coffee.example")
    broken = under_defective("Damaged in transit")
    assert broken is not None
    asked = RefundReason.objects.get(site=site, code="requested_by_customer")
    plans: tuple[tuple[str, Any, RefundKind, Money | None, RefundReason, str], ...] = (
        ("1002", staff, "amount", parse_major("12.00", "USD"), broken, "Mug chipped in transit"),
        ("1003", admin, "full", None, asked, "Changed their mind within 14 days"),
    )
    for number, actor, kind, amount, reason, note in plans:
        order = Order.objects.get(site=site, number=number)
        if Refund.objects.filter(order=order).exists():
            continue
        create_staff_refund(
            site=site, order=order, actor=actor, kind=kind, amount=amount, reason=reason,
            note=note,
        )  # fmt: skip
