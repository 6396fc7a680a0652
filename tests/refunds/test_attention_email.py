"""The email about a refund that needs attention gives each recipient the words for their
role: an owner, who may record what the provider's dashboard shows (``resolve_attention``),
is asked to; an admin, who may not, is asked to look and to ask an owner.

Seen: both were told to "record it on the order page", and an admin who opened it found no
form."""

from __future__ import annotations

import pytest
from django.core import mail

from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def flagged(staff_refund, mock_rail, make_order, settings, django_capture_on_commit_callbacks):
    """A staff refund whose answer was lost, then the rail switched off; its email sent."""
    settings.SILL_BASE_URL = "https://sill.example"
    mock_rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
    mock_rail.save()
    refund = staff_refund(make_order(total="25.00"))
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    mock_rail.enabled = False
    mock_rail.save()
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.id) == "needs_attention"
    return Refund.objects.get(pk=refund.pk)


def bodies(refund: Refund) -> dict[str, str]:
    by_role = {m.to[0].split("@")[0]: m.body for m in mail.outbox}
    assert sorted(by_role) == ["admin", "owner"]  # one message each
    return by_role


def test_an_owner_is_asked_to_record_what_the_dashboard_shows(flagged):
    owner = bodies(flagged)["owner"]
    assert (
        "If you can see the answer in the provider's dashboard (look for idempotency key "
        f"{flagged.idempotency_key}), record it on the order page:\n"
        f"https://sill.example/orders/{flagged.order_id}/\n"
    ) in owner
    assert "Only an owner" not in owner and "ask an owner" not in owner


def test_an_admin_is_asked_to_look_and_to_ask_an_owner_to_record_it(flagged):
    admin = bodies(flagged)["admin"]
    assert (
        "Only an owner can record the answer. If you can see it in the provider's dashboard "
        f"(look for idempotency key {flagged.idempotency_key}), ask an owner to record it on "
        "the order page:\n"
        f"https://sill.example/orders/{flagged.order_id}/\n"
    ) in admin
    assert ", record it on the order page" not in admin


def test_both_carry_the_same_facts(flagged):
    told = bodies(flagged)
    owner, admin = told["owner"], told["admin"]
    for body in (owner, admin):
        assert "A refund on Test Roasters needs attention" in body
        assert f"What happened: {flagged.failure_message}" in body
        assert "The amount stays reserved, so nobody can refund it twice." in body
    assert owner.split("If you can see")[0] == admin.split("Only an owner")[0]
