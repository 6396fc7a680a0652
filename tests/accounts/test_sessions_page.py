"""Settings → Your account: the member's sessions (device, address, last seen in the site's
zone, this device), logging one out or all of them, who may open it, and its query count."""

from __future__ import annotations

import zoneinfo
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from qsessions.models import Session

from sill.accounts.sessions import public_id
from tests.accounts.test_sessions import UA, sign_in, signed_in
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
URL = "/settings/account/"
LOGOUT = "/settings/account/logout/"
CHROME = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0.0.0 Safari/537.36"
)


def key_of(client: Client) -> str:
    return client.session.session_key


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 200), ("admin", 200), ("reviewer", 200), ("staff", 200), ("anonymous", 302)],
)
def test_every_member_may_open_their_own_account(client_for, persona, expected):
    response = client_for(persona).get(URL)
    assert response.status_code == expected
    if persona == "anonymous":
        assert response["Location"].startswith("/login/?next=/settings/account/")


def test_a_signed_in_user_without_a_site_is_refused(db):
    user = get_user_model().objects.create_user("lonely@example.com", password=PASSWORD)
    client = Client()
    client.force_login(user)
    assert client.get(URL).status_code == 403
    assert client.post(LOGOUT, {"session": "all"}).status_code == 403


def test_it_lists_my_sessions_and_marks_this_device(members, site):
    site.timezone = "Asia/Tokyo"
    site.save()
    here = sign_in("staff@roasters.example", CHROME)
    phone = sign_in("staff@roasters.example", UA)
    sign_in("admin@roasters.example")  # someone else's session: not listed
    seen = timezone.now() - timedelta(minutes=42)
    Session.objects.filter(session_key=key_of(phone)).update(updated_at=seen)
    body = here.get(URL).content.decode()
    assert body.count('<tr id="session-') == 2
    assert "Chrome 120 on Mac OS X" in body and "Firefox 128 on Linux" in body
    assert "This device" in body and body.index("Chrome 120") < body.index("This device")
    assert "127.0.0.1" in body and "Asia/Tokyo" in body
    tokyo = seen.astimezone(zoneinfo.ZoneInfo("Asia/Tokyo"))
    # |when: the instant in UTC for machines, the site's zone with its abbreviation for people.
    assert f'datetime="{seen.astimezone(zoneinfo.ZoneInfo("UTC")):%Y-%m-%dT%H:%M:%S}' in body
    assert f"{tokyo:%b} {tokyo.day}, {tokyo.year}, {tokyo:%H:%M:%S} JST" in body
    assert "42 min ago" in body
    # A session key is a password: pages name sessions by an opaque id only.
    assert key_of(here) not in body and key_of(phone) not in body
    assert f'value="{public_id(key_of(phone))}"' in body


def test_logging_out_another_session_ends_only_that_one(members):
    here, phone = sign_in("staff@roasters.example"), sign_in("staff@roasters.example")
    response = here.post(LOGOUT, {"session": public_id(key_of(phone))})
    assert response.status_code == 303 and response["Location"] == URL
    assert signed_in(here) and not signed_in(phone)


def test_logging_out_this_session_signs_me_out(members):
    here, phone = sign_in("staff@roasters.example"), sign_in("staff@roasters.example")
    response = here.post(LOGOUT, {"session": public_id(key_of(here))})
    assert response.status_code == 303 and response["Location"] == "/login/"
    assert not signed_in(here) and signed_in(phone)


def test_log_out_everywhere_ends_every_session_this_one_included(members):
    here, phone = sign_in("staff@roasters.example"), sign_in("staff@roasters.example")
    other = sign_in("admin@roasters.example")
    response = here.post(LOGOUT, {"session": "all"})
    assert response.status_code == 303 and response["Location"] == "/login/"
    assert not signed_in(here) and not signed_in(phone)
    assert not Session.objects.filter(user__username="staff@roasters.example").exists()
    assert signed_in(other)


def test_another_users_session_is_not_found_and_stays(members):
    mine, theirs = sign_in("staff@roasters.example"), sign_in("owner@other.example")
    response = mine.post(LOGOUT, {"session": public_id(key_of(theirs))})
    assert response.status_code == 404
    assert signed_in(theirs)


@pytest.mark.parametrize("data", [{}, {"session": ""}, {"session": "nonsense"}])
def test_bad_input_logs_nothing_out(members, data):
    here, phone = sign_in("staff@roasters.example"), sign_in("staff@roasters.example")
    response = here.post(LOGOUT, data)
    assert response.status_code in (404, 422)
    assert signed_in(here) and signed_in(phone)


def test_actions_are_post_only_and_need_a_csrf_token(members):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["staff"].user)
    assert client.get(LOGOUT).status_code == 405
    assert client.get("/settings/account/password/").status_code == 405
    assert client.post(LOGOUT, {"session": "all"}).status_code == 403
    assert signed_in(client)


def test_the_page_is_linked_from_the_top_bar_and_the_settings_index(client_for):
    assert f'href="{URL}"' in client_for("reviewer").get("/").content.decode()
    assert f'href="{URL}"' in client_for("owner").get("/settings/").content.decode()


def _page_queries(client: Client) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(URL)
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def test_the_page_runs_a_constant_number_of_queries(members):
    here = sign_in("staff@roasters.example")
    few, _ = _page_queries(here)
    for _ in range(8):
        sign_in("staff@roasters.example", CHROME)
    many, body = _page_queries(here)
    assert body.count('<tr id="session-') == 9
    assert many == few <= 8, (few, many)
