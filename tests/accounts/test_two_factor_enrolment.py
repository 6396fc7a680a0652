"""Setting up an authenticator on Settings → Your account: the QR code and the secret, the
confirming code, ten recovery codes shown once and stored hashed, removing it with a code,
and the signed member_change records of both."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from audit.models import AuditRecord
from tests.accounts.two_factor_helpers import (
    code_for,
    confirmed_device,
    recovery_codes_in,
    require_two_factor,
)
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

ACCOUNT = "/settings/account/"
SETUP = "/settings/account/two-factor/setup/"
CONFIRM = "/settings/account/two-factor/confirm/"
REMOVE = "/settings/account/two-factor/remove/"
CODES = "/settings/account/two-factor/recovery-codes/"


def _changes(site) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="member_change").order_by("seq")
    return [json.loads(r.payload)["body"] for r in records]


def _enrol(client: Client, user) -> tuple[TOTPDevice, list[str]]:
    assert client.post(SETUP).status_code == 303
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    page = client.get(SETUP)
    html = page.content.decode()
    assert page.status_code == 200
    assert 'src="data:image/svg+xml;base64,' in html
    assert 'id="totp-secret"' in html
    response = client.post(CONFIRM, {"code": code_for(device), "password": PASSWORD})
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    return device, recovery_codes_in(response.content.decode())


def test_it_enrols_an_authenticator_with_ten_recovery_codes(client_for, members, site):
    client = client_for("reviewer")
    user = members["reviewer"].user
    assert "Set up an authenticator" in client.get(ACCOUNT).content.decode()
    device, codes = _enrol(client, user)
    device.refresh_from_db()
    assert device.confirmed
    assert len(codes) == 10 and len(set(codes)) == 10
    stored = set(StaticToken.objects.filter(device__user=user).values_list("token", flat=True))
    assert len(stored) == 10 and not stored & set(codes)  # only their hashes are stored
    page = client.get(ACCOUNT).content.decode()
    assert "10 recovery codes left" in page and "This session is verified" in page
    assert not any(code in page for code in codes)  # shown once, never again
    assert _changes(site)[-1] == {
        "action": "two_factor_enabled",
        "member": user.get_username(),
        "role": "reviewer",
        "actor": user.get_username(),
        "actor_name": user.get_username(),
    }


def test_it_refuses_a_wrong_confirming_code(client_for, members):
    client = client_for("owner")
    client.post(SETUP)
    response = client.post(CONFIRM, {"code": "000000", "password": PASSWORD})
    assert response.status_code == 422
    assert "didn&#x27;t work" in response.content.decode()
    assert not TOTPDevice.objects.filter(user=members["owner"].user, confirmed=True).exists()


@pytest.mark.parametrize("password", ["not-their-password", ""])
def test_it_asks_for_the_accounts_password_to_confirm(client_for, members, site, password):
    # A stolen session of a member who never enrolled could enrol the thief's authenticator
    # with its right code alone, and the member's next login then asked for the thief's code.
    client = client_for("owner")
    user = members["owner"].user
    client.post(SETUP)
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    records = AuditRecord.objects.filter(site=site).count()
    response = client.post(CONFIRM, {"code": code_for(device), "password": password})
    html = response.content.decode()
    assert response.status_code == 422
    assert "That password is wrong" in html and 'aria-describedby="password-error"' in html
    assert not TOTPDevice.objects.filter(user=user, confirmed=True).exists()
    assert not StaticToken.objects.filter(device__user=user).exists()
    assert AuditRecord.objects.filter(site=site).count() == records
    assert "This session is verified" not in client.get(ACCOUNT).content.decode()


def test_wrong_enrolment_passwords_lock_out_like_wrong_logins(client_for, members, settings):
    client = client_for("owner")
    client.post(SETUP)
    device = TOTPDevice.objects.get(user=members["owner"].user, confirmed=False)
    statuses = [
        client.post(CONFIRM, {"code": code_for(device), "password": f"guess-{n}"}).status_code
        for n in range(settings.SILL_LOGIN_FAILURE_LIMIT + 1)
    ]
    assert statuses[0] == 422 and statuses[-1] == 429
    # Locked: even the right password is not looked at.
    right = client.post(CONFIRM, {"code": code_for(device), "password": PASSWORD})
    assert right.status_code == 429
    assert not TOTPDevice.objects.filter(user=members["owner"].user, confirmed=True).exists()


def test_no_cache_keeps_the_authenticators_key(client_for):
    # The set-up page shows the key every future code is made from; it was cacheable (the
    # back button on a shared computer showed it after sign-out), while the recovery codes,
    # which each work once, were already kept out of caches.
    client = client_for("owner")
    client.post(SETUP)
    page = client.get(SETUP)
    assert page.status_code == 200 and 'id="totp-secret"' in page.content.decode()
    assert page["Cache-Control"] == "no-store"
    # A wrong first code shows the page, and the key, again.
    refused = client.post(CONFIRM, {"code": "000000", "password": PASSWORD})
    assert refused.status_code == 422 and 'id="totp-secret"' in refused.content.decode()
    assert refused["Cache-Control"] == "no-store"


def test_it_removes_the_authenticator_only_with_a_code(client_for, members, site):
    client = client_for("owner")
    user = members["owner"].user
    device, codes = _enrol(client, user)
    assert client.post(REMOVE, {"code": "123"}).status_code == 422
    assert TOTPDevice.objects.filter(user=user).exists()
    # django-otp delays a device's next check after a failure (1 s, then 2 s, …).
    with time_machine.travel(timezone.now() + timedelta(seconds=5)):
        assert client.post(REMOVE, {"code": codes[0]}).status_code == 303
    assert not TOTPDevice.objects.filter(user=user).exists()
    assert not StaticToken.objects.filter(device__user=user).exists()
    body = _changes(site)[-1]
    assert body["action"] == "two_factor_removed" and body["member"] == user.get_username()
    assert not any(code in json.dumps(_changes(site)) for code in codes)
    assert device.key not in json.dumps(_changes(site))


def test_it_makes_new_recovery_codes_with_a_code(client_for, members, site):
    client = client_for("admin")
    user = members["admin"].user
    _, first = _enrol(client, user)
    response = client.post(CODES, {"code": first[0]})
    fresh = recovery_codes_in(response.content.decode())
    assert response.status_code == 200 and len(fresh) == 10 and not set(fresh) & set(first)
    # New codes pass the second factor as the authenticator does: signed like enabling it,
    # naming no code.
    body = _changes(site)[-1]
    assert body == {"action": "recovery_codes_replaced", "member": user.get_username(),
                    "role": "admin", "actor": user.get_username(),
                    "actor_name": user.get_username()}  # fmt: skip
    assert not any(code in json.dumps(_changes(site)) for code in [*first, *fresh])


def test_its_pages_keep_their_query_counts(client_for, members, django_assert_max_num_queries):
    client = client_for("owner")
    with django_assert_max_num_queries(14):
        assert client.get(ACCOUNT).status_code == 200
    client.post(SETUP)
    with django_assert_max_num_queries(10):
        assert client.get(SETUP).status_code == 200
    with django_assert_max_num_queries(10):
        assert client.get("/settings/account/two-factor/verify/").status_code == 200


def test_it_never_replaces_an_authenticator_without_its_code(client_for, members, site):
    # A session that never entered a code (signed in before the user enrolled elsewhere)
    # must not swap in an authenticator of its own: that would remove the user's without a
    # code and verify this session, passing the site's two-factor requirement.
    require_two_factor(site)
    owner = members["owner"]
    device = confirmed_device(owner.user)
    client = client_for("owner")
    change = f"/settings/members/{members['staff'].pk}/change/"
    assert client.post(change, {"role": "reviewer"}).status_code == 403
    response = client.post(SETUP)
    assert response.status_code == 409
    assert "remove it with a code first" in response.content.decode()
    assert not TOTPDevice.objects.filter(user=owner.user, confirmed=False).exists()
    assert list(TOTPDevice.objects.filter(user=owner.user)) == [device]
    assert client.post(change, {"role": "reviewer"}).status_code == 403
    members["staff"].refresh_from_db()
    assert members["staff"].role == "staff"


def test_it_refuses_to_confirm_a_pending_one_beside_an_authenticator(client_for, members):
    # A pending enrolment left beside a confirmed authenticator (started before it was
    # confirmed) confirms nothing either.
    user = members["admin"].user
    device = confirmed_device(user)
    pending = TOTPDevice.objects.create(user=user, name="authenticator", confirmed=False)
    response = client_for("admin").post(CONFIRM, {"code": code_for(pending), "password": PASSWORD})
    assert response.status_code == 409
    assert list(TOTPDevice.objects.filter(user=user, confirmed=True)) == [device]
