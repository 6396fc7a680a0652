"""Shared fixtures: sites, personas (owner, admin, reviewer, staff, outsider, clerk), orders."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from sill.accounts.models import Agent, Membership, Role, Site
from sill.accounts.services import add_member
from sill.money import parse_major
from sill.orders.models import Charge, ChargeStatus, Order, OrderStatus, Rail
from sill.orders.services import NewLine, create_order

PASSWORD = "correct-horse-battery-staple"
ROLES = ("owner", "admin", "reviewer", "staff")


@pytest.fixture(autouse=True)
def _eager_celery(settings):
    """Tasks run in-process unless a test starts a real worker (tests/worker.py)."""
    from celery.result import _set_task_join_will_block

    from sill.celery import app

    # Celery marks "inside a task" in one process-wide flag, which an eager apply sets and
    # restores. Two threads applying eagerly at once (the concurrency tests) can restore each
    # other's saved value and leave it set: every later EagerResult.get() of the process then
    # raised "Never call result.get() within a task!" (seen in a full run, not alone).
    _set_task_join_will_block(False)
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False
    _set_task_join_will_block(False)


@pytest.fixture(autouse=True)
def _fresh_audit_keys():
    """Each test reads the rotated audit keys of its own database (a rolled-back rotation of
    an earlier test must not linger in this process's cache)."""
    from audit.keys import forget_rotated_keys

    forget_rotated_keys()
    yield
    forget_rotated_keys()


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Each test starts with an empty cache: counters kept for an hour (password resets by
    address and email, sill/accounts/views_password.py) outlived the run that made them on
    Redis, and a second run within the hour found them spent and sent no reset email. Only
    the cache's own keys go: the broker's queues may share the Redis database."""
    from django.core.cache import cache
    from django.core.cache.backends.redis import RedisCache

    if not isinstance(cache, RedisCache):
        cache.clear()  # this process's memory
        return
    client = cache._cache.get_client(write=True)
    stale = list(client.scan_iter(match=cache.make_key("*"), count=1000))
    if stale:
        client.delete(*stale)


@pytest.fixture
def needs_postgres() -> None:
    """Skip unless the suite runs on PostgreSQL (``DATABASE_URL``): SQLite has no row locks."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks (set DATABASE_URL)")


@pytest.fixture(autouse=True)
def _postgres_marker(request: pytest.FixtureRequest) -> None:
    """A test marked ``postgres`` needs PostgreSQL: skipped elsewhere."""
    if request.node.get_closest_marker("postgres") is not None:
        request.getfixturevalue("needs_postgres")


class ThrottleClock:
    """The time sill.api's rate limits read (``_Throttle.timer``) during a test: it stands
    still unless the test moves it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def throttle_clock(monkeypatch: pytest.MonkeyPatch) -> ThrottleClock:
    """The API throttles' clock, pinned for the test (``throttle_clock.now = …`` and
    ``throttle_clock.advance(60)`` move it).

    The throttles count in fixed clock windows (N a minute is N in each clock minute): with
    the real clock, a test that sends N requests and expects the next one refused was served
    instead whenever a minute ended between its requests. Pinned mid-window (0.5 s into a
    second, 30 s into the minute the test starts in, so 30 s from an hour's or a day's edge
    too) nothing but the test ends a window. The real minute, not a constant, so the shared
    cache's counters of two runs a few minutes apart stay as apart as they were."""
    # Imported here: DRF's views import sill.api, which imported first finds DRF half-loaded.
    from rest_framework import views  # noqa: F401

    from sill.api import _Throttle

    clock = ThrottleClock(math.floor(time.time() / 60) * 60 + 30.5)
    monkeypatch.setattr(_Throttle, "timer", lambda _throttle: clock.now)
    return clock


@pytest.fixture
def site(db) -> Site:
    return Site.objects.create(
        id="01TESTSITE0000000000000001", name="Test Roasters", merchant_domain="roasters.example"
    )


@pytest.fixture
def other_site(db) -> Site:
    return Site.objects.create(
        id="01TESTSITE0000000000000002", name="Other Shop", merchant_domain="other.example"
    )


@pytest.fixture
def members(site: Site, other_site: Site) -> dict[str, Membership]:
    """One member per role on ``site``, plus ``outsider``: an owner of ``other_site``."""
    result = {
        role: add_member(
            site=site,
            email=f"{role}@roasters.example",
            role=role,
            can_refund=role == Role.STAFF,
            password=PASSWORD,
        )
        for role in ROLES
    }
    result["outsider"] = add_member(
        site=other_site, email="owner@other.example", role=Role.OWNER, password=PASSWORD
    )
    return result


def site_owner(site: Site) -> Any:
    """A user who owns ``site``: the setup of a test that writes through a service which checks
    the acting member's role (``require_member``) acts as one. The site's first owner, or
    ``owner@<its domain>`` made one (on ``site``, the ``members`` fixture's owner)."""
    membership = (
        Membership.objects.filter(site=site, role=Role.OWNER)
        .select_related("user")
        .order_by("created_at", "pk")
        .first()
    )
    if membership is None:
        membership = add_member(site=site, email=f"owner@{site.merchant_domain}", role=Role.OWNER)
    return membership.user


@pytest.fixture
def clerk(site: Site, members: dict[str, Membership]) -> Membership:
    """A staff member of ``site`` *without* the refund permission."""
    return add_member(
        site=site, email="clerk@roasters.example", role="staff", can_refund=False, password=PASSWORD
    )


@pytest.fixture
def client_for(members: dict[str, Membership]) -> Callable[[str], Client]:
    """``client_for("admin")`` → a logged-in client; ``client_for("anonymous")`` → none."""

    def make(persona: str) -> Client:
        client = Client()
        if persona != "anonymous":
            client.force_login(members[persona].user)
        return client

    return make


@pytest.fixture
def agent(site: Site) -> Agent:
    return Agent.objects.create(
        site=site, agent_id="agent_test_shopper", name="Test shopper", refund_enabled=True
    )


@pytest.fixture
def make_order(site: Site) -> Callable[..., Order]:
    counter = {"n": 0}

    def make(
        *,
        total: str = "89.00",
        currency: str = "USD",
        status: str = OrderStatus.PAID,
        on_site: Site | None = None,
        email: str = "buyer@example.com",
        charged: bool = True,
        rail: str = Rail.MOCK,
        placed_by_agent: Agent | None = None,
        source_mandate_id: str = "",
        days_ago: int = 1,
    ) -> Order:
        counter["n"] += 1
        target = on_site or site
        order = create_order(
            site=target,
            lines=[
                NewLine(
                    sku="SKU-1", name="Item", quantity=1, unit_price=parse_major(total, currency)
                )
            ],
            currency=currency,
            buyer_name="Buyer",
            buyer_email=email,
            placed_by_agent=placed_by_agent,
            source_mandate_id=source_mandate_id,
        )
        when = timezone.now() - timedelta(days=days_ago)
        Order.objects.filter(pk=order.pk).update(status=status, created_at=when)
        if charged:
            Charge.objects.create(
                order=order,
                rail=rail,
                provider_charge_id=f"ch_test_{order.pk}",
                amount_minor=order.total_minor,
                currency=currency,
                captured_at=when,
                status=ChargeStatus.SUCCEEDED,
            )
        order.refresh_from_db()
        return order

    return make
