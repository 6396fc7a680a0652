"""The staff refund API with a member's bearer token (`manage.py members token`)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from refunds.models import Refund
from sill.accounts import two_factor
from sill.accounts.models import MemberToken
from sill.accounts.services import issue_member_token

pytestmark = pytest.mark.django_db


def _post(order, body: dict, token: str | None, capture):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with capture(execute=True):
        return Client(enforce_csrf_checks=True).post(
            f"/api/order/{order.id}/refund",
            data=json.dumps(body),
            content_type="application/json",
            headers=headers,
        )


def test_a_staff_token_refunds_without_a_session_or_csrf(
    members, make_order, mock_rail, leaf, django_capture_on_commit_callbacks
):
    order = make_order(total="40.00")
    token = issue_member_token(
        membership=members["staff"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    response = _post(
        order, {"amount": 10, "reasonId": str(leaf.pk)}, token, django_capture_on_commit_callbacks
    )
    assert response.status_code == 201, response.content
    refund = Refund.objects.get()
    assert refund.requested_by == members["staff"].user and refund.amount_minor == 1000


def test_a_token_is_pinned_to_its_site(
    members, make_order, other_site, mock_rail, leaf, django_capture_on_commit_callbacks
):
    theirs = make_order(on_site=other_site)
    token = issue_member_token(
        membership=members["staff"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    response = _post(
        theirs, {"full": True, "reasonId": str(leaf.pk)}, token, django_capture_on_commit_callbacks
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert Refund.objects.count() == 0


def test_a_reviewers_token_may_not_refund(
    members, make_order, mock_rail, leaf, django_capture_on_commit_callbacks
):
    order = make_order()
    token = issue_member_token(
        membership=members["reviewer"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    response = _post(
        order, {"full": True, "reasonId": str(leaf.pk)}, token, django_capture_on_commit_callbacks
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"


def test_a_revoked_or_unknown_token_is_refused(
    members, make_order, mock_rail, leaf, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    order = make_order()
    token = issue_member_token(
        membership=members["staff"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    MemberToken.objects.update(revoked_at=timezone.now())
    for candidate in (token, "sill_mt_nope"):
        response = _post(
            order,
            {"full": True, "reasonId": str(leaf.pk)},
            candidate,
            django_capture_on_commit_callbacks,
        )
        assert (
            response.status_code == 401 and response.json()["error"]["code"] == "not_authenticated"
        )
    assert Refund.objects.count() == 0


def test_members_token_command_prints_a_token_once(site, members):
    out = io.StringIO()
    call_command(
        "members", "token", "--site", site.id, "--email", "staff@roasters.example", stdout=out
    )
    token = out.getvalue().strip()
    assert token.startswith("sill_mt_")
    stored = MemberToken.objects.get()
    assert token not in stored.token_sha256 and stored.membership == members["staff"]
