"""Reads of policies, always scoped to a site: the active version, history, previews."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import rfc8785
from django.db.models import Q, QuerySet
from django.utils import timezone

from policies.engine import BASELINE_POLICY, AutoRefund, CompiledPolicy, compile_policy
from policies.models import PolicyVersion
from policies.simulation import Preview, SimulatedRefund, simulate
from policies.subjects import Subject, rules_for
from policies.types import BASELINE_VERSION, PolicyReplaced, ReadBefore
from refunds.models import Refund, RefundKind
from sill.accounts.models import Site
from sill.sql import Columns, Guard, cols, fetch_row

PREVIEW_DAYS = 30
# ``.defer("rules")``: every field of a version but its rules.
_ALL_BUT_RULES = tuple(f.name for f in PolicyVersion._meta.concrete_fields if f.name != "rules")


@dataclass(frozen=True)
class ActivePolicy:
    """What decisions on a site use right now."""

    label: str  # "v1-default" or "v<number>"
    number: int
    rules: tuple[dict[str, Any], ...]
    compiled: CompiledPolicy  # the rules that apply to refunds (policies.subjects)
    auto_refund: AutoRefund
    version: PolicyVersion | None  # None for the baseline
    # The rules that apply to customer credits (amount, origin, reason, the customer's age).
    credit: CompiledPolicy = BASELINE_POLICY

    def rule(self, rule_id: str) -> dict[str, Any] | None:
        return next((r for r in self.rules if r["id"] == rule_id), None)

    def reads(self, fact: str) -> bool:
        """Whether a rule of this version (observed ones too) reads ``fact``."""
        return any(fact in rule.get("when", {}) for rule in self.rules)


def baseline_for(site: Site) -> ActivePolicy:
    return ActivePolicy(
        label=BASELINE_VERSION,
        number=1,
        rules=(),
        compiled=BASELINE_POLICY,
        auto_refund=AutoRefund(enabled=False, cap_minor=0, currency=site.default_currency),
        version=None,
    )


class Unread:
    """The type of :data:`UNREAD`: "not read yet", where None means "read: there is none"."""


UNREAD = Unread()


def active_policy_for(site: Site, *, version: ReadBefore | Unread = UNREAD) -> ActivePolicy:
    """The site's active policy, compiled (once per version, then from the cache).

    ``version``: the site's active version when the caller read it with
    :func:`active_version_columns` in a query of its own; else it is read here.
    """
    active = _active_version(site) if isinstance(version, Unread) else version.version
    if active is None:
        return baseline_for(site)
    compiled = _compiled(active, "refund")
    return ActivePolicy(
        label=active.label,
        number=active.number,
        rules=compiled.source,
        compiled=compiled,
        credit=_compiled(active, "credit"),
        auto_refund=AutoRefund(
            enabled=active.auto_refund_enabled,
            cap_minor=active.auto_refund_cap_minor,
            currency=active.auto_refund_currency,
        ),
        version=active,
    )


def in_force(site_id: str, label: str) -> Guard:
    """The guard a decision's audit append reads with the chain head: the site's active
    version must still be ``label`` (the baseline's when it has none), or
    :class:`PolicyReplaced`. Every version change appends to the same chain, so a decision
    whose append takes the head after this read was made by the version in force."""

    def check(active: Any) -> None:
        if (active or BASELINE_VERSION) != label:
            raise PolicyReplaced(f"decided by {label}; {active or BASELINE_VERSION} is active now")

    return Guard(
        sql="(SELECT 'v' || CAST(v.number AS TEXT) FROM policies_policyversion v "
        "WHERE v.site_id = %s AND v.active = %s)",
        params=(site_id, True),
        check=check,
    )


def active_version_columns(alias: str) -> Columns[PolicyVersion]:
    """The columns :func:`active_policy_for` needs of a version (all but its rules: the
    compile cache has them), for a caller that joins the site's active version
    (``ON v.site_id = … AND v.active``: at most one, by ``policyversion_one_active``)."""
    return cols(PolicyVersion, alias, only=_ALL_BUT_RULES)


def _active_version(site: Site) -> PolicyVersion | None:
    """The site's active version without its rules, in hand-written SQL (``sill.sql``)."""
    version = active_version_columns("v")
    row = fetch_row(
        f"""SELECT {version.sql} FROM policies_policyversion v
        WHERE v.site_id = %s AND v.active = %s
        ORDER BY v.site_id, v.number DESC
        LIMIT 1""",  # noqa: S608  (formatted in: the column list only)
        [site.pk, True],
    )
    return None if row is None else version.build(row)


def rules_digest(rules: list[dict[str, Any]]) -> str:
    """sha256 of the rules' canonical JSON (RFC 8785: key order and numbers normalised)."""
    return hashlib.sha256(rfc8785.dumps(rules)).hexdigest()


def versions_for(site: Site, *, limit: int = 10) -> QuerySet[PolicyVersion]:
    return (
        PolicyVersion.objects.filter(site=site)
        .select_related("created_by")
        .defer("rules")
        .order_by("-number")[:limit]
    )


def preview_for(
    *,
    site: Site,
    rules: list[dict[str, Any]],
    auto_refund: AutoRefund | None = None,
    now: datetime | None = None,
    days: int = PREVIEW_DAYS,
) -> Preview:
    """What validated ``rules`` would have done to the site's refund requests of ``days``, and
    (``credits``) to its customer credits when a rule of the draft or the active version
    applies to credits.

    Compared with the active version on the same stored fact snapshots. ``auto_refund``
    defaults to the active version's settings; it never lifts a credit's hold.
    """
    now = now or timezone.now()
    since = now - timedelta(days=days)
    active = active_policy_for(site)
    draft = compile_policy(rules_for(rules, "refund"))
    preview = simulate(
        draft=draft,
        active=active.compiled,
        auto_refund=auto_refund or active.auto_refund,
        refunds=refund_requests_for(site, since=since),
        days=days,
    )
    credit_draft = compile_policy(rules_for(rules, "credit"))
    if credit_draft.rules or active.credit.rules:
        preview.credits = simulate(
            draft=credit_draft,
            active=active.credit,
            auto_refund=AutoRefund(),  # a credit is decided by its rules alone
            refunds=refund_requests_for(site, since=since, kind=RefundKind.CUSTOMER_CREDIT),
            days=days,
            noun="credit",
        )
    return preview


def refund_requests_for(
    site: Site, *, since: datetime, kind: RefundKind = RefundKind.REFUND
) -> list[SimulatedRefund]:
    """The site's refund requests (or, by ``kind``, customer credit requests) since ``since``
    that reached (or should have reached) a decision: those with a fact snapshot, and older
    ones with an amount but no snapshot. Requests refused before the policy step (no amount,
    no snapshot) are not policy matters.
    """
    rows = (
        # One kind at a time: refunds and credits are decided by the rules that apply to each.
        Refund.objects.filter(site=site, created_at__gte=since, kind=kind)
        .filter(Q(facts__isnull=False) | Q(amount_minor__gt=0))
        .order_by()
        .values_list("id", "facts", "amount_minor", "currency")
    )
    return [SimulatedRefund(id=r[0], facts=r[1], amount_minor=r[2], currency=r[3]) for r in rows]


# --- the compile cache ------------------------------------------------------------------------

_CACHE_SIZE = 512
_cache: OrderedDict[str, CompiledPolicy] = OrderedDict()
_cache_lock = threading.Lock()


def _compile(rules: list[dict[str, Any]], subject: Subject) -> CompiledPolicy:
    # Only the rules that apply to ``subject``; ``source`` keeps every rule of the version.
    return replace(compile_policy(rules_for(rules, subject)), source=tuple(rules))


def _compiled(version: PolicyVersion, subject: Subject) -> CompiledPolicy:
    """Compiled rules of ``version`` that apply to ``subject``, compiled once per distinct
    rule set.

    Keyed by the digest of the rules (not the row id, which a rolled-back test transaction or
    a restored database can hand out again), so a hit always holds these very rules.
    """
    key = f"{version.rules_digest}:{subject}"
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    rules = PolicyVersion.objects.values_list("rules", flat=True).get(pk=version.pk)
    if rules_digest(rules or []) != version.rules_digest:
        # Never trust a digest that does not match its rules: compile without caching.
        return _compile(rules or [], subject)
    compiled = _compile(rules or [], subject)
    with _cache_lock:
        _cache[key] = compiled
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled
