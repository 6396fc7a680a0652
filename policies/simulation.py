"""Preview and simulation: replay stored fact snapshots through a draft policy. Pure.

Each refund request is evaluated with the facts stored at its decision, under the draft and
under the active version, both with the same AUTO-REFUND settings. Requests stored without a
complete snapshot (before the engine) cannot be replayed: they are counted apart, with a
warning that the draft could block more than the preview shows. Customer credits are replayed
the same way through the rules that apply to credits (``policies.subjects``), AUTO-REFUND
never lifting a credit's hold; their figures are a preview of their own (``Preview.credits``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from policies.engine import (
    Action,
    AutoRefund,
    CompiledPolicy,
    apply_auto_refund,
    evaluate,
    prepare_facts,
)
from policies.vocabulary import FACTS_VERSION

OUTCOMES: tuple[str, ...] = ("allow", "auto_refund", "require_approval", "deny")
MAX_CHANGES_LISTED = 20


@dataclass(frozen=True)
class SimulatedRefund:
    id: str
    facts: dict[str, Any] | None
    amount_minor: int
    currency: str


@dataclass
class RuleImpact:
    """What one draft rule would have done (observe rules too: they would have noted it)."""

    id: str
    action: str
    mode: str
    fired: int = 0
    would_deny: int = 0
    would_hold: int = 0
    amounts: dict[str, int] = field(default_factory=dict)  # currency → minor units fired on

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "action": self.action,
            "mode": self.mode,
            "fired": self.fired,
            "wouldDeny": self.would_deny,
            "wouldHold": self.would_hold,
            "amounts": [{"currency": c, "amountMinor": m} for c, m in sorted(self.amounts.items())],
        }


@dataclass(frozen=True)
class Change:
    refund_id: str
    active: str
    draft: str
    amount_minor: int = 0
    currency: str = ""


@dataclass
class Preview:
    days: int
    # What was replayed: "refund" requests, or customer "credit" requests.
    noun: str = "refund"
    total: int = 0
    evaluated: int = 0
    without_snapshot: int = 0
    draft: dict[str, int] = field(default_factory=dict)
    active: dict[str, int] = field(default_factory=dict)
    changed: int = 0
    changes: list[Change] = field(default_factory=list)
    # currency → minor units of every request decided differently (not only those listed).
    changed_amounts: dict[str, int] = field(default_factory=dict)
    rules: list[RuleImpact] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    # The credits' own preview, when the draft or the active version has a rule that applies
    # to credits (otherwise every credit is allowed both ways: nothing to show).
    credits: Preview | None = None

    @property
    def warning(self) -> str | None:
        if not self.without_snapshot:
            return None
        return (
            f"{self.without_snapshot} {self.noun} request(s) of the last {self.days} days were "
            "stored without a fact snapshot and are not counted: these rules could hold or "
            "deny more than this preview shows."
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "total": self.total,
            "evaluated": self.evaluated,
            "withoutSnapshot": self.without_snapshot,
            "warning": self.warning,
            "outcomes": {"draft": self.draft, "active": self.active},
            "changed": self.changed,
            "changes": [
                {
                    "refundId": c.refund_id,
                    "active": c.active,
                    "draft": c.draft,
                    "amountMinor": c.amount_minor,
                    "currency": c.currency,
                }
                for c in self.changes
            ],
            "changedAmounts": [
                {"currency": c, "amountMinor": m} for c, m in sorted(self.changed_amounts.items())
            ],
            "rules": [r.as_dict() for r in self.rules],
            "diff": {"added": self.added, "removed": self.removed, "changed": self.modified},
            "credits": self.credits.as_dict() if self.credits is not None else None,
        }


def has_snapshot(facts: Any) -> bool:
    return isinstance(facts, dict) and facts.get("factsVersion") == FACTS_VERSION


def simulate(
    *,
    draft: CompiledPolicy,
    active: CompiledPolicy,
    auto_refund: AutoRefund,
    refunds: Iterable[SimulatedRefund],
    days: int,
    noun: str = "refund",
) -> Preview:
    preview = Preview(days=days, noun=noun)
    impacts = {r.id: RuleImpact(r.id, r.fired.action, r.fired.mode) for r in draft.rules}
    draft_counts: Counter[str] = Counter()
    active_counts: Counter[str] = Counter()
    for refund in refunds:
        preview.total += 1
        snapshot = refund.facts
        if not has_snapshot(snapshot):
            preview.without_snapshot += 1
            continue
        assert snapshot is not None
        preview.evaluated += 1
        facts = prepare_facts(snapshot)
        draft_eval = evaluate(draft, facts)
        draft_outcome = _outcome(draft_eval.action, auto_refund, snapshot)
        active_outcome = _outcome(evaluate(active, facts).action, auto_refund, snapshot)
        draft_counts[draft_outcome] += 1
        active_counts[active_outcome] += 1
        if draft_outcome != active_outcome:
            preview.changed += 1
            preview.changed_amounts[refund.currency] = (
                preview.changed_amounts.get(refund.currency, 0) + refund.amount_minor
            )
            if len(preview.changes) < MAX_CHANGES_LISTED:
                preview.changes.append(
                    Change(
                        refund.id,
                        active_outcome,
                        draft_outcome,
                        refund.amount_minor,
                        refund.currency,
                    )
                )
        for fired in draft_eval.fired:
            impact = impacts[fired.id]
            impact.fired += 1
            if fired.action == "deny":
                impact.would_deny += 1
            elif fired.action == "require_approval":
                impact.would_hold += 1
            impact.amounts[refund.currency] = (
                impact.amounts.get(refund.currency, 0) + refund.amount_minor
            )
    preview.draft = {o: draft_counts[o] for o in OUTCOMES}
    preview.active = {o: active_counts[o] for o in OUTCOMES}
    preview.rules = list(impacts.values())
    _diff_rules(preview, draft, active)
    return preview


def _outcome(action: Action, auto_refund: AutoRefund, snapshot: dict[str, Any]) -> str:
    final, auto = apply_auto_refund(action, auto_refund, snapshot)
    return "auto_refund" if auto else final


def _diff_rules(preview: Preview, draft: CompiledPolicy, active: CompiledPolicy) -> None:
    before = {r["id"]: r for r in active.source}
    after = {r["id"]: r for r in draft.source}
    preview.added = [i for i in after if i not in before]
    preview.removed = [i for i in before if i not in after]
    preview.modified = [i for i in after if i in before and after[i] != before[i]]
