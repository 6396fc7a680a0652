"""One refund's history as a timeline: request → decision → review → settlement → outside.

Built from the refund's signed audit records (``audit.selectors.records_about``, one indexed
query) and its ``Refund`` row: each record-backed entry names its ``seq`` and hash, so a reader
can find it in an export; entries without a record (the mandate as received, a step still to
come) have ``seq`` None. Everything is said in words: rules by their catalog titles, facts by
the policy vocabulary's labels, codes through ``refunds.labels``. The rules a decision names
are looked up in the policy version the decision record names (one query), to say what each
rule read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.utils.dateparse import parse_datetime

from audit.models import AuditRecord
from audit.selectors import records_about
from policies.models import PolicyVersion
from policies.types import BASELINE_VERSION
from policies.vocabulary import FACTS, describe_condition, one_currency
from refunds.labels import (
    REASON_LABELS,
    fact_label,
    fact_value,
    failure_line,
    failure_words,
    humanize,
    labelled_rule,
    money_words,
    outcome_label,
    percent_text,
    rail_label,
    reason_label,
    refused_approval,
    requester_label,
)
from refunds.models import DecidedVia, Refund, RefundOrigin, RefundStatus
from refunds.review.slack import SLACK_NOTE
from sill.money import Money, MoneyError, format_money

DECISION = frozenset({"approved", "escalated", "rejected"})
REVIEW = frozenset({"escalated_approved", "escalated_rejected"})
SETTLEMENT = frozenset({"settlement"})
# What happened to the refund after (or beside) its settlement, reported by Sill or the rail.
OUTSIDE = frozenset(
    {
        "refund_reversed",
        "needs_attention",
        "attention_resolved",
        "failure_handled",
        "lease_lost",
        "reconciliation_found",
        "reconciliation_resolved",
    }
)
STAGES = ("request", "decision", "review", "settlement", "outside")
STAGE_LABELS = {
    "request": "Request",
    "decision": "Decision",
    "review": "Review",
    "settlement": "Settlement",
    "outside": "Afterwards",
}
# The mandate as received is shown folded; a bigger body is cut (it stays whole in the bundle).
MANDATE_SHOWN_BYTES = 20_000


@dataclass(frozen=True)
class Condition:
    """One condition of a fired rule: what it tests, and the value it read."""

    text: str  # "Refund amount in USD > $0.00"
    read: str  # "$89.00"


@dataclass(frozen=True)
class RuleLine:
    title: str
    action_label: str
    mode_label: str
    rule_id: str
    conditions: list[Condition] = field(default_factory=list)


@dataclass(frozen=True)
class FactLine:
    label: str
    value: str


@dataclass(frozen=True)
class Entry:
    """One step of the timeline. ``lines`` are (label, value) pairs already in words."""

    stage: str
    title: str
    tone: str  # ok | warn | bad | info | muted (a badge tone)
    at: datetime | None
    seq: int | None = None
    hash: str = ""
    lines: list[tuple[str, str]] = field(default_factory=list)
    rules: list[RuleLine] = field(default_factory=list)
    facts: list[FactLine] = field(default_factory=list)
    raw: str = ""  # the raw JSON the entry is built from (facts, or the mandate), folded
    raw_label: str = ""
    note: str = ""
    pending: bool = False  # a step that has not happened yet

    @property
    def stage_label(self) -> str:
        return STAGE_LABELS[self.stage]


def timeline_for(refund: Refund) -> list[Entry]:
    """``refund``'s entries in order. Queries: the records, and at most one policy version."""
    records = list(records_about(site=refund.site, refund_id=refund.pk))
    bodies = {record.seq: _body(record) for record in records}
    versions = _versions(refund, [bodies[r.seq] for r in records if r.kind in DECISION])
    entries = [_request(refund)]
    for record in records:
        body = bodies[record.seq]
        if record.kind in DECISION:
            entries.append(_decision(refund, record, body, versions))
        elif record.kind in REVIEW:
            entries.append(_review(record, body))
        elif record.kind in SETTLEMENT:
            entries.append(_settlement(refund, record, body))
        else:
            entries.append(_outside(refund, record, body))
    entries.extend(_still_to_come(refund, {r.kind for r in records}))
    return entries


# --- the steps --------------------------------------------------------------------------------


def _request(refund: Refund) -> Entry:
    """The mandate (agent refunds) or the staff member's form, from the Refund row."""
    lines = [("Reason", reason_label(refund)), ("Amount asked", format_money(refund.amount))]
    if refund.reason_path and refund.reason_path != refund.reason_label:
        lines.insert(1, ("Reason path", refund.reason_path))
    mandate = refund.mandate
    if refund.origin == RefundOrigin.AGENT:
        # The agent by the name the merchant gave it; its id (what the mandate names) below.
        agent_id = requester_label(refund)
        name = refund.agent.name if refund.agent is not None else ""
        title = f"Agent {name or agent_id} sent a signed mandate"
        if name:
            lines.append(("Agent id", agent_id))
        raw = ""
        if mandate is not None:
            lines += [
                ("Mandate", mandate.mandate_id),
                ("Signed with key", mandate.key_id),
                ("Body SHA-256", mandate.body_sha256),
            ]
            raw = _mandate_text(bytes(mandate.raw))
        return Entry(
            stage="request",
            title=title,
            tone="info",
            at=mandate.received_at if mandate is not None else refund.created_at,
            lines=lines,
            raw=raw,
            raw_label="The mandate as received",
            # No note: an agent writes none; a rejection's is Sill's, said under the decision.
        )
    return Entry(
        stage="request",
        title=f"Staff member {requester_label(refund)} asked for a refund",
        tone="info",
        at=refund.created_at,
        lines=lines,
        note=refund.note,
    )


def _decision(
    refund: Refund,
    record: AuditRecord,
    body: dict[str, Any],
    versions: dict[str, dict[str, dict[str, Any]]],
) -> Entry:
    recorded = body.get("facts")
    facts: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    currency = str(body.get("currency") or refund.currency)
    rules_by_id = versions.get(str(body.get("policy_version") or ""), {})
    rules = [
        _rule_line(rule, rules_by_id.get(str(rule.get("id"))), facts, currency)
        for rule in body.get("rules") or []
        if isinstance(rule, dict) and rule.get("id")
    ]
    titles = {
        "approved": "Approved by the rules",
        "escalated": "Held for review by the rules",
        "rejected": "Rejected",
    }
    lines: list[tuple[str, str]] = []
    if record.kind == "rejected" and body.get("reason"):
        why = outcome_label(str(body["reason"]))
        if refund.origin == RefundOrigin.AGENT and body.get("note"):
            # The refusal in full, which Sill kept (an agent writes no note of its own).
            why = f"{why}: {body['note']}"
        lines.append(("Why", why))
    version = str(body.get("policy_version") or "")
    if version:
        lines.append(("Rules version", _version_words(version)))
    if body.get("auto_refund") is True:
        lines.append(("Auto-refund", "approved under the auto-refund cap"))
    if not rules and record.kind != "rejected":
        lines.append(("Rules", "No rule fired"))
    return Entry(
        stage="decision",
        title=titles.get(record.kind, record.get_kind_display()),
        tone={"approved": "ok", "escalated": "warn"}.get(record.kind, "bad"),
        at=record.created_at,
        seq=record.seq,
        hash=record.hash,
        lines=lines,
        rules=rules,
        facts=[
            FactLine(_fact_name(key, credit=refund.is_credit), _fact_text(key, value, currency))
            for key, value in facts.items()
            if key not in ("currency", "factsVersion")
        ],
        raw=json.dumps(facts, indent=2, sort_keys=True, ensure_ascii=False) if facts else "",
        raw_label="The facts as recorded",
    )


def _review(record: AuditRecord, body: dict[str, Any]) -> Entry:
    approved = record.kind == "escalated_approved"
    reviewer = body.get("reviewer")
    # Where the button was pressed, from the record's own field ("in Slack", "in Sill"); older
    # records have none, and say where only in their note.
    via = str(body.get("via") or "")
    where = f" {DecidedVia(via).label}" if via in DecidedVia.values else ""
    note = str(body.get("note") or "")
    if via == DecidedVia.SLACK and note == SLACK_NOTE:
        note = ""  # Sill's words, said by ``where``; not a note the person typed
    lines: list[tuple[str, str]] = []
    if reviewer and not approved and refused_approval(str(body.get("reason") or "")):
        # They pressed Approve; Sill refused it (a dispute, less left, the rail off).
        title = f"Approved by {reviewer}{where}; Sill refused it"
    elif reviewer:
        title = f"{'Approved' if approved else 'Rejected'} by {reviewer}{where}"
    elif body.get("reason") == "expired":
        title = "Expired: nobody decided within 24 hours"
    else:
        title = "Approved" if approved else "Rejected"
    acted_by = body.get("acted_by")
    if acted_by and acted_by != reviewer:
        lines.append(("Pressed by", f"{acted_by}{where}"))
    if not approved and body.get("reason") and body.get("reason") != "expired":
        lines.append(("Outcome", outcome_label(str(body["reason"]))))
    return Entry(
        stage="review",
        title=title,
        tone="ok" if approved else ("muted" if body.get("reason") == "expired" else "bad"),
        at=_parsed(body.get("decided_at")) or record.created_at,
        seq=record.seq,
        hash=record.hash,
        lines=lines,
        note=note,
    )


def _settlement(refund: Refund, record: AuditRecord, body: dict[str, Any]) -> Entry:
    rail = rail_label(str(body.get("rail") or ""))
    amount = _money(body)
    failed = body.get("outcome") == "failed"
    lines = [("Rail", rail), ("Amount", amount)]
    if body.get("provider_refund_id"):
        lines.append((_provider_id_label(refund), str(body["provider_refund_id"])))
    if failed:
        # Sill's words, then the rail's, as the page's Outcome above says it.
        why = failure_words(str(body.get("reason") or ""), str(body.get("message") or ""))
        lines.append(("Why", failure_line(*why)))
    if body.get("resolved_by"):
        lines.append(("Recorded by", str(body["resolved_by"])))
    return Entry(
        stage="settlement",
        title=(
            f"{money_words(refund)[0].capitalize()} failed on {rail}"
            if failed
            else f"{amount} credited to the customer's {rail} balance"
            if refund.is_credit
            else f"{amount} refunded on {rail}"
        ),
        tone="bad" if failed else "ok",
        at=_parsed(body.get("settled_at")) or record.created_at,
        seq=record.seq,
        hash=record.hash,
        lines=lines,
    )


def _provider_id_label(refund: Refund) -> str:
    # A credit's rail id is the customer balance transaction Stripe made (cbtxn_…).
    return "Balance transaction id" if refund.is_credit else "Rail refund id"


def _outside(refund: Refund, record: AuditRecord, body: dict[str, Any]) -> Entry:
    kind = record.kind
    noun, done = money_words(refund)
    lines: list[tuple[str, str]] = []
    tone = "warn"
    if kind == "refund_reversed":
        title = f"The rail reported the {noun} failed after settlement"
        tone = "bad"
        lines += [("What the rail said", str(body.get("message") or "—"))]
        if body.get("source"):
            lines.append(("Reported by", str(body["source"])))
    elif kind == "needs_attention":
        made = str(body.get("provider_refund_id") or "")
        if made:  # the rail made it, by this id; Sill could not record it (execution.py)
            rail = rail_label(refund.rail)
            title = f"Needs attention: {rail} made the {noun}; Sill could not record it"
        else:
            title = f"Needs attention: the rail has not confirmed the {noun}"
        tone = "bad"
        why = failure_words(
            str(body.get("reason") or ""), str(body.get("message") or ""), attention=True
        )
        lines += [("Why", failure_line(*why)), ("Attempts", str(body.get("attempts", "—")))]
        if made:
            lines.append((_provider_id_label(refund), made))
    elif kind == "attention_resolved":
        outcome = done if body.get("outcome") == "refunded" else f"not {done}"
        title = f"Resolved by {body.get('resolved_by') or 'an owner'}: {outcome}"
        tone = "ok"
        if body.get("provider_refund_id"):
            lines.append((_provider_id_label(refund), str(body["provider_refund_id"])))
        if body.get("resolution_note"):
            lines.append(("Note", str(body["resolution_note"])))
    elif kind == "failure_handled":
        title = f"Marked handled by {body.get('resolved_by') or 'an owner or admin'}"
        tone = "ok"
        lines.append(("What it means", "Off the to-do lists; nothing moved, and it stays failed"))
        if body.get("resolution_note"):
            lines.append(("Note", str(body["resolution_note"])))
    elif kind == "reconciliation_found":
        title = "Reconciliation found a difference with the rail"
        lines += [
            ("Difference", str(body.get("detail") or body.get("kind") or "—")),
            ("Sill says", _amount_of(body.get("sill_amount_minor"), body.get("currency"))),
            (
                "The rail says",
                _amount_of(body.get("rail_amount_minor"), body.get("rail_currency"))
                if body.get("rail_currency")
                else _amount_of(body.get("rail_amount_minor"), body.get("currency")),
            ),
        ]
    elif kind == "reconciliation_resolved":
        title = f"Reconciliation difference resolved by {body.get('resolved_by') or 'Sill'}"
        tone = "ok"
        lines.append(("Resolution", str(body.get("resolution") or "—").replace("_", " ")))
        if body.get("resolution_note"):
            lines.append(("Note", str(body["resolution_note"])))
    else:
        title = record.get_kind_display()
        tone = "muted"
    return Entry(
        stage="outside",
        title=title,
        tone=tone,
        at=record.created_at,
        seq=record.seq,
        hash=record.hash,
        lines=lines,
    )


def _still_to_come(refund: Refund, kinds: set[str]) -> list[Entry]:
    """A placeholder for the next step of a refund still on its way."""
    if refund.status == RefundStatus.HELD and not kinds & REVIEW:
        return [
            Entry(
                stage="review",
                title="Waiting for an owner or admin to approve or reject",
                tone="warn",
                at=refund.expires_at,
                lines=[
                    ("If nobody decides", f"it expires and nothing is {money_words(refund)[1]}")
                ],
                pending=True,
            )
        ]
    if refund.status == RefundStatus.PROCESSING and not kinds & SETTLEMENT:
        return [
            Entry(
                stage="settlement",
                title=(
                    f"Crediting {format_money(refund.amount)} to the customer's "
                    f"{rail_label(refund.rail)} balance"
                    if refund.is_credit
                    else f"Refunding {format_money(refund.amount)} on {rail_label(refund.rail)}"
                ),
                tone="info",
                at=None,
                pending=True,
            )
        ]
    return []


# --- rules and facts in words -----------------------------------------------------------------


def _versions(refund: Refund, bodies: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The rules (by id) of the policy versions the decision records name: one query."""
    numbers: dict[int, str] = {}
    for body in bodies:
        label = str(body.get("policy_version") or "")
        if label.startswith("v") and label[1:].isdigit():
            numbers[int(label[1:])] = label
    if not numbers:
        return {}
    found: dict[str, dict[str, dict[str, Any]]] = {}
    rows = PolicyVersion.objects.filter(site_id=refund.site_id, number__in=list(numbers))
    for number, rules in rows.values_list("number", "rules"):
        found[numbers[number]] = {
            str(rule.get("id")): rule for rule in rules or [] if isinstance(rule, dict)
        }
    return found


def _version_words(label: str) -> str:
    """``v3`` → "v3"; the baseline (``v1-default``) as what it is."""
    if label == BASELINE_VERSION:
        return f"Sill's defaults ({label})"
    return label


def _rule_line(
    fired: dict[str, Any], source: dict[str, Any] | None, facts: dict[str, Any], currency: str
) -> RuleLine:
    labelled = labelled_rule(fired)
    conditions = []
    when = source.get("when") if source else None
    if isinstance(when, dict):
        for fact, cond in when.items():
            read = _fact_text(fact, facts[fact], currency) if fact in facts else "not recorded"
            text = describe_condition(fact, cond, one_currency(when))
            conditions.append(Condition(text=text, read=read))
    return RuleLine(
        title=labelled["title"],
        action_label=labelled["action_label"],
        mode_label=labelled["mode_label"],
        rule_id=str(fired.get("id")),
        conditions=conditions,
    )


# The refund facts a credit's decision reads too, as its page names them.
_CREDIT_FACT_NAMES = {
    "refundAmount": "Credit amount",
    "refundAmountUsd": "Credit amount in USD",
    "refundAgentTotalTodayUsd": "Agent's refunds and credits today in USD",
}


def _fact_name(key: str, *, credit: bool = False) -> str:
    if credit and key in _CREDIT_FACT_NAMES:
        return _CREDIT_FACT_NAMES[key]
    spec = FACTS.get(key)
    return spec.label if spec else fact_label(key)


def _fact_text(key: str, value: Any, currency: str) -> str:
    """A recorded fact's value as the vocabulary means it (minor units, USD cents, ratios)."""
    spec = FACTS.get(key)
    kind = spec.kind if spec else ""
    if isinstance(value, dict) and value.get("truncated") is True:
        return f"at least {_fact_text(key, value.get('value'), currency)}"
    if isinstance(value, dict) and {"num", "den"} <= value.keys():
        try:
            share = Decimal(int(value["num"])) / Decimal(int(value["den"])) * 100
        except (ArithmeticError, TypeError, ValueError):
            return fact_value(key, value, currency)
        return percent_text(share.quantize(Decimal("0.1")))
    if value is None:
        return "unknown"
    if isinstance(value, int) and not isinstance(value, bool):
        if kind == "usd":
            return _amount_of(value, "USD")
        if kind == "amount":
            return _amount_of(value, currency)
        if kind == "days":
            return f"{value} day{'s' if value != 1 else ''}"
    if key == "rail" and isinstance(value, str):
        return rail_label(value)
    if key == "refundReason" and isinstance(value, str):
        return "none given" if value == "none" else REASON_LABELS.get(value, humanize(value))
    if key == "refundOrigin" and isinstance(value, str):
        return humanize(value)
    if isinstance(value, str) and kind in ("enum", "text"):
        return value.replace("_", " ")
    return fact_value(key, value, currency)


# --- small readers ----------------------------------------------------------------------------


def _body(record: AuditRecord) -> dict[str, Any]:
    try:
        body = json.loads(record.payload).get("body", {})
    except (ValueError, AttributeError):  # `audit verify` reports a broken record
        return {}
    return body if isinstance(body, dict) else {}


def _money(body: dict[str, Any]) -> str:
    return _amount_of(body.get("amount_minor"), body.get("currency"))


def _amount_of(minor: Any, currency: Any) -> str:
    if isinstance(minor, int) and isinstance(currency, str):
        try:
            return format_money(Money(minor, currency))
        except MoneyError:
            pass
    return "—"


def _parsed(text: Any) -> datetime | None:
    return parse_datetime(text) if isinstance(text, str) else None


def _mandate_text(raw: bytes) -> str:
    """The mandate's bytes, indented when they are JSON (they are what was signed)."""
    try:
        text = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except ValueError:  # not JSON after all: shown as text
        text = raw[:MANDATE_SHOWN_BYTES].decode("utf-8", errors="replace")
    return text[:MANDATE_SHOWN_BYTES]
