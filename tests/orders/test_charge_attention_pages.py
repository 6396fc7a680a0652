"""The order page's form for a purchase's charge that needs attention: owners record what the
rail's dashboard shows, after a confirmation; everyone else reads the words only."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.models import AuditRecord
from sill.orders.charge_lease import claim_charge
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry
from tests.orders.in_doubt import charge_in_doubt

pytestmark = pytest.mark.django_db

FORM_FIELD = 'name="provider_charge_id"'


@pytest.fixture
def in_doubt(make_order, agent) -> Charge:
    order = make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id="mnd_doubt"
    )
    return charge_in_doubt(order)


def url(charge: Charge) -> str:
    return f"/orders/{charge.order_id}/charge-attention/"


def made() -> MockLedgerEntry:
    """The charge the mock rail made before its answer was lost."""
    return MockLedgerEntry.objects.get(kind="charge")


def unchanged(charge: Charge) -> None:
    fresh = Charge.objects.select_related("order").get(pk=charge.pk)
    assert fresh.needs_attention and fresh.lease_until is None
    assert (fresh.status, fresh.provider_charge_id, fresh.order.status) == (
        "pending",
        "",
        "PENDING",
    )
    assert not AuditRecord.objects.filter(kind="attention_resolved").exists()


# --- the order page -------------------------------------------------------------------------


def test_a_charge_not_confirmed_shows_no_charge_id_and_nothing_refundable(client_for, in_doubt):
    """Its card showed Sill's own id as the "Charge id" (to look up in the rail's dashboard,
    where it is not) and the whole amount as "Refundable" before anything was charged."""
    page = client_for("owner").get(f"/orders/{in_doubt.order_id}/").content.decode()
    assert '<dt>Charge id</dt><dd><span class="muted">None yet: the rail has not confirmed' in page
    assert "Nothing: not charged yet" in page


def test_an_owner_sees_the_form_under_the_charge(client_for, in_doubt):
    page = client_for("owner").get(f"/orders/{in_doubt.order_id}/").content.decode()
    assert "Record what Mock's dashboard shows" in page
    assert f"sill-charge-{in_doubt.order_id}" in page
    assert FORM_FIELD in page and 'name="provider_payment_id"' in page
    assert f'action="/orders/{in_doubt.order_id}/charge-attention/' in page
    # Every input is labelled.
    assert f'<label for="charge-id-{in_doubt.pk}">' in page
    assert f'<label for="payment-id-{in_doubt.pk}">' in page
    assert f'<label for="charge-note-{in_doubt.pk}">' in page


@pytest.mark.parametrize("persona", ["admin", "reviewer", "staff"])
def test_everyone_else_reads_the_words_only(client_for, in_doubt, persona):
    page = client_for(persona).get(f"/orders/{in_doubt.order_id}/").content.decode()
    assert "The rail has not confirmed this charge" in page
    assert "An owner can record what Mock's dashboard shows" in page
    assert FORM_FIELD not in page and "charge-attention/" not in page


def test_the_form_costs_the_page_no_query(client_for, in_doubt, django_assert_num_queries):
    admin, owner = client_for("admin"), client_for("owner")
    page = f"/orders/{in_doubt.order_id}/"
    admin.get(page), owner.get(page)  # warm: sessions, the site context
    with CaptureQueriesContext(connection) as without_form:
        assert FORM_FIELD not in admin.get(page).content.decode()
    with django_assert_num_queries(len(without_form.captured_queries)):
        assert FORM_FIELD in owner.get(page).content.decode()


def test_a_charge_that_does_not_need_attention_has_no_form(client_for, make_order):
    order = make_order()
    page = client_for("owner").get(f"/orders/{order.id}/").content.decode()
    assert FORM_FIELD not in page and "Needs attention" not in page


# --- recording it ---------------------------------------------------------------------------


def test_an_owner_confirms_before_the_charge_is_recorded(client_for, in_doubt):
    owner = client_for("owner")
    form = {
        "outcome": "charged",
        "provider_charge_id": made().provider_charge_id,
        "note": "seen in the ledger",
    }

    confirming = owner.post(url(in_doubt), form)

    assert confirming.status_code == 200
    page = confirming.content.decode()
    assert "Record that Mock charged the buyer $89.00" in page
    assert f'value="{made().provider_charge_id}"' in page
    assert 'name="confirmed" value="1"' in page and 'name="edit" value="1"' in page
    unchanged(in_doubt)  # nothing written until confirmed

    done = owner.post(url(in_doubt), {**form, "confirmed": "1"})

    assert done.status_code == 303 and done["Location"] == f"/orders/{in_doubt.order_id}/"
    charge = Charge.objects.select_related("order").get(pk=in_doubt.pk)
    assert (charge.status, charge.provider_charge_id, charge.order.status) == (
        "succeeded",
        made().provider_charge_id,
        "PAID",
    )
    record = AuditRecord.objects.get(kind="attention_resolved")
    assert "owner@roasters.example" in record.payload and "seen in the ledger" in record.payload
    after = owner.get(done["Location"]).content.decode()
    assert f"Recorded: Mock charged $89.00 ({made().provider_charge_id})" in after
    assert FORM_FIELD not in after


def test_an_owner_records_that_nothing_was_charged(client_for, in_doubt):
    owner = client_for("owner")
    confirming = owner.post(url(in_doubt), {"outcome": "not_charged"}).content.decode()
    assert "Record that Mock did not charge the buyer" in confirming
    assert "the order is cancelled" in confirming

    done = owner.post(url(in_doubt), {"outcome": "not_charged", "confirmed": "1"}, follow=True)

    charge = Charge.objects.select_related("order").get(pk=in_doubt.pk)
    assert (charge.status, charge.order.status) == ("failed", "CANCELLED")
    assert "Recorded: nothing was charged" in done.content.decode()


def test_change_gives_the_form_back_with_what_was_typed(client_for, in_doubt):
    page = client_for("owner").post(
        url(in_doubt),
        {"outcome": "charged", "provider_charge_id": "mock_ch_typed", "edit": "1"},
    )
    assert page.status_code == 200
    body = page.content.decode()
    assert FORM_FIELD in body and 'value="mock_ch_typed"' in body
    assert 'value="charged" required checked' in body and 'name="confirmed"' not in body
    unchanged(in_doubt)


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({"outcome": "charged"}, "Enter the charge id"),
        ({"outcome": "charged", "provider_charge_id": "c" * 256}, "That charge id is too long"),
        ({"outcome": "maybe"}, "Choose what"),
        ({}, "Choose what"),
        ({"outcome": "not_charged", "note": "n" * 1001}, "The note is too long"),
    ],
)
@pytest.mark.parametrize("confirmed", ["", "1"])
def test_bad_input_answers_422_beside_the_form(client_for, in_doubt, form, words, confirmed):
    response = client_for("owner").post(url(in_doubt), {**form, "confirmed": confirmed})
    assert response.status_code == 422
    page = response.content.decode()
    assert words in page and FORM_FIELD in page
    assert 'role="alert"' in page
    unchanged(in_doubt)


def test_an_id_another_charge_holds_answers_422_and_keeps_what_was_typed(
    client_for, in_doubt, make_order
):
    paid = make_order()
    held = Charge.objects.get(order=paid).provider_charge_id
    response = client_for("owner").post(
        url(in_doubt),
        {"outcome": "charged", "provider_charge_id": held, "note": "mine", "confirmed": "1"},
    )
    assert response.status_code == 422
    page = response.content.decode()
    assert f"{held} is the charge of order #{paid.number}" in page
    assert f'value="{held}"' in page and 'value="mine"' in page
    unchanged(in_doubt)


def test_it_answers_409_while_the_sweep_asks_the_rail(client_for, in_doubt):
    assert claim_charge(in_doubt.pk) is not None
    response = client_for("owner").post(url(in_doubt), {"outcome": "not_charged", "confirmed": "1"})
    assert response.status_code == 409
    assert "asking the rail about this charge right now" in response.content.decode()
    charge = Charge.objects.get(pk=in_doubt.pk)
    assert (charge.status, charge.order.status) == ("pending", "PENDING")


def test_it_answers_409_once_resolved(client_for, in_doubt):
    owner = client_for("owner")
    owner.post(url(in_doubt), {"outcome": "not_charged", "confirmed": "1"})
    response = owner.post(
        url(in_doubt), {"outcome": "charged", "provider_charge_id": "mock_ch_x", "confirmed": "1"}
    )
    assert response.status_code == 409
    assert "no longer needs attention" in response.content.decode()
    assert AuditRecord.objects.filter(kind="attention_resolved").count() == 1


# --- who may ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "status"),
    [("admin", 403), ("reviewer", 403), ("staff", 403), ("outsider", 404), ("anonymous", 302)],
)
def test_only_an_owner_of_the_site_may_record_it(client_for, in_doubt, persona, status):
    response = client_for(persona).post(url(in_doubt), {"outcome": "not_charged", "confirmed": "1"})
    assert response.status_code == status
    unchanged(in_doubt)


def test_another_sites_order_is_not_found(client_for, in_doubt, other_site):
    Order.objects.filter(pk=in_doubt.order_id).update(site=other_site)
    response = client_for("owner").post(url(in_doubt), {"outcome": "not_charged", "confirmed": "1"})
    assert response.status_code == 404
    assert Charge.objects.get(pk=in_doubt.pk).status == "pending"


def test_it_needs_the_csrf_token(members, in_doubt):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    response = client.post(url(in_doubt), {"outcome": "not_charged", "confirmed": "1"})
    assert response.status_code == 403
    unchanged(in_doubt)


def test_it_needs_a_post(client_for, in_doubt):
    assert client_for("owner").get(url(in_doubt)).status_code == 405


def test_a_charge_sill_is_still_trying_is_not_offered_for_confirmation(
    client_for, make_order, agent
):
    order = make_order(status="PENDING", charged=False, placed_by_agent=agent)
    Charge.objects.create(order=order, rail="mock", amount_minor=order.total_minor, currency="USD")
    response = client_for("owner").post(
        f"/orders/{order.id}/charge-attention/", {"outcome": "not_charged"}
    )
    assert response.status_code == 409
    page = response.content.decode()
    assert "does not need attention: Sill is still trying it" in page
    assert 'name="confirmed"' not in page and FORM_FIELD not in page
