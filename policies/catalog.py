"""Policy templates and packs: a few parameters in, ordinary rules out. Pure.

A template writes one rule named ``tpl-<template>`` (the seed's r07 keeps its own id,
``r07``); a pack applies several templates together. Parameters are checked here and turned
into rule values: US-dollar amounts are typed in major units (``"50.00"``) and stored in US
cents, shares as whole percent and stored as a fraction (50 → 0.5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from policies.rules import MODES, RuleError, validate_rules
from sill.money import Money, MoneyError, parse_major

ParamKind = Literal["usd", "days", "count", "percent"]


class CatalogError(RuleError):
    code = "invalid_field"


@dataclass(frozen=True)
class Param:
    name: str
    label: str
    kind: ParamKind
    default: int  # US cents, days, a count or whole percent
    minimum: int
    maximum: int
    help: str = ""

    def parse(self, raw: Any, *, field: str) -> int:
        if self.kind == "usd":
            value = _usd_cents(raw, field=field, label=self.label)
        else:
            value = _whole(raw, field=field, label=self.label)
        if not self.minimum <= value <= self.maximum:
            raise CatalogError(
                f"{self.label} must be between {self.display(self.minimum)} and "
                f"{self.display(self.maximum)}.",
                field=field,
            )
        return value

    def display(self, value: int) -> str:
        """The value as a person types it: ``"50.00"`` dollars, ``60`` days, ``50`` percent."""
        if self.kind == "usd":
            return Money(value, "USD").major_str()
        return str(value)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "kind": self.kind,
            "default": self.display(self.default) if self.kind == "usd" else self.default,
            "min": self.display(self.minimum) if self.kind == "usd" else self.minimum,
            "max": self.display(self.maximum) if self.kind == "usd" else self.maximum,
            "help": self.help,
        }


@dataclass(frozen=True)
class Template:
    id: str
    title: str
    summary: str
    action: str
    params: tuple[Param, ...]
    when: Callable[[Mapping[str, int]], dict[str, Any]]
    rule_id: str = ""
    kind: str = "template"

    @property
    def rule_ids(self) -> tuple[str, ...]:
        return (self.rule_id or f"tpl-{self.id}",)

    def build(self, values: Mapping[str, int], mode: str) -> list[dict[str, Any]]:
        return [
            {
                "id": self.rule_ids[0],
                "when": self.when(values),
                "then": {"action": self.action},
                "mode": mode,
            }
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": "template",
            "title": self.title,
            "summary": self.summary,
            "category": "refunds",
            "action": self.action,
            "ruleIds": list(self.rule_ids),
            "params": [p.as_dict() for p in self.params],
        }


@dataclass(frozen=True)
class Pack:
    id: str
    title: str
    summary: str
    template_ids: tuple[str, ...]
    kind: str = "pack"

    @property
    def templates(self) -> tuple[Template, ...]:
        return tuple(TEMPLATES[t] for t in self.template_ids)

    @property
    def params(self) -> tuple[Param, ...]:
        return tuple(p for t in self.templates for p in t.params)

    @property
    def rule_ids(self) -> tuple[str, ...]:
        return tuple(r for t in self.templates for r in t.rule_ids)

    def build(self, values: Mapping[str, int], mode: str) -> list[dict[str, Any]]:
        return [rule for t in self.templates for rule in t.build(values, mode)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": "pack",
            "title": self.title,
            "summary": self.summary,
            "category": "refunds",
            "templateIds": list(self.template_ids),
            "ruleIds": list(self.rule_ids),
            "params": [p.as_dict() for p in self.params],
        }


CatalogItem = Template | Pack

_USD_MAX = 100_000_000  # $1,000,000.00

_TEMPLATES: tuple[Template, ...] = (
    Template(
        id="conservative",
        title="Conservative / manual review",
        summary="Hold refunds over $50 for an owner or admin to approve.",
        action="require_approval",
        params=(Param("holdOverUsd", "Hold refunds over (USD)", "usd", 5000, 0, _USD_MAX),),
        when=lambda v: {"refundAmountUsd": {"gt": v["holdOverUsd"]}},
    ),
    Template(
        id="large-refund",
        title="Large refunds wait for a human",
        summary="Hold a refund above an amount in US dollars.",
        action="require_approval",
        params=(Param("largeRefundUsd", "Large from (USD)", "usd", 25000, 0, _USD_MAX),),
        when=lambda v: {"refundAmountUsd": {"gt": v["largeRefundUsd"]}},
    ),
    Template(
        id="old-charge",
        title="Refunds of old charges wait for a human",
        summary="Hold a refund of a charge older than a number of days.",
        action="require_approval",
        params=(Param("oldChargeDays", "Older than (days)", "days", 60, 0, 3650),),
        when=lambda v: {"refundChargeAgeDays": {"gt": v["oldChargeDays"]}},
    ),
    Template(
        id="customer-monthly",
        title="One refund per customer per 30 days",
        summary="Deny a refund once the customer already had this many refunds in 30 days. "
        "A guest (no customer) cannot be counted, so it is denied too.",
        action="deny",
        params=(
            Param("refundsPerCustomer", "Refunds per customer per 30 days", "count", 1, 1, 100),
        ),
        when=lambda v: {"refundCustomerRefunds30d": {"gte": v["refundsPerCustomer"]}},
    ),
    Template(
        id="agent-daily-cap",
        title="Daily refund cap per agent",
        summary="Deny an agent's refund that takes its refunds of the day over a cap in US "
        "dollars. Staff refunds are not counted.",
        action="deny",
        params=(Param("dailyCapUsd", "Cap per agent per day (USD)", "usd", 50000, 0, _USD_MAX),),
        when=lambda v: {
            "refundOrigin": "agent",
            "refundAgentTotalTodayUsd": {"gt": v["dailyCapUsd"]},
        },
    ),
    Template(
        id="disputed-deny",
        title="No refund on a disputed charge",
        summary="Deny a refund of a charge the buyer disputed: the dispute may pay them too.",
        action="deny",
        params=(),
        when=lambda v: {"refundDisputed": True},
    ),
    Template(
        id="repeat-customer",
        title="Repeat refunds wait for a human",
        summary="Hold a large share refunded to a customer with several refunded charges in "
        "90 days.",
        action="require_approval",
        params=(
            Param("repeatCount", "Refunded charges in 90 days (at least)", "count", 3, 1, 100),
            Param("repeatSharePercent", "Share of the charge (at least, %)", "percent", 50, 0, 100),
        ),
        when=lambda v: {
            "refundCustomerCount90d": {"gte": v["repeatCount"]},
            "refundFraction": {"gte": v["repeatSharePercent"] / 100},
        },
    ),
    Template(
        id="needs-reason",
        title="Refunds need a reason",
        summary="Hold a refund asked for without a reason.",
        action="require_approval",
        params=(),
        when=lambda v: {"refundReason": "none"},
    ),
    Template(
        id="credit-new-customer",
        title="Credits to new customers wait for a human",
        summary="Hold a Stripe customer-balance credit to a customer the rail created fewer "
        "than a number of days ago (or whose age it cannot say). Refunds are not affected.",
        action="require_approval",
        params=(Param("creditCustomerDays", "Customer younger than (days)", "days", 30, 1, 3650),),
        when=lambda v: {"creditCustomerAgeDays": {"lt": v["creditCustomerDays"]}},
    ),
    Template(
        id="r07",
        title="Human review on destructive actions (r07)",
        summary="Escalate every agent refund to an owner or admin.",
        action="require_approval",
        params=(),
        when=lambda v: {"refundOrigin": "agent"},
        rule_id="r07",
    ),
)

TEMPLATES: dict[str, Template] = {t.id: t for t in _TEMPLATES}

PACKS: dict[str, Pack] = {
    "support-refunds": Pack(
        id="support-refunds",
        title="Support agent with refunds",
        summary="Large refunds and refunds of old charges wait for a human, one refund per "
        "customer a month, and none on a disputed charge.",
        template_ids=("large-refund", "old-charge", "customer-monthly", "disputed-deny"),
    ),
}


def catalog() -> dict[str, list[dict[str, Any]]]:
    """The catalog as the API and the gallery show it."""
    return {
        "templates": [t.as_dict() for t in TEMPLATES.values()],
        "packs": [p.as_dict() for p in PACKS.values()],
    }


def find_item(*, template_id: Any = None, pack_id: Any = None) -> CatalogItem:
    """The template or pack asked for; exactly one of the two ids must be given."""
    if (template_id is None) == (pack_id is None):
        raise CatalogError("Give either templateId or packId.", field="templateId")
    if template_id is not None:
        if not isinstance(template_id, str) or template_id not in TEMPLATES:
            raise CatalogError(f"No template {template_id!r}.", field="templateId")
        return TEMPLATES[template_id]
    if not isinstance(pack_id, str) or pack_id not in PACKS:
        raise CatalogError(f"No pack {pack_id!r}.", field="packId")
    return PACKS[pack_id]


def item_by_id(catalog_id: str) -> CatalogItem | None:
    """A template or pack by its id (the gallery's URLs), or None."""
    return TEMPLATES.get(catalog_id) or PACKS.get(catalog_id)


def resolve_params(item: CatalogItem, raw: Any) -> dict[str, int]:
    """Every parameter of ``item``: the given ones checked, the others at their default."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise CatalogError("params must be an object.", field="params")
    known = {p.name: p for p in item.params}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        names = ", ".join(known) or "none"
        raise CatalogError(
            f"Unknown parameter {unknown[0]!r} for {item.id} (its parameters: {names}).",
            field=f"params.{unknown[0]}",
        )
    values: dict[str, int] = {}
    for name, param in known.items():
        given = raw.get(name)
        if given is None or given == "":
            values[name] = param.default
        else:
            values[name] = param.parse(given, field=f"params.{name}")
    return values


def build_rules(item: CatalogItem, *, params: Any, mode: Any) -> list[dict[str, Any]]:
    """The validated rules ``item`` writes with ``params`` in ``mode``."""
    if mode is None:
        mode = "enforced"
    if mode not in MODES:
        raise CatalogError(f"Unknown mode {mode!r}: use enforced or observe.", field="mode")
    values = resolve_params(item, params)
    return validate_rules(item.build(values, mode))


def _usd_cents(raw: Any, *, field: str, label: str) -> int:
    if isinstance(raw, bool):
        raise CatalogError(f"{label} is an amount in US dollars, e.g. 50.00.", field=field)
    if isinstance(raw, float):
        # A JSON number such as 50.5: read it as the decimal it was written as.
        raw = Decimal(repr(raw))
    try:
        return parse_major(raw, "USD").amount_minor
    except MoneyError as exc:
        raise CatalogError(
            f"{label} is an amount in US dollars, e.g. 50.00 ({exc}).", field=field
        ) from None


def _whole(raw: Any, *, field: str, label: str) -> int:
    if isinstance(raw, bool):
        raise CatalogError(f"{label} is a whole number.", field=field)
    if isinstance(raw, int):
        return raw
    text = raw.strip() if isinstance(raw, str) else ""
    # ASCII only: isdigit() also takes "²" (int() then raises) and Arabic-Indic digits.
    if text.isascii() and text.isdigit() and len(text) <= 9:
        return int(text)
    raise CatalogError(f"{label} is a whole number.", field=field)


def rule_title(rule_id: str) -> str:
    """A rule's name as its template titles it (``tpl-customer-monthly`` → "One refund per
    customer per 30 days"); a merchant's own rule id in words."""
    for template in TEMPLATES.values():
        if rule_id in template.rule_ids:
            return template.title
    words = rule_id.removeprefix("tpl-").replace("-", " ").replace("_", " ").strip()
    return words.capitalize() or "A rule"


def rule_name(rule_id: str) -> str:
    """A rule as a sentence names it: its title, as the Rules page shows it, then its id, what
    the rules' JSON and the API use (“Conservative / manual review” (tpl-conservative)); the
    id once when the title already says it (“Human review on destructive actions (r07)”)."""
    title = rule_title(rule_id)
    return f"“{title}”" if f"({rule_id})" in title else f"“{title}” ({rule_id})"


def rule_names(rules: Iterable[Mapping[str, Any]]) -> str:
    """:func:`rule_name` of each of ``rules``, joined with commas."""
    return ", ".join(rule_name(str(rule["id"])) for rule in rules)
