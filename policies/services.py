"""Changing a site's policy. Every change writes a new version and its audit record, atomically.

The active version is read under the site's row lock, the edit is applied to what is there *now*
(so two admins toggling different rules at once both keep their change), and the old
version is switched off before the new one is switched on (the one-active constraint is
checked row by row on PostgreSQL). The ``policy_change`` audit record is appended in the same
transaction: the version and its record commit together or not at all.

Each service first checks that ``actor`` is a member of the site whose role may edit rules
(``require_member``, 403 ``forbidden``), whoever calls it: the pages and the API check too, but
a task, a script or a new caller that forgot would otherwise change the rules for anyone.
There is no system caller: a script or a test sets rules up as a member too. The member is
checked again under the site's row lock, held until the new version commits
(``access.hold_member``): removed or demoted meanwhile, the change is refused; so is one asked
through the API with a member token (``token_id``) revoked meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from audit.services import append_record
from policies.catalog import CatalogItem, build_rules, rule_name
from policies.engine import AutoRefund
from policies.models import BASELINE_NUMBER, PolicyVersion
from policies.rules import (
    ACTION_LABELS,
    MAX_RULES,
    MODE_LABELS,
    MODES,
    RuleError,
    json_safe_rules,
    validate_rule,
)
from policies.selectors import (
    ActivePolicy,
    active_policy_for,
    baseline_for,
    preview_for,
    rules_digest,
)
from policies.simulation import Preview
from sill.accounts import two_factor
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.models import Site
from sill.errors import NotFound, SillError
from sill.money import Money

MAX_CAP_MINOR = 10**12


class PolicyConflict(SillError):
    code = "policy_conflict"
    status = 409


@dataclass(frozen=True)
class Edit:
    rules: list[dict[str, Any]]
    auto_refund: AutoRefund
    summary: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class ApplyResult:
    """The answer to applying a template or pack (or previewing it, with ``dry_run``)."""

    status: str  # "applied" | "already_applied" | "preview"
    item: CatalogItem
    mode: str
    rules: list[dict[str, Any]]  # the rules written (or that would be written)
    already: list[dict[str, Any]]  # the item's rules that were already there
    version_label: str
    preview: Preview | None = None


def apply_catalog_item(
    *,
    site: Site,
    actor: Any,
    item: CatalogItem,
    params: Any = None,
    mode: Any = "enforced",
    dry_run: bool = False,
) -> ApplyResult:
    """Write the rules of a template or pack in one new version, all or nothing.

    A template applies once: rules it would write under ids already present are left as
    they are and reported in ``already``; when none is left to write the answer is
    ``already_applied`` and nothing changes. ``dry_run`` writes nothing and returns the
    preview of the resulting rule set against the last 30 days; it too needs a member who
    may edit rules, as its page and API do.
    """
    require_member(actor, site.pk, Cap.EDIT_RULES)
    wanted = build_rules(item, params=params, mode=mode)
    mode = mode or "enforced"
    if dry_run:
        active = active_policy_for(site)
        new, already = _split(active, wanted)
        _check_room(active, new)
        preview = preview_for(site=site, rules=[*active.rules, *new])
        status = "preview" if new else "already_applied"
        return ApplyResult(status, item, mode, new, already, active.label, preview)

    outcome: dict[str, Any] = {}

    def edit(active: ActivePolicy) -> Edit | None:
        new, already = _split(active, wanted)
        outcome.update(new=new, already=already)
        if not new:
            return None
        _check_room(active, new)
        return Edit(
            rules=[*active.rules, *new],
            auto_refund=active.auto_refund,
            summary=f"Applied {item.kind} “{item.title}” ({MODE_LABELS[mode]})",
            detail={
                "change": "apply_template",
                "catalog_kind": item.kind,
                "catalog_id": item.id,
                "mode": mode,
                "added": [r["id"] for r in new],
                "already_applied": [r["id"] for r in already],
            },
        )

    label = _change(site=site, actor=actor, edit=edit)
    status = "applied" if outcome["new"] else "already_applied"
    return ApplyResult(status, item, mode, outcome["new"], outcome["already"], label)


def set_rule_mode(
    *, site: Site, actor: Any, rule_id: str, mode: str, second_factor: two_factor.Freshness
) -> str:
    """Switch one rule between enforced and observe; the active version's label after."""
    require_member(actor, site.pk, Cap.EDIT_RULES)
    if mode not in MODES:
        raise RuleError(f"Unknown mode {mode!r}: use enforced or observe.", field="mode")

    def edit(active: ActivePolicy) -> Edit | None:
        rule = _existing_rule(active, rule_id)
        if rule.get("mode", "enforced") == mode:
            return None
        return Edit(
            rules=[{**r, "mode": mode} if r["id"] == rule_id else r for r in active.rules],
            auto_refund=active.auto_refund,
            summary=f"Rule {rule_name(rule_id)} now {MODE_LABELS[mode]}",
            detail={"change": "set_rule_mode", "rule_id": rule_id, "mode": mode},
        )

    return _change(site=site, actor=actor, edit=edit, second_factor=second_factor)


def add_rule(
    *, site: Site, actor: Any, rule: Any, field: str = "rule", token_id: int | None = None
) -> tuple[str, dict[str, Any]]:
    """Add the merchant's own ``rule`` (validated here) to the active policy, as one new version.

    Without an ``id`` the rule is named ``custom-<n>``, the first free number. Returns the
    active version's label after and the rule as stored. ``RuleError`` for an invalid rule,
    409 ``rule_exists`` for an id the policy already has, 409 ``too_many_rules``.
    """
    require_member(actor, site.pk, Cap.EDIT_RULES)
    raw = dict(rule) if isinstance(rule, dict) else rule
    stored: dict[str, Any] = {}

    def edit(active: ActivePolicy) -> Edit:
        candidate = raw
        if isinstance(candidate, dict) and "id" not in candidate:
            taken = {r["id"] for r in active.rules}
            number = next(n for n in range(1, MAX_RULES + 2) if f"custom-{n}" not in taken)
            candidate = {"id": f"custom-{number}", **candidate}
        valid = validate_rule(candidate, field=field)
        if active.rule(valid["id"]) is not None:
            raise SillError(
                f"The policy already has a rule {valid['id']!r}: pick another id.",
                code="rule_exists",
                field=f"{field}.id",
                status=409,
            )
        _check_room(active, [valid])
        stored.update(valid)
        return Edit(
            rules=[*active.rules, valid],
            auto_refund=active.auto_refund,
            summary=f"Rule {rule_name(valid['id'])} added: "
            + ACTION_LABELS[valid["then"]["action"]].lower()
            + (" (observe only)" if valid["mode"] == "observe" else ""),
            detail={"change": "add_rule", "rule_id": valid["id"]},
        )

    label = _change(site=site, actor=actor, edit=edit, token_id=token_id)
    return label, stored


MAX_WINDOW_DAYS = 3650


def set_refund_window(
    *, site: Site, actor: Any, days: int | None, second_factor: two_factor.Freshness
) -> None:
    """The merchant's own refund window in days from payment (None: only the rails'). One
    signed ``settings_change`` record per change. Lengthening or removing it widens (refused
    by ``second_factor`` without a fresh code); shortening or setting one does not."""
    require_member(actor, site.pk, Cap.EDIT_RULES)
    if days is not None and not 1 <= days <= MAX_WINDOW_DAYS:
        raise SillError(
            f"A refund window is 1 to {MAX_WINDOW_DAYS} days, or none.",
            code="invalid_field",
            field="days",
        )
    with transaction.atomic():
        locked = Site.objects.select_for_update(no_key=True).get(pk=site.pk)
        if locked.refund_window_days == days:
            return
        before = locked.refund_window_days
        two_factor.check_widening(
            second_factor, widens=before is not None and (days is None or days > before)
        )
        locked.refund_window_days = days
        locked.save(update_fields=["refund_window_days"])
        site.refund_window_days = days
        append_record(
            site=locked,
            kind="settings_change",
            body={
                "change": "refund_window",
                "actor": actor.get_username() if getattr(actor, "pk", None) else None,
                "refund_window_days": days,
                "previous_refund_window_days": before,
            },
        )


def restore_version(
    *, site: Site, actor: Any, number: int, second_factor: two_factor.Freshness
) -> str:
    """Make the rules and auto-refund of version ``number`` active again, as a new version.

    NotFound for a version the site does not have; nothing is written when it is what is
    active already.
    """
    require_member(actor, site.pk, Cap.EDIT_RULES)
    old = PolicyVersion.objects.filter(site=site, number=number).first()
    if old is None:
        raise NotFound(f"No policy version v{number} on this site.")
    wanted = AutoRefund(
        enabled=old.auto_refund_enabled,
        cap_minor=old.auto_refund_cap_minor,
        currency=old.auto_refund_currency,
    )

    def edit(active: ActivePolicy) -> Edit | None:
        if list(active.rules) == list(old.rules) and active.auto_refund == wanted:
            return None
        return Edit(
            rules=list(old.rules),
            auto_refund=wanted,
            summary=f"Restored {old.label}",
            detail={"change": "restore_version", "restored": old.label},
        )

    return _change(site=site, actor=actor, edit=edit, second_factor=second_factor)


def delete_rule(
    *,
    site: Site,
    actor: Any,
    rule_id: str,
    second_factor: two_factor.Freshness,
    token_id: int | None = None,
) -> str:
    require_member(actor, site.pk, Cap.EDIT_RULES)

    def edit(active: ActivePolicy) -> Edit:
        _existing_rule(active, rule_id)
        return Edit(
            rules=[r for r in active.rules if r["id"] != rule_id],
            auto_refund=active.auto_refund,
            summary=f"Rule {rule_name(rule_id)} deleted",
            detail={"change": "delete_rule", "rule_id": rule_id},
        )

    return _change(
        site=site, actor=actor, edit=edit, second_factor=second_factor, token_id=token_id
    )


def set_auto_refund(
    *, site: Site, actor: Any, enabled: bool, cap: Money, second_factor: two_factor.Freshness
) -> str:
    """AUTO-REFUND: approve held refunds up to ``cap`` from the agent that placed the order."""
    require_member(actor, site.pk, Cap.EDIT_RULES)
    if cap.amount_minor < 0 or cap.amount_minor > MAX_CAP_MINOR:
        raise SillError("The cap must be between 0 and 10,000,000,000.", code="invalid_field",
                        field="cap")  # fmt: skip
    if enabled and cap.amount_minor == 0:
        raise SillError(
            "Set a maximum auto-approve amount above zero to switch auto-refund on.",
            code="invalid_field",
            field="cap",
        )
    wanted = AutoRefund(enabled=enabled, cap_minor=cap.amount_minor, currency=cap.currency)

    def edit(active: ActivePolicy) -> Edit | None:
        if active.auto_refund == wanted:
            return None
        state = "on" if enabled else "off"
        return Edit(
            rules=list(active.rules),
            auto_refund=wanted,
            summary=f"Auto-refund {state}, cap {cap}",
            detail={
                "change": "set_auto_refund",
                "enabled": enabled,
                "cap_minor": cap.amount_minor,
                "currency": cap.currency,
            },
        )

    return _change(site=site, actor=actor, edit=edit, second_factor=second_factor)


# --- the one writer -----------------------------------------------------------------------------


def _change(
    *,
    site: Site,
    actor: Any,
    edit: Callable[[ActivePolicy], Edit | None],
    second_factor: two_factor.Freshness | None = None,
    token_id: int | None = None,
) -> str:
    """Apply ``edit`` to the locked active version and write the result as the next one.

    ``actor`` is checked again under the site's row lock, and with ``token_id`` the member
    token the API request came with: revoked (or its member removed) meanwhile, 401
    ``not_authenticated`` (``access.TokenRefused``), nothing written.

    Returns the label of the version active afterwards (unchanged when ``edit`` has nothing
    to do). A change that :func:`_widens` what may be refunded is refused by
    ``second_factor`` without a fresh code (``None``: the caller's edits only add rules,
    which never widen; a widening one then is a bug, refused).
    """
    try:
        with transaction.atomic():
            # One lock per site serialises policy changes. The site row, not the active
            # version: a version switched off while we waited would drop out of a locked read
            # of "the active one". NO KEY UPDATE leaves inserts that reference the site alone.
            Site.objects.select_for_update(no_key=True).filter(pk=site.pk).first()
            # Still allowed now, and until this commits: member changes lock the site's row
            # first too (accounts.services.lock_for_member_change), so one that came first
            # (it may have waited for the audit chain behind another append) is read here and
            # refuses this change, and one that comes later waits for it. After the site's
            # row, as member changes take them: site, then member.
            hold_member(actor, site.pk, Cap.EDIT_RULES, token_id=token_id)
            current = PolicyVersion.objects.filter(site=site, active=True).first()
            active = active_policy_for(site) if current is not None else baseline_for(site)
            change = edit(active)
            if change is None:
                return active.label
            widens = _widens(active, change)
            if second_factor is not None:
                two_factor.check_widening(second_factor, widens=widens)
            elif widens:
                raise TypeError("a change that can widen the rules needs its second_factor")
            return _write(site=site, actor=actor, current=current, active=active, change=change)
    except IntegrityError:
        # Two first versions of a site written at once: the unique number refused one.
        raise PolicyConflict(
            "The rules were changed by someone else at the same moment; reload and try again."
        ) from None


def _write(
    *,
    site: Site,
    actor: Any,
    current: PolicyVersion | None,
    active: ActivePolicy,
    change: Edit,
) -> str:
    last = PolicyVersion.objects.filter(site=site).aggregate(n=Max("number"))["n"]
    number = max(last or BASELINE_NUMBER, BASELINE_NUMBER) + 1
    if current is not None:
        PolicyVersion.objects.filter(pk=current.pk).update(active=False)
    digest = rules_digest(change.rules)
    version = PolicyVersion.objects.create(
        site=site,
        number=number,
        rules=change.rules,
        rules_digest=digest,
        auto_refund_enabled=change.auto_refund.enabled,
        auto_refund_cap_minor=change.auto_refund.cap_minor,
        auto_refund_currency=change.auto_refund.currency,
        active=True,
        summary=change.summary[:300],
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    append_record(
        site=site,
        kind="policy_change",
        body={
            **change.detail,
            "version": version.label,
            "previous_version": active.label,
            "actor": actor.get_username() if getattr(actor, "pk", None) else None,
            "summary": version.summary,
            "rules": json_safe_rules(change.rules),
            "rules_digest": digest,
            "auto_refund": {
                "enabled": change.auto_refund.enabled,
                "cap_minor": change.auto_refund.cap_minor,
                "currency": change.auto_refund.currency,
            },
        },
    )
    return version.label


def _widens(active: ActivePolicy, change: Edit) -> bool:
    """Whether ``change`` may let through a refund or credit ``active`` would hold or deny.

    Rules only restrict (policies.engine: the outcome starts at allow, an allow rule never
    lowers it, an observe rule changes nothing), so a rule set cannot widen while every
    enforced deny and require_approval rule of ``active`` is still there, unchanged: adding
    rules never widens. Anything else counts as widening (a rule deleted, switched to observe,
    or restored in an older form, even a stricter one: comparing conditions is not attempted).
    AUTO-REFUND widens when it is switched on, its cap raised or its currency changed."""
    for rule in active.rules:
        restrictive = rule["then"]["action"] != "allow"
        enforced = rule.get("mode", "enforced") == "enforced"
        if restrictive and enforced and rule not in change.rules:
            return True
    was, now = active.auto_refund, change.auto_refund
    return now.enabled and (
        not was.enabled or now.currency != was.currency or now.cap_minor > was.cap_minor
    )


def _split(
    active: ActivePolicy, wanted: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    there = {r["id"]: r for r in active.rules}
    new = [r for r in wanted if r["id"] not in there]
    already = [there[r["id"]] for r in wanted if r["id"] in there]
    return new, already


def _check_room(active: ActivePolicy, new: list[dict[str, Any]]) -> None:
    missing = len(active.rules) + len(new) - MAX_RULES
    if missing > 0:
        raise SillError(
            f"A policy holds at most {MAX_RULES} rules: delete {missing} rule(s) first. "
            "Nothing was written.",
            code="too_many_rules",
            status=409,
        )


def _existing_rule(active: ActivePolicy, rule_id: str) -> dict[str, Any]:
    rule = active.rule(rule_id)
    if rule is None:
        raise NotFound(f"No rule {rule_id!r} in the active policy.")
    return rule
