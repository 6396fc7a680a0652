"""What Sill says of a refund that needs attention because the rail made it and Sill could not
record it (``exceeds_charge_at_rail``): that the rail made it, by its id, not that the rail
has not confirmed it."""

from __future__ import annotations

import pytest

from refunds.review.decisions import approve_refund
from tests.conftest import site_owner
from tests.refunds.conftest import made_but_unrecordable

pytestmark = pytest.mark.django_db


@pytest.fixture
def approved_but_unrecordable(held, mock_rail):
    """The held refund, approved by the owner, made at the rail and not recordable."""
    return made_but_unrecordable(
        mock_rail, lambda: approve_refund(refund=held, actor=site_owner(held.site), note="")
    )


def test_an_approved_refund_the_rail_made_says_so_on_the_held_pages(
    approved_but_unrecordable, client_for
):
    """The polled row said "Approved: the rail has not confirmed the refund … yet", and the
    decision panel "the rail has not confirmed the refund yet", though the rail had made it."""
    refund, made = approved_but_unrecordable
    assert (refund.status, refund.outcome_code) == ("needs_attention", "exceeds_charge_at_rail")
    client = client_for("owner")
    said = f"Mock made the refund of $89.00 ({made.provider_id}), but Sill could not record it"
    row = client.get(
        f"/held/{refund.id}/",
        headers={"HX-Request": "true", "HX-Target": f"held-row-{refund.id}"},
    ).content.decode()
    assert f"Approved: {said}" in row and "has not confirmed" not in row
    panel = client.get(
        f"/held/{refund.id}/", headers={"HX-Request": "true", "HX-Target": "decision-panel"}
    ).content.decode()
    assert said in panel and "has not confirmed" not in panel


def test_the_staff_apis_message_says_the_rail_made_a_refund_sill_could_not_record(
    make_order, staff_refund, mock_rail
):
    """The staff API's message said the rail "may have made this refund" though Sill held the
    rail's refund id."""
    from refunds.staff.api import refund_output  # after Django's setup: DRF's settings import it

    refund, made = made_but_unrecordable(mock_rail, lambda: staff_refund(make_order()))
    message = refund_output(refund)["message"]
    assert message.startswith(
        f"Mock made the refund of $89.00 ({made.provider_id}), but Sill could not record it; "
    )
    assert "may have made" not in message
