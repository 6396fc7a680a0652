"""API rate limits (sill/api.py): over a limit is 429 with Retry-After and the error shape,
under it is served, and one credential's or address's budget is its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import Client, override_settings

from sill.accounts import two_factor
from sill.accounts.models import Agent
from sill.accounts.services import issue_agent_token, issue_member_token
from tests.conftest import site_owner
from tests.refunds.conftest import ORIGINAL, refund_intent, register_key, signed_body
from tests.threads import run_concurrently

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def own_counters(settings):
    """Counters of this test only: the default cache under a key prefix of its own."""
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
        for name, config in settings.CACHES.items()
    }


@pytest.fixture
def rates(settings):
    """``rates(address=3, …)``: those limits per minute, the others off."""

    def set_rates(**per_minute: int) -> None:
        settings.SILL_API_RATES = {scope: f"{n}/minute" for scope, n in per_minute.items()}

    return set_rates


def _refused(response) -> int:
    """The Retry-After of a rate-limited answer (and its error shape checked)."""
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["error"]["code"] == "rate_limited"
    assert body["error"]["field"] is None
    assert "try again in" in body["error"]["message"]
    wait = int(response["Retry-After"])
    assert 0 < wait <= 60
    return wait


def _agent_get(token: str) -> int:
    return Client().get("/api/v1/agent", headers={"Authorization": f"Bearer {token}"})


def test_it_answers_429_with_retry_after_over_an_agent_tokens_limit(agent, rates):
    rates(agent_token=3)
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    assert [_agent_get(token).status_code for _ in range(3)] == [200, 200, 200]
    _refused(_agent_get(token))


def test_the_bearer_scheme_is_read_in_any_case_and_counted_as_one_token(agent, rates):
    """RFC 7235: the scheme is case-insensitive. ``bearer <token>`` was 401 "credentials were
    not provided"; read now, it counts against the same limit as ``Bearer <token>`` (a
    throttle keyed on the header's spelling would let each spelling have a budget)."""
    rates(agent_token=2)
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )

    def get(scheme: str):
        return Client().get("/api/v1/agent", headers={"Authorization": f"{scheme} {token}"})

    lower = get("bearer")
    assert lower.status_code == 200, lower.content
    assert lower.json()["agent_id"] == agent.agent_id
    assert get("BEARER").status_code == 200
    _refused(get("Bearer"))


def test_a_limited_agent_does_not_affect_another(site, agent, rates):
    rates(agent_token=2)
    other = Agent.objects.create(
        site=site, agent_id="agent_other", name="Other agent", refund_enabled=True
    )
    limited, fine = (
        issue_agent_token(
            agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
        ),
        issue_agent_token(
            agent=other, actor=site_owner(other.site), second_factor=two_factor.OPERATOR
        ),
    )
    for _ in range(2):
        _agent_get(limited)
    _refused(_agent_get(limited))
    assert _agent_get(fine).status_code == 200
    assert (
        Client()
        .get("/api/v1/refunds/mnd_unknown", headers={"Authorization": f"Bearer {fine}"})
        .status_code
        == 404
    )  # the agent's other reads share its token's budget, not another's


def _post(body: bytes, address: str):
    client = Client(REMOTE_ADDR=address)
    return client.post("/api/v1/mandates", data=body, content_type="application/json")


def test_it_bounds_unsigned_mandate_posts_per_address_before_the_signature_check(
    site, agent, rates, django_assert_num_queries
):
    rates(address=3)
    register_key(agent)
    forged = json.loads(
        signed_body(refund_intent(ORIGINAL), site_id=site.id, agent_id=agent.agent_id)
    )
    forged["envelope"]["signature"] = "A" * 86
    garbage = json.dumps(forged).encode()
    codes = [_post(garbage, "198.51.100.7").json()["error"]["code"] for _ in range(3)]
    assert codes == ["bad_signature"] * 3
    # Over the limit, even a valid mandate is refused before anything reads the database.
    valid = signed_body(refund_intent(ORIGINAL), site_id=site.id, agent_id=agent.agent_id)
    with django_assert_num_queries(0):
        _refused(_post(valid, "198.51.100.7"))
    # Another address has its own budget.
    assert _post(valid, "198.51.100.8").status_code == 201


def test_it_limits_signed_mandates_per_key_and_forged_ones_spend_nothing(site, agent, rates):
    rates(mandate_key=2)
    register_key(agent)
    other = Agent.objects.create(
        site=site, agent_id="agent_other", name="Other agent", refund_enabled=True
    )
    register_key(other)

    def mandate(of: Agent) -> bytes:
        return signed_body(refund_intent(ORIGINAL), site_id=site.id, agent_id=of.agent_id)

    # Forged mandates naming the key, from many addresses: refused, and no budget spent.
    for n in range(5):
        forged = json.loads(mandate(agent))
        forged["envelope"]["signature"] = "B" * 86
        assert _post(json.dumps(forged).encode(), f"192.0.2.{n}").status_code == 401
    first, second = _post(mandate(agent), "192.0.2.50"), _post(mandate(agent), "192.0.2.51")
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["decision"] == "rejected"  # no such original: still an answer
    _refused(_post(mandate(agent), "192.0.2.52"))
    # The other agent's key is untouched.
    assert _post(mandate(other), "192.0.2.50").status_code == 201


def _staff_api(headers: dict[str, str] | None = None, client: Client | None = None):
    return (client or Client()).post(
        "/api/order/ord_missing/refund",
        data={"full": True},
        content_type="application/json",
        headers=headers or {},
    )


def test_it_limits_the_staff_api_per_member_token(members, rates):
    rates(member_token=2)
    limited = issue_member_token(
        membership=members["staff"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    fine = issue_member_token(
        membership=members["owner"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    auth = {"Authorization": f"Bearer {limited}"}
    assert [_staff_api(auth).status_code for _ in range(2)] == [404, 404]
    _refused(_staff_api(auth))
    assert _staff_api({"Authorization": f"Bearer {fine}"}).status_code == 404


def test_it_limits_a_members_session_per_user(members, rates, client_for):
    rates(member_session=2)
    owner, admin = client_for("owner"), client_for("admin")
    assert [owner.get("/api/v1/policy-templates").status_code for _ in range(2)] == [200, 200]
    _refused(owner.get("/api/v1/policy-templates"))
    assert admin.get("/api/v1/policy-templates").status_code == 200


def test_it_serves_everything_under_the_limits(site, agent, members, rates):
    rates(address=50, agent_token=50, mandate_key=50, member_token=50, member_session=50)
    register_key(agent)
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    for _ in range(10):
        assert _agent_get(token).status_code == 200
        body = signed_body(refund_intent(ORIGINAL), site_id=site.id, agent_id=agent.agent_id)
        assert _post(body, "198.51.100.9").status_code == 201


def _production(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SILL_", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"))
    }
    base.update(
        SILL_DATA_DIR=str(tmp_path),
        SILL_SECRET_KEY="k" * 50,
        SILL_ALLOWED_HOSTS="refunds.example.com",
        **env,
    )
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_has_every_limit_on_by_default_and_refuses_a_bad_rate(tmp_path):
    show = "from django.conf import settings; print(settings.SILL_API_RATES)"
    shown = _production(tmp_path, "shell", "--no-imports", "-c", show)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == str(
        {
            "address": "600/minute",
            "mandate_key": "120/minute",
            "agent_token": "600/minute",
            "member_token": "300/minute",
            "member_session": "600/minute",
            "paypal_verify": "120/minute",
            "paypal_verify_address": "30/minute",
        }
    )
    off = _production(tmp_path, "shell", "--no-imports", "-c", show, SILL_RATE_ADDRESS="off")
    assert "'address': None" in off.stdout
    bad = _production(tmp_path, "check", SILL_RATE_ADDRESS="lots")
    assert bad.returncode != 0 and "SILL_RATE_ADDRESS must look like" in bad.stderr


def _racing(attempt, *, threads: int, each: int) -> int:
    """How many of ``threads`` x ``each`` calls of ``attempt()``, started together, passed."""
    connected = threading.Barrier(threads)

    def run(_i: int) -> int:
        cache.get("throttle_warm")  # this thread's cache connection made before the race
        connected.wait(timeout=30)
        return sum(bool(attempt()) for _ in range(each))

    passed = run_concurrently(threads, run)
    assert all(isinstance(n, int) for n in passed), passed
    return sum(passed)


def _budget():
    """sill.api's key budget, its refusal and its throttles' base class (imported once DRF's
    views are: they import sill.api, which imported first would find DRF half-loaded)."""
    from rest_framework import views  # noqa: F401

    from sill.api import RateLimited, _Throttle, spend_mandate_budget

    return spend_mandate_budget, RateLimited, _Throttle


def _spent(ident: str) -> bool:
    spend_mandate_budget, RateLimited, _throttle = _budget()
    try:
        spend_mandate_budget(site_id="site_race", agent_id="agent_race", key_id=ident)
    except RateLimited:
        return False
    return True


def test_requests_racing_each_other_pass_no_more_than_the_limit(rates, throttle_clock):
    # The counters are shared (Redis in CI, each thread with its own connection): requests
    # that read the same count at once must not all pass, nor overwrite one another's counts.
    # (DRF's own window let 96 of these 96 through.) The clock stays mid-window: a window
    # that ended during the test would rightly give a second budget.
    throttle_clock.now = 1_000_030.0
    rates(mandate_key=30)
    assert _racing(lambda: _spent("key_a"), threads=8, each=12) == 30
    # Per hour too, and each key's budget its own.
    with override_settings(SILL_API_RATES={"mandate_key": "25/hour"}):
        assert _racing(lambda: _spent("key_b"), threads=8, each=10) == 25
        assert _spent("key_c")


def test_a_refused_request_waits_for_the_next_window_and_its_full_budget(rates, throttle_clock):
    rates(mandate_key=3)
    throttle_clock.now = 1_000_000.0
    spend_mandate_budget, RateLimited, _throttle = _budget()
    assert [_spent("key_d") for _ in range(5)] == [True, True, True, False, False]
    with pytest.raises(RateLimited) as refused:
        spend_mandate_budget(site_id="site_race", agent_id="agent_race", key_id="key_d")
    # Retry-After: until the window (a clock minute) ends; 1,000,000 s is 40 s into one.
    assert refused.value.retry_after == 20
    # The next window has the full budget, whatever was refused before; so has the one after.
    throttle_clock.advance(20)
    assert [_spent("key_d") for _ in range(4)] == [True, True, True, False]
    throttle_clock.advance(60)
    assert [_spent("key_d") for _ in range(4)] == [True, True, True, False]


def _last_moment(throttle_clock) -> None:
    """The throttles' clock 0.05 s before the clock minute it reads ends."""
    throttle_clock.now = (throttle_clock.now // 60 + 1) * 60 - 0.05


def test_a_minute_ending_between_requests_gives_the_next_one_a_fresh_budget(
    agent, rates, throttle_clock
):
    """Why every test here reads a pinned clock (tests/conftest.py throttle_clock): N a minute
    is N in each clock minute, so "N requests, then one more is refused" holds only within
    one minute. On the real clock a minute sometimes ended between a test's requests (once,
    in a long loaded run); here it ends 0.05 s after the N-th, and the one more is served
    with a budget of its own: a test expecting it refused failed."""
    rates(agent_token=3)
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    _last_moment(throttle_clock)
    assert [_agent_get(token).status_code for _ in range(3)] == [200, 200, 200]
    throttle_clock.advance(0.1)
    assert [_agent_get(token).status_code for _ in range(3)] == [200, 200, 200]
    assert _refused(_agent_get(token)) == 60  # 59.95 s of the new minute left


def test_a_refusal_in_a_windows_last_moment_asks_for_a_whole_second(agent, rates, throttle_clock):
    """0.05 s before the window ends, Retry-After is 1 (whole seconds, rounded up), never 0,
    which would say "again now" (and DRF leaves the header out for a wait of 0): for a view's
    limit and for the mandate key's budget alike."""
    rates(agent_token=1, mandate_key=1)
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    _last_moment(throttle_clock)
    assert _agent_get(token).status_code == 200
    refused = _agent_get(token)
    assert _refused(refused) == 1
    assert refused.json()["error"]["message"].endswith("try again in 1 second.")
    spend_mandate_budget, RateLimited, _throttle = _budget()
    from sill.api import error_response  # after _budget(): DRF's views first

    assert _spent("key_e")
    with pytest.raises(RateLimited) as over:
        spend_mandate_budget(site_id="site_race", agent_id="agent_race", key_id="key_e")
    assert over.value.retry_after == 1
    assert error_response(over.value)["Retry-After"] == "1"
