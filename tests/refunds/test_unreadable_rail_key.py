"""A rail whose stored API key no key opens is refused when a refund is decided, as a rail
switched off is (``rail_disabled``, saying what to do), not answered "approved" and then
failed a moment later at execution: an agent's mandate, a staff refund (service, form and
API), and the approval of a refund held before the key became unreadable. The order page
says so instead of offering a form and an amount the confirmation would refuse."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from audit.models import AuditRecord
from refunds.models import Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.review.decisions import DecisionRefused, approve_refund
from refunds.staff.services import create_staff_refund
from sill.errors import SillError
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry, RailAccount
from sill.rails.secrets import WHAT_TO_DO
from tests.refunds.conftest import ORIGINAL, hold_refund, post, refund_intent
from tests.refunds.staff_api import post_full_refund

pytestmark = pytest.mark.django_db

KEY = "sk_test_51UnreadableDecisionKey00000000XYZ9"
# The SECRET_KEY the key was sealed under, since rotated away without being kept as a fallback.
LOST = "the-secret-key-that-was-rotated-away-" + "l" * 40
REFUSAL = f"The Stripe rail is disabled because its stored API key cannot be read: {WHAT_TO_DO}."


def seal_under_lost_key(account: RailAccount) -> None:
    """Store ``account``'s key as it was sealed before SECRET_KEY was rotated to today's."""
    with override_settings(SECRET_KEY=LOST, SECRET_KEY_FALLBACKS=[]):
        account.set_secret(KEY)
    account.save()


@pytest.fixture
def stripe_rail(site) -> RailAccount:
    account = RailAccount(site=site, rail="stripe", enabled=True)
    seal_under_lost_key(account)
    return account


@pytest.fixture
def reason(site) -> RefundReason:
    ensure_default_reasons(site)
    return RefundReason.objects.get(site=site, code="defective")


def _sealed(account: RailAccount) -> bytes:
    return bytes(RailAccount.objects.get(pk=account.pk).secret_encrypted)


def _nothing_moved(order: Order) -> None:
    """No refund was reserved, sent or failed: an execution enqueued (the tests run what
    commits enqueues) would have failed the refund rail_disabled."""
    charge = Charge.objects.get(order=order)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (0, 0)
    assert not Refund.objects.filter(
        order=order, status__in=["processing", "succeeded", "failed", "needs_attention"]
    ).exists()


# --- an agent's mandate -----------------------------------------------------------------------


def test_an_agents_mandate_is_answered_rejected_rail_disabled(
    agent, make_order, stripe_rail, sign, django_capture_on_commit_callbacks
):
    """It was answered 201 approved/processing, and the refund failed rail_disabled at once."""
    order = make_order(rail="stripe", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    sealed = _sealed(stripe_rail)

    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), sign(refund_intent(ORIGINAL)))

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["decision"], body["status"], body["reason"]) == (
        "rejected",
        "rejected",
        "rail_disabled",
    )
    refund = Refund.objects.get(pk=body["refund_id"])
    assert (refund.status, refund.outcome_code) == ("rejected", "rail_disabled")
    assert AuditRecord.objects.filter(kind="rejected", subject_refund_id=refund.pk).exists()
    _nothing_moved(order)
    assert _sealed(stripe_rail) == sealed  # the decision wrote nothing to the account


# --- a staff refund ---------------------------------------------------------------------------


def test_a_staff_refund_is_refused_with_what_to_do(
    site, members, make_order, stripe_rail, reason, django_capture_on_commit_callbacks
):
    """It was decided and reserved ("on its way"), then failed rail_disabled at execution."""
    order = make_order(rail="stripe")

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(SillError) as refused,
    ):
        create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=reason
        )

    assert (refused.value.code, refused.value.status) == ("rail_disabled", 409)
    assert refused.value.message == REFUSAL
    assert not Refund.objects.filter(order=order).exists()
    _nothing_moved(order)


def test_the_staff_form_refuses_it_before_the_confirmation(
    client_for, make_order, stripe_rail, reason
):
    order = make_order(rail="stripe")
    form = {"kind": "full", "reason": str(reason.pk), "note": ""}

    response = client_for("staff").post(f"/orders/{order.id}/refund/", form)

    assert response.status_code == 422
    body = response.content.decode()
    assert "its stored API key cannot be read" in body and "SILL_SECRET_KEY_FALLBACKS" in body
    assert "Confirm the refund" not in body
    assert KEY not in body
    assert not Refund.objects.filter(order=order).exists()


def test_the_staff_api_answers_409_rail_disabled(
    client_for, make_order, stripe_rail, reason, django_capture_on_commit_callbacks
):
    order = make_order(rail="stripe")

    with django_capture_on_commit_callbacks(execute=True):
        response = post_full_refund(
            client_for("staff"), order.id, reason_id=reason.pk, key="unreadable-key-1"
        )

    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "rail_disabled"
    assert response.json()["error"]["message"] == REFUSAL
    _nothing_moved(order)


# --- approving a held refund ------------------------------------------------------------------


@pytest.fixture
def held_on_stripe(site, members, make_order, localstripe_url, reason) -> Refund:
    """A staff refund of a Stripe order, held while the rail's key was readable."""
    account = RailAccount(site=site, rail="stripe", enabled=True, api_base=localstripe_url)
    account.set_secret(KEY)
    account.save()
    order = make_order(rail="stripe")
    return hold_refund(order=order, requested_by=members["staff"].user, reason_code="defective")


def test_approving_a_held_refund_whose_key_became_unreadable_closes_it(
    site, members, held_on_stripe, django_capture_on_commit_callbacks
):
    """The approval went through and the refund failed rail_disabled a moment later."""
    seal_under_lost_key(RailAccount.objects.get(site=site, rail="stripe"))

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(DecisionRefused) as refused,
    ):
        approve_refund(refund=held_on_stripe, actor=members["owner"].user)

    assert (refused.value.code, refused.value.message) == ("rail_disabled", REFUSAL)
    held_on_stripe.refresh_from_db()
    assert (held_on_stripe.status, held_on_stripe.outcome_code) == ("rejected", "rail_disabled")
    closing = AuditRecord.objects.get(
        kind="escalated_rejected", subject_refund_id=held_on_stripe.pk
    )
    assert json.loads(closing.payload)["body"]["reason"] == "rail_disabled"
    _nothing_moved(held_on_stripe.order)


def test_an_approval_in_the_browser_answers_the_refusal(
    site, client_for, held_on_stripe, django_capture_on_commit_callbacks
):
    seal_under_lost_key(RailAccount.objects.get(site=site, rail="stripe"))

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for("owner").post(
            f"/held/{held_on_stripe.id}/approve/", headers={"Accept": "application/json"}
        )

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "rail_disabled"
    assert response.json()["error"]["message"] == REFUSAL
    assert Refund.objects.get(pk=held_on_stripe.pk).outcome_code == "rail_disabled"


def test_approving_a_held_refund_on_a_rail_switched_off_closes_it_too(
    members, held, mock_rail, django_capture_on_commit_callbacks
):
    """The approval's check of the rail refuses a switched-off rail as it refuses an unreadable
    key: it was approved, then failed rail_disabled at execution."""
    mock_rail.enabled = False
    mock_rail.save()

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(DecisionRefused) as refused,
    ):
        approve_refund(refund=held, actor=members["owner"].user)

    assert refused.value.code == "rail_disabled"
    held.refresh_from_db()
    assert (held.status, held.outcome_code) == ("rejected", "rail_disabled")
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
    _nothing_moved(held.order)


# --- the order page -----------------------------------------------------------------------

REFUSED = "<p><strong>Refunds on Stripe are refused.</strong> " + REFUSAL + "</p>"
# On its own line, a button: inline after the words it wrapped apart and read as part of them.
SETTINGS_LINK = (
    '<p class="rail-refused-fix">'
    '<a href="/settings/rails/" role="button" class="outline">Open rail settings</a></p>'
)
ASK = '<p class="rail-refused-fix">An owner or admin can fix it on Settings → Rails.</p>'


def _said(body: str, *parts: str) -> bool:
    """``parts`` in ``body`` one after the other, whatever whitespace is between tags."""
    return "".join(parts) in re.sub(r">\s+<", "><", body)


FORM = 'name="idempotency_key"'


def test_the_order_page_tells_an_owner_instead_of_offering_the_form(
    client_for, make_order, stripe_rail
):
    """It offered the Refund form and its amount; the confirmation then refused them."""
    order = make_order(rail="stripe")

    body = client_for("owner").get(f"/orders/{order.id}/").content.decode()

    assert _said(body, REFUSED, SETTINGS_LINK)
    assert body.count("its stored API key cannot be read") == 1  # the card does not repeat it
    assert FORM not in body and "You are refunding" not in body
    assert KEY not in body


def test_the_order_page_tells_a_reviewer_who_can_fix_it(client_for, make_order, stripe_rail):
    """A reviewer has no refund panel: the charge's card says it, without the settings link
    a reviewer cannot open."""
    order = make_order(rail="stripe")

    body = client_for("reviewer").get(f"/orders/{order.id}/").content.decode()

    assert 'id="charge-rail-refused"><p><strong>Refunds on Stripe are refused.</strong> ' in body
    assert _said(body, REFUSED, ASK)
    assert "/settings/rails/" not in body and FORM not in body


def test_staff_who_refund_are_told_who_can_fix_it(client_for, make_order, stripe_rail):
    order = make_order(rail="stripe")

    body = client_for("staff").get(f"/orders/{order.id}/").content.decode()

    assert 'id="refund-rail-refused"' in body and _said(body, REFUSED, ASK)
    assert "/settings/rails/" not in body and FORM not in body


def test_the_preview_says_it_instead_of_an_amount(client_for, make_order, stripe_rail):
    """A page opened while the key was readable asks for previews: no amount to confirm."""
    order = make_order(rail="stripe")

    body = client_for("staff").get(f"/orders/{order.id}/refund/preview/?kind=full")

    assert body.status_code == 200
    assert f'<p class="preview-error">{REFUSAL}</p>' in body.content.decode()
    assert "confirmed_amount_minor" not in body.content.decode()


def test_the_order_page_says_a_switched_off_rail_refuses_too(client_for, make_order, mock_rail):
    mock_rail.enabled = False
    mock_rail.save()
    order = make_order()

    body = client_for("admin").get(f"/orders/{order.id}/").content.decode()

    assert _said(
        body,
        "<p><strong>Refunds on Mock are refused.</strong> The Mock rail is not enabled for this "
        "site.</p>",
        SETTINGS_LINK,
    )
    assert FORM not in body


def test_nothing_is_said_once_nothing_is_left_to_refund(client_for, make_order, stripe_rail):
    order = make_order(rail="stripe")
    charge = Charge.objects.get(order=order)
    Charge.objects.filter(pk=charge.pk).update(amount_refunded_minor=charge.amount_minor)

    for persona in ("owner", "reviewer"):
        body = client_for(persona).get(f"/orders/{order.id}/").content.decode()
        assert "are refused" not in body, persona


def _rail_account_reads(client: Client, order: Order) -> int:
    client.get(f"/orders/{order.id}/")  # warm: the session, the site context
    with CaptureQueriesContext(connection) as page:
        assert client.get(f"/orders/{order.id}/").status_code == 200
    return sum(RailAccount._meta.db_table in q["sql"] for q in page.captured_queries)


def test_the_page_reads_the_sites_rail_accounts_once(client_for, make_order, stripe_rail):
    """One query for the page, whatever its charges (none without a charge), and no more when
    the key cannot be read."""
    charged, uncharged = make_order(rail="stripe"), make_order(rail="stripe", charged=False)
    for persona in ("owner", "reviewer"):
        client = client_for(persona)
        assert _rail_account_reads(client, charged) == 1, persona
        assert _rail_account_reads(client, uncharged) == 0, persona
