"""Audited rail administration: connecting Stripe, changing its mode, key or webhook secrets and
switching a rail on or off each write a signed ``rail_change`` record with the actor, and no
record ever holds a key or a signing secret."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from audit.models import AuditRecord
from sill.rails.registry import ensure_mock_rail

pytestmark = pytest.mark.django_db
URL = "/settings/rails/"
TEST_KEY = "sk_test_51AbCdEfGhIjKlMnOpQrStUvWxYz0123456789secretXYZ9"
LIVE_KEY = "sk_live_51AbCdEfGhIjKlMnOpQrStUvWxYz0123456789secretLIV3"
WHSEC = ("whsec_firstSigningSecret0123456789", "whsec_secondSigningSecret987654321")


def rail_changes(site) -> list[dict]:
    return [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(site=site, kind="rail_change").order_by("seq")
    ]


def no_secret_in_any_record() -> None:
    payloads = "".join(AuditRecord.objects.values_list("payload", flat=True))
    for secret in (TEST_KEY, LIVE_KEY, *WHSEC, "secretXYZ9", "secretLIV3", "whsec_"):
        assert secret not in payloads


def verified() -> None:
    call_command("audit", "verify", stdout=io.StringIO())


def test_connecting_stripe_is_signed_without_the_key_or_secrets(client_for, site):
    response = client_for("admin").post(
        f"{URL}stripe/",
        {"secret_key": TEST_KEY, "mode": "test", "connected_account": "acct_1Example",
         "webhook_secrets": "\n".join(WHSEC)},
    )  # fmt: skip
    assert response.status_code == 303
    [body] = rail_changes(site)
    assert body == {"rail": "stripe", "action": "connect", "mode": "test", "mode_before": None,
                    "new_key": True, "connected_account": "acct_1Example",
                    "webhook_secrets_changed": True, "webhook_secrets_count": 2,
                    "actor": "admin@roasters.example", "actor_name": "admin@roasters.example"}  # fmt: skip
    no_secret_in_any_record()
    verified()


def test_a_mode_change_with_a_new_key_records_before_and_after(client_for, site, settings):
    settings.SILL_ALLOW_LIVE = True
    client = client_for("owner")
    client.post(f"{URL}stripe/", {"secret_key": TEST_KEY, "mode": "test"})
    assert client.post(f"{URL}stripe/", {"secret_key": LIVE_KEY, "mode": "live"}).status_code == 303
    connect, change = rail_changes(site)
    assert connect["action"] == "connect" and not connect["webhook_secrets_changed"]
    assert (change["action"], change["mode_before"], change["mode"]) == ("update", "test", "live")
    assert change["new_key"] and change["actor"] == "owner@roasters.example"
    no_secret_in_any_record()
    body = client.get("/activity/", {"kind": "rail_change"}).content.decode()
    assert "Stripe settings saved, mode test → live, new key" in body
    assert "Stripe connected, test mode, new key" in body
    verified()


def test_rotating_webhook_secrets_alone_records_how_many(client_for, site):
    client = client_for("owner")
    client.post(f"{URL}stripe/", {"secret_key": TEST_KEY, "mode": "test"})
    client.post(f"{URL}stripe/", {"secret_key": "", "mode": "test", "webhook_secrets": WHSEC[1]})
    change = rail_changes(site)[-1]
    assert (change["new_key"], change["webhook_secrets_changed"]) == (False, True)
    assert change["webhook_secrets_count"] == 1 and change["mode_before"] == "test"
    no_secret_in_any_record()
    body = client.get("/activity/").content.decode()
    assert "webhook secrets changed: 1 secret" in body
    verified()


def test_a_refused_configuration_records_nothing(client_for, site):
    response = client_for("owner").post(f"{URL}stripe/", {"secret_key": LIVE_KEY, "mode": "test"})
    assert response.status_code == 422
    assert rail_changes(site) == []


def test_switching_a_rail_off_and_on_is_signed_once_per_switch(client_for, site):
    ensure_mock_rail(site)
    client = client_for("admin")
    assert client.post(f"{URL}mock/enabled/", {"enabled": "0"}).status_code == 303
    assert client.post(f"{URL}mock/enabled/", {"enabled": "0"}).status_code == 303  # no change
    assert client_for("owner").post(f"{URL}mock/enabled/", {"enabled": "1"}).status_code == 303
    assert [(b["rail"], b["action"], b["actor"]) for b in rail_changes(site)] == [
        ("mock", "disable", "admin@roasters.example"),
        ("mock", "enable", "owner@roasters.example"),
    ]
    verified()


@pytest.mark.parametrize("persona", ["reviewer", "staff", "outsider"])
def test_other_roles_and_sites_record_nothing_here(client_for, site, persona):
    ensure_mock_rail(site)
    client_for(persona).post(f"{URL}mock/enabled/", {"enabled": "0"})
    client_for(persona).post(f"{URL}stripe/", {"secret_key": TEST_KEY, "mode": "test"})
    assert rail_changes(site) == []
