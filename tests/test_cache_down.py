"""A cache that cannot be reached (Redis down; sill/cache_down.py): every request whose guard
counts in the cache (a rate limit, a replay guard, a debounce) fails closed, before it writes
anything or calls a rail, and is answered 503 with ``Retry-After``: ``unavailable`` in the
error shape for programs (the API, the rails' webhooks, Slack), a "briefly unavailable" page
for people. One warning is logged, naming the cache but not its address. The notices' sweeps
pick nothing while it is down and send everything once it is back; a message already sent is
not failed for it.

Seen: with the cache down the agent API (with its rate limits on), PayPal's webhooks, Slack's
clicks, the password reset and Settings → Rails' "Test connection" raised redis'
``ConnectionError``: a ``500 server_error`` an agent author or a webhook sender could not tell
from a defect, and Django's "Something went wrong" page for people. The sweeps raised too, and
a failure email sent while the cache was down failed its task after it went out."""

from __future__ import annotations

import logging
import signal
import time

import pytest
from django.core import mail
from django.test import Client

from audit.models import AuditRecord
from refunds.execution import execute_refund
from refunds.models import Mandate, Refund, RefundReason, RefundStatus
from refunds.reasons.services import ensure_default_reasons
from refunds.review.failures import notify_failed
from refunds.tasks import notify_missed_outcomes_task
from sill.accounts import two_factor
from sill.accounts.services import issue_agent_token, issue_member_token
from sill.rails.models import WebhookEvent
from tests.broker_down import cache_not_answering, cache_unreachable
from tests.conftest import site_owner
from tests.rails.paypal_fixtures import paypal, paypal_account, paypal_order  # noqa: F401 (fixtures)
from tests.rails.test_paypal_webhooks import deliver, refund_event
from tests.refunds.conftest import (  # noqa: F401 (fixtures)
    ORIGINAL,
    agent_key,
    held,
    mock_rail,
    order,
    original,
    refund_intent,
    sign,
    staff_refund,
)
from tests.refunds.staff_api import post_full_refund
from tests.refunds.test_slack_approvals import click, linked, slack  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

RATES = ("address", "agent_token", "member_token", "member_session", "mandate_key")
LOGGER = "sill.cache_down"


@pytest.fixture
def rates_on(settings):
    """Every API limit on (the tests run with them off), far from being reached."""
    settings.SILL_API_RATES = {
        scope: "1000/minute" for scope in (*RATES, "paypal_verify", "paypal_verify_address")
    }


@pytest.fixture
def down(caplog):
    """The cache unreachable for the test's requests; yields its address."""
    with caplog.at_level(logging.WARNING, logger=LOGGER), cache_unreachable() as address:
        yield address


def unavailable(response, address: str, caplog) -> None:
    """503 ``unavailable`` in the error shape, Retry-After a minute, and one warning that
    names the cache but not its address."""
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "60"
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("unavailable", None)
    assert "briefly unavailable" in error["message"] and "again in a minute" in error["message"]
    logged(address, caplog)


def logged(address: str, caplog) -> None:
    [warning] = [r for r in caplog.records if r.name == LOGGER]
    text = warning.getMessage()
    assert warning.levelno == logging.WARNING
    assert text.startswith("the cache cannot be reached (ConnectionError)")
    assert address.split("//")[1] not in text and address.rsplit(":", 1)[1] not in text
    # Once: not again by Django as an error ("Service Unavailable: <path>").
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def _mandate(body: bytes):
    return Client().post("/api/v1/mandates", data=body, content_type="application/json")


@pytest.mark.parametrize("limit", ["address", "mandate_key"])
def test_a_mandate_is_refused_503_and_nothing_is_stored_or_refunded(
    limit,
    settings,
    sign,  # noqa: F811
    original,  # noqa: F811
    down,
    caplog,
):
    # The address limit is counted before the body is read; the key's once its signature holds.
    settings.SILL_API_RATES = {limit: "1000/minute"}
    unavailable(_mandate(sign(refund_intent(ORIGINAL))), down, caplog)
    assert not Mandate.objects.exists() and not Refund.objects.exists()


def test_an_agents_read_is_refused_503(agent, rates_on, down, caplog):
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    response = Client().get("/api/v1/agent", headers={"Authorization": f"Bearer {token}"})
    unavailable(response, down, caplog)


def test_the_member_api_is_refused_503_and_refunds_nothing(
    members,
    order,  # noqa: F811
    rates_on,
    client_for,
    down,
    caplog,
):
    token = issue_member_token(
        membership=members["staff"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    ensure_default_reasons(order.site)
    reason = RefundReason.objects.get(site=order.site, code="defective")
    client = Client(headers={"Authorization": f"Bearer {token}"})
    unavailable(post_full_refund(client, order.pk, reason_id=reason.pk, key="k1"), down, caplog)
    caplog.clear()
    unavailable(client_for("staff").get("/api/v1/policy-templates"), down, caplog)  # a session
    assert not Refund.objects.exists()


def test_a_paypal_webhook_is_refused_503_stored_nowhere_and_paypal_not_asked(
    site,
    paypal,  # noqa: F811
    paypal_account,  # noqa: F811
    paypal_order,  # noqa: F811
    rates_on,
    caplog,
):
    _, capture = paypal_order()
    event = refund_event(paypal, capture, value="30.00")
    with caplog.at_level(logging.WARNING, logger=LOGGER), cache_unreachable() as address:
        response = deliver(site, paypal, event)
    unavailable(response, address, caplog)
    assert paypal.verifications == [] and not WebhookEvent.objects.exists()
    # PayPal delivers it again later: with the cache back, it is verified and stored.
    assert deliver(site, paypal, event).json() == {"received": True, "duplicate": False}


def test_a_slack_click_is_refused_503_and_nothing_is_decided(
    site,
    linked,  # noqa: F811
    held,  # noqa: F811
    slack,  # noqa: F811
    down,
    caplog,
):
    records = AuditRecord.objects.count()
    unavailable(click(site, held.pk, user="U0OWNER", response_url=slack), down, caplog)
    held.refresh_from_db()
    assert held.status == RefundStatus.HELD and AuditRecord.objects.count() == records


def test_a_password_reset_is_a_briefly_unavailable_page_and_sends_nothing(members, down, caplog):
    response = Client().post("/password/reset/", {"email": "staff@roasters.example"})
    assert response.status_code == 503 and response["Retry-After"] == "60"
    page = response.content.decode()
    assert "<h1" in page and "Sill is briefly unavailable" in page
    assert "Try again in a minute." in page and "nothing was changed" in page
    assert mail.outbox == []
    logged(down, caplog)


def test_a_pages_htmx_form_gets_the_page_in_its_place_and_no_rail_is_called(
    client_for,
    paypal,  # noqa: F811
    paypal_account,  # noqa: F811
    down,
    caplog,
):
    response = client_for("owner").post("/settings/rails/paypal/test/", HTTP_HX_REQUEST="true")
    assert response.status_code == 503 and response["Retry-After"] == "60"
    fragment = response.content.decode()
    assert "<html" not in fragment and "Sill is briefly unavailable</h2>" in fragment
    assert paypal.token_requests == 0  # the debounce could not be read: PayPal was not asked
    logged(down, caplog)


# --- the notices' sweeps -------------------------------------------------------------------


@pytest.fixture
def failed(
    order,  # noqa: F811
    staff_refund,  # noqa: F811
    mock_rail,  # noqa: F811
    django_capture_on_commit_callbacks,
) -> Refund:
    """A staff refund the rail declined; its failure email not sent yet."""
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    refund = staff_refund(order)
    with django_capture_on_commit_callbacks(execute=False):
        assert execute_refund(refund.id) == "failed"
    mail.outbox.clear()
    return refund


def test_a_failure_email_sent_while_the_cache_is_down_is_not_failed_for_it(failed, caplog):
    with caplog.at_level(logging.WARNING), cache_unreachable() as address:
        assert notify_failed(refund_id=failed.pk) is True
    assert sorted(m.to[0] for m in mail.outbox) == [
        "admin@roasters.example",
        "owner@roasters.example",
    ]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "the cache cannot be reached (ConnectionError)" in text
    assert address.rsplit(":", 1)[1] not in text


def test_a_sweep_picks_nothing_while_the_cache_is_down_and_sends_it_once_back(failed, caplog):
    with caplog.at_level(logging.WARNING), cache_unreachable():
        assert notify_missed_outcomes_task.apply().get() == 0
    assert mail.outbox == []
    failed.refresh_from_db()
    assert failed.failure_notified_at is None  # not claimed: nothing is lost
    assert "refund-failed sweep: nothing picked" in caplog.text

    assert notify_missed_outcomes_task.apply().get() == 1
    assert len(mail.outbox) == 2


def test_a_cache_that_takes_the_connection_and_never_answers_is_503_within_seconds(
    agent, rates_on, settings, caplog
):
    # Seen: Django's Redis cache had no timeouts of Sill's: a Redis host that hangs (or drops
    # packets) held every rate-limited request for as long as the driver's default (redis-py
    # 5, which the requirements allow, waits forever), the web workers all waiting. The
    # request now fails closed after the cache's own timeout.
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )

    def waited_too_long(signum, frame):
        raise AssertionError("the request was still waiting for the cache after 30 s")

    # The request runs in the test's thread (its database transaction); an alarm ends it if
    # the cache call never returns (before the fix it waited for as long as the kernel did).
    previous = signal.signal(signal.SIGALRM, waited_too_long)
    signal.alarm(30)
    try:
        with (
            caplog.at_level(logging.WARNING, logger=LOGGER),
            cache_not_answering(settings.SILL_REDIS_CACHE_OPTIONS) as address,
        ):
            started = time.monotonic()
            response = Client().get("/api/v1/agent", headers={"Authorization": f"Bearer {token}"})
            took = time.monotonic() - started
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    # The cache's own timeout (2 s), not the driver's default (5 s in redis-py 8; forever in
    # the redis-py 5 the requirements allow).
    assert took < 4.5, took
    assert response.status_code == 503 and response.json()["error"]["code"] == "unavailable"
    [warning] = [r for r in caplog.records if r.name == LOGGER]
    assert "(TimeoutError)" in warning.getMessage()
    assert address.rsplit(":", 1)[1] not in warning.getMessage()
