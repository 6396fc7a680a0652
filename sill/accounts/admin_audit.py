"""Signed audit records of a site's administration: members, agents, keys, rails.

Each record is written by the service that makes the change, inside its transaction
(``audit.services.append_record`` refuses to run outside one), so the Settings pages, the
management commands and anything else calling the service record alike.

A body says what changed and who changed it: ``actor`` is the acting user's username, or
``None`` when an operator ran a management command (``actor_name`` is then
:data:`OPERATOR`). Never a secret: no rail key, webhook secret, token or password, only
whether one changed and how many there are (an agent's *public* key is not secret and names
the key).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit.models import AuditRecord
from audit.services import append_record
from sill.accounts.models import Membership, Site

OPERATOR = "operator (manage.py)"


def actor_fields(actor: Any) -> dict[str, str | None]:
    """``actor`` is a user, a :class:`~sill.accounts.models.Membership`, or None (operator)."""
    user = getattr(actor, "user", actor)
    if user is None:
        return {"actor": None, "actor_name": OPERATOR}
    name = user.get_username()
    return {"actor": name, "actor_name": name}


def record_admin_change(
    *, site: Site, kind: str, actor: Any, body: Mapping[str, Any]
) -> AuditRecord:
    """Append the signed ``kind`` record of an administrative change made by ``actor``."""
    return append_record(site=site, kind=kind, body={**body, **actor_fields(actor)})


def record_own_account_change(
    user: Any, action: str, *, actor: Any, except_site: Site | None = None, **extra: Any
) -> None:
    """A ``member_change`` record of ``action`` (``password_change``, ``two_factor_enabled``…)
    about ``user``'s own account, in the log of every site they belong to: one account signs
    in to all of them. ``except_site``: one whose log the caller writes a record of its own
    about the same change. ``extra``: more of the body (never a secret)."""
    memberships = Membership.objects.filter(user=user).select_related("site")
    if except_site is not None:
        memberships = memberships.exclude(site=except_site)
    for membership in memberships:
        body = {"action": action, "member": user.get_username(), "role": membership.role}
        record_admin_change(
            site=membership.site, kind="member_change", actor=actor, body={**body, **extra}
        )
