"""Settings → Refund reasons: who may see and change it, and each action through the page."""

from __future__ import annotations

import pytest

from refunds.models import RefundReason
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.services import create_staff_refund
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db
URL = "/settings/reasons/"


@pytest.fixture
def reason(site):
    ensure_default_reasons(site)
    return add_reason(site=site, actor=site_owner(site), name="Product problem")


ROLES = [
    ("owner", 200),
    ("admin", 200),
    ("reviewer", 403),
    ("staff", 403),
    ("clerk", 403),
    ("anonymous", 302),
]


@pytest.mark.parametrize(("persona", "expected"), ROLES)
def test_who_may_open_the_reasons_page(as_, reason, persona, expected):
    response = as_(persona).get(URL)
    assert response.status_code == expected
    if expected == 200:
        body = response.content.decode()
        assert "Refund reasons" in body and "Product problem" in body
        assert "requested_by_customer" in body


def test_an_outsider_sees_only_their_own_sites_reasons(as_, reason, other_site):
    ensure_default_reasons(other_site)  # as the site's creation would (pages never seed)
    body = as_("outsider").get(URL).content.decode()
    assert "Product problem" not in body
    assert "Requested by customer" in body  # their own site's seeded reasons


@pytest.mark.parametrize(("persona", "shown"), [("owner", True), ("admin", True), ("staff", False)])
def test_the_nav_links_reasons_for_owners_and_admins(as_, persona, shown):
    # The nav's Settings entry leads to the settings index, which links this page.
    body = as_(persona).get("/").content.decode()
    assert ('href="/settings/"' in body) is shown
    if shown:
        assert f'href="{URL}"' in as_(persona).get("/settings/").content.decode()


ACTIONS = ["rename", "move", "deactivate", "reactivate", "delete"]


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize(
    ("persona", "expected"),
    [("reviewer", 403), ("staff", 403), ("clerk", 403), ("anonymous", 302), ("outsider", 404)],
)
def test_reason_actions_are_for_owners_and_admins_of_the_site(
    as_, reason, action, persona, expected
):
    response = as_(persona).post(f"{URL}{reason.pk}/{action}/", {"name": "Hacked", "parent": ""})
    assert response.status_code == expected
    reason.refresh_from_db()
    assert (reason.name, reason.active) == ("Product problem", True)


@pytest.mark.parametrize(("persona", "expected"), [*ROLES[2:], ("outsider", 303)])
def test_adding_is_for_owners_and_admins(as_, site, reason, persona, expected):
    response = as_(persona).post(f"{URL}add/", {"name": "New one", "parent": ""})
    assert response.status_code == expected
    # The outsider adds to their own site, never to this one.
    assert not RefundReason.objects.filter(site=site, name="New one").exists()


def test_get_on_an_action_is_not_allowed(as_, reason):
    assert as_("owner").get(f"{URL}{reason.pk}/rename/").status_code == 405


def test_an_admin_builds_the_tree_through_the_page(as_, site, reason):
    client = as_("admin")
    response = client.post(f"{URL}add/", {"name": "Arrived broken", "parent": str(reason.pk)})
    assert response.status_code == 303 and response["Location"] == URL
    broken = RefundReason.objects.get(site=site, name="Arrived broken")
    page = client.get(URL).content.decode()
    assert "Added “Arrived broken”." in page
    assert "category" in page  # Product problem now has a sub-reason

    client.post(f"{URL}{broken.pk}/rename/", {"name": "Broken in transit"})
    broken.refresh_from_db()
    assert broken.name == "Broken in transit"

    client.post(f"{URL}{broken.pk}/move/", {"parent": ""})
    broken.refresh_from_db()
    assert broken.depth == 1

    client.post(f"{URL}{broken.pk}/deactivate/")
    broken.refresh_from_db()
    assert not broken.active
    page = client.get(URL).content.decode()
    assert "Inactive" in page and "no longer appears in the refund form" in page

    client.post(f"{URL}{broken.pk}/reactivate/")
    broken.refresh_from_db()
    assert broken.active

    client.post(f"{URL}{broken.pk}/delete/")
    assert not RefundReason.objects.filter(pk=broken.pk).exists()


def test_a_refused_change_re_renders_the_page_with_why(as_, site, reason):
    child = add_reason(site=site, actor=site_owner(site), name="Child", parent=reason)
    response = as_("owner").post(f"{URL}{reason.pk}/move/", {"parent": str(child.pk)})
    assert response.status_code == 422
    assert "can't go under itself" in response.content.decode().replace("&#x27;", "'")
    response = as_("owner").post(f"{URL}add/", {"name": "  ", "parent": ""})
    assert response.status_code == 422 and "Give the reason a name." in response.content.decode()


def test_a_used_reason_offers_deactivation_and_says_why_it_cannot_be_deleted(
    as_, site, reason, make_order, members, mock_rail
):
    leaf = add_reason(site=site, actor=site_owner(site), name="Arrived broken", parent=reason)
    create_staff_refund(
        site=site,
        order=make_order(),
        actor=members["owner"].user,
        kind="full",
        reason=leaf,
        note="",
    )
    client = as_("owner")
    page = client.get(URL).content.decode()
    row = page[page.index(f'id="reason-{leaf.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "Used by 1 refund: deactivate it instead." in row
    assert f"{URL}{leaf.pk}/delete/" not in row
    assert f"{URL}{leaf.pk}/deactivate/" in row
    # Posting the delete anyway is refused with the same explanation.
    response = client.post(f"{URL}{leaf.pk}/delete/")
    assert response.status_code == 422
    assert "is used by 1 refund" in response.content.decode()
    assert RefundReason.objects.filter(pk=leaf.pk).exists()


def test_another_sites_reason_is_a_404_for_every_action(as_, other_site):
    theirs = add_reason(site=other_site, actor=site_owner(other_site), name="Theirs")
    client = as_("owner")
    for action in ACTIONS:
        assert client.post(f"{URL}{theirs.pk}/{action}/", {"name": "x"}).status_code == 404
    response = client.post(f"{URL}add/", {"name": "Mine", "parent": str(theirs.pk)})
    assert response.status_code == 404
