"""Helpers of the two-factor tests: real TOTP codes (django_otp.oath.totp on the device's key),
a device as enrolment leaves it, a session verified with it, a site requiring it."""

from __future__ import annotations

import re

from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from sill.accounts.models import Membership, Site
from sill.accounts.two_factor import TOTP_NAME

VERIFY = "/settings/account/two-factor/verify/"


def code_for(device: TOTPDevice, *, drift: int = 0) -> str:
    """The code the user's app shows now (``drift`` steps of 30 s later)."""
    device.refresh_from_db()
    value = totp(device.bin_key, step=device.step, t0=device.t0, digits=device.digits, drift=drift)
    return f"{value:0{device.digits}d}"


def confirmed_device(user) -> TOTPDevice:
    return TOTPDevice.objects.create(user=user, name=TOTP_NAME, confirmed=True)


def require_two_factor(site: Site) -> Site:
    site.require_two_factor = True
    site.save(update_fields=["require_two_factor"])
    return site


def verified_client(membership: Membership, device: TOTPDevice) -> Client:
    """Logged in and verified in the session with a code (the verify page)."""
    client = Client()
    client.force_login(membership.user)
    response = client.post(VERIFY, {"code": code_for(device)})
    assert response.status_code == 303, response.content.decode()
    return client


def recovery_codes_in(html: str) -> list[str]:
    return re.findall(r"<li><code>([0-9a-f]{6}-[0-9a-f]{6})</code></li>", html)
