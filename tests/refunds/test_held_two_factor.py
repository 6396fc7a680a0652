"""Approving and rejecting a held refund where the site requires two factors: refused (HTML,
htmx, JSON) until the approver's session is verified, then decided as usual."""

from __future__ import annotations

import pytest

from refunds.models import Refund
from tests.accounts.two_factor_helpers import confirmed_device, require_two_factor, verified_client

pytestmark = pytest.mark.django_db

WORDS = "Two-factor authentication needed"


def status_of(refund: Refund) -> str:
    return Refund.objects.get(pk=refund.pk).status


@pytest.mark.parametrize("persona", ["owner", "admin"])
def test_it_approves_only_from_a_verified_session(client_for, members, site, held, persona):
    require_two_factor(site)
    device = confirmed_device(members[persona].user)
    refused = client_for(persona).post(f"/held/{held.id}/approve/")
    assert refused.status_code == 403 and WORDS in refused.content.decode()
    assert status_of(held) == "held"
    response = verified_client(members[persona], device).post(
        f"/held/{held.id}/approve/", {"confirmed": "1"}
    )
    assert response.status_code == 302
    assert status_of(held) != "held"


def test_it_rejects_only_from_a_verified_session(client_for, members, site, held):
    require_two_factor(site)
    device = confirmed_device(members["owner"].user)
    client = client_for("owner")
    htmx = client.post(
        f"/held/{held.id}/reject/", headers={"HX-Request": "true", "HX-Target": "decision-panel"}
    )
    assert htmx.status_code == 403 and WORDS in htmx.content.decode()
    as_json = client.post(f"/held/{held.id}/reject/", headers={"Accept": "application/json"})
    assert as_json.status_code == 403
    assert as_json.json()["error"]["code"] == "two_factor_required"
    assert status_of(held) == "held"
    assert (
        verified_client(members["owner"], device).post(f"/held/{held.id}/reject/").status_code
        == 302
    )
    assert status_of(held) == "rejected"


def test_the_queue_stays_readable_unverified(client_for, site, held):
    require_two_factor(site)
    client = client_for("owner")
    assert client.get("/held/").status_code == 200
    assert client.get(f"/held/{held.id}/").status_code == 200
