"""The token of an ``Authorization: Bearer <token>`` header (agents' and members' API tokens).

The scheme is case-insensitive (RFC 7235 section 2.1): ``bearer <token>``, as some HTTP
clients write it, was refused 401 "Authentication credentials were not provided." One
function for the authentication classes and the per-token rate limit, so that both read the
same token from the same header (a throttle keyed on another spelling would count it apart).
No imports: DRF loads the throttles while ``rest_framework.views`` is still loading.
"""

from __future__ import annotations

_SCHEME = "bearer "


def bearer_token(header: str) -> str | None:
    """The token after ``Bearer `` (any case), stripped; None for another scheme or none."""
    if header[: len(_SCHEME)].lower() != _SCHEME:
        return None
    return header[len(_SCHEME) :].strip()
