"""Refunds that need attention on the dashboard and order page; an owner's resolution."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.models import AuditRecord
from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund
from refunds.services import reverse_settled_refund
from sill.orders.models import Charge
from sill.orders.outside import OutsideRefund, record_outside_refund
from tests.refunds.conftest import made_but_unrecordable

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
        {"outcome": "refunded", "provider_refund_id": provider_refund_id, "confirmed": "1"},
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
        {
            "outcome": "refunded",
            "provider_refund_id": "mock_re_seen",
            "note": "in the ledger",
            "confirmed": "1",
        },
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
    client_for("owner").post(
        f"/refunds/{flagged.id}/resolve/", {"outcome": "not_refunded", "confirmed": "1"}
    )
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
        f"/refunds/{flagged.id}/resolve/",
        {"outcome": "not_refunded", "confirmed": "1"},
        follow=True,
    )
    assert "asking the rail about this refund right now" in response.content.decode()
    flagged.refresh_from_db()
    assert flagged.status == "needs_attention"


def test_resolving_needs_a_post(client_for, flagged):
    assert client_for("owner").get(f"/refunds/{flagged.id}/resolve/").status_code == 405


# --- what the owner is shown before anything is written ---------------------------------------


def _unchanged(refund: Refund) -> None:
    after = Refund.objects.get(pk=refund.pk)
    assert (after.status, after.provider_refund_id, after.lease_until) == (
        "needs_attention", refund.provider_refund_id, None,
    )  # fmt: skip
    assert not AuditRecord.objects.filter(kind="attention_resolved").exists()
    charge = Charge.objects.get(pk=refund.charge_id)
    assert charge.amount_reserved_minor == refund.amount_minor


@pytest.mark.parametrize(
    ("answer", "sentence", "button"),
    [
        (
            {"outcome": "not_refunded"},
            "Record that Mock made no refund of $25.00? The reservation is released: $25.00 "
            "is refundable again.",
            "Record: no refund",
        ),
        (
            {"outcome": "refunded", "provider_refund_id": "mock_re_seen", "note": "ledger"},
            "Record that Mock made the refund of $25.00 (mock_re_seen)? Sill records it as "
            "refunded.",
            "Record: refunded",
        ),
    ],
)
def test_a_post_without_the_confirmation_changes_nothing_and_asks_first(
    client_for, flagged, answer, sentence, button
):
    # Seen: the form's only confirmation was sill.js's dialog; a POST without it (no
    # JavaScript, a replayed request) recorded the answer at once.
    response = client_for("owner").post(f"/refunds/{flagged.id}/resolve/", answer)
    assert response.status_code == 200
    _unchanged(flagged)
    page = response.content.decode()
    confirm = page[page.index(f'id="attention-confirm-{flagged.id}"') :]
    assert sentence in confirm and "The signed record names you." in confirm
    assert 'name="confirmed" value="1"' in confirm and f">{button}</button>" in confirm
    for name, value in answer.items():
        assert f'type="hidden" name="{name}" value="{value}"' in confirm


def test_confirming_records_it_and_change_gives_the_form_back(client_for, flagged):
    owner = client_for("owner")
    typed = {"outcome": "refunded", "provider_refund_id": "mock_re_typed", "note": "seen it"}
    again = owner.post(f"/refunds/{flagged.id}/resolve/", {**typed, "edit": "1"})
    assert again.status_code == 200
    _unchanged(flagged)
    form = again.content.decode()
    form = form[form.index(f'id="attention-{flagged.id}"') :]
    assert 'value="mock_re_typed"' in form and 'value="seen it"' in form
    assert 'value="refunded" required checked' in form and "<details open" in form
    done = owner.post(f"/refunds/{flagged.id}/resolve/", {**typed, "confirmed": "1"})
    assert done.status_code == 302
    flagged.refresh_from_db()
    assert (flagged.status, flagged.provider_refund_id) == ("succeeded", "mock_re_typed")


def test_a_refusal_is_said_before_the_confirmation(client_for, flagged):
    response = client_for("owner").post(
        f"/refunds/{flagged.id}/resolve/", {"outcome": "refunded"}, follow=True
    )
    page = response.content.decode()
    assert "Enter the provider" in page and "attention-confirm-" not in page
    _unchanged(flagged)


# --- what Sill already knows is filled in -----------------------------------------------------


def test_the_form_is_prefilled_with_the_refund_id_the_rail_confirmed(
    client_for, make_order, staff_refund, mock_rail
):
    # Seen: the rail's refund id, shown in the sentence above the form, had to be copied into
    # an empty field, and "The refund was made" (the only answer offered) picked by hand.
    order = make_order(total="25.00")
    refund, made = made_but_unrecordable(mock_rail, lambda: staff_refund(order))
    page = client_for("owner").get(f"/orders/{order.id}/").content.decode()
    form = page[page.index(f'id="attention-{refund.id}"') :]
    assert 'name="provider_refund_id" maxlength="255" autocomplete="off"' in form
    assert f'value="{made.provider_id}"' in form
    assert 'name="outcome" value="refunded" required checked' in form


def test_the_form_of_a_refund_the_rail_never_confirmed_starts_empty(client_for, flagged):
    page = client_for("owner").get(f"/orders/{flagged.order_id}/").content.decode()
    form = page[page.index(f'id="attention-{flagged.id}"') :]
    form = form[: form.index("</form>")]
    assert " checked" not in form and 'placeholder="re_…" value="">' in form


def test_the_next_check_reads_alike_in_the_banner_and_the_section_below(client_for, flagged):
    # Seen: the banner said "(next in 5 min)" and the section just below it "(next Dec 7,
    # 13:41 UTC)" for the same check.
    page = client_for("owner").get(f"/orders/{flagged.order_id}/").content.decode()
    section = page[page.index(f'id="attention-{flagged.id}"') :]
    said = re.compile(r"\(next <time [^>]*>in \d+ min</time>\)")
    assert said.search(page[: page.index(f'id="attention-{flagged.id}"')])
    assert said.search(section[: section.index("</article>")])


def test_what_happened_says_sills_words_then_the_rails(
    client_for, make_order, staff_refund, mock_rail, settings, django_capture_on_commit_callbacks
):
    """Seen: a refund needing attention said what happened in the message Sill kept alone
    ("gave up after 1 attempt: mock rail: the refund timed out (scripted)") on the dashboard,
    the order page's attention card and Transactions row, and its timeline's "Why", while the
    order page's banner and the Refunds list said Sill's words ("The rail did not answer in
    time"). Each now says Sill's words first, then the message, as a failed refund's do."""
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1
    mock_rail.config = {"refund": "timeout"}
    mock_rail.save()
    order = make_order()
    refund = staff_refund(order)
    with django_capture_on_commit_callbacks(execute=False):
        assert execute_refund(refund.id) == "needs_attention"
    said = "gave up after 1 attempt: mock rail: the refund timed out (scripted)"
    words = f"The rail did not answer in time. {said}"
    owner = client_for("owner")
    dashboard = owner.get("/").content.decode()
    assert f'<td data-label="What happened">{words}</td>' in dashboard
    page = owner.get(f"/orders/{order.id}/").content.decode()
    card = page.split(f'id="attention-{refund.id}"', 1)[1].split("</dl>", 1)[0]
    assert (
        f'<dt>What happened</dt><dd>The rail did not answer in time. <span class="muted">{said}'
        "</span></dd>"
    ) in card
    tab = owner.get(f"/orders/{order.id}/", {"tab": "transactions"}).content.decode()
    row = tab.split(f'<tr class="tx-refund" data-refund-id="{refund.id}">', 1)[1]
    assert f'<span class="muted small">{words}</span>' in row.split("</tr>", 1)[0]
    timeline = owner.get(f"/refunds/{refund.id}/").content.decode()
    assert f"<dt>Why</dt><dd>{words}</dd>" in timeline
