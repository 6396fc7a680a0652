"""A browser's form over Django's limits (``DATA_UPLOAD_MAX_MEMORY_SIZE``,
``DATA_UPLOAD_MAX_NUMBER_FIELDS``) gets a page in the site's layout, like the other error
pages, saying the form was refused and nothing was changed: 413 when too large, 400 for too
many fields. Nothing is written. (A JSON client and the machine endpoints get the JSON error
shape: tests/test_bad_input_smoke.py.)"""

from __future__ import annotations

import pytest

from audit.models import AuditRecord
from refunds.models import Refund, RefundReason
from sill.rails.models import MockLedgerEntry

pytestmark = pytest.mark.django_db


def _written() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (Refund, RefundReason, MockLedgerEntry, AuditRecord))


def _refund_form(leaf, **extra: str) -> dict[str, str]:
    # A full refund the form accepts as it is (the control below makes it).
    return {
        "kind": "full",
        "reason": str(leaf.pk),
        "note": "",
        "expected_remaining_minor": "",
        "expected_refund_count": "",
        "confirmed": "1",
        **extra,
    }


def _assert_the_page(response, *, status: int, label: str, title: str) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert body.startswith("<!doctype html>")
    assert '<nav class="topnav" aria-label="Main">' in body
    assert '<main class="container" id="content"' in body
    assert '<section class="error-page"' in body
    assert f'<p class="error-code">{status} · {label}</p>' in body
    assert f'<h1 id="error-title">{title}</h1>' in body
    assert "<strong>nothing was changed</strong>" in body
    assert 'href="/" role="button"' in body  # the way on: the dashboard
    return body


def test_an_oversized_staff_refund_form_gets_the_413_page_and_refunds_nothing(
    client_for, order, leaf, settings, django_capture_on_commit_callbacks
):
    client = client_for("owner")
    url = f"/orders/{order.id}/refund/"
    padded = _refund_form(leaf, note="x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    before = _written()

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, padded)

    body = _assert_the_page(
        response, status=413, label="Form too large", title="That form was too large to send"
    )
    assert "Sill accepts at most 2.5\xa0MB from one form" in body
    assert _written() == before
    # The same form, not padded, refunds: the page above is the limit's doing alone.
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(url, _refund_form(leaf)).status_code == 303
    assert Refund.objects.count() == 1


def test_a_staff_refund_form_with_too_many_fields_gets_the_400_page(
    client_for, order, leaf, settings, django_capture_on_commit_callbacks
):
    extra = {f"f{n}": "1" for n in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS)}
    before = _written()

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for("owner").post(
            f"/orders/{order.id}/refund/", _refund_form(leaf, **extra)
        )

    body = _assert_the_page(
        response, status=400, label="Too many fields", title="That form had too many fields"
    )
    assert "Sill accepts at most 1,000 fields in one form" in body
    assert _written() == before


def test_an_oversized_settings_form_gets_the_413_page_and_adds_no_reason(
    client_for, leaf, settings
):
    before = _written()
    response = client_for("owner").post(
        "/settings/reasons/add/",
        {"name": "Late" + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE},
        headers={"Accept": "text/html"},
    )
    _assert_the_page(
        response, status=413, label="Form too large", title="That form was too large to send"
    )
    assert _written() == before


def test_the_page_links_back_to_the_form_only_on_sills_own_host(client_for, leaf, settings):
    client = client_for("owner")
    body = {"name": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE}

    def post(referer: str) -> str:
        response = client.post("/settings/reasons/add/", body, headers={"Referer": referer})
        assert response.status_code == 413
        return response.content.decode()

    assert 'href="http://testserver/settings/reasons/" role="button">Back to the form' in post(
        "http://testserver/settings/reasons/"
    )
    assert "Back to the form" not in post("https://evil.example/settings/reasons/")
    assert "Back to the form" not in post("")


def test_an_htmx_post_gets_the_page_without_a_second_nav(client_for, order, leaf, settings):
    response = client_for("owner").post(
        f"/orders/{order.id}/refund/",
        _refund_form(leaf, note="x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE),
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 413
    body = response.content.decode()
    assert "That form was too large to send" in body and "nothing was changed" in body
    assert "<nav" not in body and "<html" not in body
