"""Settings → Members: who may open it, inviting, changing and removing members, and the rules.

Invitations themselves (resend, revoke, the invitee's link) are in test_invites.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sill.accounts.models import MemberInvite, Membership, Role
from sill.accounts.services import add_member
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
URL = "/settings/members/"
ADD = "/settings/members/add/"
HTMX = {"HTTP_HX_REQUEST": "true"}


def change_url(membership: Membership) -> str:
    return f"/settings/members/{membership.pk}/change/"


def remove_url(membership: Membership) -> str:
    return f"/settings/members/{membership.pk}/remove/"


def snapshot(site) -> list[tuple[str, str, bool]]:
    return sorted(
        Membership.objects.filter(site=site).values_list("user__username", "role", "can_refund")
    )


# --- access ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 200), ("admin", 200), ("reviewer", 403), ("staff", 403), ("anonymous", 302)],
)
def test_who_may_open_the_members_page(client_for, persona, expected):
    response = client_for(persona).get(URL)
    assert response.status_code == expected
    if expected == 200:
        body = response.content.decode()
        for email in ("owner@", "admin@", "reviewer@", "staff@"):
            assert f"{email}roasters.example" in body
        assert "owner@other.example" not in body
    if persona == "anonymous":
        assert response["Location"].startswith("/login/?next=/settings/members/")


@pytest.mark.parametrize("action", ["change", "remove"])
@pytest.mark.parametrize(
    ("persona", "expected"), [("reviewer", 403), ("staff", 403), ("anonymous", 302)]
)
def test_member_actions_are_for_owners_and_admins(
    client_for, members, site, action, persona, expected
):
    before = snapshot(site)
    target = members["staff"]
    url = change_url(target) if action == "change" else remove_url(target)
    response = client_for(persona).post(url, {"role": "admin"})
    assert response.status_code == expected
    assert snapshot(site) == before


@pytest.mark.parametrize(
    ("persona", "expected"), [("reviewer", 403), ("staff", 403), ("anonymous", 302)]
)
def test_adding_is_for_owners_and_admins(client_for, site, persona, expected):
    response = client_for(persona).post(ADD, {"email": "new@roasters.example", "role": "admin"})
    assert response.status_code == expected
    assert not Membership.objects.filter(user__username="new@roasters.example").exists()
    assert not MemberInvite.objects.exists()


@pytest.mark.parametrize("action", ["change", "remove"])
def test_another_sites_membership_is_not_found(client_for, members, action):
    # The outsider owns other_site; the staff membership belongs to site.
    target = members["staff"]
    url = change_url(target) if action == "change" else remove_url(target)
    response = client_for("outsider").post(url, {"role": "reviewer"})
    assert response.status_code == 404
    target.refresh_from_db()
    assert target.role == Role.STAFF


def test_get_is_not_allowed_on_actions(client_for, members):
    assert client_for("owner").get(remove_url(members["staff"])).status_code == 405
    assert Membership.objects.filter(pk=members["staff"].pk).exists()


def test_actions_need_a_csrf_token(members, site):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    before = snapshot(site)
    assert client.post(remove_url(members["staff"])).status_code == 403
    assert client.post(ADD, {"email": "new@roasters.example", "role": "staff"}).status_code == 403
    assert snapshot(site) == before


# --- adding ----------------------------------------------------------------------------------


def test_an_admin_invites_staff_who_can_refund(client_for, site, mailoutbox):
    admin = client_for("admin")
    response = admin.post(
        ADD, {"email": " New.Person@Roasters.example ", "role": "staff", "can_refund": "on"}
    )
    assert response.status_code == 303 and response["Location"] == URL
    # Nobody is added until the invitation is accepted.
    assert not Membership.objects.filter(user__username="new.person@roasters.example").exists()
    invite = MemberInvite.objects.get(site=site, email="new.person@roasters.example")
    assert (invite.role, invite.can_refund, invite.pending) == (Role.STAFF, True, True)
    (sent,) = mailoutbox
    assert sent.to == ["new.person@roasters.example"]
    body = admin.get(URL).content.decode()
    assert "Invitation sent to new.person@roasters.example as staff." in body
    assert f'id="invite-{invite.pk}"' in body and "Pending invitations" in body
    assert "manage.py" not in body


def test_inviting_with_htmx_answers_the_list_with_the_notice(client_for, site, mailoutbox):
    response = client_for("owner").post(
        ADD, {"email": "rev@roasters.example", "role": "reviewer"}, **HTMX
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="members">') and "<html" not in body
    assert "Invitation sent to rev@roasters.example as reviewer." in body
    assert MemberInvite.objects.get(email="rev@roasters.example").role == Role.REVIEWER


def test_can_refund_is_only_kept_for_staff(client_for, site, mailoutbox):
    client_for("owner").post(
        ADD, {"email": "a2@roasters.example", "role": "admin", "can_refund": "on"}
    )
    assert MemberInvite.objects.get(email="a2@roasters.example").can_refund is False


def test_inviting_a_user_of_another_site_keeps_their_password(
    client_for, members, site, mailoutbox
):
    response = client_for("owner").post(ADD, {"email": "owner@other.example", "role": "reviewer"})
    assert response.status_code == 303
    user = get_user_model().objects.get(username="owner@other.example")
    assert user.check_password(PASSWORD)
    assert not user.memberships.filter(site=site).exists()
    assert MemberInvite.objects.get(email="owner@other.example").site == site


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"email": "not-an-email", "role": "staff"}, "Enter a valid email address"),
        ({"email": "", "role": "staff"}, "Enter the new member&#x27;s email address."),
        ({"email": "x@roasters.example", "role": "superuser"}, "Choose one of: owner, admin"),
        ({"email": "x@roasters.example"}, "Choose a role."),
    ],
)
@pytest.mark.parametrize("htmx", [True, False])
def test_bad_input_is_refused_with_a_clear_message(client_for, site, data, message, htmx):
    before = snapshot(site)
    users = get_user_model().objects.count()
    response = client_for("owner").post(ADD, data, **(HTMX if htmx else {}))
    assert response.status_code == 422
    body = response.content.decode()
    assert message in body
    assert ("<html" in body) is not htmx  # htmx gets the partial, a plain post the page
    assert 'aria-invalid="true"' in body
    assert snapshot(site) == before and get_user_model().objects.count() == users


def test_adding_someone_who_is_already_a_member_is_refused(client_for, members, site):
    before = snapshot(site)
    response = client_for("admin").post(ADD, {"email": "STAFF@roasters.example", "role": "admin"})
    assert response.status_code == 422
    assert (
        "staff@roasters.example is already a member of Test Roasters" in response.content.decode()
    )
    assert snapshot(site) == before


def test_an_admin_may_not_invite_an_owner(client_for, site, mailoutbox):
    before = snapshot(site)
    users = get_user_model().objects.count()
    response = client_for("admin").post(
        ADD, {"email": "boss@roasters.example", "role": "owner"}, **HTMX
    )
    assert response.status_code == 422
    assert "Only an owner can invite an owner." in response.content.decode()
    assert snapshot(site) == before and get_user_model().objects.count() == users
    assert not MemberInvite.objects.exists() and not mailoutbox


def test_an_owner_invites_an_owner(client_for, site, mailoutbox):
    response = client_for("owner").post(ADD, {"email": "co@roasters.example", "role": "owner"})
    assert response.status_code == 303
    assert MemberInvite.objects.get(email="co@roasters.example").role == Role.OWNER


def test_admins_are_not_offered_the_owner_role(client_for):
    admin_body = client_for("admin").get(URL).content.decode()
    owner_body = client_for("owner").get(URL).content.decode()
    assert 'value="owner"' not in admin_body and 'value="owner"' in owner_body


# --- changing roles --------------------------------------------------------------------------


def test_an_admin_promotes_staff_to_admin(client_for, members):
    admin = client_for("admin")
    response = admin.post(change_url(members["staff"]), {"role": "admin", "can_refund": "on"})
    assert response.status_code == 303
    members["staff"].refresh_from_db()
    assert (members["staff"].role, members["staff"].can_refund) == (Role.ADMIN, False)
    assert "staff@roasters.example is now admin." in admin.get(URL).content.decode()


def test_an_admin_toggles_can_refund_with_htmx(client_for, members):
    response = client_for("admin").post(change_url(members["staff"]), {"role": "staff"}, **HTMX)
    assert response.status_code == 200
    assert "staff@roasters.example is now staff who can&#x27;t refund." in response.content.decode()
    members["staff"].refresh_from_db()
    assert members["staff"].can_refund is False


def test_an_admin_manages_another_admin(client_for, site, members):
    other = add_member(site=site, email="admin2@roasters.example", role="admin", password=PASSWORD)
    assert client_for("admin").post(change_url(other), {"role": "reviewer"}).status_code == 303
    other.refresh_from_db()
    assert other.role == Role.REVIEWER
    assert client_for("admin").post(remove_url(other)).status_code == 303
    assert not Membership.objects.filter(pk=other.pk).exists()


@pytest.mark.parametrize(
    ("target", "role", "message"),
    [
        ("owner", "admin", "Only an owner can change an owner."),
        ("staff", "owner", "Only an owner can make someone an owner."),
    ],
)
def test_an_admin_may_not_touch_owners(client_for, members, site, target, role, message):
    before = snapshot(site)
    response = client_for("admin").post(change_url(members[target]), {"role": role})
    assert response.status_code == 422
    assert message in response.content.decode()
    assert snapshot(site) == before


def test_an_owner_promotes_and_demotes_owners(client_for, members, site):
    owner = client_for("owner")
    assert owner.post(change_url(members["admin"]), {"role": "owner"}).status_code == 303
    assert (
        owner.post(change_url(members["admin"]), {"role": "staff", "can_refund": "on"}).status_code
        == 303
    )
    members["admin"].refresh_from_db()
    assert (members["admin"].role, members["admin"].can_refund) == (Role.STAFF, True)


def test_nobody_changes_their_own_role(client_for, site, members):
    add_member(site=site, email="co@roasters.example", role="owner", password=PASSWORD)
    before = snapshot(site)
    for persona, role in (("owner", "admin"), ("admin", "reviewer"), ("admin", "admin")):
        response = client_for(persona).post(change_url(members[persona]), {"role": role}, **HTMX)
        assert response.status_code == 422
        assert "You can&#x27;t change your own role" in response.content.decode()
    assert snapshot(site) == before


def test_the_last_owner_can_not_be_demoted_or_removed(client_for, members, site):
    before = snapshot(site)
    owner = client_for("owner")
    response = owner.post(change_url(members["owner"]), {"role": "admin"})
    assert response.status_code == 422
    assert "You can&#x27;t demote the last owner of Test Roasters." in response.content.decode()
    response = owner.post(remove_url(members["owner"]), **HTMX)
    assert response.status_code == 422
    assert "You can&#x27;t remove the last owner of Test Roasters." in response.content.decode()
    assert snapshot(site) == before


def test_an_unknown_role_on_change_is_refused(client_for, members, site):
    before = snapshot(site)
    response = client_for("owner").post(change_url(members["staff"]), {"role": "root"}, **HTMX)
    assert response.status_code == 422
    assert "Choose one of: owner, admin, reviewer, staff." in response.content.decode()
    assert snapshot(site) == before


# --- removing --------------------------------------------------------------------------------


def test_removing_asks_for_confirmation(client_for, members):
    body = client_for("owner").get(URL).content.decode()
    assert 'data-confirm="Remove staff@roasters.example from Test Roasters?' in body


def test_an_admin_removes_staff_but_keeps_the_account(client_for, members, site):
    response = client_for("admin").post(remove_url(members["staff"]), **HTMX)
    assert response.status_code == 200
    assert "Removed staff@roasters.example from Test Roasters." in response.content.decode()
    assert not Membership.objects.filter(pk=members["staff"].pk).exists()
    assert get_user_model().objects.filter(username="staff@roasters.example").exists()


def test_an_admin_may_not_remove_an_owner(client_for, members, site):
    before = snapshot(site)
    response = client_for("admin").post(remove_url(members["owner"]))
    assert response.status_code == 422 and "<html" in response.content.decode()
    assert "Only an owner can remove an owner." in response.content.decode()
    assert snapshot(site) == before


def test_nobody_removes_themselves(client_for, members, site):
    before = snapshot(site)
    response = client_for("admin").post(remove_url(members["admin"]))
    assert response.status_code == 422
    assert "You can&#x27;t remove yourself" in response.content.decode()
    assert snapshot(site) == before


def test_an_owner_removes_another_owner(client_for, site):
    co = add_member(site=site, email="co@roasters.example", role="owner", password=PASSWORD)
    assert client_for("owner").post(remove_url(co)).status_code == 303
    assert not Membership.objects.filter(pk=co.pk).exists()


def test_the_list_explains_what_may_not_be_changed(client_for):
    body = client_for("admin").get(URL).content.decode()
    assert "Only an owner can change or remove an owner." in body
    assert "This is you" in body


# --- performance -----------------------------------------------------------------------------


def _queries_for_page(client: Client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(URL).status_code == 200
    return len(queries)


def test_the_page_runs_a_constant_number_of_queries(client_for, site, members):
    client = client_for("owner")
    few = _queries_for_page(client)
    for i in range(27):
        add_member(site=site, email=f"m{i}@roasters.example", role="staff", can_refund=i % 2 == 0)
    assert Membership.objects.filter(site=site).count() == 31
    assert _queries_for_page(client) == few


def test_pending_invitations_cost_no_query_each(client_for, site, members, mailoutbox):
    client = client_for("owner")
    client.post(ADD, {"email": "first@roasters.example", "role": "staff"})
    few = _queries_for_page(client)
    for i in range(12):
        client.post(ADD, {"email": f"i{i}@roasters.example", "role": "reviewer"})
    assert MemberInvite.objects.filter(site=site).count() == 13
    assert _queries_for_page(client) == few
