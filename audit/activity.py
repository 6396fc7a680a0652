"""Activity's reads: filters, rows in words (badge, actor, order number), and the exports.

The page and both exports read the same filtered records (:class:`ActivityFilters`): kind,
refund id (the indexed subject column, exact), and days from/to in the site's time zone.
Rows are built from each record's signed body; order numbers for a page (or an export chunk)
are looked up in one query. The JSONL export is the stored records exactly as signed (the
chain fields), the CSV a spreadsheet's view of them, every cell safe from formula injection.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from django.db.models import QuerySet
from django.http import QueryDict, StreamingHttpResponse
from django.urls import NoReverseMatch, reverse

from audit.chain import SUBJECT_MAX_LENGTH
from audit.models import DECISION_KINDS, AuditKind, AuditRecord
from refunds.models import DecidedVia
from sill.accounts.models import Agent, Site
from sill.days import day_bounds
from sill.money import Money, MoneyError
from sill.orders.models import Order
from sill.outcomes import humanize, outcome_label
from sill.rails.base import rail_label

EXPORT_CHUNK = 500
# The stored record, as signed and chained: what the JSONL export writes, one per line.
JSONL_FIELDS = ("seq", "kind", "payload", "prev_hash", "hash", "signature", "key_id")
# "detail" last, where a spreadsheet reading the older columns by position still finds them.
CSV_HEADER = ["seq", "time", "kind", "refund", "order", "amount", "currency", "actor", "detail"]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Records no person made: who they are "by" in words.
SYSTEM = "Sill"
# Why Sill refused a purchase mandate when it arrived (refunds.agent.intake signs the refusal
# as a ``rejected`` record with ``"kind": "purchase"``, as it signs an acceptance ``approved``),
# in words; the order page says the same.
PURCHASE_REFUSALS = {"rail_disabled": "the rail is off or can't take payments"}


# --- filters --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActivityFilters:
    """Activity's filters, parsed from the query string (bad input is ignored, not an error)."""

    kind: str = ""
    refund: str = ""
    date_from: date | None = None
    date_to: date | None = None

    @classmethod
    def from_query(cls, query: QueryDict) -> ActivityFilters:
        kind = query.get("kind", "")
        return cls(
            kind=kind if kind in AuditKind.values else "",
            refund=query.get("refund", "").strip()[:SUBJECT_MAX_LENGTH],
            date_from=_day(query.get("from", "")),
            date_to=_day(query.get("to", "")),
        )

    @property
    def active(self) -> bool:
        return bool(self.kind or self.refund or self.date_from or self.date_to)

    @property
    def query(self) -> str:
        """The filters as a query string (no page), for links that keep them."""
        pairs = {
            "kind": self.kind,
            "refund": self.refund,
            "from": self.date_from.isoformat() if self.date_from else "",
            "to": self.date_to.isoformat() if self.date_to else "",
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    def apply(self, records: QuerySet[AuditRecord], zone: ZoneInfo) -> QuerySet[AuditRecord]:
        """``records`` narrowed by these filters; the days are whole days in ``zone``."""
        if self.kind:
            records = records.filter(kind=self.kind)
        if self.refund:
            records = records.filter(subject_refund_id=self.refund)
        start, end = day_bounds(self.date_from, self.date_to, zone)
        if start is not None:
            records = records.filter(created_at__gte=start)
        if end is not None:
            records = records.filter(created_at__lt=end)
        return records


def _day(text: str) -> date | None:
    try:
        return date.fromisoformat(text.strip()[:10])
    except ValueError:
        return None


def filtered_records(site: Site, filters: ActivityFilters) -> QuerySet[AuditRecord]:
    """The site's records under ``filters``, in chain order."""
    return filters.apply(AuditRecord.objects.filter(site=site), site.zone).order_by("seq")


# --- rows -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActivityRow:
    record: AuditRecord
    body: dict[str, Any]
    amount: Money | None
    by: str
    order_number: str = ""
    # A small tag beside the kind ("auto-refund", "auto-refund on"), from what the body says.
    tag: str = ""
    # One line saying what an administrative or policy record changed ("" for the others).
    summary: str = ""
    # The name of the site's agent ``by`` is the id of, which the page shows first ("" when
    # a person, Sill or the rail acted, or the agent is no longer on the site).
    agent_name: str = ""
    # Where the person who decided a held refund pressed the button ("in Slack", "in Sill"),
    # as the refund page says it; "" for other records and older decisions that do not say.
    where: str = ""

    @property
    def by_words(self) -> str:
        """Who acted and, for a held refund's decision, where: the "By" cell and the CSV's
        actor ("owner@… in Slack")."""
        return f"{self.by} {self.where}" if self.by and self.where else self.by

    @property
    def by_named(self) -> str:
        """Who acted, named as the page names them: :attr:`by_words`, or an agent by its name
        with its id beside it ("Test shopper (agent_test_shopper)"), the CSV's actor."""
        return f"{self.agent_name} ({self.by})" if self.agent_name else self.by_words

    @property
    def refund_id(self) -> str:
        value = self.body.get("refund_id")
        return value if isinstance(value, str) else ""

    @property
    def reason(self) -> str:
        """The body's reason code, shown under the refund; a purchase's refusal says its reason
        in the summary instead (there is no refund to show it under)."""
        value = self.body.get("reason")
        return value if isinstance(value, str) and not _is_purchase(self.body) else ""

    @property
    def reason_words(self) -> str:
        """The reason in the refund pages' words ("More than is still refundable"), not its
        code humanized ("Exceeds refundable")."""
        return outcome_label(self.reason)

    @property
    def detail(self) -> str:
        """The row's words in one cell (the CSV's last column): its summary, else its reason."""
        return self.summary or self.reason_words

    @property
    def order_id(self) -> str:
        value = self.body.get("order_id")
        return value if isinstance(value, str) else ""

    # Links to the refund and order pages; none for an id no such path can hold (a payload
    # edited in the database: listed as text, and `audit verify` reports it), not a 500.
    @property
    def refund_url(self) -> str:
        return _url("refunds:detail", self.refund_id)

    @property
    def order_url(self) -> str:
        return _url("orders:detail", self.order_id)


def _url(name: str, value: str) -> str:
    try:
        return reverse(name, args=[value]) if value else ""
    except NoReverseMatch:
        return ""


def rows_for(site: Site, records: Iterable[AuditRecord]) -> list[ActivityRow]:
    """``records`` as rows; their order numbers in one query, their agents' names in one."""
    parsed = [(record, body_of(record)) for record in records]
    numbers = order_numbers(site, {b["order_id"] for _, b in parsed if _is_id(b.get("order_id"))})
    agent_ids = {b["agent_id"] for _, b in parsed if _is_id(b.get("agent_id"))}
    agents = Agent.objects.filter(site=site, agent_id__in=agent_ids)
    names = dict(agents.values_list("agent_id", "name")) if agent_ids else {}
    return [_row(record, body, numbers, names) for record, body in parsed]


def order_numbers(site: Site, order_ids: set[str]) -> dict[str, str]:
    """Order id → number for ``order_ids`` of ``site`` (one query; none for no ids)."""
    if not order_ids:
        return {}
    rows = Order.objects.filter(site=site, pk__in=order_ids).values_list("pk", "number")
    return {pk: str(number) for pk, number in rows}


def body_of(record: AuditRecord) -> dict[str, Any]:
    try:
        body = json.loads(record.payload).get("body", {})
    except (ValueError, AttributeError, RecursionError):
        return {}  # shown as-is; `audit verify` reports the record
    return body if isinstance(body, dict) else {}


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _is_purchase(body: dict[str, Any]) -> bool:
    return body.get("kind") == "purchase"


def _row(
    record: AuditRecord, body: dict[str, Any], numbers: dict[str, str], names: dict[str, str]
) -> ActivityRow:
    amount = None
    if isinstance(body.get("amount_minor"), int) and isinstance(body.get("currency"), str):
        try:
            amount = Money(body["amount_minor"], body["currency"])
        except MoneyError:
            amount = None
    order_id = body.get("order_id")
    by = actor_of(record.kind, body)
    return ActivityRow(
        record=record,
        body=body,
        amount=amount,
        by=by,
        # Only when the record's actor is its agent: a settlement names the agent that asked
        # but is by Sill.
        agent_name=names.get(by, "") if by == body.get("agent_id") else "",
        order_number=numbers.get(order_id, "") if isinstance(order_id, str) else "",
        tag=tag_of(record.kind, body),
        summary=summary_of(record.kind, body),
        where=where_of(record.kind, body),
    )


@dataclass(frozen=True)
class PurchaseRefusal:
    """What the order page says of the purchase Sill refused when its mandate arrived."""

    record: AuditRecord
    words: str  # "Purchase refused: the rail is off or can't take payments"


def purchase_refusal_of(order: Order) -> PurchaseRefusal | None:
    """The signed refusal of the purchase that placed ``order`` (one indexed query), or None."""
    records = AuditRecord.objects.filter(
        site_id=order.site_id, subject_order_id=order.pk, kind=AuditKind.REJECTED
    ).order_by("seq")
    for record in records:
        body = body_of(record)
        if _is_purchase(body):
            return PurchaseRefusal(record=record, words=summary_of(record.kind, body))
    return None


def purchase_approval_of(order: Order) -> AuditRecord | None:
    """The signed approval of the purchase that placed ``order`` (one indexed query), or None:
    Sill's decision on the agent's mandate, written before any charge was tried."""
    records = AuditRecord.objects.filter(
        site_id=order.site_id, subject_order_id=order.pk, kind=AuditKind.APPROVED
    ).order_by("seq")
    return next((record for record in records if _is_purchase(body_of(record))), None)


def tag_of(kind: str, body: dict[str, Any]) -> str:
    """What the body says about auto-refund, if anything.

    A decision's ``auto_refund`` is a boolean (approved under the auto-refund cap); a policy
    change's is the whole setting (``{"enabled", …}``), always present, so only a change *of*
    that setting is tagged, with its new state.
    """
    if kind in DECISION_KINDS:
        return "auto-refund" if body.get("auto_refund") is True else ""
    if kind == AuditKind.POLICY_CHANGE and body.get("change") == "set_auto_refund":
        return "auto-refund on" if body.get("enabled") is True else "auto-refund off"
    return ""


# Who acted, by the keys each kind's body uses (the first one present wins):
#   actor_name  member, agent, key and rail changes (sill.accounts.admin_audit)
#   actor       policy and reason changes, Shopify connects
#   reviewer    a held refund's approval or rejection; acted_by who pressed the button
#   resolved_by attention resolved, a reconciliation item resolved, a settlement recorded by hand
_PERSON_KEYS = ("actor_name", "actor", "reviewer", "acted_by", "resolved_by")
# Kinds Sill or the rail writes on its own; the refund's requester did not do them.
_BY_SILL = frozenset(
    {
        AuditKind.SETTLEMENT,
        AuditKind.NEEDS_ATTENTION,
        AuditKind.LEASE_LOST,
        AuditKind.RECONCILIATION_FOUND,
    }
)
_BY_RAIL = frozenset(
    {AuditKind.EXTERNAL_REFUND, AuditKind.DISPUTE, AuditKind.REFUND_REVERSED, AuditKind.CHARGE}
)


def actor_of(kind: str, body: dict[str, Any]) -> str:
    """The person (or agent, or Sill, or the rail) a record names as having acted."""
    for key in _PERSON_KEYS:
        if _is_id(body.get(key)):
            return str(body[key])
    if kind == AuditKind.ESCALATED_REJECTED and body.get("reason") == "expired":
        return f"{SYSTEM} (expired)"
    if kind in _BY_RAIL:
        rail = str(body.get("rail") or "")
        if kind == AuditKind.CHARGE and _is_id(body.get("agent_id")):
            return str(body["agent_id"])
        return rail_label(rail) if rail else SYSTEM
    if kind in _BY_SILL:
        return SYSTEM
    for key in ("agent_id", "requested_by"):
        if _is_id(body.get(key)):
            return str(body[key])
    return SYSTEM if kind in DECISION_KINDS or "actor" in body else ""


def where_of(kind: str, body: dict[str, Any]) -> str:
    """Where a decision's person pressed the button, from the record's ``via`` ("in Slack",
    "in Sill"); "" when Sill decided on its own (no ``via``) or the record is older than it."""
    via = body.get("via")
    return DecidedVia(via).label if kind in DECISION_KINDS and via in DecidedVia.values else ""


_VERBS = {
    "add": "added",
    "remove": "removed",
    "password_set": "password set by an operator",
    "create": "created",
    "deactivate": "deactivated",
    "reactivate": "reactivated",
    "revoke": "revoked",
    "replace": "replaced",
    "connect": "connected",
    "update": "settings saved",
    "enable": "switched on",
    "disable": "switched off",
    "delete": "deleted",
    "move_away": "moved to another site",
}


_INVITE_WORDS = {
    "invite": "invited as {role}",
    "invite_resend": "invitation resent",
    "invite_revoke": "invitation withdrawn",
    "invite_accept": "joined as {role} by invitation",
}


# A member's or an agent's API token (the record names its prefix, never the token).
_TOKEN_WORDS = {"issue_token": "issued", "revoke_token": "revoked"}


def _token_said(action: str, body: dict[str, Any]) -> str:
    return f"API token {body.get('token_prefix', '')}… {_TOKEN_WORDS[action]}"


def summary_of(kind: str, body: dict[str, Any]) -> str:
    """Words for policy, member, agent, key and rail changes, for what an owner recorded of a
    charge that needed attention, and for a purchase accepted or refused (never a secret:
    bodies hold none)."""
    action = str(body.get("action", ""))
    verb = _VERBS.get(action, action.replace("_", " "))
    if kind == AuditKind.REJECTED and _is_purchase(body):
        reason = str(body.get("reason") or "")
        return f"Purchase refused: {PURCHASE_REFUSALS.get(reason, humanize(reason).lower())}"
    if kind == AuditKind.APPROVED and _is_purchase(body):
        # Taken before it is charged: the charge's own record (kind charge) follows.
        return f"Purchase approved, to be charged on {rail_label(str(body.get('rail', '')))}"
    if kind == AuditKind.ATTENTION_RESOLVED and _is_id(body.get("charge_id")):
        # A purchase's charge (sill.orders.charge_attention); a refund's names its refund.
        if body.get("outcome") == "charged":
            shown = body.get("provider_charge_id") or body.get("provider_payment_id") or "?"
            return f"Charge recorded as charged ({shown})"
        return "Charge recorded as not charged; the order was cancelled"
    if kind == AuditKind.POLICY_CHANGE:
        version = f"{body.get('previous_version', '?')} → {body.get('version', '?')}"
        return f"{body.get('summary') or 'Rules changed'} ({version})"
    if kind == AuditKind.MEMBER_CHANGE:
        who = body.get("member", "")
        if action == "role_change":
            before = (body.get("before") or {}).get("role", "?")
            return f"{who}: {before} → {body.get('role')}"
        if action == "add":
            return f"{who}: added as {body.get('role')}"
        if action in _TOKEN_WORDS:
            return f"{who}: {_token_said(action, body)}"
        if action in _INVITE_WORDS:
            said = f"{who}: {_INVITE_WORDS[action]}".replace("{role}", str(body.get("role")))
            if body.get("reason") == "inviter_lost_role":
                said += " (whoever sent it may no longer invite as that role)"
            return said
        return f"{who}: {verb}"
    if kind == AuditKind.AGENT_CHANGE:
        agent = body.get("agent_id", "")
        if action in _TOKEN_WORDS:
            return f"Agent {agent}: {_token_said(action, body)}"
        return f"Agent {agent} {verb}"
    if kind == AuditKind.KEY_CHANGE and body.get("change") == "audit_key_rotated":
        return (
            f"Audit signing key {body.get('retired_key_id', '?')} retired, "
            f"{body.get('key_id', '')} signs from {body.get('valid_from', '?')}"
        )
    if kind == AuditKind.KEY_CHANGE:
        return f"Key {body.get('key_id', '')} of {body.get('agent_id', '')} {verb}"
    if kind == AuditKind.RAIL_CHANGE and action == "account_named":
        named = body.get("payment_account") or "unknown"
        return f"{rail_label(str(body.get('rail', '')))} account named: {named}"
    if (
        kind == AuditKind.CHARGE
        and body.get("payment_account")
        and body.get("outcome", "succeeded") == "succeeded"
    ):
        # Which merchant account a charge's money is on: its charge record, or the one that
        # names it later (sill.rails.payment_account, no outcome). A failed one paid no one.
        rail = rail_label(str(body.get("rail", "")))
        return f"Paid to the {rail} account {body['payment_account']}"
    if kind == AuditKind.RAIL_CHANGE:
        words = [f"{rail_label(str(body.get('rail', '')))} {verb}".strip()]
        if body.get("via") == "django_admin":
            words[0] += " in the Django admin"
            if body.get("changed"):
                words.append("changed: " + ", ".join(str(name) for name in body["changed"]))
        if body.get("mode") and body.get("mode_before") not in (None, body.get("mode")):
            words.append(f"mode {body.get('mode_before')} → {body.get('mode')}")
        elif body.get("mode") and action == "connect":
            words.append(f"{body.get('mode')} mode")
        if body.get("new_key"):
            words.append("new key")
        if body.get("webhook_secrets_changed"):
            count = body.get("webhook_secrets_count")
            words.append(f"webhook secrets changed: {count} secret{'s' if count != 1 else ''}")
        return ", ".join(words)
    if kind == AuditKind.SETTINGS_CHANGE:
        return _settings_words(body)
    return ""


def _settings_words(body: dict[str, Any]) -> str:
    """Words for the settings changes that change who may decide; "" for the others."""
    change = body.get("change")
    if change == "slack_token":
        refused = body.get("refused")
        if refused:
            return f"Slack refused the bot token ({refused}): Slack clicks decide nothing"
        return "Slack took the bot token again: Slack clicks decide again"
    if change == "require_two_factor":
        if body.get("require_two_factor") is True:
            return "Two factors required of owners and admins"
        return "Two factors no longer required of owners and admins"
    return ""


# --- exports ------------------------------------------------------------------------------------


def jsonl_response(records: QuerySet[AuditRecord], *, filename: str) -> StreamingHttpResponse:
    """The stored records, one JSON object per line, streamed in chain order."""

    def lines() -> Iterator[str]:
        for row in records.values(*JSONL_FIELDS).iterator(chunk_size=EXPORT_CHUNK):
            yield json.dumps(row, ensure_ascii=False) + "\n"

    response = StreamingHttpResponse(lines(), content_type="application/jsonl; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def safe_cell(value: object) -> str:
    """``value`` as CSV text no spreadsheet evaluates (OWASP "CSV Injection")."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class _Echo:
    """A file-like object whose ``write`` hands back the line (Django's streaming CSV recipe)."""

    def write(self, value: str) -> str:
        return value


def csv_response(
    site: Site, records: QuerySet[AuditRecord], *, filename: str
) -> StreamingHttpResponse:
    """One line per record: seq, time (ISO, site zone), kind, refund, order number, amount
    (major units), currency, actor, and the page's words for it (detail). Order numbers are
    looked up once per chunk."""
    writer = csv.writer(_Echo())
    zone = site.zone

    def chunks() -> Iterator[list[AuditRecord]]:
        chunk: list[AuditRecord] = []
        for record in records.iterator(chunk_size=EXPORT_CHUNK):
            chunk.append(record)
            if len(chunk) == EXPORT_CHUNK:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def lines() -> Iterator[str]:
        yield writer.writerow(CSV_HEADER)
        for chunk in chunks():
            for row in rows_for(site, chunk):
                cells = [
                    row.record.seq,
                    row.record.created_at.astimezone(zone).isoformat(),
                    row.record.get_kind_display(),
                    row.refund_id,
                    row.order_number or row.order_id,
                    # `is not None`: a zero Money is falsy, and 0.00 is an amount too.
                    row.amount.major_str() if row.amount is not None else "",
                    row.amount.currency if row.amount is not None else "",
                    row.by_named,
                    row.detail,
                ]
                yield writer.writerow([safe_cell(cell) for cell in cells])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
