"""Logging in with an authenticator: the password, then a code (TOTP or a recovery code, each
recovery code once); wrong codes count towards django-axes' lockout like wrong passwords."""

from __future__ import annotations

import pytest
from django.test import Client

from sill.accounts import two_factor
from tests.accounts.two_factor_helpers import code_for, confirmed_device
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

OWNER = "owner@roasters.example"
CODE_STEP = "/login/code/"


def _password(client: Client, nxt: str = "/held/"):
    return client.post("/login/", {"username": OWNER, "password": PASSWORD, "next": nxt})


def test_it_asks_for_a_code_after_the_password(members):
    device = confirmed_device(members["owner"].user)
    client = Client()
    response = _password(client)
    assert response.status_code == 303 and response["Location"] == CODE_STEP
    assert "_auth_user_id" not in client.session  # not logged in by the password alone
    assert client.get("/held/").status_code == 302
    assert "Enter your code" in client.get(CODE_STEP).content.decode()
    response = client.post(CODE_STEP, {"code": code_for(device)})
    assert response.status_code == 303 and response["Location"] == "/held/"
    assert client.get("/held/").status_code == 200
    assert client.session[two_factor.VERIFIED_AT_KEY]


def test_it_logs_in_without_a_code_step_without_an_authenticator(members):
    response = _password(Client())
    assert response.status_code == 302 and response["Location"] == "/held/"


def test_a_recovery_code_logs_in_once(client_for, members):
    user = members["owner"].user
    confirmed_device(user)
    codes = two_factor.regenerate_recovery_codes(user)
    first = Client()
    _password(first)
    assert first.post(CODE_STEP, {"code": codes[3].upper()}).status_code == 303
    assert two_factor.recovery_codes_left(user) == 9
    again = Client()
    _password(again)
    assert again.post(CODE_STEP, {"code": codes[3]}).status_code == 422
    assert "_auth_user_id" not in again.session


def test_it_locks_out_wrong_codes_like_wrong_passwords(members, settings):
    device = confirmed_device(members["owner"].user)
    client = Client()
    _password(client)
    statuses = [
        client.post(CODE_STEP, {"code": f"{n:06d}"}).status_code
        for n in range(settings.SILL_LOGIN_FAILURE_LIMIT + 2)
    ]
    assert statuses[0] == 422 and statuses[-1] == 429
    # Locked: even the right code is not looked at, and the password step is refused too.
    response = client.post(CODE_STEP, {"code": code_for(device)})
    assert response.status_code == 429 and "Retry-After" in response
    assert "_auth_user_id" not in client.session
    assert _password(Client()).status_code == 429


def test_the_code_step_without_a_password_goes_back_to_the_login(members):
    response = Client().post(CODE_STEP, {"code": "123456"})
    assert response.status_code == 303 and response["Location"] == "/login/"


def test_a_head_on_the_code_step_is_a_look_not_a_wrong_code(members, settings):
    """HEAD answers as GET does (it was 405), and never reaches the code check: were it taken
    for an empty code, a monitor or a prefetch would lock the account out."""
    device = confirmed_device(members["owner"].user)
    client = Client()
    _password(client)
    for _ in range(settings.SILL_LOGIN_FAILURE_LIMIT + 2):
        assert client.head(CODE_STEP).status_code == 200
    response = client.post(CODE_STEP, {"code": code_for(device)})
    assert response.status_code == 303 and response["Location"] == "/held/"
