"""Failed logins are counted per account and address (django-axes): an attack on the owner's
account is locked out, the owner still logs in from the owner's own address, the Django
admin's login too, and the lock ends after its cool-down."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from tests.admin_mount import admin_mounted
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

OWNER = "owner@roasters.example"
ATTACKER = "203.0.113.66"
OWNERS_ADDRESS = "198.51.100.10"


def _try(client: Client, password: str, *, username: str = OWNER, path: str = "/login/"):
    return client.post(path, {"username": username, "password": password})


def _hammer(client: Client, times: int, **kwargs) -> list[int]:
    return [_try(client, f"guess-{n}", **kwargs).status_code for n in range(times)]


def test_it_throttles_200_wrong_passwords_on_one_account(members):
    attacker = Client(REMOTE_ADDR=ATTACKER)
    statuses = _hammer(attacker, 200)
    limit = settings.SILL_LOGIN_FAILURE_LIMIT
    # The form answers until the limit; the try that reaches it and every later one is locked.
    assert statuses[: limit - 1] == [200] * (limit - 1)
    assert statuses[limit - 1 :] == [429] * (200 - limit + 1)
    # Even the right password is refused from there: a lucky guess learns nothing.
    locked = _try(attacker, PASSWORD)
    assert locked.status_code == 429
    cool_off = settings.SILL_LOGIN_COOLOFF_MINUTES * 60
    assert cool_off - 60 < int(locked["Retry-After"]) <= cool_off
    page = locked.content.decode()
    assert "Too many login attempts" in page
    assert f"Try again in {settings.SILL_LOGIN_COOLOFF_MINUTES} minutes" in page
    assert "_auth_user_id" not in attacker.session


def test_it_lets_the_owner_in_from_their_own_address_during_the_attack(members):
    attacker = Client(REMOTE_ADDR=ATTACKER)
    owner = Client(REMOTE_ADDR=OWNERS_ADDRESS)
    assert 429 in _hammer(attacker, 30)
    response = _try(owner, PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/"
    assert owner.get("/").status_code == 200
    # The attack goes on, and stays locked.
    assert set(_hammer(attacker, 30)) == {429}


def test_it_lets_the_owner_mistype_a_few_times_from_their_own_address(members):
    owner = Client(REMOTE_ADDR=OWNERS_ADDRESS)
    assert _hammer(owner, settings.SILL_LOGIN_FAILURE_LIMIT - 1) == [200] * (
        settings.SILL_LOGIN_FAILURE_LIMIT - 1
    )
    assert _try(owner, PASSWORD).status_code == 302
    # A success clears the count of that account from that address.
    assert not AccessAttempt.objects.filter(ip_address=OWNERS_ADDRESS).exists()


def test_it_counts_case_and_spaces_variants_as_one_account(members):
    attacker = Client(REMOTE_ADDR=ATTACKER)
    variants = [OWNER.upper(), f" {OWNER} ", "Owner@Roasters.Example", OWNER]
    statuses = [
        _try(attacker, "nope", username=variants[n % len(variants)]).status_code
        for n in range(settings.SILL_LOGIN_FAILURE_LIMIT)
    ]
    assert statuses[-1] == 429


def test_it_locks_an_address_that_sprays_many_accounts(members):
    sprayer = Client(REMOTE_ADDR=ATTACKER)
    statuses = [
        _try(sprayer, "Winter2026!", username=f"user{n}@roasters.example").status_code
        for n in range(settings.SILL_LOGIN_ADDRESS_FAILURE_LIMIT + 1)
    ]
    assert statuses[: settings.SILL_LOGIN_ADDRESS_FAILURE_LIMIT - 1] == [200] * (
        settings.SILL_LOGIN_ADDRESS_FAILURE_LIMIT - 1
    )
    assert statuses[-1] == 429
    # That address is locked for any account, the owner's included; the owner's own is not.
    assert _try(sprayer, PASSWORD).status_code == 429
    assert _try(Client(REMOTE_ADDR=OWNERS_ADDRESS), PASSWORD).status_code == 302


def test_it_ends_the_cool_down(members):
    attacker = Client(REMOTE_ADDR=ATTACKER)
    assert _hammer(attacker, 10)[-1] == 429
    start = timezone.now()  # just after the failure that locked
    cool_off = timedelta(minutes=settings.SILL_LOGIN_COOLOFF_MINUTES)
    with time_machine.travel(start + cool_off - timedelta(minutes=2)):
        locked = _try(attacker, PASSWORD)
        assert locked.status_code == 429  # still locked, with about two minutes to go
        assert 60 < int(locked["Retry-After"]) <= 120
        assert "Try again in 2 minutes" in locked.content.decode()
    with time_machine.travel(start + cool_off + timedelta(minutes=1)):
        response = _try(attacker, PASSWORD)
        assert response.status_code == 302 and response["Location"] == "/"


def test_tries_while_locked_are_not_recorded(members):
    # A flood must not grow axes' row (it appends every recorded try) nor write per request.
    attacker = Client(REMOTE_ADDR=ATTACKER)
    _hammer(attacker, 50)
    attempt = AccessAttempt.objects.get(ip_address=ATTACKER)
    assert attempt.failures_since_start == settings.SILL_LOGIN_FAILURE_LIMIT


def test_it_ignores_x_forwarded_for_unless_the_proxy_is_trusted(members, settings):
    statuses = [
        Client(REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
        .post("/login/", {"username": OWNER, "password": "nope"})
        .status_code
        for n in range(settings.SILL_LOGIN_FAILURE_LIMIT)
    ]
    assert statuses[-1] == 429  # a made-up header is not a new address


def test_behind_a_trusted_proxy_it_counts_the_address_the_proxy_saw(members, settings):
    settings.SILL_TRUST_PROXY = True
    proxy = "10.0.0.5"

    def via_proxy(client_address: str, password: str) -> int:
        # The client wrote its own "1.2.3.4"; the proxy appended the address it saw.
        client = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=f"1.2.3.4, {client_address}")
        return _try(client, password).status_code

    assert [via_proxy(ATTACKER, "nope") for _ in range(10)][-1] == 429
    assert via_proxy(OWNERS_ADDRESS, PASSWORD) == 302
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {ATTACKER}


@pytest.fixture
def superuser(db):
    return get_user_model().objects.create_superuser(
        "root@sill.example", email="root@sill.example", password=PASSWORD
    )


def test_it_throttles_the_django_admin_login_too(superuser):
    with admin_mounted():
        attacker = Client(REMOTE_ADDR=ATTACKER)
        statuses = _hammer(attacker, 200, username=superuser.username, path="/django-admin/login/")
        assert statuses[0] == 200 and set(statuses[-190:]) == {429}
        locked = _try(attacker, PASSWORD, username=superuser.username, path="/django-admin/login/")
        assert locked.status_code == 429 and "Too many login attempts" in locked.content.decode()
        # The operator, from their own address, still gets in.
        operator = Client(REMOTE_ADDR=OWNERS_ADDRESS)
        response = _try(
            operator, PASSWORD, username=superuser.username, path="/django-admin/login/"
        )
        assert response.status_code == 302
        assert operator.get("/django-admin/").status_code == 200


def test_the_admin_and_the_product_login_share_the_count(superuser):
    with admin_mounted():
        attacker = Client(REMOTE_ADDR=ATTACKER)
        half = settings.SILL_LOGIN_FAILURE_LIMIT // 2 + 1
        _hammer(attacker, half, username=superuser.username)
        statuses = _hammer(attacker, half, username=superuser.username, path="/django-admin/login/")
        assert statuses[-1] == 429


def test_an_attacker_rotating_through_its_ipv6_64_is_one_address(members):
    """An IPv6 subscriber is given a whole /64 and may send from any of its 2**64 addresses:
    counted one by one, every try came from a fresh address and nothing was ever locked. The
    /64 is the client; the owner, in a /64 of their own, still logs in."""
    statuses = [
        _try(Client(REMOTE_ADDR=f"2001:db8:66:1::{n + 1:x}"), f"guess-{n}").status_code
        for n in range(settings.SILL_LOGIN_FAILURE_LIMIT + 5)
    ]
    limit = settings.SILL_LOGIN_FAILURE_LIMIT
    assert statuses[: limit - 1] == [200] * (limit - 1)
    assert set(statuses[limit - 1 :]) == {429}
    assert _try(Client(REMOTE_ADDR="2001:db8:66:1:ffff::9"), PASSWORD).status_code == 429
    assert _try(Client(REMOTE_ADDR="2001:db8:10:2::1"), PASSWORD).status_code == 302
