"""Every email Sill sends, read as a merchant's owner or admin (or the buyer) reads it on a
phone, for a site far from UTC selling in a currency without cents (JPY) and one with three
decimals (KWD): the subject says what and which order, in words and with the amount; money
carries its currency and its decimals; a time is in the site's zone, named; every link is
absolute, on ``SILL_BASE_URL``; the plain text has no leftover template syntax, HTML entities,
doubled spaces or runs of blank lines; the people told are the roles that act on it.

Seen: the held, failed, failed-after-settlement and needs-attention emails' subjects named
an amount but no order, so two held ¥8,900 refunds were two identical lines in an inbox; the
held email split its facts with a blank line (the credit line, empty for a refund); the
needs-attention email named the rail by its code ("the mock rail", "the woocommerce rail");
a buyer with no name was greeted "Hello ,"; the buyer's subject named neither the amount nor
the order; the invitation and password-reset emails ended in a blank line."""

from __future__ import annotations

import json
import re
from zoneinfo import ZoneInfo

import pytest
from django.core import mail
from django.test import Client

from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund
from refunds.review.decisions import deadline
from refunds.review.failures import notify_failed
from refunds.review.notifications import notify_held_refund
from refunds.review.slack import held_message
from refunds.services import reverse_settled_refund
from sill.accounts.models import Role
from sill.accounts.services import add_member, remove_member
from tests.conftest import PASSWORD
from tests.orders.in_doubt import charge_in_doubt
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db

BASE = "https://sill.roasters.example"
OWNER, ADMIN = "owner@roasters.example", "admin@roasters.example"
DECIDERS = [[ADMIN], [OWNER]]
# A buyer's name that would be markup, and quotes, if anything rendered it as HTML.
BUYER_NAME = 'Ada "Ace" O\'Brien <b>x</b>'

SITES = {
    # zone, currency, an order's total, as the email writes it, the zone's abbreviations
    "tokyo-jpy": ("Asia/Tokyo", "JPY", "8900", "¥8,900", ("JST",)),
    "los-angeles-kwd": ("America/Los_Angeles", "KWD", "12.345", "KWD 12.345", ("PST", "PDT")),
}


@pytest.fixture(params=sorted(SITES))
def shop(request, site, members, settings):
    """``site`` in a zone and currency of ``SITES``, its links on ``BASE``; a second admin
    who was removed from the site (still an active account), and every other role."""
    zone, currency, total, shown, abbreviations = SITES[request.param]
    settings.SILL_BASE_URL = BASE + "/"
    site.timezone, site.default_currency = zone, currency
    site.save()
    gone = add_member(site=site, email="gone@roasters.example", role=Role.ADMIN, password=PASSWORD)
    remove_member(membership=gone, actor=members["owner"])
    return {
        "site": site,
        "zone": zone,
        "currency": currency,
        "total": total,
        "shown": shown,
        "abbreviations": abbreviations,
    }


@pytest.fixture
def buy(shop, make_order, mock_rail):
    """``buy(**kwargs)``: a paid order of the shop's total in its currency, on the mock rail."""

    def make(**kwargs):
        order = make_order(total=shop["total"], currency=shop["currency"], **kwargs)
        order.buyer_name = BUYER_NAME
        order.save(update_fields=["buyer_name"])
        return order

    return make


def reads_well(message, *, link: str = "") -> str:
    """The checks every email passes; its body."""
    body, subject = message.body, message.subject
    # Plain text only: nothing renders the buyer's or site's words as markup.
    assert not getattr(message, "alternatives", None), message.alternatives
    assert "\n" not in subject and "  " not in subject
    assert not re.search(r"\b[a-z]+_[a-z_]+\b", subject), subject  # no raw code
    for leftover in ("{{", "}}", "{%", "%}", "&amp;", "&#x27;", "&quot;", "&lt;", "&gt;"):
        assert leftover not in body, (leftover, body)
    assert "\n\n\n" not in body, body  # no run of blank lines
    assert not body.startswith("\n") and body.endswith("\n") and not body.endswith("\n\n"), body
    assert not re.search(r"\S  +\S", body), body  # no doubled spaces
    assert not re.search(r" +\n", body), body  # no trailing spaces
    assert " ," not in body, body
    for code in ("needs_attention", "rail_declined", "not_at_rail", "wrong_item"):
        assert code not in body and code not in subject
    for url in re.findall(r"\S*://\S*", body):
        assert url.startswith(BASE + "/"), url
    assert "testserver" not in body and "localhost" not in body and "127.0.0.1" not in body
    if link:
        assert f"\n{BASE}{link}\n" in body or f": {BASE}{link}\n" in body, body
    return body


def told(*, only=None) -> list[list[str]]:
    return sorted(m.to for m in mail.outbox if only is None or only in m.subject)


# --- held for review -------------------------------------------------------------------------


def test_a_held_refund_names_its_order_amount_and_deadline_in_the_sites_zone(shop, buy, agent):
    order = buy()
    held = hold_refund(order=order, agent=agent)
    mail.outbox.clear()
    assert notify_held_refund(refund_id=held.id) is True

    # The owner and the admin; not the reviewer (who cannot decide), staff, another site's
    # owner, nor the admin who was removed from the site.
    assert told() == DECIDERS
    local = deadline(held).astimezone(ZoneInfo(shop["zone"]))
    for message in mail.outbox:
        assert message.subject == (
            "[Sill] Held for review: Refund request · Wrong item · up to "
            f"{shop['shown']} for order #{order.number}"
        )
        body = reads_well(message, link=f"/held/{held.id}/")
        # The agent by its name, as the pages name it (its id is internal); a percentage as
        # the pages write it, without a space before the sign.
        assert (
            f"Order: #{order.number} ({BUYER_NAME})\nRequested by: Test shopper (agent)\n" in body
        )
        assert "\nFacts: 100% of the order · " in body
        assert f"{local:%b} {local.day}, {local:%H:%M} {local.tzname()}" in body
        assert local.tzname() in shop["abbreviations"]
    # Slack's message names the agent and writes the share as the email does.
    slack = json.dumps(held_message(held, review_url=BASE), ensure_ascii=False)
    assert "Asked by Test shopper (agent). " in slack and "100% of the order" in slack
    assert "agent_test_shopper" not in slack


def test_a_held_staff_refund_names_its_exact_amount(shop, buy, members):
    """A staff member asked for an exact amount: "up to" is an agent's ceiling alone."""
    order = buy()
    held = hold_refund(order=order, requested_by=members["staff"].user, reason_code="defective")
    mail.outbox.clear()
    assert notify_held_refund(refund_id=held.id) is True
    assert told() == DECIDERS
    for message in mail.outbox:
        assert message.subject == (
            f"[Sill] Held for review: Staff refund · Defective · {shop['shown']} "
            f"for order #{order.number}"
        )


# --- a refund failed ------------------------------------------------------------------------


def test_a_failed_refund_names_its_order_and_why_in_words(shop, buy, mock_rail, staff_refund):
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    refund = staff_refund(buy())
    mail.outbox.clear()
    assert execute_refund(refund.id) == "failed"
    assert notify_failed(refund_id=refund.id) is True
    assert told() == DECIDERS
    order = refund.order
    for message in mail.outbox:
        assert message.subject == (
            f"[Sill] Refund failed: Staff refund · Defective · {shop['shown']} "
            f"for order #{order.number}"
        )
        body = reads_well(message, link=f"/orders/{order.pk}/")
        assert "Why: Declined by the rail.\n" in body


def test_a_refund_failed_after_settlement_names_its_order(
    shop, buy, staff_refund, django_capture_on_commit_callbacks
):
    refund = staff_refund(buy())
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.id) == "succeeded"
    refund = Refund.objects.get(pk=refund.pk)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert reverse_settled_refund(
            refund_id=refund.id, provider_refund_id=refund.provider_refund_id,
            message="the card was closed", source="evt_failed",
        )  # fmt: skip
    assert told() == DECIDERS
    for message in mail.outbox:
        assert message.subject == (
            f"[Sill] Refund failed after settlement: Staff refund · Defective · "
            f"{shop['shown']} for order #{refund.order.number}"
        )
        body = reads_well(message, link=f"/orders/{refund.order_id}/")
        assert "What happened: the card was closed\n" in body


# --- a refund needs attention ---------------------------------------------------------------


def test_a_refund_that_needs_attention_names_its_order_and_its_rail_in_words(
    shop, buy, mock_rail, staff_refund, django_capture_on_commit_callbacks
):
    mock_rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
    mock_rail.save()
    refund = staff_refund(buy())
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    mock_rail.enabled = False
    mock_rail.save()
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.id) == "needs_attention"
    assert told() == DECIDERS
    for message in mail.outbox:
        assert message.subject == (
            f"[Sill] Needs attention: Staff refund · Defective · {shop['shown']} "
            f"for order #{refund.order.number}"
        )
        body = reads_well(message, link=f"/orders/{refund.order_id}/")
        assert f"A refund on {shop['site'].name} needs attention: Mock may have made it" in body
        assert "mock rail" not in body


# --- the buyer's confirmation ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "  "])
def test_a_buyer_without_a_name_is_greeted_and_told_the_amount_and_order(
    shop, buy, staff_refund, django_capture_on_commit_callbacks, name
):
    order = buy()
    order.buyer_name = name
    order.save(update_fields=["buyer_name"])
    refund = staff_refund(order)
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.id) == "succeeded"
    [message] = [m for m in mail.outbox if m.to == ["buyer@example.com"]]
    assert message.subject == (
        f"Your refund from {shop['site'].name}: {shop['shown']} for order #{order.number}"
    )
    body = reads_well(message)
    assert body.startswith("Hello,\n\n")
    assert f"We have refunded {shop['shown']} for order #{order.number}." in body


def test_a_named_buyer_is_greeted_by_name(
    shop, buy, staff_refund, django_capture_on_commit_callbacks
):
    refund = staff_refund(buy())
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.id) == "succeeded"
    [message] = [m for m in mail.outbox if m.to == ["buyer@example.com"]]
    assert reads_well(message).startswith(f"Hello {BUYER_NAME},\n\n")


# --- a purchase's charge needs attention ----------------------------------------------------


def test_a_charge_that_needs_attention_names_its_order_and_amount(
    shop, make_order, agent, django_capture_on_commit_callbacks
):
    order = make_order(
        total=shop["total"], currency=shop["currency"], status="PENDING", charged=False,
        placed_by_agent=agent, source_mandate_id="mnd_doubt",
    )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        charge = charge_in_doubt(order)
    assert told() == DECIDERS
    for message in mail.outbox:
        assert message.subject == (
            f"[Sill] Needs attention: a {shop['shown']} charge for order #{order.number}"
        )
        body = reads_well(message, link=f"/orders/{order.pk}/#charge-{charge.pk}")
        assert f"Amount: {shop['shown']} on Mock\n" in body


# --- invitations and password resets --------------------------------------------------------


def test_an_invitation_reads_well_and_carries_its_link_only(shop, client_for):
    response = client_for("owner").post(
        "/settings/members/add/", {"email": "new@roasters.example", "role": "reviewer"}
    )
    assert response.status_code == 303
    [message] = mail.outbox
    assert message.to == ["new@roasters.example"]
    assert message.subject == f"You're invited to {shop['site'].name} on Sill"
    body = reads_well(message)
    assert re.search(rf"\n{re.escape(BASE)}/invite/[\w-]+/\n", body), body
    assert body.endswith("— Sill\n")


def test_a_password_reset_reads_well(shop):
    Client().post("/password/reset/", {"email": "staff@roasters.example"})
    [message] = mail.outbox
    assert (
        message.to == ["staff@roasters.example"] and message.subject == "Reset your Sill password"
    )
    body = reads_well(message)
    assert re.search(rf"\n{re.escape(BASE)}/password/reset/[\w-]+/[\w-]+/\n", body), body
    assert body.endswith("— Sill\n")


def test_a_held_refund_of_a_removed_or_deactivated_decider_tells_only_the_others(
    shop, buy, agent, members
):
    members["admin"].user.is_active = False
    members["admin"].user.save(update_fields=["is_active"])
    held = hold_refund(order=buy(), agent=agent)
    mail.outbox.clear()
    assert notify_held_refund(refund_id=held.id) is True
    assert told() == [[OWNER]]
