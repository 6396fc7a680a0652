"""The Django admin: not there unless SILL_ADMIN=1, then superusers only; its rail form holds
credentials to the rails page's checks."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sill.rails.models import RailAccount
from tests.admin_mount import admin_mounted
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

ADD_RAIL = "/django-admin/rails/railaccount/add/"


@pytest.fixture
def mounted():
    with admin_mounted():
        yield


def _user(email: str, *, staff: bool = False, superuser: bool = False):
    return get_user_model().objects.create_user(
        email, email=email, password=PASSWORD, is_staff=staff or superuser, is_superuser=superuser
    )


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(_user("root@sill.example", superuser=True))
    return client


@pytest.mark.parametrize("path", ["/django-admin/", "/django-admin/login/", ADD_RAIL])
def test_it_is_not_mounted_by_default(db, path):
    superuser = Client()
    superuser.force_login(_user("root@sill.example", superuser=True))
    assert superuser.get(path).status_code == 404
    assert Client().get(path).status_code == 404


def test_it_lets_a_superuser_in(mounted):
    _user("root@sill.example", superuser=True)
    client = Client()
    login = {"username": "root@sill.example", "password": PASSWORD, "next": "/django-admin/"}
    assert client.post("/django-admin/login/", login).status_code == 302
    page = client.get("/django-admin/")
    assert page.status_code == 200 and "Sill administration" in page.content.decode()


def test_it_refuses_staff_without_superuser_at_the_login(mounted):
    _user("staffer@sill.example", staff=True)
    client = Client()
    response = client.post(
        "/django-admin/login/", {"username": "staffer@sill.example", "password": PASSWORD}
    )
    assert response.status_code == 200
    assert "Please enter the correct" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("persona", ["staff_user", "owner", "anonymous"])
def test_it_refuses_everyone_but_superusers_on_every_page(mounted, members, persona):
    client = Client()
    if persona == "staff_user":
        client.force_login(_user("staffer@sill.example", staff=True))
    elif persona == "owner":
        client.force_login(members["owner"].user)
    for path in ("/django-admin/", ADD_RAIL, "/django-admin/rails/railaccount/"):
        response = client.get(path)
        assert response.status_code == 302 and "/django-admin/login/" in response["Location"]


def _rail_form(site, **fields: str) -> dict[str, str]:
    form = {
        "site": site.pk,
        "rail": "stripe",
        "mode": "test",
        "connected_account": "",
        "api_base": "",
        "config": "{}",
        "new_secret": "",
    }
    form.update(fields)
    return form


def _errors(response) -> str:
    assert response.status_code == 200, "the form was accepted"
    return response.content.decode()


def test_the_rail_form_refuses_an_api_base_with_debug_off(mounted, root, site):
    response = root.post(ADD_RAIL, _rail_form(site, api_base="http://169.254.169.254/latest"))
    assert "can only be overridden when DEBUG is on" in _errors(response)
    assert not RailAccount.objects.exists()


def test_the_rail_form_takes_an_api_base_with_debug_on_like_the_rails_page(
    mounted, root, site, settings
):
    settings.DEBUG = True
    form = _rail_form(site, api_base="http://127.0.0.1:8420/", new_secret="sk_test_" + "a" * 24)
    assert root.post(ADD_RAIL, form).status_code == 302
    account = RailAccount.objects.get(site=site, rail="stripe")
    assert account.api_base == "http://127.0.0.1:8420"  # as the page stores it
    assert account.get_secret() == "sk_test_" + "a" * 24


def test_the_rail_form_leaves_a_stored_api_base_alone_with_debug_off(mounted, root, site):
    account = RailAccount.objects.create(site=site, rail="stripe", api_base="http://127.0.0.1:8420")
    account.set_secret("sk_test_" + "b" * 24)
    account.save()
    change = f"/django-admin/rails/railaccount/{account.pk}/change/"
    form = _rail_form(site, api_base="http://127.0.0.1:8420", enabled="on")
    assert root.post(change, form).status_code == 302
    account.refresh_from_db()
    assert account.enabled and account.api_base == "http://127.0.0.1:8420"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"new_secret": "pk_test_" + "a" * 24}, "That is not a Stripe secret key"),
        ({"new_secret": "sk_test_bad key!"}, "unexpected characters"),
        ({"new_secret": "sk_live_" + "a" * 24, "mode": "live"}, "Live mode is switched off"),
        ({"new_secret": "sk_live_" + "a" * 24}, "The key is a live key"),
        ({"connected_account": "acct with spaces"}, "A connected account id looks like"),
        ({"enabled": "on"}, "Save a Stripe secret key before switching"),
        ({"rail": "shopify", "new_secret": "shpat_" + "a" * 32}, "Connect this rail on Settings"),
        ({"rail": "shopify", "enabled": "on"}, "Connect this rail on Settings → Rails with"),
        ({"rail": "paypal", "enabled": "on"}, "Connect this rail on Settings → Rails with"),
        ({"rail": "paypal", "new_secret": "client:secret"}, "Connect this rail on Settings"),
    ],
)
def test_the_rail_form_holds_credentials_to_the_rails_page_checks(
    mounted, root, site, fields, message
):
    assert message in _errors(root.post(ADD_RAIL, _rail_form(site, **fields)))
    assert not RailAccount.objects.exists()


def test_the_rail_form_takes_a_live_key_where_live_is_allowed(mounted, root, site, settings):
    settings.SILL_ALLOW_LIVE = True
    form = _rail_form(site, new_secret="sk_live_" + "c" * 24, mode="live", enabled="on")
    assert root.post(ADD_RAIL, form).status_code == 302
    assert RailAccount.objects.get(site=site, rail="stripe").mode == "live"
