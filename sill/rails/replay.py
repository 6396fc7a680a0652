"""Replaying webhook events a site's endpoint may have missed or failed to apply
(``manage.py rails replay-webhooks``).

For a rail other than Stripe, :func:`retry_stored_events` attempts the site's stored events
that were never applied again (those rails cannot be asked for their events again). For
Stripe:

Stripe is asked for the events Sill handles created since a given time (``events.list``;
Stripe keeps events 30 days). Each one goes through the webhook's own storing code
(``store_event``: the same checks, the same once-per-id row) and is then processed inline,
oldest first, by the same attempt the task makes. An event already stored and processed
changes nothing; one stored but never processed (a lost task, a failure, a give-up) is
processed now. Nothing here moves money: processing only records what Stripe reports.
"""

from __future__ import annotations

import json
import zoneinfo
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from django.utils import timezone

from sill.accounts.models import Site
from sill.errors import SillError
from sill.orders.models import Rail
from sill.rails.base import rail_label
from sill.rails.event_attempts import PROCESSORS, TRANSIENT, Attempt, attempt_event
from sill.rails.models import WebhookEvent
from sill.rails.registry import RailDisabled, rail_account_for, rail_from_account
from sill.rails.stripe import StripeRail
from sill.rails.stripe_events import DISPUTE_EVENTS, REFUND_EVENTS
from sill.rails.stripe_webhooks import WebhookRefused, store_event

# Stripe deletes events after 30 days: an older ``since`` would silently miss some.
MAX_AGE = timedelta(days=30)
REPLAYED_TYPES = sorted(REFUND_EVENTS | DISPUTE_EVENTS | {"charge.refunded", "refund.failed"})


class ReplayRefused(SillError):
    code = "replay_refused"
    status = 400


@dataclass
class ReplayReport:
    """What a replay did. ``fetched`` = ``new`` + ``already_known`` + ``refused``;
    ``processed`` and ``failed`` count the attempts made now (new events, and stored ones
    that were still unprocessed)."""

    since: datetime
    fetched: int = 0
    new: int = 0
    already_known: int = 0
    refused: int = 0
    processed: int = 0
    failed: int = 0
    # "<event id>: <why>" for each event refused or failed.
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"fetched {self.fetched} Stripe event(s) since {self.since.isoformat()}: "
            f"{self.new} new, {self.already_known} already known, {self.processed} processed, "
            f"{self.failed} failed" + (f", {self.refused} refused" if self.refused else "")
        )


def replay_webhooks_site(*, site_id: str, rail: str) -> Site:
    """The site a replay is for; ``ReplayRefused`` for an unknown site or a rail that sends
    Sill no webhooks (the mock rail, or a name Sill does not know)."""
    if rail not in PROCESSORS:
        known = (
            "a rail Sill does not know" if rail not in Rail.values else "a rail without webhooks"
        )
        raise ReplayRefused(
            f"--rail {rail!r} is {known}: webhooks are replayed for "
            f"{', '.join(sorted(PROCESSORS))}.",
            field="rail",
        )
    site = Site.objects.filter(pk=site_id).first()
    if site is None:
        raise ReplayRefused(f"There is no site {site_id!r}.", field="site")
    return site


def parse_since(text: str, *, site: Site) -> datetime:
    """An ISO 8601 time or date; without a zone (a date is its midnight) it is read in the
    site's time zone, UTC when the site has none Sill can read."""
    try:
        since = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReplayRefused(
            f"--since {text!r} is not an ISO 8601 time or date "
            "(e.g. 2026-11-20T08:00:00+01:00, 2026-11-20T07:00:00Z or 2026-11-20).",
            field="since",
        ) from None
    if timezone.is_naive(since):
        since = since.replace(tzinfo=_zone_of(site))
    return since


def _zone_of(site: Site) -> tzinfo:
    try:
        return zoneinfo.ZoneInfo(site.timezone or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return UTC


def check_since(since: datetime, *, now: datetime, stripe: bool = True) -> None:
    """Refuse a ``since`` without a zone, in the future, or (for Stripe's own events, which
    it keeps 30 days) beyond 30 days."""
    if timezone.is_naive(since):
        raise ReplayRefused("--since needs a time zone.", field="since")
    if since > now:
        raise ReplayRefused(f"--since {since.isoformat()} is in the future.", field="since")
    if stripe and since < now - MAX_AGE:
        raise ReplayRefused(
            f"--since {since.isoformat()} is more than 30 days ago: Stripe keeps events for "
            f"30 days only. Use {(now - MAX_AGE).isoformat(timespec='seconds')} or later.",
            field="since",
        )


def replay_stripe_events(
    *, site: Site, since: datetime, now: datetime | None = None
) -> ReplayReport:
    """Store and process the site's Stripe events created at or after ``since``.

    Raises ``ReplayRefused`` for a bad ``since``, ``RailDisabled`` when the site's Stripe rail
    is absent, switched off or unreadable, and ``RailError`` when Stripe refuses the listing
    (its message holds no secret). Nothing is stored unless the whole listing was read.
    """
    now = now or timezone.now()
    check_since(since, now=now)
    account = rail_account_for(site_id=site.pk, rail=Rail.STRIPE)
    rail = rail_from_account(account)
    if not isinstance(rail, StripeRail):  # the registry builds Stripe's; never another
        raise RailDisabled("The Stripe rail of this site cannot list events.")
    report = ReplayReport(since=since)
    # events_since reads every page before yielding the first event (it sorts them).
    for event in rail.events_since(since, types=REPLAYED_TYPES):
        report.fetched += 1
        event_id = str(event.get("id") or "")
        try:
            stored = store_event(account=account, payload=_payload(event))
        except WebhookRefused as refused:
            report.refused += 1
            report.errors.append(f"{event_id or 'an event'}: {refused.message}")
            continue
        if stored is None:
            report.already_known += 1
            stored = WebhookEvent.objects.get(site=site, rail=Rail.STRIPE, event_id=event_id[:255])
            if stored.processed_at is not None:
                continue
        else:
            report.new += 1
        _tally(report, event_id, _attempt(stored.pk))
    return report


@dataclass
class StoredReport:
    """What attempting a rail's stored, unprocessed events again did."""

    rail: str
    since: datetime
    found: int = 0
    processed: int = 0
    failed: int = 0
    refused: int = 0  # nothing is fetched again, so nothing is refused: for the command
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.found} stored {rail_label(self.rail)} event(s) not yet applied since "
            f"{self.since.isoformat()}: {self.processed} processed, {self.failed} failed"
        )


def retry_stored_events(
    *, site: Site, rail: str, since: datetime, now: datetime | None = None
) -> StoredReport:
    """Attempt again, oldest first and whatever the retries concluded, the site's events of
    ``rail`` received at or after ``since`` that were stored but never applied (a failure,
    a give-up, a lost task). For the rails Sill cannot ask for their events again (PayPal,
    Shopify, WooCommerce): what they delivered is all Sill has. Shopify and WooCommerce
    orders missed altogether come back with ``rails sync-shopify`` / ``sync-woocommerce``.
    """
    check_since(since, now=now or timezone.now(), stripe=False)
    report = StoredReport(rail=rail, since=since)
    waiting = WebhookEvent.objects.filter(
        site=site, rail=rail, processed_at__isnull=True, received_at__gte=since
    ).order_by("received_at", "id")
    for event_pk, event_id in waiting.values_list("pk", "event_id"):
        report.found += 1
        _tally(report, event_id, _attempt(event_pk))
    return report


def _tally(report: ReplayReport | StoredReport, event_id: str, attempt: Attempt) -> None:
    if attempt.ok:
        report.processed += 1
    else:
        report.failed += 1
        report.errors.append(f"{event_id}: {attempt.outcome}")


def _attempt(event_pk: int) -> Attempt:
    try:
        # Unbounded: whoever runs a replay wants it tried, whatever the retries concluded.
        return attempt_event(event_pk, bounded=False)
    except TRANSIENT as exc:
        return Attempt(ok=False, outcome=f"{type(exc).__name__}: {exc}"[:500])


def _payload(event: dict[str, Any]) -> bytes:
    # The SDK's dict may hold Decimals (fields Stripe sends as decimal strings): back to text.
    return json.dumps(event, default=str, separators=(",", ":")).encode()
