"""The ``reason`` an agent's answer carries, as an agent author reads it off the README and
the OpenAPI schema: every reason Sill's code can decide a refund, credit or purchase with (read
from the code that decides, so a new one fails here until it is documented) is named in the
README's agent API section and in the schema's description of ``reason``; and real answers
carrying those reasons are ``201`` (or ``200`` when read) with bodies valid against the
schema (tests/openapi.py)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from pytest_django.fixtures import Settings

from policies.catalog import item_by_id
from policies.services import apply_catalog_item
from refunds.agent.caps import CODE as AGENT_CAP_CODE
from refunds.models import Decision, RefundStatus
from refunds.review.decisions import expire_held_refunds, reject_refund
from sill.accounts import two_factor
from sill.accounts.models import Agent, Site
from sill.accounts.services import issue_agent_token
from sill.orders.models import Charge, Dispute, Order
from sill.rails.models import RailAccount
from sill.rails.registry import RailDisabled
from tests.conftest import site_owner
from tests.openapi import check_answer, served_schema
from tests.refunds.conftest import ORIGINAL, hold_refund, purchase_intent, refund_intent

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SECTION = README.split("## The agent API", 1)[1].split("\n## ", 1)[0]
CREATE = ("/api/v1/mandates", "POST")
DETAIL = "/api/v1/refunds/{mandate_id}"


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _strings(node: ast.AST | None) -> set[str]:
    """The string constants in ``node`` (``"a" if x else None``, ``x and "b"``)."""
    if node is None:
        return set()
    return {
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def _calls(module: str, *names: str) -> Iterator[ast.Call]:
    tree = ast.parse((ROOT / module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in names:
            yield node


def _keyword(module: str, names: tuple[str, ...], keyword: str) -> set[str]:
    """The constant ``keyword=`` arguments of calls of ``names`` in ``module``."""
    return {
        value
        for call in _calls(module, *names)
        for kw in call.keywords
        if kw.arg == keyword
        for value in _strings(kw.value)
    }


def _first_argument(module: str, name: str) -> set[str]:
    return {value for call in _calls(module, name) if call.args for value in _strings(call.args[0])}


def _purchase_reasons() -> set[str]:
    """What ``purchase_payload`` assigns to ``reason`` (tuple assignments ending in it)."""
    tree = ast.parse((ROOT / "refunds/agent/answers.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)):
            continue
        targets, value = node.targets[0].elts, node.value
        if _name(targets[-1]) == "reason" and isinstance(value, ast.Tuple):
            found |= _strings(value.elts[-1])
    return found


def decision_reasons() -> set[str]:
    """Every ``reason`` Sill decides an agent's mandate with: a refund's, a credit's or a
    purchase's rejection, and what a held refund or credit is closed with (a reviewer's
    rejection, its 24 hours, or what the quote refuses again when it is approved)."""
    quote = _keyword("refunds/quote.py", ("RefundRefused",), "code")
    rejected = _first_argument("refunds/agent/intake.py", "rejected") | _first_argument(
        "refunds/agent/credits.py", "rejected"
    )
    customer_read = _keyword("refunds/agent/credits.py", ("CustomerRead",), "refusal")
    policy = _keyword("refunds/services.py", ("unsaved_refund",), "outcome_code")
    held = _keyword("refunds/review/decisions.py", ("_close",), "outcome_code")
    purchase = _purchase_reasons() | _keyword(
        "refunds/agent/intake.py", ("record_purchase_decision",), "reason"
    )
    reasons = (
        quote
        | rejected
        | customer_read
        | policy
        | held
        | purchase
        | {AGENT_CAP_CODE, str(RailDisabled.code)}
    )
    # The reader above still finds what it was written for (a refactor that moves a code
    # elsewhere must move the reader too, or this list would shrink unnoticed).
    assert {
        "original_not_charged",
        "disputed",
        "method_not_allowed",
        "unknown_customer",
        "rail_unavailable",
        "policy_denied",
        "rejected_by_reviewer",
        "expired",
        "charge_failed",
        "agent_cap_exceeded",
    } <= reasons, reasons
    return reasons


def _readme_reasons() -> set[str]:
    """The codes the README's paragraph on business refusals names."""
    paragraph = SECTION.split("Business refusals", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"`(\w+)`", paragraph))


def test_the_readme_names_every_reason_an_agent_can_be_answered() -> None:
    missing = decision_reasons() - _readme_reasons()
    assert not missing, f"README's agent API section does not name {sorted(missing)}"


@pytest.fixture
def schema(settings: Settings) -> dict[str, Any]:
    settings.SILL_PUBLIC_SCHEMA = True  # README: The OpenAPI schema
    return served_schema()


def _reason_description(schema: dict[str, Any]) -> str:
    return str(
        schema["components"]["schemas"]["MandateResult"]["properties"]["reason"].get(
            "description", ""
        )
    )


@pytest.mark.django_db
def test_the_schema_describes_every_reason_an_agent_can_be_answered(schema) -> None:
    described = set(re.findall(r"`(\w+)`", _reason_description(schema)))
    missing = decision_reasons() - described
    assert not missing, f"the schema's MandateResult.reason does not name {sorted(missing)}"


# --- real answers ---------------------------------------------------------------------------


def _documented(schema: dict[str, Any], reason: str) -> None:
    assert reason in _readme_reasons(), f"README does not name {reason}"
    assert f"`{reason}`" in _reason_description(schema), f"the schema does not name {reason}"


def _refusing(case: str, *, site: Site, agent: Agent, order: Order, members: Any) -> dict:
    """Set ``site`` up so that an agent's full refund of ``order`` is refused ``case``; the
    intent's changes, if any."""
    if case == "method_not_allowed":
        Agent.objects.filter(pk=agent.pk).update(refund_enabled=False)
    elif case == "agent_cap_exceeded":
        Agent.objects.filter(pk=agent.pk).update(refund_cap_minor=100)
    elif case == "original_not_charged":
        return {"original_mandate_id": "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTA"}
    elif case == "scope_unsupported":
        return {"scope": [{"sku": "SKU-1", "quantity": 1}]}
    elif case == "disputed":
        Dispute.objects.create(
            charge=Charge.objects.get(order=order), reason="fraudulent", amount_minor=8900,
            currency="USD", status="needs_response", opened_at=timezone.now(),
        )  # fmt: skip
    elif case == "refund_window_passed":
        Site.objects.filter(pk=site.pk).update(refund_window_days=1)
        Charge.objects.filter(order=order).update(captured_at=timezone.now() - timedelta(days=3))
    elif case == "exceeds_refundable":
        hold_refund(order=order, requested_by=members["staff"].user)  # all of it, held
    elif case == "policy_denied":
        apply_catalog_item(
            site=site, actor=site_owner(site), item=item_by_id("agent-daily-cap"),
            params={"dailyCapUsd": "0.00"},
        )  # fmt: skip
    elif case == "rail_disabled":
        RailAccount.objects.filter(site=site, rail="mock").update(enabled=False)
    return {}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "case",
    [
        "method_not_allowed",
        "agent_cap_exceeded",
        "original_not_charged",
        "scope_unsupported",
        "disputed",
        "refund_window_passed",
        "exceeds_refundable",
        "policy_denied",
        "rail_disabled",
    ],
)
def test_a_refused_refund_is_answered_201_as_documented(
    schema, site, agent, original, members, sign, api, case
) -> None:
    changes = _refusing(case, site=site, agent=agent, order=original, members=members)
    answer = api(sign(refund_intent(ORIGINAL, **changes)))
    check_answer(schema, *CREATE, answer)
    assert answer.status_code == 201, answer.content  # README: not an HTTP error
    body = answer.json()
    assert (body["decision"], body["status"], body["reason"]) == ("rejected", "rejected", case)
    _documented(schema, case)


@pytest.fixture
def bearer(agent: Agent) -> dict[str, str]:
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    return {"Authorization": f"Bearer {token}"}


def _read(schema: dict[str, Any], mandate_id: str, bearer: dict[str, str]) -> dict[str, Any]:
    read = Client().get(f"/api/v1/refunds/{mandate_id}", headers=bearer)
    check_answer(schema, DETAIL, "GET", read)
    assert read.status_code == 200, read.content
    return dict(read.json())


@pytest.mark.django_db
@pytest.mark.parametrize("case", ["rejected_by_reviewer", "expired"])
def test_a_held_refund_not_approved_reads_as_documented(
    schema, site, agent, original, bearer, case
) -> None:
    held = hold_refund(order=original, agent=agent)
    if case == "expired":
        assert expire_held_refunds(now=timezone.now() + timedelta(days=2)) == 1
    else:
        reject_refund(refund=held, actor=site_owner(site))
    body = _read(schema, held.mandate.mandate_id, bearer)
    assert (body["decision"], body["status"], body["reason"]) == (
        "rejected",  # no longer escalated: closed without a refund
        "expired" if case == "expired" else "rejected",
        case,
    )
    _documented(schema, case)


@pytest.mark.django_db
def test_a_declined_purchase_reads_as_documented(schema, mock_rail, sign, api, bearer) -> None:
    mock_rail.config = {"charge": "decline"}
    mock_rail.save()
    answer = api(sign(purchase_intent()))  # its charge runs on commit (eager tasks)
    check_answer(schema, *CREATE, answer)
    assert answer.status_code == 201, answer.content
    body = _read(schema, answer.json()["mandate_id"], bearer)
    assert (body["decision"], body["status"], body["reason"]) == (
        "approved",
        "failed",
        "charge_failed",
    )
    _documented(schema, "charge_failed")


@pytest.mark.django_db
def test_the_schemas_decisions_and_statuses_are_the_ones_sill_answers(schema) -> None:
    """A generated client's enums: a status the schema leaves out fails its parser."""
    result = schema["components"]["schemas"]["MandateResult"]["properties"]

    def enum(name: str) -> set[str]:
        ref = result[name]["$ref"].rsplit("/", 1)[1]
        return set(schema["components"]["schemas"][ref]["enum"])

    assert enum("decision") == set(Decision.values)
    # A purchase's statuses (refunds.agent.answers) are a refund's words too.
    assert enum("status") == set(RefundStatus.values)
