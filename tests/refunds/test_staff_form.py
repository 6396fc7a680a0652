"""The refund form on the order page: who sees it, who may post it, preview, errors, tab."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from refunds.models import Decision, Refund, RefundReason, RefundStatus
from refunds.reasons.selectors import PATH_SEPARATOR
from refunds.reasons.services import set_reason_active
from refunds.staff.services import ROUNDING_RULE
from sill.orders.models import Charge, ExternalRefund
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db


@pytest.fixture
def post_refund(django_capture_on_commit_callbacks):
    def post(client, order, data, **headers):
        # confirmed=1: what the confirmation (or sill.js's dialog) adds before money moves.
        form = {
            "expected_remaining_minor": "",
            "expected_refund_count": "",
            "note": "",
            "confirmed": "1",
            **data,
        }
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(f"/orders/{order.id}/refund/", form, headers=headers)

    return post


def _page(client, order) -> str:
    response = client.get(f"/orders/{order.id}/")
    assert response.status_code == 200
    return response.content.decode()


def _hidden(body: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', body)
    assert match, name
    return match.group(1)


# --- who sees the form -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "sees_form"),
    [("owner", True), ("admin", True), ("staff", True), ("reviewer", False), ("clerk", False)],
)
def test_only_members_who_may_refund_see_the_form(as_, order, leaf, persona, sees_form):
    body = _page(as_(persona), order)
    assert ('action="/orders/' + order.id + '/refund/"' in body) is sees_form
    if persona == "clerk":
        assert "Refunding needs the refund permission" in body


def test_the_form_offers_each_type_the_remaining_amount_and_the_rounding_rule(
    client_for, order, leaf
):
    body = _page(client_for("staff"), order)
    for kind in ("full", "amount", "percentage"):
        assert f'name="kind" value="{kind}"' in body
    assert "Left to refund" in body and "$89.00" in body
    assert ROUNDING_RULE.replace("'", "&#x27;") in body
    assert _hidden(body, "expected_remaining_minor") == "8900"
    assert _hidden(body, "expected_refund_count") == "0"


def test_the_picker_shows_active_leaves_under_their_category(client_for, site, order, leaf):
    set_reason_active(
        reason=RefundReason.objects.get(site=site, code="other"),
        actor=site_owner(site),
        active=False,
    )
    body = _page(client_for("staff"), order)
    start = body.index('id="refund-reason"')
    picker = body[start : body.index("</select>", start)]
    assert re.search(
        rf'<optgroup label="Product problem">\s*<option value="{leaf.pk}" >Arrived broken</option>',
        picker,
    )
    assert "Defective" in picker and ">Other<" not in picker


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("PENDING", "is still pending"),
        ("REFUNDED", "already refunded"),
        ("CANCELLED", "was cancelled"),
    ],
)
def test_unrefundable_orders_say_why_instead_of_a_form(
    client_for, make_order, mock_rail, leaf, status, message
):
    order = make_order(status=status)
    body = _page(client_for("owner"), order)
    assert message in body
    assert 'name="kind"' not in body


# --- who may post ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "expected"),
    [
        ("owner", 303),
        ("admin", 303),
        ("staff", 303),
        ("reviewer", 403),
        ("clerk", 403),
        ("outsider", 404),
        ("anonymous", 302),
    ],
)
def test_posting_a_refund_by_role(as_, order, leaf, post_refund, persona, expected):
    response = post_refund(as_(persona), order, {"kind": "full", "reason": str(leaf.pk)})
    assert response.status_code == expected
    assert Refund.objects.count() == (1 if expected == 303 else 0)
    if expected == 302:
        assert response["Location"].startswith("/login/")


def test_get_on_the_refund_url_is_not_allowed(client_for, order):
    assert client_for("owner").get(f"/orders/{order.id}/refund/").status_code == 405


def test_the_preview_is_for_refunders_only(as_, order):
    url = f"/orders/{order.id}/refund/preview/?kind=full"
    assert as_("staff").get(url).status_code == 200
    assert as_("reviewer").get(url).status_code == 403
    assert as_("clerk").get(url).status_code == 403
    assert as_("outsider").get(url).status_code == 404
    assert as_("anonymous").get(url).status_code == 302


# --- posting ---------------------------------------------------------------------------------


def test_a_fixed_amount_refund_redirects_to_the_transactions_tab_with_a_message(
    client_for, order, leaf, post_refund
):
    client = client_for("staff")
    body = _page(client, order)
    response = post_refund(
        client,
        order,
        {
            "kind": "amount",
            "amount": "15.00",
            "reason": str(leaf.pk),
            "note": "Chipped mug",
            "expected_remaining_minor": _hidden(body, "expected_remaining_minor"),
            "expected_refund_count": _hidden(body, "expected_refund_count"),
        },
    )
    assert response.status_code == 303
    assert response["Location"] == f"/orders/{order.id}/?tab=transactions"
    refund = Refund.objects.get()
    assert (refund.amount_minor, refund.status, refund.note) == (1500, "succeeded", "Chipped mug")
    page = client.get(response["Location"]).content.decode()
    # The test runs execution after the response (on commit), so the message says pending.
    assert "Refund of $15.00 sent to Mock" in page
    assert "Partially refunded" in page


def test_a_percentage_refund_without_javascript_shows_the_amount_first(
    client_for, order, leaf, post_refund
):
    client = client_for("staff")
    data = {"kind": "percentage", "percentage": "25", "reason": str(leaf.pk)}
    response = post_refund(client, order, data)
    assert response.status_code == 422
    body = response.content.decode()
    assert "25% comes to $22.25" in body and "You are refunding" in body
    assert Refund.objects.count() == 0
    data["confirmed_amount_minor"] = _hidden(body, "confirmed_amount_minor")
    assert data["confirmed_amount_minor"] == "2225"
    assert post_refund(client, order, data).status_code == 303
    assert Refund.objects.get().amount_minor == 2225


def test_a_double_submit_makes_one_refund(client_for, order, leaf, post_refund):
    client = client_for("staff")
    body = _page(client, order)
    data = {
        "kind": "amount",
        "amount": "10.00",
        "reason": str(leaf.pk),
        "expected_remaining_minor": _hidden(body, "expected_remaining_minor"),
        "expected_refund_count": _hidden(body, "expected_refund_count"),
    }
    first = post_refund(client, order, data)
    second = post_refund(client, order, data)
    assert (first.status_code, second.status_code) == (303, 422)
    assert f"Order #{order.number} changed since you opened it" in second.content.decode()
    assert Refund.objects.count() == 1
    # The second page also carries the first request's message, so the user sees both.
    assert "Refund of $10.00 sent to Mock" in second.content.decode()


def test_htmx_posts_get_the_panel_back_on_errors_and_a_client_redirect_on_success(
    client_for, order, leaf, post_refund
):
    client = client_for("staff")
    bad = post_refund(
        client,
        order,
        {"kind": "amount", "amount": "100.00", "reason": str(leaf.pk)},
        HX_Request="true",
        HX_Target="refund-panel",
    )
    assert bad.status_code == 422
    body = bad.content.decode()
    assert body.lstrip().startswith('<section id="refund-panel"') and "<html" not in body
    assert "At most $89.00 can be refunded" in body
    assert 'aria-invalid="true"' in body and 'value="100.00"' in body
    good = post_refund(
        client,
        order,
        {"kind": "amount", "amount": "10.00", "reason": str(leaf.pk)},
        HX_Request="true",
    )
    assert good.status_code == 200
    assert good["HX-Redirect"] == f"/orders/{order.id}/?tab=transactions"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "amount", "amount": ""}, "Enter the amount to refund."),
        ({"kind": "amount", "amount": "1.001"}, "USD amounts have at most 2 decimal place(s)"),
        ({"kind": "amount", "amount": "abc"}, "is not a decimal amount"),
        ({"kind": "percentage", "percentage": "101"}, "at most 100"),
        # Both were "'' is not a percentage: type a number from 0.01 to 100 ...".
        ({"kind": "percentage", "percentage": ""}, "Enter the percentage to refund."),
        ({"kind": "percentage", "percentage": " % "}, "Enter the percentage to refund."),
        ({"kind": "bogus"}, "Choose a full, fixed-amount or percentage refund."),
        ({"kind": "full", "reason": ""}, "Choose a reason for this refund."),
    ],
)
def test_bad_input_re_renders_the_form_with_the_message(
    client_for, order, leaf, post_refund, data, message
):
    data = {"reason": str(leaf.pk), **data}
    response = post_refund(client_for("owner"), order, data)
    assert response.status_code == 422
    assert message in response.content.decode().replace("&#x27;", "'")
    assert Refund.objects.count() == 0


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"kind": "amount", "amount": "100.00"}, "amount", "At most $89.00 can be refunded"),
        ({"kind": "amount", "amount": "abc"}, "amount", "is not a decimal amount"),
        ({"kind": "amount", "amount": "1.001"}, "amount", "at most 2 decimal place(s)"),
        ({"kind": "amount", "amount": ""}, "amount", "Enter the amount to refund."),
        ({"kind": "percentage", "percentage": "101"}, "percentage", "at most 100"),
    ],
)
def test_an_amount_refusal_is_said_once_beside_its_field(
    client_for, order, leaf, post_refund, data, field, message
):
    # It was said twice: under the field, and again in the preview box below it.
    response = post_refund(client_for("owner"), order, {"reason": str(leaf.pk), **data})
    assert response.status_code == 422
    body = response.content.decode().replace("&#x27;", "'")
    assert body.count(message) == 1, body
    # The field names the message, for a screen reader, and the message is beside it.
    described = re.search(rf'id="refund-{field}"[^>]*aria-describedby="([^"]+)"', body)
    assert described and described.group(1) == f"refund-{field}-error"
    said = re.search(rf'<small class="field-error" id="refund-{field}-error"[^>]*>([^<]*)<', body)
    assert said and message in said.group(1)
    assert 'class="preview-error"' not in body


def test_a_parent_or_inactive_reason_is_refused_in_the_form(
    client_for, site, order, leaf, post_refund
):
    client = client_for("owner")
    parent = RefundReason.objects.get(site=site, name="Product problem")
    response = post_refund(client, order, {"kind": "full", "reason": str(parent.pk)})
    assert response.status_code == 422 and "is a category" in response.content.decode()
    set_reason_active(reason=leaf, actor=site_owner(leaf.site), active=False)
    response = post_refund(client, order, {"kind": "full", "reason": str(leaf.pk)})
    assert response.status_code == 422 and "is deactivated" in response.content.decode()
    assert Refund.objects.count() == 0


def test_a_refunded_order_is_refused_on_post(client_for, make_order, mock_rail, leaf, post_refund):
    order = make_order(status="REFUNDED")
    response = post_refund(client_for("owner"), order, {"kind": "full", "reason": str(leaf.pk)})
    assert response.status_code == 422
    assert "already refunded" in response.content.decode()


# --- preview ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "currency", "percentage", "shown", "unit"),
    [
        ("89.00", "USD", "25", "$22.25", "$0.01"),
        ("1001", "JPY", "50", "¥501", "¥1"),
        ("1.001", "KWD", "50", "KWD 0.501", "KWD 0.001"),
    ],
)
def test_the_preview_shows_the_concrete_amount_and_how_it_was_rounded(
    client_for, make_order, mock_rail, total, currency, percentage, shown, unit
):
    order = make_order(total=total, currency=currency)
    response = client_for("staff").get(
        f"/orders/{order.id}/refund/preview/",
        {"kind": "percentage", "percentage": percentage},
        headers={"HX-Request": "true"},
    )
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert f'<strong class="refund-amount">{shown}</strong>' in body
    assert f"rounded half up to {unit}" in body
    assert 'name="confirmed_amount_minor"' in body


def test_the_preview_names_the_maximum_when_too_much_is_asked(client_for, order):
    body = (
        client_for("staff")
        .get(f"/orders/{order.id}/refund/preview/", {"kind": "amount", "amount": "120"})
        .content.decode()
    )
    assert "At most $89.00 can be refunded" in body
    assert "confirmed_amount_minor" not in body


def test_the_preview_hints_while_the_input_is_empty(client_for, order):
    body = (
        client_for("staff")
        .get(f"/orders/{order.id}/refund/preview/", {"kind": "percentage", "percentage": ""})
        .content.decode()
    )
    assert "Enter a percentage of the $89.00 order total." in body


# --- the transactions tab --------------------------------------------------------------------


def test_the_transactions_tab_shows_status_reason_who_when_and_provider_id(
    client_for, site, order, leaf, post_refund, members, mock_rail
):
    client = client_for("staff")
    post_refund(client, order, {"kind": "amount", "amount": "10.00", "reason": str(leaf.pk)})
    # A pending one (its execution never ran), a failed one and a held one.
    path = f"Product problem{PATH_SEPARATOR}Arrived broken"
    with_reason = {"refund_reason": leaf, "reason_path": path}
    charge = Charge.objects.get(order=order)
    common = {"site": site, "order": order, "charge": charge, "currency": "USD", "rail": "mock"}
    Refund.objects.create(
        **common, **with_reason, origin="staff", amount_minor=200,
        decision=Decision.APPROVED, status=RefundStatus.PROCESSING,
        requested_by=members["admin"].user,
    )  # fmt: skip
    Refund.objects.create(
        **common, **with_reason, origin="staff", amount_minor=300,
        decision=Decision.APPROVED, status=RefundStatus.FAILED,
        requested_by=members["owner"].user, failure_message="card expired",
    )  # fmt: skip
    Refund.objects.create(
        **common, **with_reason, origin="staff", amount_minor=400,
        decision=Decision.ESCALATED, status=RefundStatus.HELD,
        requested_by=members["staff"].user, note="big customer",
    )  # fmt: skip
    body = client.get(f"/orders/{order.id}/?tab=transactions").content.decode()
    table = body[body.index('id="transactions"') :]
    for label in ("Succeeded", "Failed", "Processing", "Held"):
        assert f">{label}</span>" in table
    assert path in table
    assert "staff@roasters.example" in table and "admin@roasters.example" in table
    assert "card expired" in table and "“big customer”" in table
    done = Refund.objects.get(status="succeeded")
    assert done.provider_refund_id in table and done.provider_refund_id.startswith("mock_re_")
    page = client.get(f"/orders/{order.id}/").content.decode()
    assert "Awaiting approval" in page and "refund is awaiting approval" in page


BADGE = re.compile(r'<span class="badge badge-[a-z]+">([^<]*)</span>')


def test_every_transactions_badge_is_words_in_one_style(client_for, site, order, members):
    # Seen: "COMPLETED" and "FAILED" beside "pending" and "needs attention", and an outside
    # refund's rail state as its code ("requires_action", "canceled"), under a page whose
    # banners and refund page say "Succeeded", "Held", "Needs attention".
    charge = Charge.objects.get(order=order)
    common = {"site": site, "order": order, "charge": charge, "currency": "USD", "rail": "mock"}
    who = {"origin": "staff", "requested_by": members["staff"].user, "amount_minor": 100}
    for status in RefundStatus:
        Refund.objects.create(**common, **who, status=status, decision=Decision.APPROVED)
    Refund.objects.create(
        **common, **who, status=RefundStatus.FAILED, decision=Decision.APPROVED,
        reversed_at=timezone.now(),
    )  # fmt: skip
    now = timezone.now()
    for state in ("pending", "requires_action", "succeeded", "failed", "canceled"):
        ExternalRefund.objects.create(
            charge=charge, provider_refund_id=f"re_{state}", amount_minor=100, currency="USD",
            status=state, created_at_rail=now, rail_updated_at=now,
        )  # fmt: skip
    body = client_for("owner").get(f"/orders/{order.id}/?tab=transactions").content.decode()
    badges = BADGE.findall(body[body.index('id="transactions"') :])
    assert len(badges) == 1 + len(RefundStatus) + 1 + 5
    for words in badges:
        assert words == words[:1].upper() + words[1:].lower() and "_" not in words, words
    assert set(badges) == {
        "Succeeded", "Held", "Processing", "Needs attention", "Failed", "Rejected", "Expired",
        "Failed after settlement", "Pending", "Waiting for the buyer", "Cancelled",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("succeeded", "Made at the rail, outside Sill"),
        ("pending", "Made at the rail, outside Sill"),
        ("failed", "Nothing was refunded: the rail reports it failed"),
        ("canceled", "Nothing was refunded: the rail reports it cancelled"),
    ],
)
def test_an_outside_refund_row_says_whether_money_moved(client_for, order, state, said):
    # Seen: every outside refund read "refunded at the rail, outside Sill", a failed or
    # cancelled one too, beside its "Failed" badge.
    now = timezone.now()
    ExternalRefund.objects.create(
        charge=Charge.objects.get(order=order), provider_refund_id="re_outside",
        amount_minor=100, currency="USD", status=state, created_at_rail=now, rail_updated_at=now,
    )  # fmt: skip
    body = client_for("owner").get(f"/orders/{order.id}/?tab=transactions").content.decode()
    row = body[body.index('<tr class="tx-external_refund"') :]
    row = row[: row.index("</tr>")]
    assert f'<span class="muted small">{said}</span>' in row
    assert ("refunded at the rail" in row) is False


def _detail_queries(client, order) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(f"/orders/{order.id}/").status_code == 200
    return len(ctx.captured_queries)


def test_the_order_page_runs_the_same_number_of_queries_for_1_and_6_refunds(
    client_for, order, leaf, post_refund
):
    client = client_for("owner")
    post_refund(client, order, {"kind": "amount", "amount": "1.00", "reason": str(leaf.pk)})
    one = _detail_queries(client, order)
    for _ in range(5):
        post_refund(client, order, {"kind": "amount", "amount": "1.00", "reason": str(leaf.pk)})
    assert Refund.objects.count() == 6
    assert _detail_queries(client, order) == one
