"""Writes to a site's refund-reason tree: seed, add, rename, move, (de)activate, delete.

Every change runs in ``transaction.atomic()`` and appends a ``reason_change`` audit record in
the same transaction. A reason a refund used can't be deleted: ``Refund.refund_reason`` is
``on_delete=PROTECT`` (and a plain foreign key in the database), so the delete is refused and
the merchant is told to deactivate it instead. Past refunds keep the reason's path and label
as they were anyway (``Refund.reason_path`` / ``reason_label``).

Each change by a person first checks that ``actor`` is a member of the reason's site whose
role manages settings (403 ``forbidden``), as the Settings → Reasons pages do, so no other
caller can edit a site's reasons for a member who may not. The check is the transaction's
first statement and holds the member's rows until it commits (``access.hold_member``, before
the tree's lock, as a staff refund takes them): an owner's removal or demotion of ``actor``
that came first (it may have waited for the audit chain behind another append) refuses the
change, one that comes later waits for it. Only
:func:`ensure_default_reasons` (site creation, the demo, a migration) writes with no person.

Treebeard keeps one materialised-path forest for the whole table (every site's roots are
siblings), and a sorted insert or move rewrites the paths of the nodes after it. Two writers
at once could compute the same path, so on PostgreSQL every tree write first takes one
transaction-scoped advisory lock; SQLite's IMMEDIATE transactions already serialise writers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError
from treebeard.exceptions import InvalidMoveToDescendant

from audit.services import append_record
from refunds.models import REASON_NAME_MAX, RefundReason
from refunds.reasons.selectors import DEFAULT_CODES, DEFAULT_REASONS, PATH_SEPARATOR
from sill.accounts.access import Cap, hold_member
from sill.accounts.models import Site
from sill.errors import SillError

_CODE_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# Any constant works; it only has to be the same for every writer of the tree.
_TREE_LOCK_KEY = 0x5111_2EA5

_T = TypeVar("_T")


def _lock_tree() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_TREE_LOCK_KEY])


def hold_reason_tree() -> None:
    """Keep the reason tree as it is until the caller's transaction ends: the tree writers'
    lock, shared (refunds picking reasons don't wait for each other), on PostgreSQL.

    A refund takes it before it reads its reason. Without it, a delete that had read the
    reason as unused could commit between the refund's read and its commit, and the database
    refused the refund's reference to the deleted row at commit (a server error). Taken after
    the order's locks and before the audit chain head, as the writers take theirs before the
    head too. SQLite's IMMEDIATE transactions already serialise writers.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock_shared(%s)", [_TREE_LOCK_KEY])


def _actor_name(actor: Any) -> str | None:
    return actor.get_username() if actor is not None else None


def _path_of(reason: RefundReason) -> str:
    chain = [*RefundReason.objects.get_ancestors(reason), reason]
    return PATH_SEPARATOR.join(n.name for n in chain)


def _record(*, site: Site, actor: Any, action: str, reason: RefundReason, **extra: Any) -> None:
    append_record(
        site=site,
        kind="reason_change",
        body={
            "action": action,
            "reason_id": reason.pk,
            "name": reason.name,
            "code": reason.code or None,
            "path": _path_of(reason),
            "actor": _actor_name(actor),
            **extra,
        },
    )


def _clean_name(name: str) -> str:
    name = " ".join((name or "").split())
    if not name:
        raise SillError("Give the reason a name.", code="invalid_field", field="name")
    if len(name) > REASON_NAME_MAX:
        raise SillError(
            f"A reason's name is at most {REASON_NAME_MAX} characters.",
            code="invalid_field",
            field="name",
        )
    return name


def _refuse_duplicate_sibling(
    *, site: Site, name: str, parent: RefundReason | None, exclude: RefundReason | None = None
) -> None:
    siblings = (
        RefundReason.objects.get_children(parent)
        if parent is not None
        else RefundReason.objects.filter(site=site, depth=1)
    )
    if exclude is not None:
        siblings = siblings.exclude(pk=exclude.pk)
    if siblings.filter(name__iexact=name).exists():
        where = f"under “{parent.name}”" if parent is not None else "at the top level"
        raise SillError(
            f"There is already a reason named “{name}” {where}.", code="duplicate", field="name"
        )


def _parent_of(reason: RefundReason) -> RefundReason | None:
    return RefundReason.objects.get_parent(reason, update=True)


def _first_root(site: Site, *, exclude: RefundReason | None = None) -> RefundReason | None:
    roots = RefundReason.objects.filter(site=site, depth=1)
    if exclude is not None:
        roots = roots.exclude(pk=exclude.pk)
    return roots.order_by("path").first()


def _tree_write(fn: Callable[[], _T]) -> _T:
    """Run a tree write; a path collision (a writer we did not serialise with) is a 409."""
    try:
        return fn()
    except IntegrityError as exc:
        raise SillError(
            "The reason list changed while saving; nothing was changed. Please try again.",
            code="conflict",
            status=409,
        ) from exc


def seed_site_reasons(sender: object, *, site: Site, **_: object) -> None:
    """``site_created`` receiver: every new site starts with the default reasons."""
    ensure_default_reasons(site)


def ensure_default_reasons(site: Site) -> list[RefundReason]:
    """Give ``site`` the coded reasons agents use (``DEFAULT_REASONS``); idempotent.

    Only codes the site lacks are added, as top-level reasons; an uncoded top-level reason
    with the same name is given the code instead of getting a twin. Cheap when nothing is
    missing (one query). Called when a site is created (``site_created``), by ``demo`` and by
    a data migration for older sites; never by a page (a GET writes nothing). Returns the
    reasons it added or coded.
    """
    if (
        set(
            RefundReason.objects.filter(site=site, code__in=DEFAULT_CODES).values_list(
                "code", flat=True
            )
        )
        >= DEFAULT_CODES
    ):
        return []
    try:
        with transaction.atomic():
            _lock_tree()
            have = set(
                RefundReason.objects.filter(site=site, code__in=DEFAULT_CODES).values_list(
                    "code", flat=True
                )
            )
            changed: list[RefundReason] = []
            for code, name in DEFAULT_REASONS:
                if code in have:
                    continue
                twin = RefundReason.objects.filter(
                    site=site, depth=1, code="", name__iexact=name
                ).first()
                if twin is not None:
                    twin.code = code
                    twin.save(update_fields=["code"])
                    changed.append(twin)
                else:
                    changed.append(
                        RefundReason.objects.add_root(
                            instance=RefundReason(site=site, name=name, code=code)
                        )
                    )
            if changed:
                append_record(
                    site=site,
                    kind="reason_change",
                    body={
                        "action": "seed",
                        "actor": None,
                        "reasons": [
                            {"reason_id": r.pk, "name": r.name, "code": r.code} for r in changed
                        ],
                    },
                )
            return changed
    except IntegrityError:
        # Another process seeded the same site at the same moment (SQLite without the lock
        # ordering we get on PostgreSQL); its reasons are the ones we wanted.
        return []


@transaction.atomic
def add_reason(
    *, site: Site, actor: Any, name: str, parent: RefundReason | None = None, code: str = ""
) -> RefundReason:
    """Add a reason at the top level or under ``parent`` (a reason of the same ``site``)."""
    hold_member(actor, site.pk, Cap.MANAGE_SETTINGS)
    name = _clean_name(name)
    code = (code or "").strip().lower()
    if code and not _CODE_RE.match(code):
        raise SillError(
            "A code is lower-case letters, digits and underscores, starting with a letter "
            "(at most 40).",
            code="invalid_field",
            field="code",
        )
    if parent is not None and parent.site_id != site.pk:
        raise SillError("No such parent reason on this site.", code="invalid_field", field="parent")
    _lock_tree()
    if parent is not None:
        # Paths shift when siblings are inserted: only a path read under the lock is current.
        parent.refresh_from_db()
    if code and RefundReason.objects.filter(site=site, code=code).exists():
        raise SillError(
            f"Another reason already has the code {code}.", code="duplicate", field="code"
        )
    _refuse_duplicate_sibling(site=site, name=name, parent=parent)
    instance = RefundReason(site=site, name=name, code=code)
    if parent is None:
        reason = _tree_write(lambda: RefundReason.objects.add_root(instance=instance))
    else:
        reason = _tree_write(lambda: RefundReason.objects.add_child(parent, instance=instance))
    _record(site=site, actor=actor, action="add", reason=reason)
    return reason


def _resort(reason: RefundReason) -> None:
    """Put ``reason`` back in name order among its siblings (treebeard sorts on insert only)."""
    parent = _parent_of(reason)
    if parent is not None:
        RefundReason.objects.move(reason, parent, "sorted-child")
    else:
        RefundReason.objects.move(reason, reason, "sorted-sibling")


@transaction.atomic
def rename_reason(*, reason: RefundReason, actor: Any, name: str) -> RefundReason:
    hold_member(actor, reason.site_id, Cap.MANAGE_SETTINGS)
    name = _clean_name(name)
    _lock_tree()
    reason.refresh_from_db()
    old_name, old_path = reason.name, _path_of(reason)
    if name == old_name:
        return reason
    _refuse_duplicate_sibling(
        site=reason.site, name=name, parent=_parent_of(reason), exclude=reason
    )
    reason.name = name
    reason.save(update_fields=["name"])
    _tree_write(lambda: _resort(reason))
    reason.refresh_from_db()
    _record(
        site=reason.site,
        actor=actor,
        action="rename",
        reason=reason,
        from_name=old_name,
        from_path=old_path,
    )
    return reason


@transaction.atomic
def move_reason(*, reason: RefundReason, actor: Any, parent: RefundReason | None) -> RefundReason:
    """Move ``reason`` (with everything under it) under ``parent``, or to the top level."""
    hold_member(actor, reason.site_id, Cap.MANAGE_SETTINGS)
    site = reason.site
    _lock_tree()
    reason.refresh_from_db()
    if parent is not None:
        if parent.site_id != reason.site_id:
            raise SillError(
                "No such parent reason on this site.", code="invalid_field", field="parent"
            )
        parent.refresh_from_db()
        if parent.pk == reason.pk or parent.path.startswith(reason.path):
            raise SillError(
                f"“{reason.name}” can't go under itself or under one of its own sub-reasons.",
                code="invalid_move",
                field="parent",
            )
    current = _parent_of(reason)
    if (current.pk if current else None) == (parent.pk if parent else None):
        return reason
    old_path = _path_of(reason)
    _refuse_duplicate_sibling(site=site, name=reason.name, parent=parent, exclude=reason)

    def move() -> None:
        if parent is not None:
            RefundReason.objects.move(reason, parent, "sorted-child")
        else:
            # Any top-level reason anchors a move to the top level; roots are kept sorted.
            anchor = _first_root(site, exclude=reason) or RefundReason.objects.get_root_nodes()[0]
            RefundReason.objects.move(reason, anchor, "sorted-sibling")

    try:
        _tree_write(move)
    except InvalidMoveToDescendant as exc:  # pragma: no cover - refused above
        raise SillError(str(exc), code="invalid_move", field="parent") from exc
    reason.refresh_from_db()
    _record(site=site, actor=actor, action="move", reason=reason, from_path=old_path)
    return reason


@transaction.atomic
def set_reason_active(*, reason: RefundReason, actor: Any, active: bool) -> RefundReason:
    """Deactivate (hide from pickers, keep on past refunds) or reactivate a reason."""
    hold_member(actor, reason.site_id, Cap.MANAGE_SETTINGS)
    reason = RefundReason.objects.select_for_update().get(pk=reason.pk)
    if reason.active == active:
        return reason
    reason.active = active
    reason.save(update_fields=["active"])
    _record(
        site=reason.site,
        actor=actor,
        action="reactivate" if active else "deactivate",
        reason=reason,
    )
    return reason


@transaction.atomic
def delete_reason(*, reason: RefundReason, actor: Any) -> None:
    """Delete an unused reason and everything under it.

    Refused for reasons a refund used (the database's PROTECT says so; deactivate instead)
    and for the coded reasons agents use, which :func:`ensure_default_reasons` would only
    bring back.
    """
    hold_member(actor, reason.site_id, Cap.MANAGE_SETTINGS)
    _lock_tree()
    reason.refresh_from_db()
    subtree = RefundReason.objects.filter(path__startswith=reason.path, depth__gte=reason.depth)
    coded = sorted(subtree.filter(code__in=DEFAULT_CODES).values_list("name", flat=True))
    if coded:
        raise SillError(
            f"“{coded[0]}” is one of the reasons agents send by code, so it can't be deleted; "
            "deactivate it instead.",
            code="reason_protected",
        )
    _record(site=reason.site, actor=actor, action="delete", reason=reason)
    try:
        with transaction.atomic():
            reason.delete()
    except (ProtectedError, IntegrityError) as exc:
        used = subtree.filter(refunds__isnull=False).values("refunds").count()
        raise SillError(
            f"“{reason.name}” is used by {used} refund{'s' if used != 1 else ''}"
            f"{' (on it or a reason under it)' if reason.numchild else ''}, so it can't be "
            "deleted; deactivate it instead. Past refunds keep it either way.",
            code="reason_in_use",
        ) from exc
