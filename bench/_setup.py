"""Shared set-up for the bench scripts: Django on a throwaway data dir."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def django_setup(name: str) -> Path:
    """Configure Django on a fresh SQLite file (or DATABASE_URL if set) and migrate."""
    sys.path.insert(0, str(ROOT))
    data_dir = Path(tempfile.mkdtemp(prefix=f"sill-bench-{name}-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sill.settings")
    os.environ["SILL_DATA_DIR"] = str(data_dir)
    os.environ["SILL_TESTING"] = "1"
    os.environ.setdefault("SILL_LOG_LEVEL", "WARNING")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return data_dir


def paid_agent_orders(site: object, agent: object, count: int) -> list[str]:
    """``count`` paid $20.00 orders placed by ``agent`` on the mock rail, each with its own
    buyer (so its own customer); the purchase mandate ids a refund mandate names them by."""
    from datetime import UTC, datetime

    from sill.ids import new_ulid
    from sill.money import parse_major
    from sill.orders.models import Charge, ChargeStatus, Order
    from sill.orders.services import NewLine, create_order

    originals = []
    for i in range(count):
        mandate_id = f"mnd_{new_ulid()}"
        order = create_order(
            site=site, lines=[NewLine(sku="B", name="Bench", quantity=1, unit_price=parse_major("20.00", "USD"))],
            currency="USD", buyer_name="Bench", buyer_email=f"b{i}-{mandate_id[-6:].lower()}@example.com",
            source_mandate_id=mandate_id, placed_by_agent=agent,
        )  # fmt: skip
        Order.objects.filter(pk=order.pk).update(status="PAID")
        Charge.objects.create(
            order=order, rail="mock", amount_minor=2000, currency="USD",
            status=ChargeStatus.SUCCEEDED, captured_at=datetime.now(UTC),
        )  # fmt: skip
        originals.append(mandate_id)
    analyze()
    return originals


def analyze() -> None:
    """Table statistics for what the set-up just wrote, as autovacuum would gather them
    within a minute of a bulk load: without them PostgreSQL plans the decision's reads for
    empty tables (a scan of every charge instead of the order's index)."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


# Decisions a bench sends before it measures anything (see history()).
HISTORY = 200


def history(bodies: list[bytes]) -> None:
    """Send ``bodies`` (approved refund decisions) in this process, then gather statistics:
    the site has a history of refunds, mandates and audit records before the measured
    servers start, as a merchant's database has.

    On a database created a moment ago those tables are empty, and a statement PostgreSQL
    plans once for a connection (the prepared ones of ``sill.sql``, the foreign-key checks)
    is planned for an empty table: a scan of the whole table, which costs more with every
    refund the bench adds. A server's connections last a minute (``conn_max_age``) and
    autovacuum analyses growing tables, so production sees that for a database's first
    minute only; a bench run would see it throughout.
    """
    from django.test import Client

    client = Client()
    for body in bodies:
        answer = client.post("/api/v1/mandates", data=body, content_type="application/json")
        if answer.status_code != 201 or answer.json()["decision"] != "approved":
            raise SystemExit(f"history: not an approved decision: {answer.content[:300]!r}")
    analyze()
