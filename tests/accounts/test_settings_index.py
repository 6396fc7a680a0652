"""Settings index: who may open it, the pages it links, the site's facts and the nav entry."""

from __future__ import annotations

import pytest
from django.urls import NoReverseMatch, reverse

pytestmark = pytest.mark.django_db
URL = "/settings/"


def test_it_has_the_stable_url():
    assert reverse("settings:index") == URL
    assert reverse("settings:members") == "/settings/members/"


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 200), ("admin", 200), ("reviewer", 403), ("staff", 403), ("anonymous", 302)],
)
def test_it_is_for_owners_and_admins(client_for, persona, expected):
    response = client_for(persona).get(URL)
    assert response.status_code == expected
    if persona == "anonymous":
        assert response["Location"].startswith("/login/")


def test_it_links_the_settings_pages_that_exist(client_for):
    body = client_for("admin").get(URL).content.decode()
    assert 'href="/settings/reasons/"' in body and "Refund reasons" in body
    assert 'href="/settings/members/"' in body
    # Agents & keys and Rails are built separately: linked once their URLs resolve.
    for name, title in (("settings:agents", "Agents &amp; keys"), ("settings:rails", "Rails")):
        try:
            url = reverse(name)
        except NoReverseMatch:
            assert f'id="settings-{name.replace(":", "")}"' not in body
        else:
            assert f'href="{url}"' in body and title in body


def test_it_shows_the_sites_facts_read_only(client_for, site):
    site.timezone = "Europe/Amsterdam"
    site.default_currency = "EUR"
    site.save()
    body = client_for("owner").get(URL).content.decode()
    for text in ("Test Roasters", "roasters.example", "EUR", "Europe/Amsterdam"):
        assert text in body
    assert 'name="timezone"' not in body and '<form method="post" action="/settings' not in body


def test_an_outsider_sees_their_own_site(client_for):
    body = client_for("outsider").get(URL).content.decode()
    assert "Other Shop" in body and "roasters.example" not in body


@pytest.mark.parametrize(("persona", "shown"), [("owner", True), ("admin", True), ("staff", False)])
def test_the_nav_links_settings_for_owners_and_admins(client_for, persona, shown):
    body = client_for(persona).get("/").content.decode()
    assert ('href="/settings/"' in body) is shown
    assert ">Reasons<" not in body


@pytest.mark.parametrize("path", ["/settings/", "/settings/members/", "/settings/reasons/"])
def test_the_settings_nav_entry_is_current_on_every_settings_page(client_for, path):
    body = client_for("owner").get(path).content.decode()
    assert '<a href="/settings/" aria-current="page">Settings</a>' in body
