"""What a superuser changes about a member's account in the Django admin (switching it off,
setting its password, deleting it, deleting its authenticator) changes who may sign in to a
site: each writes the signed ``member_change`` record the same change makes elsewhere, on every
site the account belongs to, naming the superuser and ``via: "django_admin"``."""

from __future__ import annotations

import io
import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from audit.models import AuditRecord
from sill.accounts.admin_audit import OPERATOR
from tests.accounts.test_sessions import sign_in
from tests.accounts.two_factor_helpers import confirmed_device
from tests.admin_mount import admin_mounted

pytestmark = pytest.mark.django_db

ROOT = "root@sill.example"
STAFF = "staff@roasters.example"


@pytest.fixture
def root_client() -> Client:
    root = get_user_model().objects.create_superuser(ROOT, email=ROOT, password="x-long-pass-1")
    client = Client()
    client.force_login(root)
    with admin_mounted():
        yield client


def changes(site) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="member_change").order_by("seq")
    return [json.loads(record.payload)["body"] for record in records]


def by_root(action: str, **extra) -> dict:
    return {"action": action, "member": STAFF, "role": "staff", "via": "django_admin",
            "actor": ROOT, "actor_name": ROOT, **extra}  # fmt: skip


def account_form(username: str, **fields: str) -> dict[str, str]:
    """The admin's change form of an account, as sent: a box left out is unticked."""
    return {
        "username": username, "email": username, "first_name": "", "last_name": "",
        "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01", "initial-date_joined_1": "00:00:00",
        "_save": "Save", **fields,
    }  # fmt: skip


def test_switching_an_account_off_is_signed(root_client, members, site):
    user = members["staff"].user
    form = account_form(STAFF)
    response = root_client.post(f"/django-admin/auth/user/{user.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    user.refresh_from_db()
    assert not user.is_active
    assert changes(site) == [by_root("account_change", changed=["is_active"], is_active=False,
                                     is_staff=False, is_superuser=False)]  # fmt: skip

    root_client.post(f"/django-admin/auth/user/{user.pk}/change/", form)  # the same again
    assert len(changes(site)) == 1  # nothing changed: nothing recorded


def test_changing_an_accounts_email_or_login_name_is_signed(root_client, members, site):
    # Before: recorded nowhere. The email is where a password reset is sent: a superuser could
    # point an owner's at an address of theirs, reset the password from the emailed link, and
    # the log said only that the owner had reset their own password.
    user = members["staff"].user
    theirs = "thief@elsewhere.example"
    form = account_form(STAFF, email=theirs, is_active="on")
    response = root_client.post(f"/django-admin/auth/user/{user.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    renamed = account_form("staff2@roasters.example", email=theirs, is_active="on")
    root_client.post(f"/django-admin/auth/user/{user.pk}/change/", renamed)
    access = {"is_active": True, "is_staff": False, "is_superuser": False}
    assert changes(site) == [
        by_root("account_change", changed=["email"], email=theirs, email_before=STAFF, **access),
        {**by_root("account_change", changed=["username"], username="staff2@roasters.example",
                   username_before=STAFF, **access), "member": "staff2@roasters.example"},
    ]  # fmt: skip


def test_a_password_set_in_the_admin_is_signed(root_client, members, site):
    user = members["staff"].user
    new = "a-new-long-password-9"
    response = root_client.post(
        f"/django-admin/auth/user/{user.pk}/password/",
        {"password1": new, "password2": new, "usable_password": "true"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert changes(site) == [by_root("password_set")]
    assert new not in "".join(AuditRecord.objects.values_list("payload", flat=True))


def test_deleting_an_account_removes_its_memberships_with_a_record(root_client, members, site):
    user = members["staff"].user
    response = root_client.post(f"/django-admin/auth/user/{user.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert not get_user_model().objects.filter(pk=user.pk).exists()
    assert changes(site) == [by_root("remove")]


def test_deleting_an_authenticator_in_the_admin_is_signed(root_client, members, site):
    device = confirmed_device(members["staff"].user)
    response = root_client.post(
        f"/django-admin/otp_totp/totpdevice/{device.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert changes(site) == [by_root("two_factor_removed", device=device.persistent_id)]


# --- authenticators are enrolled by their owner, never planted in the admin ------------------
# Before: a superuser could add a TOTP device with a key they chose to anyone's account, or
# edit one (its key, its owner, confirmed), and read any authenticator's key and QR code, with
# no record: they could then sign in as that member with the member's second factor. Only a
# delete (recorded) is left to the admin; the member enrols on Settings → Your account.

KNOWN_KEY = "3132333435363738393031323334353637383930"


def test_an_authenticator_cannot_be_added_or_changed_in_the_admin(root_client, members, site):
    user = members["staff"].user
    device = confirmed_device(user)
    planted = {"user": user.pk, "name": "planted", "confirmed": "on", "key": KNOWN_KEY,
               "step": "30", "t0": "0", "digits": "6", "tolerance": "1", "drift": "0",
               "throttling_failure_count": "0"}  # fmt: skip
    added = root_client.post("/django-admin/otp_totp/totpdevice/add/", planted)
    changed = root_client.post(f"/django-admin/otp_totp/totpdevice/{device.pk}/change/", planted)
    assert (added.status_code, changed.status_code) == (403, 403)
    assert list(TOTPDevice.objects.values_list("pk", "name", "key")) == [
        (device.pk, device.name, device.key)
    ]
    recovery = {"user": user.pk, "name": "backup", "confirmed": "on",
                "token_set-TOTAL_FORMS": "1", "token_set-INITIAL_FORMS": "0",
                "token_set-0-token": "known-code"}  # fmt: skip
    assert (
        root_client.post("/django-admin/otp_static/staticdevice/add/", recovery).status_code == 403
    )
    assert not StaticDevice.objects.exists()
    assert changes(site) == []


def test_the_admin_never_shows_an_authenticators_key(root_client, members):
    device = confirmed_device(members["staff"].user)
    base = f"/django-admin/otp_totp/totpdevice/{device.pk}"
    page = root_client.get(f"{base}/change/")
    assert page.status_code == 200
    assert device.key not in page.content.decode()
    listed = root_client.get("/django-admin/otp_totp/totpdevice/").content.decode()
    assert "qrcode" not in listed
    assert root_client.get(f"{base}/config/").status_code == 403
    assert root_client.get(f"{base}/qrcode/").status_code == 403


# --- sessions are not the admin's to read ------------------------------------------------------
# Before: django-qsessions' pages listed every session by its key (the row's primary key, in
# every link) with its decoded data. A superuser could copy an owner's session cookie and act
# as the owner, second factor already verified in that session, and every record would name
# the owner. Members see and end their own sessions on Your account; an account switched off
# in the admin (recorded) ends all of its sessions.


def test_the_admin_shows_no_members_session_key(root_client, members):
    owner = sign_in("owner@roasters.example")
    key = owner.cookies[settings.SESSION_COOKIE_NAME].value
    for path in ("/django-admin/", "/django-admin/qsessions/session/"):
        assert key not in root_client.get(path).content.decode()
    page = root_client.get(f"/django-admin/qsessions/session/{key}/change/")
    assert key not in page.content.decode()


# --- a superuser's reach is every site ---------------------------------------------------------
# Before: making an account superuser in the admin was recorded only on the sites the account
# belonged to (none, for an account of no site), and `manage.py createsuperuser` recorded
# nothing: yet a superuser's admin edits every site's rail accounts and members. Both are now
# in every site's log, as a rotated audit key is.

OUTSIDER = "owner@other.example"


def test_making_an_account_superuser_is_recorded_on_every_site(
    root_client, members, site, other_site
):
    user = members["outsider"].user  # an owner of other_site only
    form = account_form(OUTSIDER, is_active="on", is_staff="on", is_superuser="on")
    response = root_client.post(f"/django-admin/auth/user/{user.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    promoted = {"action": "account_change", "member": OUTSIDER, "via": "django_admin",
                "actor": ROOT, "actor_name": ROOT, "changed": ["is_staff", "is_superuser"],
                "is_active": True, "is_staff": True, "is_superuser": True}  # fmt: skip
    assert changes(site) == [{**promoted, "role": None}]
    assert changes(other_site) == [{**promoted, "role": "owner"}]


def test_createsuperuser_is_recorded_on_every_site(site, other_site, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a-long-operator-password-3")
    call_command("createsuperuser", "--noinput", "--username", "ops@sill.example",
                 "--email", "ops@sill.example", stdout=io.StringIO())  # fmt: skip
    created = {"action": "account_change", "member": "ops@sill.example", "role": None,
               "actor": None, "actor_name": OPERATOR, "changed": ["is_superuser"],
               "is_active": True, "is_staff": True, "is_superuser": True}  # fmt: skip
    assert changes(site) == changes(other_site) == [created]
    call_command("audit", "verify", stdout=io.StringIO())


# --- manage.py changepassword ---------------------------------------------------------------
# Before: Django's own `changepassword` set the password (the sessions ended) and no site's
# log said so. Now it is Sill's override, recorded as a password set by the operator: on every
# site of the account, on every site for a superuser.


@pytest.fixture
def typed_password(monkeypatch):
    from django.contrib.auth.management.commands import changepassword

    monkeypatch.setattr(
        changepassword.Command, "_get_pass", lambda self, prompt=None: "a-new-long-password-7"
    )


def by_operator(member: str, role: str | None) -> dict:
    return {"action": "password_set", "member": member, "role": role, "via": "changepassword",
            "actor": None, "actor_name": OPERATOR}  # fmt: skip


def test_changepassword_is_recorded_on_every_site_of_the_account(
    typed_password, members, site, other_site
):
    call_command("changepassword", STAFF, stdout=io.StringIO())
    user = get_user_model().objects.get(username=STAFF)
    assert user.check_password("a-new-long-password-7")
    assert changes(site) == [by_operator(STAFF, "staff")]
    assert changes(other_site) == []  # not a member there
    call_command("audit", "verify", stdout=io.StringIO())


def test_changepassword_of_a_superuser_is_recorded_on_every_site(typed_password, site, other_site):
    get_user_model().objects.create_superuser(ROOT, email=ROOT, password="x-long-pass-1")
    call_command("changepassword", ROOT, stdout=io.StringIO())
    assert changes(site)[-1] == changes(other_site)[-1] == by_operator(ROOT, None)


# --- a superuser's own sign-in, changed in the admin -----------------------------------------
# Before: a password set, or an authenticator deleted, in the admin for a superuser who is no
# site's member was recorded on the sites they belong to: none. That password and second
# factor guard the Django admin, which edits every site, so every site's log says so (as
# changepassword, two_factor reset and a new superuser are recorded).


def test_a_superusers_password_or_authenticator_changed_in_the_admin_is_on_every_site(
    root_client, site, other_site
):
    ops = get_user_model().objects.create_superuser(
        "ops@sill.example", email="ops@sill.example", password="x-long-pass-2"
    )
    before = {s.pk: len(changes(s)) for s in (site, other_site)}  # its creation's records
    new = "a-new-long-password-8"
    response = root_client.post(
        f"/django-admin/auth/user/{ops.pk}/password/",
        {"password1": new, "password2": new, "usable_password": "true"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    device = confirmed_device(ops)
    response = root_client.post(
        f"/django-admin/otp_totp/totpdevice/{device.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    done = {"member": "ops@sill.example", "role": None, "via": "django_admin",
            "actor": ROOT, "actor_name": ROOT}  # fmt: skip
    for each in (site, other_site):
        assert changes(each)[before[each.pk] :] == [
            {"action": "password_set", **done},
            {"action": "two_factor_removed", **done, "device": device.persistent_id},
        ]
