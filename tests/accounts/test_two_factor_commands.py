"""``manage.py two_factor``: requiring it on a site, and resetting a user who lost their phone
(recorded, actor the operator)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django_otp.plugins.otp_totp.models import TOTPDevice

from audit.activity import summary_of
from audit.models import AuditRecord
from sill.accounts import two_factor
from tests.accounts.two_factor_helpers import confirmed_device

pytestmark = pytest.mark.django_db


def test_it_switches_the_requirement_on_and_off(site):
    call_command("two_factor", "require", "--site", site.pk, "on")
    site.refresh_from_db()
    assert site.require_two_factor
    call_command("two_factor", "require", "--site", site.pk, "off")
    site.refresh_from_db()
    assert not site.require_two_factor
    with pytest.raises(CommandError):
        call_command("two_factor", "require", "--site", "nope", "on")


def test_it_records_each_switch_of_the_requirement_signed_by_the_operator(site):
    # Switching the second factor off for a site's owners and admins takes away the brake on
    # every widening change: the audit log says when, and that the operator did it.
    site.require_two_factor = False
    site.save(update_fields=["require_two_factor"])
    call_command("two_factor", "require", "--site", site.pk, "on")
    call_command("two_factor", "require", "--site", site.pk, "on")  # no change: no record
    call_command("two_factor", "require", "--site", site.pk, "off")
    bodies = [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(site=site, kind="settings_change").order_by("seq")
    ]
    assert bodies == [
        {"change": "require_two_factor", "require_two_factor": on, "previous": not on,
         "actor": None, "actor_name": "operator (manage.py)"}
        for on in (True, False)
    ]  # fmt: skip
    out = io.StringIO()
    call_command("audit", "verify", stdout=out)  # raises on any bad record
    # Activity says it in words.
    records = AuditRecord.objects.filter(site=site, kind="settings_change").order_by("seq")
    assert [summary_of(r.kind, json.loads(r.payload)["body"]) for r in records] == [
        "Two factors required of owners and admins",
        "Two factors no longer required of owners and admins",
    ]


def test_it_resets_a_user_and_records_the_operator(members, site):
    user = members["admin"].user
    confirmed_device(user)
    two_factor.regenerate_recovery_codes(user)
    call_command("two_factor", "reset", "--email", "ADMIN@roasters.example")
    assert not TOTPDevice.objects.filter(user=user).exists()
    assert two_factor.recovery_codes_left(user) == 0
    record = AuditRecord.objects.filter(site=site, kind="member_change").latest("seq")
    body = json.loads(record.payload)["body"]
    assert body["action"] == "two_factor_removed" and body["actor"] is None
    assert body["actor_name"] == "operator (manage.py)"


# Before: a reset of a user with no authenticator and no codes still wrote two_factor_removed
# (nothing was removed), and a superuser's reset (member of no site) was recorded nowhere,
# though that second factor guards the Django admin of every site.


def _removals(site) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="member_change").order_by("seq")
    bodies = [json.loads(record.payload)["body"] for record in records]
    return [body for body in bodies if body["action"] == "two_factor_removed"]


def test_a_reset_that_removes_nothing_records_nothing(members, site):
    out = io.StringIO()
    call_command("two_factor", "reset", "--email", "admin@roasters.example", stdout=out)
    assert "nothing removed" in out.getvalue()
    assert _removals(site) == []


def test_a_superusers_reset_is_recorded_on_every_site(site, other_site):
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser("root@sill.example", password="x-long-1")
    confirmed_device(root)
    call_command("two_factor", "reset", "--email", "root@sill.example", stdout=io.StringIO())
    assert not TOTPDevice.objects.filter(user=root).exists()
    removed = {"action": "two_factor_removed", "member": "root@sill.example", "role": None,
               "actor": None, "actor_name": "operator (manage.py)"}  # fmt: skip
    assert _removals(site) == _removals(other_site) == [removed]
