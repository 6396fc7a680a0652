"""The decision step's boundary types: what a decision reads and what it answers.

Kept apart from ``policies.decide`` so that ``policies.facts`` (which reads a context) and the
refund core (which builds one and stores the outcome) can name them without importing the
decision itself. Pure: no ORM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from policies.engine import Action, FiredRule

if TYPE_CHECKING:
    from policies.models import PolicyVersion
    from sill.accounts.models import Agent, Site
    from sill.money import Money
    from sill.orders.models import Charge, Order
    from sill.rails.base import RefundFacts

__all__ = ["BASELINE_VERSION", "PolicyOutcome", "RefundContext"]

# The version a site without a policy of its own runs: no rules, auto-refund off.
BASELINE_VERSION = "v1-default"


class PolicyReplaced(Exception):
    """The version a decision was made by is no longer the site's active one (another was
    switched on while the decision ran): the decision is made again (``refunds.locks.
    retry_on_conflict``), on the version now active; nothing of it was written."""


@dataclass(frozen=True)
class ReadBefore:
    """The site's active version as read before a decision's transaction (``None``: it had
    none, the baseline). It goes stale when another version is switched on meanwhile; the
    decision's guard then raises :class:`PolicyReplaced`, and ``refunds.locks.
    retry_on_conflict`` drops every argument of this type before deciding again, so the next
    attempt reads the version afresh, whatever the argument is called."""

    version: PolicyVersion | None


@dataclass(frozen=True)
class PolicyOutcome:
    action: Action
    policy_version: str
    rules: tuple[FiredRule, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)
    auto_refund: bool = False


@dataclass(frozen=True)
class RefundContext:
    """Everything the decision may look at, all from Sill's records (never the caller's claims).

    ``charge`` and ``order`` are locked by the caller; ``amount`` is the quoted amount.
    ``rail_facts``: what the rail reported, read by the caller *before* it took any lock or
    opened its transaction (``policies.facts.prefetch_rail_facts``): a provider's network
    calls must never hold row locks (or SQLite's write lock). When None, they are read here.
    """

    site: Site
    order: Order
    charge: Charge
    amount: Money
    origin: Literal["agent", "staff"]
    agent: Agent | None
    user: Any | None
    reason: str | None  # the agent's reason code or the staff reason's code; None if none
    now: datetime
    rail_facts: RefundFacts | None = None
    # The site's active policy (policies.selectors.ActivePolicy) when the caller read it
    # already (to know which decision locks it needs); None: read by the decision.
    policy: Any = None
    # The agent's live refunds since its day began (``policies.facts.agent_day_start``),
    # summed by currency, when the caller read them already (with the order's lock: agent
    # intake); None: read by the facts.
    agent_totals_today: list[tuple[str, int]] | None = None
