"""What ``members revoke-token`` and ``agents revoke-token`` share: the tokens ``--prefix``
names, as Settings and the audit records show them, each revoked with a line saying so."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.core.management.base import CommandError
from django.db.models import QuerySet

from sill.accounts.models import AgentToken, MemberToken
from sill.errors import SillError

Token = TypeVar("Token", AgentToken, MemberToken)


def revoke_tokens(
    tokens: QuerySet[Token],
    *,
    prefix: str | None,
    whose: str,
    revoke: Callable[[Token], Token],
    write: Callable[[str], None],
) -> None:
    """Revoke the one of ``tokens`` whose prefix is ``prefix`` (every one when None), oldest
    first, writing ``sill_xx_abcd… revoked`` (or ``revoked already (when)``, left as it
    is) for each; none matching is a CommandError naming ``whose`` they are."""
    tokens = tokens.order_by("created_at", "pk")
    if prefix is not None:
        # As the page and the records show it: its first 12 characters and an ellipsis.
        tokens = tokens.filter(prefix=prefix.strip().rstrip("…").rstrip("."))
    found = list(tokens)
    if not found:
        raise CommandError(
            f"{whose} has no API token {prefix}" if prefix else f"{whose} has no API token"
        )
    for token in found:
        already = token.revoked_at is not None
        try:
            token = revoke(token)
        except SillError as exc:
            raise CommandError(exc.message) from exc
        assert token.revoked_at is not None
        when = token.revoked_at.isoformat(timespec="seconds")
        write(f"{token.prefix}… " + (f"revoked already ({when})" if already else "revoked"))
