"""A rejected refund names who rejected it where Sill knows (an owner or admin, in Sill or in
Slack), not "a reviewer": reviewers cannot decide."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_rejection_names_the_person_who_rejected_it(client_for, held):
    client = client_for("owner")
    assert client.post(f"/held/{held.id}/reject/").status_code == 302
    said = "Rejected by owner@roasters.example"
    for path in (f"/refunds/{held.id}/", "/refunds/", "/refunds/?format=csv"):
        response = client.get(path)
        body = b"".join(response).decode() if response.streaming else response.content.decode()
        assert said in body, path
        assert "a reviewer" not in body, path
