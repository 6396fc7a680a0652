"""Session policy: idle and absolute timeouts, and sessions ended by removal, deactivation and a
new password. Time moves by editing a session's own stamps (what the middleware reads)."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from qsessions.models import Session

from audit.models import AuditRecord
from sill.accounts.models import Role
from sill.accounts.services import add_member
from sill.accounts.sessions import SEEN_AT, SIGNED_IN_AT
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
UA = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


def sign_in(email: str, user_agent: str = UA) -> Client:
    """Through the login page, as a browser would: the session row gets its agent and address."""
    client = Client(HTTP_USER_AGENT=user_agent)
    response = client.post("/login/", {"username": email, "password": PASSWORD})
    assert response.status_code == 302, response.content[:300]
    return client


def shift(client: Client, **seconds_ago: int) -> None:
    """Pretend the session signed in / was last seen that many seconds ago."""
    session = client.session
    now = int(timezone.now().timestamp())
    if "signed_in" in seconds_ago:
        session[SIGNED_IN_AT] = now - seconds_ago["signed_in"]
    if "seen" in seconds_ago:
        session[SEEN_AT] = now - seconds_ago["seen"]
    session.save()


def signed_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def sessions_of(email: str) -> int:
    return Session.objects.filter(user__username=email).count()


# --- timeouts --------------------------------------------------------------------------------


def test_it_starts_both_clocks_at_sign_in_and_records_the_device(members):
    client = sign_in("staff@roasters.example")
    data = client.session
    assert isinstance(data[SIGNED_IN_AT], int) and data[SEEN_AT] == data[SIGNED_IN_AT]
    row = Session.objects.get(user__username="staff@roasters.example")
    assert (row.user_agent, row.ip) == (UA, "127.0.0.1")


def test_it_signs_out_a_session_idle_past_the_limit(members, settings):
    settings.SILL_SESSION_IDLE_SECONDS = 1800
    client = sign_in("staff@roasters.example")
    shift(client, seen=1799)
    assert signed_in(client)
    shift(client, seen=1801)
    response = client.get("/orders/")
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=/orders/")
    assert sessions_of("staff@roasters.example") == 0
    page = client.get(response["Location"]).content.decode()
    assert "You were signed out after 30 minutes without activity" in page
    assert not signed_in(client)


def test_it_signs_out_a_session_past_the_absolute_limit_however_busy(members, settings):
    settings.SILL_SESSION_MAX_SECONDS = 12 * 3600
    client = sign_in("owner@roasters.example")
    shift(client, signed_in=12 * 3600 - 5, seen=0)
    assert signed_in(client)
    shift(client, signed_in=12 * 3600 + 5, seen=0)
    assert not signed_in(client)
    assert sessions_of("owner@roasters.example") == 0


def test_the_api_answers_an_expired_session_as_anonymous(members):
    client = sign_in("owner@roasters.example")
    assert client.get("/api/v1/policy-templates").status_code == 200
    shift(client, seen=3 * 3600)
    response = client.get("/api/v1/policy-templates")
    assert response.status_code in (401, 403)
    assert sessions_of("owner@roasters.example") == 0


def test_last_seen_is_written_at_most_once_a_minute(members):
    client = sign_in("staff@roasters.example")
    stamped = client.session[SEEN_AT]
    updated = Session.objects.get(user__username="staff@roasters.example").updated_at
    assert signed_in(client) and signed_in(client)
    # Within the minute: no session write at all (the row's updated_at did not move).
    assert Session.objects.get(user__username="staff@roasters.example").updated_at == updated
    shift(client, seen=61)
    assert signed_in(client)
    assert client.session[SEEN_AT] >= stamped


def test_a_session_without_stamps_starts_its_clocks_on_its_next_request(members):
    client = Client()
    client.force_login(members["staff"].user)
    session = client.session
    del session[SIGNED_IN_AT], session[SEEN_AT]
    session.save()
    assert signed_in(client)
    assert isinstance(client.session[SIGNED_IN_AT], int)


# --- ended by administration -----------------------------------------------------------------


def test_removing_the_last_membership_ends_every_session_of_the_user(members):
    laptop, phone = sign_in("staff@roasters.example"), sign_in("staff@roasters.example", "Phone")
    assert signed_in(laptop) and signed_in(phone) and sessions_of("staff@roasters.example") == 2
    owner = sign_in("owner@roasters.example")
    response = owner.post(f"/settings/members/{members['staff'].pk}/remove/")
    assert response.status_code == 303
    assert sessions_of("staff@roasters.example") == 0
    for client in (laptop, phone):
        response = client.get("/orders/")
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert signed_in(owner)  # the remover's own session is untouched


def test_removal_from_one_site_ends_access_to_it_at_once_but_keeps_the_other(
    members, site, other_site, make_order
):
    add_member(site=other_site, email="admin@roasters.example", role=Role.REVIEWER)
    ours, theirs = make_order(), make_order(on_site=other_site)
    client = sign_in("admin@roasters.example")
    assert client.get(f"/orders/{ours.id}/").status_code == 200
    assert client.get("/settings/members/").status_code == 200
    owner = sign_in("owner@roasters.example")
    assert owner.post(f"/settings/members/{members['admin'].pk}/remove/").status_code == 303
    # Still signed in (they keep other_site), but nothing of site answers from the next request.
    assert sessions_of("admin@roasters.example") == 1
    assert client.get(f"/orders/{ours.id}/").status_code == 404
    assert client.get("/settings/members/").status_code == 403  # a reviewer on other_site
    assert client.get(f"/orders/{theirs.id}/").status_code == 200
    assert "Other Shop" in client.get("/").content.decode()


def test_deactivating_a_user_ends_their_sessions(members):
    client = sign_in("reviewer@roasters.example")
    user = members["reviewer"].user
    user.is_active = False
    user.save(update_fields=["is_active"])
    assert sessions_of("reviewer@roasters.example") == 0
    assert not signed_in(client)


def test_deactivating_through_a_plain_save_ends_them_too(members):
    client = sign_in("reviewer@roasters.example")
    user = get_user_model().objects.get(username="reviewer@roasters.example")
    user.is_active = False
    user.save()
    assert not signed_in(client)


def test_signing_in_again_does_not_end_the_other_sessions(members):
    first = sign_in("staff@roasters.example")
    second = sign_in("staff@roasters.example")  # saves last_login: no password change
    assert signed_in(first) and signed_in(second)


def test_an_operator_setting_a_password_ends_every_session(members, site):
    client = sign_in("staff@roasters.example")
    call_command("members", "add", "--site", site.pk, "--email", "staff@roasters.example",
                 "--role", "staff", "--can-refund", "--password", "a-new-long-password-2",
                 stdout=io.StringIO())  # fmt: skip
    assert sessions_of("staff@roasters.example") == 0
    assert not signed_in(client)


def member_changes(site, action: str) -> list[dict]:
    """The bodies of ``site``'s signed ``member_change`` records of ``action``."""
    records = AuditRecord.objects.filter(site=site, kind="member_change").order_by("seq")
    bodies = [json.loads(record.payload)["body"] for record in records]
    return [body for body in bodies if body["action"] == action]


def test_a_password_changed_on_the_account_page_ends_the_others_and_keeps_this_one(members, site):
    here, elsewhere = sign_in("staff@roasters.example"), sign_in("staff@roasters.example")
    response = here.post(
        "/settings/account/password/",
        {"old_password": PASSWORD, "new_password1": "a-new-long-password-3",
         "new_password2": "a-new-long-password-3"},
    )  # fmt: skip
    assert response.status_code == 303 and response["Location"] == "/settings/account/"
    assert "Every other session was logged out" in here.get("/settings/account/").content.decode()
    assert signed_in(here) and not signed_in(elsewhere)
    assert sessions_of("staff@roasters.example") == 1
    # Signed, by the member, in the log of the site they belong to (no password in it).
    assert member_changes(site, "password_change") == [
        {"action": "password_change", "member": "staff@roasters.example", "role": "staff",
         "actor": "staff@roasters.example", "actor_name": "staff@roasters.example"}
    ]  # fmt: skip
    assert "a-new-long-password-3" not in "".join(
        AuditRecord.objects.values_list("payload", flat=True)
    )


def test_a_wrong_current_password_changes_nothing(members):
    here, elsewhere = sign_in("staff@roasters.example"), sign_in("staff@roasters.example")
    response = here.post(
        "/settings/account/password/",
        {"old_password": "nope", "new_password1": "a-new-long-password-3",
         "new_password2": "a-new-long-password-3"},
    )  # fmt: skip
    assert response.status_code == 422
    assert 'aria-invalid="true"' in response.content.decode()
    assert signed_in(here) and signed_in(elsewhere)
    assert not AuditRecord.objects.filter(kind="member_change").exists()
    assert get_user_model().objects.get(username="staff@roasters.example").check_password(PASSWORD)
