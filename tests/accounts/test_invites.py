"""Invitations by email: the link, resend, revoke, accept, the role rules and the audit trail."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from audit.activity import summary_of
from audit.models import AuditRecord
from sill.accounts import invites, two_factor
from sill.accounts.models import MemberInvite, Membership, Role
from sill.accounts.services import add_member, change_member_role, remove_member
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
ADD = "/settings/members/add/"
HTMX = {"HTTP_HX_REQUEST": "true"}
NEW_PASSWORD = "a-long-new-passphrase-42"


def link_in(message) -> str:
    (url,) = re.findall(r"https?://\S+/invite/\S+/", message.body)
    return url


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def member_records(site) -> list[dict]:
    return [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(site=site, kind="member_change").order_by("seq")
    ]


def actions(site) -> list[str]:
    return [body["action"] for body in member_records(site)]


@pytest.fixture
def invite_staff(client_for, mailoutbox):
    """The admin invites new@roasters.example as staff; returns the link's path."""

    def make(email: str = "new@roasters.example", role: str = "staff", persona: str = "admin"):
        response = client_for(persona).post(ADD, {"email": email, "role": role})
        assert response.status_code == 303, response.content
        return path_of(link_in(mailoutbox[-1]))

    return make


# --- the email ------------------------------------------------------------------------------


def test_the_email_links_to_the_configured_base_url_not_the_host_header(
    client_for, settings, mailoutbox
):
    settings.SILL_BASE_URL = "https://sill.roasters.example/"
    settings.ALLOWED_HOSTS = ["*"]
    client_for("owner").post(
        ADD, {"email": "new@roasters.example", "role": "staff"}, HTTP_HOST="evil.example"
    )
    (sent,) = mailoutbox
    url = link_in(sent)
    assert url.startswith("https://sill.roasters.example/invite/")
    assert "evil.example" not in sent.body
    assert "Test Roasters" in sent.subject and "owner@roasters.example" in sent.body
    assert "72 hours" in sent.body


@pytest.mark.parametrize(
    ("role", "words"),
    [("owner", "an owner"), ("admin", "an admin"), ("reviewer", "a reviewer"), ("staff", "staff")],
)
def test_the_email_names_the_role_with_its_article(client_for, mailoutbox, role, words):
    # It said "to join Test Roasters on Sill as reviewer".
    response = client_for("owner").post(ADD, {"email": "new@roasters.example", "role": role})
    assert response.status_code == 303, response.content
    (sent,) = mailoutbox
    assert f" invited you to join Test Roasters on Sill as {words}.\n" in sent.body


def test_only_a_hash_of_the_token_is_stored(invite_staff):
    path = invite_staff()
    token = path.split("/")[2]
    invite = MemberInvite.objects.get()
    assert token not in invite.token_sha256 and len(invite.token_sha256) == 64


def test_an_email_that_cannot_be_sent_saves_nothing(client_for, site, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens there
    before = AuditRecord.objects.filter(site=site).count()
    response = client_for("owner").post(ADD, {"email": "new@roasters.example", "role": "staff"})
    assert response.status_code == 422
    assert "Sill could not send the email, so nothing was saved." in response.content.decode()
    assert not MemberInvite.objects.exists()
    assert AuditRecord.objects.filter(site=site).count() == before


# --- accepting as a new address ---------------------------------------------------------------


def test_a_new_member_sets_a_password_then_logs_in(invite_staff, site):
    path = invite_staff()
    anonymous = Client()
    page = anonymous.get(path)
    assert page.status_code == 200
    body = page.content.decode()
    assert "Join Test Roasters" in body and "admin@roasters.example invited" in body
    assert 'name="new_password1"' in body

    response = anonymous.post(path, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert response.status_code == 303 and response["Location"] == "/login/"
    user = get_user_model().objects.get(username="new@roasters.example")
    assert user.check_password(NEW_PASSWORD) and user.email == "new@roasters.example"
    membership = Membership.objects.get(site=site, user=user)
    assert (membership.role, membership.can_refund) == (Role.STAFF, False)
    assert MemberInvite.objects.get().accepted_at is not None
    login = anonymous.get("/login/").content.decode()
    assert "Your password is set: log in with new@roasters.example" in login

    assert (
        anonymous.post(
            "/login/", {"username": "new@roasters.example", "password": NEW_PASSWORD}
        ).status_code
        == 302
    )
    assert anonymous.get("/settings/account/").status_code == 200
    assert actions(site)[-2:] == ["invite", "invite_accept"]
    accept = member_records(site)[-1]
    assert accept["actor"] == "new@roasters.example" and accept["password_set"] is True


@pytest.mark.parametrize(
    ("password", "message"),
    [("short", "This password is too short."), ("password123", "This password is too common.")],
)
def test_weak_passwords_are_refused_and_nothing_changes(invite_staff, site, password, message):
    path = invite_staff()
    response = Client().post(path, {"new_password1": password, "new_password2": password})
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not get_user_model().objects.filter(username="new@roasters.example").exists()
    assert MemberInvite.objects.get().pending


def test_mismatched_passwords_are_refused(invite_staff):
    path = invite_staff()
    response = Client().post(path, {"new_password1": NEW_PASSWORD, "new_password2": "other-one-99"})
    assert response.status_code == 422
    assert "The two password fields didn\u2019t match." in response.content.decode()
    assert MemberInvite.objects.get().pending


# --- accepting as an existing user ------------------------------------------------------------


def test_an_existing_user_joins_after_logging_in_and_keeps_their_password(
    invite_staff, members, site, other_site
):
    path = invite_staff(email="owner@other.example", role="reviewer")
    anonymous = Client()
    body = anonymous.get(path).content.decode()
    assert "already has a Sill account" in body and 'name="new_password1"' not in body
    # A password posted anyway is refused: the account's password never changes this way.
    response = anonymous.post(path, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    user = get_user_model().objects.get(username="owner@other.example")
    assert user.check_password(PASSWORD)

    signed_in = Client()
    signed_in.force_login(user)
    assert "Join Test Roasters" in signed_in.get(path).content.decode()
    response = signed_in.post(path)
    assert response.status_code == 303 and response["Location"] == "/"
    user.refresh_from_db()
    assert user.check_password(PASSWORD)
    assert set(user.memberships.values_list("site_id", "role")) == {
        (site.pk, "reviewer"),
        (other_site.pk, "owner"),
    }
    # The new site is now the current one.
    assert signed_in.session["sill_site_id"] == site.pk


def test_someone_signed_in_as_another_address_cannot_accept(invite_staff, members, site):
    path = invite_staff()
    other = Client()
    other.force_login(members["reviewer"].user)
    body = other.get(path).content.decode()
    assert "This invitation is for new@roasters.example" in body
    assert (
        other.post(path, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}).status_code
        == 403
    )
    assert MemberInvite.objects.get().pending
    assert not get_user_model().objects.filter(username="new@roasters.example").exists()


def test_a_refused_accept_leaves_no_usable_link_in_the_log(invite_staff, members, caplog):
    # Django logs the path of every 4xx answer; an invitation's path is its token, and an
    # owner's pending one let whoever read the log choose the password and join as owner.
    path = invite_staff(role="owner", persona="owner")
    token = path.strip("/").rsplit("/", 1)[-1]
    other = Client()
    other.force_login(members["reviewer"].user)
    weak = {"new_password1": "short", "new_password2": "short"}
    with caplog.at_level(logging.INFO):
        assert Client().post(path, weak).status_code == 422
        assert other.post(path, {}).status_code == 403
        assert Client(enforce_csrf_checks=True).post(path, weak).status_code == 403
    logged = [record.getMessage() for record in caplog.records]
    assert not [line for line in logged if token in line], logged
    # Still logged, as every refusal is: only the token is left out.
    refused = [line for line in logged if "/invite/<token>/" in line]
    assert len(refused) == 3, logged
    assert MemberInvite.objects.get().pending


# --- links that open nothing --------------------------------------------------------------------


def test_a_used_link_does_not_work_twice(invite_staff):
    path = invite_staff()
    Client().post(path, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    again = Client().post(
        path, {"new_password1": "another-pass-777", "new_password2": "another-pass-777"}
    )
    assert again.status_code == 410
    assert "This invitation was already used." in again.content.decode()
    user = get_user_model().objects.get(username="new@roasters.example")
    assert user.check_password(NEW_PASSWORD)


def test_an_expired_link_says_so_and_changes_nothing(invite_staff, settings):
    path = invite_staff()
    with time_machine.travel(timezone.now() + timedelta(hours=72, seconds=1)):
        for response in (
            Client().get(path),
            Client().post(path, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}),
        ):
            assert response.status_code == 410
            body = response.content.decode()
            assert "This invitation expired" in body
            assert "Ask admin@roasters.example to resend it" in body
    assert not get_user_model().objects.filter(username="new@roasters.example").exists()


def test_a_tampered_link_is_not_found(invite_staff):
    path = invite_staff()
    tampered = path[:-3] + ("A" if path[-3] != "A" else "B") + path[-2:]
    response = Client().get(tampered)
    assert response.status_code == 404
    assert "This invitation link is not valid" in response.content.decode()
    assert Client().get("/invite/" + "x" * 200 + "/").status_code == 404


def test_resend_makes_a_new_link_and_the_old_one_stops_working(
    invite_staff, client_for, mailoutbox, site
):
    old = invite_staff()
    invite = MemberInvite.objects.get()
    response = client_for("admin").post(f"/settings/members/invites/{invite.pk}/resend/", **HTMX)
    assert response.status_code == 200
    assert "A new link was sent to new@roasters.example" in response.content.decode()
    new = path_of(link_in(mailoutbox[-1]))
    assert new != old and len(mailoutbox) == 2
    assert Client().get(old).status_code == 404
    assert Client().get(new).status_code == 200
    assert actions(site)[-2:] == ["invite", "invite_resend"]


def test_revoke_closes_the_link(invite_staff, client_for, site):
    path = invite_staff()
    invite = MemberInvite.objects.get()
    owner = client_for("owner")
    response = owner.post(f"/settings/members/invites/{invite.pk}/revoke/")
    assert response.status_code == 303
    page = owner.get("/settings/members/").content.decode()
    assert "The invitation for new@roasters.example was revoked" in page
    assert f'id="invite-{invite.pk}"' not in page
    refused = Client().get(path)
    assert (
        refused.status_code == 410 and "This invitation was withdrawn" in refused.content.decode()
    )
    assert actions(site)[-1] == "invite_revoke"
    # Revoking again is refused in words, and writes nothing.
    count = AuditRecord.objects.filter(site=site).count()
    again = client_for("owner").post(f"/settings/members/invites/{invite.pk}/revoke/", **HTMX)
    assert again.status_code == 422 and "accepted or revoked meanwhile" in again.content.decode()
    assert AuditRecord.objects.filter(site=site).count() == count


def test_inviting_the_same_address_again_replaces_the_open_invite(invite_staff, site):
    first = invite_staff()
    second = invite_staff(role="reviewer")
    assert Client().get(first).status_code == 410  # the replaced invite is closed
    assert Client().get(second).status_code == 200
    (pending,) = invites.pending_invites(site)
    assert pending.role == Role.REVIEWER
    replaced = member_records(site)[-1]
    assert replaced["action"] == "invite" and replaced["replaces"] is not None


# --- who may resend and revoke ------------------------------------------------------------------


@pytest.mark.parametrize("action", ["resend", "revoke"])
@pytest.mark.parametrize(
    ("persona", "expected"),
    [("reviewer", 403), ("staff", 403), ("anonymous", 302), ("outsider", 404)],
)
def test_resend_and_revoke_are_for_this_sites_owners_and_admins(
    invite_staff, client_for, mailoutbox, action, persona, expected
):
    invite_staff()
    invite = MemberInvite.objects.get()
    sent = len(mailoutbox)
    response = client_for(persona).post(f"/settings/members/invites/{invite.pk}/{action}/")
    assert response.status_code == expected
    invite.refresh_from_db()
    assert invite.pending and len(mailoutbox) == sent


@pytest.mark.parametrize("action", ["resend", "revoke"])
def test_an_admin_may_not_resend_or_revoke_an_owners_invite(
    invite_staff, client_for, mailoutbox, action
):
    invite_staff(email="co@roasters.example", role="owner", persona="owner")
    invite = MemberInvite.objects.get()
    sent = len(mailoutbox)
    page = client_for("admin").get("/settings/members/").content.decode()
    assert "Only an owner can resend or revoke an owner&#x27;s invite." in page
    response = client_for("admin").post(f"/settings/members/invites/{invite.pk}/{action}/", **HTMX)
    assert response.status_code == 422
    assert f"Only an owner can {action} the invite of an owner." in response.content.decode()
    invite.refresh_from_db()
    assert invite.pending and len(mailoutbox) == sent


def test_the_invite_actions_need_post_and_csrf(invite_staff, members):
    invite_staff()
    invite = MemberInvite.objects.get()
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    assert client.get(f"/settings/members/invites/{invite.pk}/revoke/").status_code == 405
    assert client.post(f"/settings/members/invites/{invite.pk}/revoke/").status_code == 403
    invite.refresh_from_db()
    assert invite.pending


# --- no shell commands on any page ---------------------------------------------------------------

SETTINGS_PAGES = [
    "/settings/",
    "/settings/members/",
    "/settings/agents/",
    "/settings/rails/",
    "/settings/account/",
]


def test_no_settings_page_prints_a_command_built_from_an_address(client_for, site, mailoutbox):
    hostile = '"$(id)"@example.com'
    # A member an operator added without a password (it used to get a copy-paste command) …
    add_member(site=site, email=hostile, role="staff")
    # … and an invitation to another such address.
    response = client_for("owner").post(ADD, {"email": '"$(whoami)"@example.com', "role": "staff"})
    assert response.status_code == 303
    escaped = ("$(id)", "$(whoami)")
    for url in SETTINGS_PAGES:
        body = client_for("owner").get(url).content.decode()
        assert "manage.py members" not in body, url
        for block in re.findall(r"<(code|pre|kbd|samp)[^>]*>(.*?)</\1>", body, flags=re.S):
            assert not any(text in block[1] for text in escaped), (url, block)
    members_page = client_for("owner").get("/settings/members/").content.decode()
    assert "&quot;$(id)&quot;@example.com" in members_page  # shown, as text only
    assert "No password yet" in members_page


# --- an invite outlives its inviter's say -----------------------------------------------------


@pytest.mark.parametrize("change", ["removed", "made staff", "deactivated"])
def test_an_invite_stops_working_once_its_inviter_could_no_longer_send_it(
    invite_staff, members, site, change
):
    """An admin invites an address as admin, then loses the say (removed, demoted, or the
    account switched off). The open invite used to keep working, so the address still
    became an admin after the owner had taken the inviter's access away."""
    path = invite_staff(email="friend@elsewhere.example", role="admin")
    invite = MemberInvite.objects.get()
    inviter, owner = members["admin"], members["owner"]
    if change == "removed":
        remove_member(membership=inviter, actor=owner)
    elif change == "made staff":
        change_member_role(
            membership=inviter, actor=owner, role="staff", second_factor=two_factor.OPERATOR
        )
    else:
        inviter.user.is_active = False
        inviter.user.save()
    refused = Client().get(path)
    assert refused.status_code == 410 and "withdrawn" in refused.content.decode()
    posted = Client().post(path, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert posted.status_code == 410
    assert not Membership.objects.filter(site=site, user__username="friend@elsewhere.example")
    invite.refresh_from_db()
    if change != "deactivated":
        # Withdrawn with the change that took the say away, on the record.
        assert invite.revoked_at is not None
        withdrawn = member_records(site)[-1]
        assert (withdrawn["action"], withdrawn["member"]) == (
            "invite_revoke",
            "friend@elsewhere.example",
        )
        assert withdrawn["actor"] == "owner@roasters.example"
        assert withdrawn["reason"] == "inviter_lost_role"
        assert summary_of("member_change", withdrawn) == (
            "friend@elsewhere.example: invitation withdrawn (whoever sent it may no longer "
            "invite as that role)"
        )


def test_an_owner_made_admin_keeps_only_the_invites_an_admin_may_send(members, site):
    """An admin may not invite an owner: an owner made admin loses their open owner invite,
    and keeps their staff invite."""
    second = add_member(site=site, email="second@roasters.example", role="owner", password=PASSWORD)
    client = Client()
    client.force_login(second.user)
    for email, role in (("o@elsewhere.example", "owner"), ("s@elsewhere.example", "staff")):
        assert client.post(ADD, {"email": email, "role": role}).status_code == 303
    change_member_role(
        membership=second,
        actor=members["owner"],
        role="admin",
        second_factor=two_factor.OPERATOR,
    )
    open_now = {i.email for i in MemberInvite.objects.filter(accepted_at=None, revoked_at=None)}
    assert open_now == {"s@elsewhere.example"}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_accepting_while_the_inviter_is_removed_is_no_deadlock(members, site, mailoutbox):
    """Member changes lock the site, then (since they withdraw the inviter's invites) the
    invites; accepting locked the invite, then the site. An invitee accepting while the owner
    removed the inviter deadlocked: PostgreSQL ended one of the two with an error (a 500).
    Accepting now takes the site first, like every member change: it waits for the removal,
    then finds the invite withdrawn."""
    import threading
    import time

    from django.db import connection

    from sill.accounts import services
    from tests.threads import run_concurrently

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    invites.create_invite(
        site=site,
        actor=members["admin"],
        email="friend@elsewhere.example",
        role="admin",
        second_factor=two_factor.OPERATOR,
    )
    token = link_in(mailoutbox[-1]).rstrip("/").rsplit("/", 1)[1]
    invite_locked = threading.Event()
    opened, withdraw = invites.open_invite, services._withdraw_invites

    def open_then_say(*args, **kwargs):
        found = opened(*args, **kwargs)
        invite_locked.set()
        return found

    def withdraw_once_accepting(**kwargs):
        # The removal holds the site: let the acceptance lock its invite first, if it can.
        invite_locked.wait(timeout=2)
        return withdraw(**kwargs)

    def work(i: int):
        if i == 0:
            return services.remove_member(membership=members["admin"], actor=members["owner"])
        time.sleep(0.3)  # the removal takes the site's lock first
        return invites.accept_invite(token=token, password=NEW_PASSWORD)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(invites, "open_invite", open_then_say)
        patch.setattr(services, "_withdraw_invites", withdraw_once_accepting)
        removed, accepted = run_concurrently(2, work)
    assert removed is None, removed
    assert isinstance(accepted, invites.InviteUnusable), accepted
    assert accepted.code == "invite_revoked"
    assert not Membership.objects.filter(site=site, user__username="friend@elsewhere.example")


def test_an_owner_resending_an_invite_whose_sender_was_switched_off_makes_it_work(
    invite_staff, members, site, client_for, mailoutbox
):
    """Resending is the resender's say: the new link must not be refused for the first
    sender's, who can no longer send it."""
    invite_staff()  # by the admin
    invite = MemberInvite.objects.get()
    members["admin"].user.is_active = False
    members["admin"].user.save()
    response = client_for("owner").post(f"/settings/members/invites/{invite.pk}/resend/")
    assert response.status_code == 303
    page = Client().get(path_of(link_in(mailoutbox[-1])))
    assert page.status_code == 200 and "Join Test Roasters" in page.content.decode()
