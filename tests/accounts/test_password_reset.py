"""Password reset by email: the same answer for every address, a link from the configured base
URL that works once and expires, every session ended after a reset, and a rate limit."""

from __future__ import annotations

import logging
import re
import threading
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from qsessions.models import Session

from audit.models import AuditRecord
from sill.accounts.services import add_member
from tests.accounts.test_sessions import member_changes
from tests.conftest import PASSWORD
from tests.threads import run_concurrently

pytestmark = pytest.mark.django_db
RESET = "/password/reset/"
NEW = "brand-new-passphrase-17"


@pytest.fixture(autouse=True)
def own_counters(settings):
    """Rate-limit counters of this test only."""
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
        for name, config in settings.CACHES.items()
    }


def reset_link(message) -> str:
    (url,) = re.findall(r"https?://\S+/password/reset/\S+/\S+/", message.body)
    return url


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def test_the_login_page_offers_a_reset(client):
    assert 'href="/password/reset/">Forgot password?</a>' in client.get("/login/").content.decode()


def test_the_answer_is_the_same_whether_or_not_the_address_exists(members, mailoutbox):
    known = Client().post(RESET, {"email": "Staff@Roasters.example"})
    unknown = Client().post(RESET, {"email": "nobody@roasters.example"})
    assert known.status_code == unknown.status_code == 302
    assert known["Location"] == unknown["Location"] == "/password/reset/sent/"
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["staff@roasters.example"]
    page = Client().get("/password/reset/sent/").content.decode()
    assert "If that address has a Sill account" in page and "2 hours" in page


def test_the_link_uses_the_base_url_and_a_reset_ends_every_session(members, mailoutbox, settings):
    settings.SILL_BASE_URL = "https://sill.roasters.example"
    settings.ALLOWED_HOSTS = ["*"]
    user = members["staff"].user
    signed_in = Client()
    signed_in.post("/login/", {"username": "staff@roasters.example", "password": PASSWORD})
    assert Session.objects.filter(user=user).count() == 1

    Client().post(RESET, {"email": "staff@roasters.example"}, HTTP_HOST="evil.example")
    (sent,) = mailoutbox
    url = reset_link(sent)
    assert url.startswith("https://sill.roasters.example/password/reset/")
    assert "evil.example" not in sent.body and sent.subject == "Reset your Sill password"

    browser = Client()
    form = browser.get(path_of(url), follow=True)
    assert "Choose a new password" in form.content.decode()
    set_url = form.redirect_chain[-1][0]
    weak = browser.post(set_url, {"new_password1": "short", "new_password2": "short"})
    assert "This password is too short." in weak.content.decode()
    done = browser.post(set_url, {"new_password1": NEW, "new_password2": NEW})
    assert done.status_code == 302 and done["Location"] == "/password/reset/done/"
    user.refresh_from_db()
    assert user.check_password(NEW)
    # Every session of the account ended; the reset itself signs nobody in.
    assert not Session.objects.filter(user=user).exists()
    assert signed_in.get("/settings/account/").status_code == 302
    assert "_auth_user_id" not in browser.session

    # Signed in the log of the site the account belongs to, by the account (the email proved
    # it), without the password.
    assert member_changes(members["staff"].site, "password_reset") == [
        {"action": "password_reset", "member": "staff@roasters.example", "role": "staff",
         "actor": "staff@roasters.example", "actor_name": "staff@roasters.example"}
    ]  # fmt: skip
    assert NEW not in "".join(AuditRecord.objects.values_list("payload", flat=True))

    # The link worked once.
    again = Client().get(path_of(url), follow=True).content.decode()
    assert "This reset link does not work" in again


def test_an_expired_or_tampered_link_changes_nothing(members, mailoutbox, settings):
    Client().post(RESET, {"email": "staff@roasters.example"})
    path = path_of(reset_link(mailoutbox[0]))
    tampered = path[:-2] + ("a" if path[-2] != "a" else "b") + "/"
    assert "This reset link does not work" in Client().get(tampered, follow=True).content.decode()
    with time_machine.travel(
        timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT + 5)
    ):
        body = Client().get(path, follow=True).content.decode()
        assert "This reset link does not work" in body
    user = get_user_model().objects.get(username="staff@roasters.example")
    assert user.check_password(PASSWORD)


def test_an_account_without_a_password_yet_can_set_one(site, mailoutbox):
    add_member(site=site, email="nopass@roasters.example", role="staff")
    Client().post(RESET, {"email": "nopass@roasters.example"})
    (sent,) = mailoutbox
    browser = Client()
    form = browser.get(path_of(reset_link(sent)), follow=True)
    browser.post(form.redirect_chain[-1][0], {"new_password1": NEW, "new_password2": NEW})
    assert get_user_model().objects.get(username="nopass@roasters.example").check_password(NEW)


def test_requests_are_rate_limited_per_address_and_per_mailbox(members, mailoutbox, settings):
    settings.SILL_PASSWORD_RESET_PER_HOUR = 2
    settings.SILL_PASSWORD_RESET_ADDRESS_PER_HOUR = 3
    client = Client()
    assert client.post(RESET, {"email": "nobody@roasters.example"}).status_code == 302
    for _ in range(2):
        assert client.post(RESET, {"email": "staff@roasters.example"}).status_code == 302
    assert len(mailoutbox) == 2
    refused = client.post(RESET, {"email": "staff@roasters.example"})
    assert refused.status_code == 429 and 0 < int(refused["Retry-After"]) <= 3600
    assert "Too many reset requests" in refused.content.decode()
    # Another address (client) asking for the same mailbox gets the usual answer, no email.
    other = Client(REMOTE_ADDR="10.0.0.7")
    assert other.post(RESET, {"email": "staff@roasters.example"}).status_code == 302
    assert len(mailoutbox) == 2


def test_an_account_whose_email_field_is_empty_is_found_by_its_login_name(site, mailoutbox):
    membership = add_member(site=site, email="legacy@roasters.example", role="staff")
    get_user_model().objects.filter(pk=membership.user_id).update(email="")
    Client().post(RESET, {"email": "LEGACY@roasters.example"})
    (sent,) = mailoutbox
    assert sent.to == ["legacy@roasters.example"]
    assert get_user_model().objects.get(pk=membership.user_id).email == ""


def test_requests_racing_at_the_start_of_a_window_are_all_counted():
    # The first requests of a window race to create its counter: each must count once (the
    # counters are shared, Redis in CI; a set() of 1 by each of them lost the others').
    from django.core.cache import cache

    from sill.accounts.views_password import _count

    threads, each = 8, 5
    connected = threading.Barrier(threads)

    def run(_i: int) -> list[int]:
        cache.get("sill:pwreset:other")  # this thread's cache connection made before the race
        connected.wait(timeout=30)
        return [_count("sill:pwreset:race")[0] for _ in range(each)]

    results = run_concurrently(threads, run)
    assert all(isinstance(counted, list) for counted in results), results
    counts = [n for counted in results for n in counted]
    assert sorted(counts) == list(range(1, threads * each + 1))


def test_a_refused_request_on_a_reset_link_leaves_no_usable_link_in_the_log(
    members, mailoutbox, caplog
):
    # Django logs the path of every 4xx answer (here a post without the CSRF cookie), and a
    # reset link's path holds its token: whoever read the log could set the account's password
    # while the link was unused.
    Client().post(RESET, {"email": "owner@roasters.example"})
    path = path_of(reset_link(mailoutbox[0]))
    uid, token = path.strip("/").rsplit("/", 2)[-2:]
    with caplog.at_level(logging.INFO):
        assert Client(enforce_csrf_checks=True).post(path).status_code == 403
    logged = [record.getMessage() for record in caplog.records]
    assert not [line for line in logged if token in line], logged
    # Still logged, as every refusal is: only the token is left out.
    assert len([line for line in logged if f"/password/reset/{uid}/<token>/" in line]) == 1
    # The link was live all along: the refusals spent nothing.
    form = Client().get(path, follow=True).content.decode()
    assert "Choose a new password" in form
