"""The page shell: branded 403/404/500 pages, skip link, favicon, /favicon.ico, _copy_id.html."""

from __future__ import annotations

import json

import pytest
from django.template import loader
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_it_shows_a_403_with_the_nav_and_the_members_role(client_for):
    response = client_for("reviewer").get(reverse("settings:index"))
    assert response.status_code == 403
    body = response.content.decode()
    assert '<nav class="topnav" aria-label="Main">' in body
    assert '<main class="container" id="content"' in body
    assert "<h1" in body and "You can't open this page" in body
    assert "Reviewer" in body and "Test Roasters" in body
    assert 'href="/"' in body  # the way back: the dashboard


def test_it_shows_a_404_with_the_nav_for_a_member(client_for):
    response = client_for("owner").get("/no-such-page/")
    assert response.status_code == 404
    body = response.content.decode()
    assert '<nav class="topnav" aria-label="Main">' in body
    assert "We couldn't find that page" in body
    assert 'aria-controls="site-menu"' in body  # the phone menu button


def test_it_shows_a_404_with_a_way_to_log_in_when_signed_out(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    body = response.content.decode()
    assert "We couldn't find that page" in body
    assert 'href="/login/"' in body


def test_the_500_page_renders_with_no_context_at_all():
    html = loader.get_template("500.html").render()  # as django.views.defaults.server_error does
    assert "<main" in html and "<h1" in html and "Something went wrong" in html
    assert "favicon.svg" in html


def test_every_page_has_a_skip_link_and_a_favicon(client_for):
    body = client_for("owner").get(reverse("settings:account")).content.decode()
    assert '<a class="skip-link" href="#content">Skip to content</a>' in body
    assert 'rel="icon" href="/static/favicon.svg"' in body
    assert 'id="content"' in body


def test_favicon_ico_redirects_to_the_svg(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/favicon.svg"


def test_an_htmx_request_gets_the_403_without_a_second_nav(client_for):
    response = client_for("reviewer").get(reverse("settings:index"), HTTP_HX_REQUEST="true")
    assert response.status_code == 403
    body = response.content.decode()
    assert "You can't open this page" in body
    assert "<nav" not in body and "<html" not in body


def test_the_copy_id_include_shortens_and_keeps_the_full_id():
    from django.template import engines

    render = (
        engines["django"]
        .from_string('{% include "_copy_id.html" with value=v label="Refund id" %}')
        .render
    )
    html = render({"v": "rf_01M8S5R5TNA06CN171H8FHK06X"})
    assert "…FHK06X" in html and 'data-copy="rf_01M8S5R5TNA06CN171H8FHK06X"' in html
    assert 'aria-label="Copy refund id"' in html and 'role="status"' in html
    assert render({"v": ""}).strip() == "—"


@pytest.mark.parametrize(
    ("path", "accept"),
    [
        ("/api/v1/mandates", "*/*"),
        ("/webhooks/stripe/01JDEMOSITE00000000000MAIN", ""),
        ("/slack/interactions", "text/html"),
        ("/orders/", "application/json"),
    ],
)
def test_a_program_gets_its_500_in_the_error_shape(path, accept):
    """What Django answers when a view raises (the broker down under a Slack click, say): a
    program reads the error shape and the code ``server_error``, not the HTML page."""
    from django.test import RequestFactory
    from django.urls import get_resolver

    handler = get_resolver().resolve_error_handler(500)
    response = handler(RequestFactory().post(path, HTTP_ACCEPT=accept))
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    error = json.loads(response.content)["error"]
    assert error["code"] == "server_error"
    assert "never acted on twice" in error["message"]


def test_a_browser_gets_the_500_page():
    from django.test import RequestFactory
    from django.urls import get_resolver

    handler = get_resolver().resolve_error_handler(500)
    response = handler(RequestFactory().get("/orders/", HTTP_ACCEPT="text/html"))
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    assert "Something went wrong" in response.content.decode()
