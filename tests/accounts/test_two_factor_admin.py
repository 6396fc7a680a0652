"""With SILL_ADMIN=1 and SILL_ADMIN_TWO_FACTOR, the Django admin lets in only a superuser whose
session entered a code: at its login form, or on Settings → Your account's verify page."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.accounts.two_factor_helpers import code_for, confirmed_device
from tests.admin_mount import admin_mounted
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

ROOT = "root@sill.example"


@pytest.fixture
def mounted(settings):
    settings.SILL_ADMIN_TWO_FACTOR = True
    with admin_mounted():
        yield


@pytest.fixture
def root(db):
    return get_user_model().objects.create_user(
        ROOT, email=ROOT, password=PASSWORD, is_staff=True, is_superuser=True
    )


def _login(client: Client, **extra: str):
    form = {"username": ROOT, "password": PASSWORD, "next": "/django-admin/", **extra}
    return client.post("/django-admin/login/", form)


def test_it_refuses_a_superuser_without_a_code(mounted, root):
    confirmed_device(root)
    client = Client()
    response = _login(client)
    assert response.status_code == 200
    assert "Enter a code from your authenticator" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_it_refuses_a_superuser_without_an_authenticator(mounted, root):
    response = _login(Client(), otp_token="123456")
    assert response.status_code == 200 and "a superuser needs one" in response.content.decode()


def test_it_refuses_a_logged_in_but_unverified_superuser_on_every_page(mounted, root):
    client = Client()
    client.force_login(root)
    response = client.get("/django-admin/")
    assert response.status_code == 302 and "/django-admin/login/" in response["Location"]


def test_it_lets_in_a_superuser_with_a_code(mounted, root):
    device = confirmed_device(root)
    client = Client()
    response = _login(client, otp_token=code_for(device))
    assert response.status_code == 302
    page = client.get("/django-admin/")
    assert page.status_code == 200 and "Sill administration" in page.content.decode()
