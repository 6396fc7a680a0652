"""What a rule set will not do as its author expects: rules that can never apply, rules another
rule makes moot, and an auto-refund cap above a hold threshold. Pure.

Shown beside a preview and on the Rules page; none of these is an error (the rules are valid),
each is a sentence saying what happens instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from policies.catalog import rule_name
from policies.engine import AutoRefund
from policies.rates import RATES
from policies.rules import to_fraction
from policies.vocabulary import FACTS, amount_words, one_currency
from sill.money import Money, exponent, format_money

# Facts a rail never sends a real value for: Shopify's refunds carry no reason Sill can read
# (policies.facts writes "none"), so a rule on any other reason never fires for Shopify.
NEVER_SENT: dict[str, dict[str, Any]] = {"shopify": {"refundReason": "none"}}
STRICTER = {"deny": 2, "require_approval": 1, "allow": 0}


def policy_warnings(rules: Sequence[Mapping[str, Any]], auto_refund: AutoRefund) -> list[str]:
    warnings: list[str] = []
    enforced = [r for r in rules if r.get("mode", "enforced") == "enforced"]
    warnings += _never_sent(rules)
    warnings += _amount_in_any_currency(rules)
    warnings += _moot(enforced)
    warnings += _auto_refund_above_holds(enforced, auto_refund)
    return warnings


def _never_sent(rules: Sequence[Mapping[str, Any]]) -> list[str]:
    found = []
    for rule in rules:
        when = rule["when"]
        rails = when.get("rail")
        rails = [rails] if isinstance(rails, str) else rails
        if not isinstance(rails, list):
            continue
        for rail in rails:
            for fact, only in NEVER_SENT.get(rail, {}).items():
                if fact not in when:
                    continue
                wanted = when[fact] if isinstance(when[fact], list) else [when[fact]]
                if only not in wanted and len(rails) == 1:
                    found.append(
                        f"Rule {rule_name(rule['id'])} can never apply: {rail.capitalize()} "
                        "does not send "
                        f"the {_fact_words(fact)} (Sill reads “{only}” for every "
                        f"{rail.capitalize()} refund)."
                    )
    return found


def _fact_words(fact: str) -> str:
    """A fact as the rule's conditions name it, inside a sentence: ``refundReason`` → "reason"."""
    spec = FACTS.get(fact)
    return spec.label.lower() if spec else fact


def _amount_in_any_currency(rules: Sequence[Mapping[str, Any]]) -> list[str]:
    """Rules bounding refundAmount (minor units of each refund's own currency) without naming
    one currency: the bound means different money in every currency."""
    found = []
    for rule in rules:
        when = rule["when"]
        if isinstance(when.get("refundAmount"), Mapping) and one_currency(when) is None:
            found.append(
                f"Rule {rule_name(rule['id'])} compares Refund amount in each refund's own "
                "currency: its bound counts minor units of whatever currency a refund is in "
                "(10000 is $100.00, ¥10,000 or 10.000 KWD). Name one currency in the rule, or "
                "use Refund amount in USD to compare refunds in every currency."
            )
    return found


def _moot(rules: Sequence[Mapping[str, Any]]) -> list[str]:
    found = []
    for i, rule in enumerate(rules):
        for other in [*rules[:i], *rules[i + 1 :]]:
            same = other["when"] == rule["when"]
            stricter = STRICTER[other["then"]["action"]] > STRICTER[rule["then"]["action"]]
            earlier = list(rules).index(other) < i
            if same and (stricter or (other["then"] == rule["then"] and earlier)):
                found.append(
                    f"Rule {rule_name(rule['id'])} never changes a decision: rule "
                    f"{rule_name(other['id'])} has the same conditions and {_does(other)}."
                )
                break
    return found


def _does(rule: Mapping[str, Any]) -> str:
    return {"deny": "denies", "require_approval": "holds"}.get(rule["then"]["action"], "allows")


def _auto_refund_above_holds(
    rules: Sequence[Mapping[str, Any]], auto_refund: AutoRefund
) -> list[str]:
    if not auto_refund.enabled:
        return []
    cap = Money(auto_refund.cap_minor, auto_refund.currency)
    cap_usd = _usd_cents(cap)
    found = []
    for rule in rules:
        if rule["then"]["action"] != "require_approval":
            continue
        for fact in ("refundAmountUsd", "refundAmount"):
            bound = rule["when"].get(fact)
            if not isinstance(bound, Mapping):
                continue
            low = next((bound[k] for k in ("gte", "gt") if k in bound), None)
            if low is None:
                continue
            threshold = to_fraction(low)
            above = (
                cap_usd is not None and cap_usd > threshold
                if fact == "refundAmountUsd"
                else (cap.amount_minor > threshold)
            )
            if above:
                currency = one_currency(rule["when"])
                if fact == "refundAmountUsd":
                    shown = format_money(Money(int(threshold), "USD"))
                elif currency:  # the rule's own currency: its bound is money in it
                    shown = amount_words(int(threshold), currency)
                else:
                    shown = f"{int(threshold)} minor units"
                found.append(
                    f"Auto-refund approves held refunds up to {format_money(cap)}, above the "
                    f"hold threshold of {shown} of rule {rule_name(rule['id'])}: refunds "
                    "between the two that "
                    "the order's own agent asks for are approved without review."
                )
    return found


def _usd_cents(money: Money) -> Fraction | None:
    rate = RATES.get(money.currency)
    if rate is None:
        return None
    return Fraction(money.amount_minor, 10 ** exponent(money.currency)) * rate * 100
