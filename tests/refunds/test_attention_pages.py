"""Refunds that need attention on the dashboard and order page; an owner's resolution."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.models import AuditRecord
from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund
from refunds.services import reverse_settled_refund
from sill.orders.models import Charge
from sill.orders.outside import OutsideRefund, record_outside_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def flag(staff_refund, mock_rail, django_capture_on_commit_callbacks):
    """``flag(order)``: a staff refund of what remains of ``order`` whose answer was lost,
    then the rail was switched off: it needs attention."""

    def make(order):
        mock_rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
        mock_rail.save()
        refund = staff_refund(order)
        with pytest.raises(RetryLater):
            execute_refund(refund.id)
        mock_rail.enabled = False
        mock_rail.save()
        with django_capture_on_commit_callbacks(execute=False):
            assert execute_refund(refund.id) == "needs_attention"
        refund.refresh_from_db()
        return refund

    return make


@pytest.fixture
def flagged(flag, make_order):
    return flag(make_order(total="25.00"))


def _refused(owner, refund: Refund, provider_refund_id: str) -> str:
    """The owner records ``provider_refund_id`` for ``refund``; the page they are shown, once
    checked that nothing changed: still needing attention, asked about when it was due."""
    due = Refund.objects.get(pk=refund.pk).next_check_at
    assert due is not None
    response = owner.post(
        f"/refunds/{refund.id}/resolve/",
        {"outcome": "refunded", "provider_refund_id": provider_refund_id},
        follow=True,
    )
    assert response.status_code == 200
    after = Refund.objects.get(pk=refund.pk)
    assert (after.status, after.provider_refund_id) == ("needs_attention", "")
    assert (after.lease_until, after.next_check_at) == (None, due)
    assert not AuditRecord.objects.filter(kind="attention_resolved").exists()
    return response.content.decode()


@pytest.mark.parametrize("persona", ["owner", "admin"])
def test_owners_and_admins_see_it_on_the_dashboard_and_the_order_page(client_for, flagged, persona):
    client = client_for(persona)
    dashboard = client.get("/").content.decode()
    assert "Refunds that need attention" in dashboard and "$25.00" in dashboard
    page = client.get(f"/orders/{flagged.order_id}/").content.decode()
    assert "need attention" in page or "needs attention" in page
    assert flagged.idempotency_key in page
    assert ("Record what the provider" in page) is (persona == "owner")


def test_the_dashboard_says_one_refund_needs_attention_and_two_need_it(
    client_for, flag, make_order, mock_rail
):
    # "Refunds in flight" read "1 need attention" under its count.
    flag(make_order(total="25.00"))
    assert "· 1 needs attention</small>" in client_for("owner").get("/").content.decode()
    mock_rail.enabled = True  # flag() switched it off; a refund is refused while it is off
    mock_rail.save()
    flag(make_order(total="30.00", email="second@example.com"))
    assert "· 2 need attention</small>" in client_for("owner").get("/").content.decode()


@pytest.mark.parametrize("persona", ["reviewer", "staff"])
def test_reviewers_and_staff_do_not_see_it(client_for, flagged, persona):
    client = client_for(persona)
    assert "Refunds that need attention" not in client.get("/").content.decode()
    page = client.get(f"/orders/{flagged.order_id}/").content.decode()
    assert flagged.idempotency_key not in page


@pytest.mark.parametrize(
    ("persona", "status"), [("admin", 403), ("reviewer", 403), ("staff", 403), ("outsider", 404)]
)
def test_only_an_owner_of_the_site_may_resolve(client_for, flagged, persona, status):
    response = client_for(persona).post(
        f"/refunds/{flagged.id}/resolve/", {"outcome": "not_refunded"}
    )
    assert response.status_code == status
    flagged.refresh_from_db()
    assert flagged.status == "needs_attention"
    assert not AuditRecord.objects.filter(kind="attention_resolved").exists()


def test_an_owner_records_the_refund_the_dashboard_shows(client_for, flagged, members):
    response = client_for("owner").post(
        f"/refunds/{flagged.id}/resolve/",
        {"outcome": "refunded", "provider_refund_id": "mock_re_seen", "note": "in the ledger"},
    )
    assert response.status_code == 302
    flagged.refresh_from_db()
    assert (flagged.status, flagged.provider_refund_id) == ("succeeded", "mock_re_seen")
    charge = Charge.objects.get(pk=flagged.charge_id)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (2500, 0)
    record = AuditRecord.objects.get(kind="attention_resolved")
    assert "owner@roasters.example" in record.payload and "mock_re_seen" in record.payload
    call_command("audit", "verify")


def test_an_owner_records_that_no_refund_was_made(client_for, flagged):
    client_for("owner").post(f"/refunds/{flagged.id}/resolve/", {"outcome": "not_refunded"})
    flagged.refresh_from_db()
    assert (flagged.status, flagged.outcome_code) == ("failed", "not_at_rail")
    assert Charge.objects.get(pk=flagged.charge_id).amount_reserved_minor == 0


def test_a_refund_id_is_required_to_record_a_refund(client_for, flagged):
    response = client_for("owner").post(
        f"/refunds/{flagged.id}/resolve/", {"outcome": "refunded"}, follow=True
    )
    assert "Enter the provider" in response.content.decode()
    flagged.refresh_from_db()
    assert flagged.status == "needs_attention"


def test_the_id_of_a_refund_made_outside_sill_is_refused(client_for, flagged):
    # The dashboard lists a colleague's refund, already recorded from its webhook, right
    # beside the one Sill made: recorded as Sill's, the one rail refund would count twice.
    charge = Charge.objects.get(pk=flagged.charge_id)
    now = timezone.now()
    record_outside_refund(
        charge=charge,
        refund=OutsideRefund(
            provider_refund_id="re_outside", amount_minor=1000, currency="USD",
            status="succeeded", created_at_rail=now,
        ),
        event_id="evt_outside", event_at=now,
    )  # fmt: skip
    page = _refused(client_for("owner"), flagged, "re_outside")
    assert "re_outside is a refund made outside Sill, already counted on this charge" in page
    assert flagged.idempotency_key in page
    charge.refresh_from_db()
    assert (charge.amount_refunded_minor, charge.amount_refunded_outside_minor) == (0, 1000)
    assert charge.amount_reserved_minor == 2500


def test_the_id_of_another_sill_refund_of_the_charge_is_refused(
    client_for, flag, staff_refund, make_order
):
    # An earlier refund Sill settled failed at the rail after all (reversed): its id is on
    # the dashboard too, and is not this refund's.
    order = make_order(total="25.00")
    earlier = staff_refund(order)
    assert execute_refund(earlier.id) == "succeeded"
    earlier.refresh_from_db()
    assert reverse_settled_refund(
        refund_id=earlier.id, provider_refund_id=earlier.provider_refund_id,
        message="the card was closed", source="evt_failed",
    )  # fmt: skip
    refund = flag(order)
    page = _refused(client_for("owner"), refund, earlier.provider_refund_id)
    assert f"is Sill&#x27;s refund {earlier.id} of this charge" in page
    charge = Charge.objects.get(pk=refund.charge_id)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (0, 2500)


def test_a_refund_of_another_site_is_not_found(client_for, flagged, other_site):
    Refund.objects.filter(pk=flagged.pk).update(site=other_site)
    response = client_for("owner").post(
        f"/refunds/{flagged.id}/resolve/", {"outcome": "not_refunded"}
    )
    assert response.status_code == 404


def test_resolving_is_refused_while_an_execution_holds_the_refund(client_for, flagged):
    from refunds.execution import claim

    assert claim(flagged.id, status="needs_attention")
    response = client_for("owner").post(
        f"/refunds/{flagged.id}/resolve/", {"outcome": "not_refunded"}, follow=True
    )
    assert "asking the rail about this refund right now" in response.content.decode()
    flagged.refresh_from_db()
    assert flagged.status == "needs_attention"


def test_resolving_needs_a_post(client_for, flagged):
    assert client_for("owner").get(f"/refunds/{flagged.id}/resolve/").status_code == 405
