"""Proxy headers count only with SILL_TRUST_PROXY=1: X-Forwarded-Proto (is the request
https?) and X-Forwarded-For (the client address every per-address limit counts by)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import RequestFactory

from sill.client_address import client_address

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = {
    "SILL_SECRET_KEY": "k" * 20 + "-a-long-random-production-secret-0123456789",
    "SILL_ALLOWED_HOSTS": "refunds.example.com",
    "SILL_AUDIT_SIGNING_KEY": "A" * 43,
}


def _manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SILL_", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"))
    }
    base.update({"SILL_DATA_DIR": str(tmp_path), **PRODUCTION, **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


SHOW = "from django.conf import settings; print(settings.SECURE_PROXY_SSL_HEADER)"


def test_x_forwarded_proto_is_not_trusted_by_default(tmp_path):
    shown = _manage(tmp_path, "shell", "--no-imports", "-c", SHOW)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "None"


def test_x_forwarded_proto_is_trusted_behind_a_proxy_and_check_deploy_stays_clean(tmp_path):
    shown = _manage(tmp_path, "shell", "--no-imports", "-c", SHOW, SILL_TRUST_PROXY="1")
    assert shown.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https')"
    checked = _manage(
        tmp_path, "check", "--deploy", "--fail-level", "WARNING", SILL_TRUST_PROXY="1"
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_it_refuses_a_trusted_proxy_that_is_no_network(tmp_path):
    checked = _manage(tmp_path, "check", SILL_TRUSTED_PROXIES="10.0.0.0/8,not-a-network")
    assert checked.returncode != 0 and "SILL_TRUSTED_PROXIES" in checked.stderr


def test_a_forwarded_proto_header_does_not_make_a_request_secure():
    request = RequestFactory().get("/", HTTP_X_FORWARDED_PROTO="https")
    assert not request.is_secure()


def _address(xff: str | None = None, remote: str = "10.0.0.5") -> str:
    extra = {"REMOTE_ADDR": remote}
    if xff is not None:
        extra["HTTP_X_FORWARDED_FOR"] = xff
    return client_address(RequestFactory().get("/", **extra))


def test_the_client_address_is_the_peer_by_default():
    assert _address("1.2.3.4", remote="203.0.113.7") == "203.0.113.7"


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        ("2001:db8:aa:bb:1:2:3:4", "2001:db8:aa:bb::"),
        ("2001:db8:aa:bb::ffff", "2001:db8:aa:bb::"),  # the same /64: the same client
        ("2001:db8:aa:bc::1", "2001:db8:aa:bc::"),
        ("::ffff:198.51.100.7", "198.51.100.7"),  # a dual-stack socket's IPv4 peer
        ("::ffff:198.51.100.8", "198.51.100.8"),  # ...each its own client, not one "::"
        ("::1", "::"),
        ("not an address", ""),
    ],
)
def test_an_ipv6_peer_counts_as_its_64(remote, expected):
    """Per-address limits count an IPv6 client by its /64: one subscriber holds all of it, and
    each of its 2**64 addresses was a fresh budget."""
    assert _address(remote=remote) == expected


@pytest.mark.parametrize(
    ("xff", "trusted", "expected"),
    [
        (None, [], "10.0.0.5"),  # no header: the peer
        ("203.0.113.7", [], "203.0.113.7"),
        ("1.2.3.4, 203.0.113.7", [], "203.0.113.7"),  # the client's own entry is ignored
        ("1.2.3.4, 203.0.113.7, 10.1.2.3", ["10.0.0.0/8"], "203.0.113.7"),  # our proxies skipped
        ("10.9.9.9, 10.1.2.3", ["10.0.0.0/8"], "10.9.9.9"),  # all ours: the left-most
        ("1.2.3.4, garbage, 203.0.113.7", [], "203.0.113.7"),
        ("1.2.3.4, garbage, 10.1.2.3", ["10.0.0.0/8"], "10.1.2.3"),  # stop at what can't be read
        ("203.0.113.7:51234", [], "203.0.113.7"),
        ("[2001:db8::7]:443", [], "2001:db8::"),  # an IPv6 client is its /64
        ("2001:db8::7", [], "2001:db8::"),
        ("2001:db8:1:2:3:4:5:6", [], "2001:db8:1:2::"),
        ("::ffff:203.0.113.7", [], "203.0.113.7"),  # IPv4 written as IPv6 is that address
        (" , ", [], "10.0.0.5"),
    ],
)
def test_behind_a_trusted_proxy_it_is_the_right_most_untrusted_hop(
    settings, xff, trusted, expected
):
    settings.SILL_TRUST_PROXY = True
    settings.SILL_TRUSTED_PROXIES = trusted
    assert _address(xff) == expected
