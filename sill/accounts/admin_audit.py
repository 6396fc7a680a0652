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

from django.db import transaction

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
        _record_account(membership.site, user, membership.role, action, actor=actor, **extra)


def record_account_change_everywhere(user: Any, action: str, *, actor: Any, **extra: Any) -> None:
    """A ``member_change`` record of ``action`` about ``user``'s account in *every* site's
    log, member there or not (``role`` None where not), as a rotated audit key is: for a change
    whose reach is every site, such as a superuser's, whom the Django admin lets edit any
    site's rail accounts and members."""
    roles = dict(Membership.objects.filter(user=user).values_list("site_id", "role"))
    for site in Site.objects.order_by("pk"):
        _record_account(site, user, roles.get(site.pk), action, actor=actor, **extra)


def record_account_change(user: Any, action: str, *, actor: Any, **extra: Any) -> None:
    """A change of ``user``'s own sign-in (a password set, a second factor removed) where its
    reach is: every site's log for a superuser (:func:`record_account_change_everywhere`: their
    password and second factor guard the Django admin, which edits every site), else every site
    they belong to (:func:`record_own_account_change`)."""
    record = record_account_change_everywhere if user.is_superuser else record_own_account_change
    record(user, action, actor=actor, **extra)


def _record_account(
    site: Site, user: Any, role: str | None, action: str, *, actor: Any, **extra: Any
) -> None:
    body = {"action": action, "member": user.get_username(), "role": role}
    record_admin_change(site=site, kind="member_change", actor=actor, body={**body, **extra})


def record_superuser_created(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    """``post_save`` receiver for the user model: an account created a superuser outside the
    Django admin (whose add form makes none) — ``manage.py createsuperuser``, or a shell — is
    recorded in every site's log, actor the operator. Its own transaction: the command saves
    the account in autocommit, so the record follows the row rather than sharing its commit."""
    if not created or not instance.is_superuser or kwargs.get("raw"):
        return
    with transaction.atomic():
        record_account_change_everywhere(
            instance,
            "account_change",
            actor=None,
            changed=["is_superuser"],
            is_active=instance.is_active,
            is_staff=instance.is_staff,
            is_superuser=True,
        )
