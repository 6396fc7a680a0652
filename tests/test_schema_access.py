"""``/api/schema/`` needs a login when DEBUG is off, unless ``SILL_PUBLIC_SCHEMA=1``."""

from __future__ import annotations

import pytest
from django.test import Client

from sill.accounts import two_factor
from sill.accounts.services import issue_member_token

pytestmark = pytest.mark.django_db

JSON = {"Accept": "application/json"}


def test_it_refuses_the_schema_to_an_anonymous_caller():
    response = Client().get("/api/schema/", headers=JSON)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Bearer"
    assert b"/api/v1/mandates" not in response.content


def test_it_serves_the_schema_to_a_logged_in_member(client_for):
    response = client_for("reviewer").get("/api/schema/", headers=JSON)
    assert response.status_code == 200
    assert "/api/v1/mandates" in response.json()["paths"]


def test_it_serves_the_schema_to_a_member_token(members):
    token = issue_member_token(
        membership=members["staff"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    response = Client().get("/api/schema/", headers={**JSON, "Authorization": f"Bearer {token}"})
    assert response.status_code == 200


def test_a_revoked_or_made_up_token_is_refused(db):
    response = Client().get("/api/schema/", headers={**JSON, "Authorization": "Bearer sill_mt_x"})
    assert response.status_code == 401


def test_sill_public_schema_makes_it_public(settings):
    settings.SILL_PUBLIC_SCHEMA = True
    response = Client().get("/api/schema/", headers=JSON)
    assert response.status_code == 200
    assert "/api/v1/mandates" in response.json()["paths"]


def test_debug_makes_it_public(settings):
    settings.DEBUG = True
    assert Client().get("/api/schema/", headers=JSON).status_code == 200
