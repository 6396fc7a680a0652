"""``manage.py rails replay-webhooks``: events read back from Stripe (events.list) and applied
once, against a loopback Stripe driven through the real SDK (tests/rails/stripe_events_stub.py)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import AuditRecord
from sill.orders.models import Charge, Dispute, ExternalRefund
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.replay import REPLAYED_TYPES, ReplayRefused, replay_stripe_events
from tests.rails.failing_stripe_event import books_agree, books_disagree, too_large_refund_event
from tests.rails.stripe_events import deliverer, dispute_obj, event, header, post_event, refund_obj
from tests.rails.stripe_events import stripe_account as make_stripe_account
from tests.rails.stripe_events_stub import EventsStub, serving_events_stub

pytestmark = pytest.mark.django_db

HOUR = 3600


@pytest.fixture
def events_stub() -> Iterator[EventsStub]:
    with serving_events_stub() as stub:
        yield stub


@pytest.fixture
def account(site, events_stub: EventsStub) -> RailAccount:
    return make_stripe_account(site, api_base=events_stub.url)


@pytest.fixture
def charge(account, make_order) -> Charge:
    return Charge.objects.get(order=make_order(total="89.00", rail="stripe"))


@pytest.fixture
def deliver(django_capture_on_commit_callbacks):
    return deliverer(django_capture_on_commit_callbacks)


def as_event(event_type: str, obj: dict[str, Any], *, event_id: str, ago: int) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(
        event(event_type, obj, event_id=event_id, created=int(time.time()) - ago)
    )
    return decoded


def charge_refunded(charge: Charge, *, ago: int = HOUR) -> dict[str, Any]:
    refund = refund_obj(charge.provider_charge_id, refund_id="re_outside", amount=3000)
    obj = {
        "id": charge.provider_charge_id,
        "object": "charge",
        "amount": 8900,
        "amount_refunded": 3000,
        "currency": "usd",
        "refunded": False,
        "refunds": {"object": "list", "data": [refund], "has_more": False},
    }
    return as_event("charge.refunded", obj, event_id="evt_charge_refunded", ago=ago)


def dispute_created(charge: Charge, *, ago: int = HOUR // 2) -> dict[str, Any]:
    obj = dispute_obj(charge.provider_charge_id, dispute_id="dp_replayed")
    return as_event("charge.dispute.created", obj, event_id="evt_dispute", ago=ago)


def replay(site, *, since: str | None = None) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    since = since or (timezone.now() - timedelta(days=1)).isoformat()
    call_command(
        "rails", "replay-webhooks", "--site", site.pk, "--rail", "stripe", "--since", since,
        stdout=out, stderr=err,
    )  # fmt: skip
    return out.getvalue(), err.getvalue()


def test_it_records_the_outside_refund_and_the_dispute_once(site, charge, events_stub):
    events_stub.add(charge_refunded(charge), dispute_created(charge))
    since = timezone.now() - timedelta(days=2)

    out, _ = replay(site, since=since.isoformat())

    assert "fetched 2 Stripe event(s)" in out
    assert "2 new, 0 already known, 2 processed, 0 failed" in out
    charge.refresh_from_db()
    assert charge.amount_refunded_outside_minor == 3000
    assert list(ExternalRefund.objects.values_list("provider_refund_id", "amount_minor")) == [
        ("re_outside", 3000)
    ]
    dispute = Dispute.objects.get()
    assert (dispute.provider_dispute_id, dispute.status) == ("dp_replayed", "needs_response")
    assert all(e.processed_at is not None for e in WebhookEvent.objects.all())
    # What Stripe was asked: the types Sill handles, created since --since, 100 a page.
    asked = events_stub.seen[0]
    assert sorted(asked.values("types")) == REPLAYED_TYPES
    assert {"charge.refunded", "charge.dispute.created", "refund.failed"} <= set(REPLAYED_TYPES)
    assert asked.values("created[gte]") == [str(int(since.timestamp()))]
    assert asked.values("limit") == ["100"]

    out, _ = replay(site, since=since.isoformat())

    assert "0 new, 2 already known, 0 processed, 0 failed" in out
    assert ExternalRefund.objects.count() == 1 and Dispute.objects.count() == 1
    assert AuditRecord.objects.filter(kind="external_refund").count() == 1
    assert AuditRecord.objects.filter(kind="dispute").count() == 1
    call_command("audit", "verify", "--site", site.pk, stdout=io.StringIO())


def test_it_does_not_apply_twice_an_event_the_webhook_delivered(site, charge, events_stub, deliver):
    delivered = charge_refunded(charge)
    body = json.dumps(delivered).encode()
    assert deliver(site, body, header(body)).json() == {"received": True, "duplicate": False}
    events_stub.add(delivered, dispute_created(charge))

    out, _ = replay(site)

    assert "1 new, 1 already known, 1 processed, 0 failed" in out
    charge.refresh_from_db()
    assert charge.amount_refunded_outside_minor == 3000
    assert ExternalRefund.objects.count() == 1
    assert AuditRecord.objects.filter(kind="external_refund").count() == 1
    assert WebhookEvent.objects.count() == 2


def test_it_processes_an_event_stored_but_never_processed(site, charge, events_stub):
    lost = charge_refunded(charge)
    body = json.dumps(lost).encode()
    # The webhook stores it, but its on-commit task never runs here (as if the broker had
    # been down): the test's transaction never commits and nothing captures the callback.
    response = post_event(site, body)
    assert response.status_code == 200
    assert WebhookEvent.objects.get().processed_at is None
    events_stub.add(lost)

    out, _ = replay(site)

    assert "0 new, 1 already known, 1 processed, 0 failed" in out
    assert WebhookEvent.objects.get().processed_at is not None
    charge.refresh_from_db()
    assert charge.amount_refunded_outside_minor == 3000


def test_it_reads_every_page_and_applies_the_events_oldest_first(site, charge, events_stub):
    # 104 events about charges Sill did not make, then two about Sill's: more than one page
    # at Stripe's maximum of 100 events a page.
    foreign = [
        as_event(
            "refund.created",
            refund_obj(f"ch_elsewhere_{n}", refund_id=f"re_elsewhere_{n}"),
            event_id=f"evt_elsewhere_{n:03}",
            ago=2 * HOUR + n,
        )
        for n in range(104)
    ]
    events_stub.add(*foreign, charge_refunded(charge), dispute_created(charge))

    out, _ = replay(site)

    assert "fetched 106 Stripe event(s)" in out and "106 new" in out and "106 processed" in out
    assert len(events_stub.seen) == 2
    first, second = events_stub.seen
    assert first.values("starting_after") == []
    assert second.values("starting_after") == [first_page_last_id(events_stub)]
    stored = list(WebhookEvent.objects.order_by("pk").values_list("event_id", flat=True))
    expected = sorted(events_stub.events, key=lambda e: (e["created"], e["id"]))
    assert stored == [e["id"] for e in expected]
    assert ExternalRefund.objects.count() == 1 and Dispute.objects.count() == 1


def first_page_last_id(stub: EventsStub) -> str:
    newest_first = sorted(stub.events, key=lambda e: (e["created"], e["id"]), reverse=True)
    return str(newest_first[99]["id"])


def test_it_sends_the_connected_account_and_takes_its_events(site, account, charge, events_stub):
    RailAccount.objects.filter(pk=account.pk).update(connected_account="acct_1Mine")
    events_stub.add({**charge_refunded(charge), "account": "acct_1Mine"})

    out, _ = replay(site)

    assert events_stub.seen[0].headers.get("Stripe-Account") == "acct_1Mine"
    assert "1 new" in out and "1 processed" in out
    assert ExternalRefund.objects.count() == 1


def test_it_reports_a_failing_event_keeps_it_and_applies_it_on_a_later_replay(
    site, charge, events_stub
):
    books_disagree(charge)
    events_stub.add(too_large_refund_event(charge, created=int(time.time()) - HOUR))

    with pytest.raises(CommandError) as caught:
        replay(site)

    assert "1 event(s) could not be applied" in str(caught.value)
    assert caught.value.returncode == 1
    stored = WebhookEvent.objects.get()
    assert stored.processed_at is None and stored.attempts == 1
    assert stored.last_error.startswith("ExceedsCharge")
    assert not ExternalRefund.objects.exists()

    books_agree(charge)
    out, _ = replay(site)

    assert "0 new, 1 already known, 1 processed, 0 failed" in out
    assert ExternalRefund.objects.count() == 1


def test_it_says_what_failed_and_still_prints_the_summary(site, charge, events_stub):
    books_disagree(charge)
    events_stub.add(
        too_large_refund_event(charge, created=int(time.time()) - HOUR), dispute_created(charge)
    )
    out, err = io.StringIO(), io.StringIO()

    with pytest.raises(CommandError):
        call_command(
            "rails", "replay-webhooks", "--site", site.pk, "--rail", "stripe",
            "--since", (timezone.now() - timedelta(days=1)).isoformat(), stdout=out, stderr=err,
        )  # fmt: skip

    assert "2 new, 0 already known, 1 processed, 1 failed" in out.getvalue()
    assert err.getvalue().startswith("evt_too_large: ExceedsCharge")
    assert Dispute.objects.count() == 1  # one bad event does not stop the others


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--site", "01NOSUCHSITE00000000000000"], "There is no site"),
        (["--rail", "mock"], "a rail without webhooks: webhooks are replayed for paypal"),
        (["--rail", "bitcoin"], "a rail Sill does not know: webhooks are replayed for"),
        (["--since", "last tuesday"], "is not an ISO 8601 time or date"),
        (["--since", "2999-01-01T00:00:00Z"], "is in the future"),
        (["--since", "{31_days_ago}"], "Stripe keeps events for 30 days only"),
    ],
    ids=["unknown-site", "mock-rail", "unknown-rail", "not-iso", "future", "too-old"],
)
def test_it_refuses_bad_arguments_in_words(site, charge, events_stub, args, words):
    given = {
        "--site": site.pk,
        "--rail": "stripe",
        "--since": (timezone.now() - timedelta(days=1)).isoformat(),
    }
    old = (timezone.now() - timedelta(days=31)).isoformat()
    given[args[0]] = args[1].replace("{31_days_ago}", old)
    argv = [part for pair in given.items() for part in pair]

    with pytest.raises(CommandError) as caught:
        call_command("rails", "replay-webhooks", *argv, stdout=io.StringIO())

    assert words in str(caught.value)
    assert caught.value.returncode == 1
    assert events_stub.seen == [] and not WebhookEvent.objects.exists()


def test_it_bounds_since(site, account):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    with pytest.raises(ReplayRefused, match="needs a time zone"):
        replay_stripe_events(site=site, since=datetime(2026, 11, 30), now=now)
    with pytest.raises(ReplayRefused, match="30 days"):
        replay_stripe_events(site=site, since=now - timedelta(days=30, seconds=1), now=now)
    with pytest.raises(ReplayRefused, match="future"):
        replay_stripe_events(site=site, since=now + timedelta(seconds=1), now=now)


@pytest.mark.parametrize(
    ("zone", "text", "expected"),
    [
        ("Asia/Tokyo", "{day}", "{day}T00:00:00+09:00"),
        ("Asia/Tokyo", "{day}T08:30:00", "{day}T08:30:00+09:00"),
        ("Asia/Tokyo", "{day}T08:30:00Z", "{day}T08:30:00+00:00"),
        ("UTC", "{day}T08:30:00-05:00", "{day}T08:30:00-05:00"),
        ("UTC", "{day}", "{day}T00:00:00+00:00"),
    ],
)
def test_it_reads_a_time_without_a_zone_in_the_sites_zone(
    site, account, events_stub, zone, text, expected
):
    site.timezone = zone  # Tokyo keeps +09:00 all year
    site.save()
    day = (timezone.now() - timedelta(days=3)).date().isoformat()

    out, _ = replay(site, since=text.format(day=day))

    since = datetime.fromisoformat(expected.format(day=day))
    assert events_stub.seen[0].values("created[gte]") == [str(int(since.timestamp()))]
    assert f"since {since.isoformat()}" in out


def test_it_exits_non_zero_on_a_disabled_rail_and_asks_nothing(site, account, events_stub):
    RailAccount.objects.filter(pk=account.pk).update(enabled=False)

    with pytest.raises(CommandError, match="The Stripe rail is not enabled") as caught:
        replay(site)

    assert caught.value.returncode == 1
    assert events_stub.seen == []


def test_it_exits_non_zero_for_a_site_without_a_stripe_rail(site, other_site, account, events_stub):
    with pytest.raises(CommandError, match="The Stripe rail is not enabled"):
        replay(other_site)


def test_it_exits_non_zero_when_stripe_refuses_without_printing_the_secret(
    site, account, events_stub, capsys
):
    revoked = "sk_test_revokedKey0000000000000001"
    account.set_secret(revoked)
    account.save()
    out, err = io.StringIO(), io.StringIO()

    with pytest.raises(CommandError) as caught:
        call_command(
            "rails", "replay-webhooks", "--site", site.pk, "--rail", "stripe",
            "--since", (timezone.now() - timedelta(days=1)).isoformat(), stdout=out, stderr=err,
        )  # fmt: skip

    message = str(caught.value)
    assert message.startswith("Stripe event list failed: Invalid API Key provided")
    assert caught.value.returncode == 1
    assert events_stub.seen[0].headers["Authorization"] == f"Bearer {revoked}"  # it was sent
    everything = message + out.getvalue() + err.getvalue() + "".join(capsys.readouterr())
    assert revoked not in everything and "sk_test_" not in everything
    assert not WebhookEvent.objects.exists()
