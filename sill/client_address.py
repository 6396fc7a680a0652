"""The address a request came from, the one every per-address limit counts by.

Login throttling (django-axes, ``AXES_CLIENT_IP_CALLABLE``) and the API's rate limits (DRF
throttles in :mod:`sill.api`) both call :func:`client_address`, so one client is one client
everywhere.

- By default it is ``REMOTE_ADDR``: the peer of the TCP connection, which nobody can forge.
  ``X-Forwarded-For`` is ignored, since any client can send one.
- With ``SILL_TRUST_PROXY=1`` (Sill runs behind a reverse proxy that appends the peer it saw to
  ``X-Forwarded-For``) it is the right-most hop that is not one of our own proxies: walking the
  header from the right, addresses in ``SILL_TRUSTED_PROXIES`` (networks, e.g. ``10.0.0.0/8``)
  are skipped. The entries left of the first untrusted one were written by the client and
  prove nothing, so they never count. With no trusted networks listed, the right-most entry
  (what the one proxy in front of Sill appended) is the client.
- An IPv6 client is its /64, written as the network's first address (``2001:db8:1:2::``):
  one subscriber (a home, a server, a phone) is given a whole /64 and may send from any of its
  2**64 addresses, each of which was a fresh budget for every per-address limit (a password
  guessed from rotating addresses was never locked). An IPv4 address written as IPv6
  (``::ffff:203.0.113.7``, a dual-stack socket's peer) is that IPv4 address.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def client_address(request: HttpRequest) -> str:
    """The client's IP address as text, an IPv6 client's /64 as its first address ("" when
    the request has none, as in some tests)."""
    remote = _parse(request.META.get("REMOTE_ADDR", ""))
    if not settings.SILL_TRUST_PROXY:
        return _counted(remote)
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    trusted = _trusted_networks(tuple(settings.SILL_TRUSTED_PROXIES))
    chosen = remote
    for hop in reversed([h for h in hops if h]):
        address = _parse(hop)
        if address is None:
            # Garbage where a proxy should have written an address: stop at the last hop we
            # could read rather than believe anything further left.
            break
        chosen = address
        if not any(address in network for network in trusted):
            break
    return _counted(chosen)


def _counted(address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> str:
    """``address`` as the limits count it: an IPv6 address by its /64 (the module docstring)."""
    if address is None:
        return ""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        # Through int: the network of an address with a zone (fe80::1%eth0) keeps no zone.
        return str(ipaddress.IPv6Address(int(address) >> 64 << 64))
    return str(address)


def _parse(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # "[2001:db8::1]:443"
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # "203.0.113.7:51234"
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@lru_cache(maxsize=8)
def _trusted_networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)
