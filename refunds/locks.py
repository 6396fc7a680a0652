"""Serialising refund decisions that share an agent or a customer, and retrying conflicts.

Some facts a policy reads sum over several orders: the agent's refunds today, the customer's
refunds in 30 days (``policies.facts``). The order's row lock serialises only refunds of one
order, so two decisions on two orders of one customer would both read "no refund yet" and
both pass a one-a-month rule. :func:`lock_decision_scope` closes that gap.

Why advisory locks rather than ``SELECT … FOR UPDATE`` on the Agent and Customer rows:

- Inserting a Mandate or a Refund takes ``FOR KEY SHARE`` on the agent row (the foreign
  key), which ``FOR UPDATE`` conflicts with. Intake stores the mandate *before* it decides,
  so two intakes of one agent would each hold a key-share lock and wait for the other's
  ``FOR UPDATE``: a deadlock on every burst.
- Row locks would also queue behind unrelated writers of those rows (order sync updating
  customers, agent settings, key changes) and would need a row to exist (a guest checkout
  has no customer).

Agent intake takes a scope's lock only when something acts on its sum (:func:`decision_scope`:
the agent's daily cap, or a rule reading the agent's or the customer's sum): otherwise one
agent's decisions on different orders would queue behind one another for a sum nobody reads.
Staff refunds and held approvals always take both.

A transaction-scoped advisory lock is none of that: it is released at commit or rollback,
with the decision it protects, and it conflicts only with itself.

Lock order, on every path that decides (agent intake, staff refunds, held approvals): a
person's decision first share-locks the deciding member's rows (``access.hold_member``:
membership and token ``FOR SHARE``, account ``FOR KEY SHARE``); then the scope locks, sorted
by (namespace, key), then the refund row (approvals; a rejection, which takes the member's
rows and no scope lock, and the expiry, which takes neither, start here), then the
order, then its charge, then (staff refunds, before reading their reason) the reason tree's
lock, shared (``refunds.reasons.services.hold_reason_tree``), then the audit chain head.
Nothing takes a scope lock while holding a row lock other than those share locks of its own
member, which only a member change (or the account's switch-off) waits for, and which takes
no scope lock: the scope locks can never be part of a deadlock cycle with the row locks.
The site's row is never locked by a decision (its foreign keys share-lock it at commit, while
the chain head is held): a path that locks the site's row ``FOR UPDATE`` and then appends
deadlocks with any append of the site, so ``select_for_update`` joining the site takes
``of=("self",)``.
Settlement and execution take no scope lock: they do not change what the sums count.
A person's other changes of money-relevant state share-lock their member's rows first too,
then their own rows, then the chain head: an owner's resolution of a refund that needs
attention (then the refund, order, charge) or of a purchase's charge that does (then the
order, the charge), a person's resolution of a reconciliation item
(then the item), a change on Settings → Agents (then the agent's or the key's row).

On SQLite this is a no-op: its IMMEDIATE transactions already serialise every writer.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from django.db import DatabaseError, connection

from policies.types import PolicyReplaced, ReadBefore
from sill.errors import SillError

if TYPE_CHECKING:
    from policies.selectors import ActivePolicy
    from sill.accounts.models import Agent

logger = logging.getLogger(__name__)

# pg_advisory_xact_lock(int4, int4): the first key says what the second one is, so these
# locks never collide with another user of advisory locks (e.g. refunds.reasons.services' one-key
# lock lives in the single-bigint key space, which PostgreSQL keeps apart from this one).
AGENT_NAMESPACE = 0x5111_A6E7
CUSTOMER_NAMESPACE = 0x5111_C057

# PostgreSQL's serialization_failure and deadlock_detected: the transaction was rolled back
# as a whole and may simply be run again.
CONFLICT_SQLSTATES = frozenset({"40001", "40P01"})
RETRIES = 3
RETRY_BASE_SECONDS = 0.05

P = ParamSpec("P")
R = TypeVar("R")


class Busy(SillError):
    """The database kept refusing the decision (conflicts with concurrent ones); try again."""

    code = "busy"
    status = 503


# The facts that sum over other orders' refunds (policies.facts), by the scope they sum over.
AGENT_SUM_FACTS = ("refundAgentTotalTodayUsd",)
CUSTOMER_SUM_FACTS = ("refundCustomerRefunds30d",)


@dataclass(frozen=True)
class Scope:
    agent: bool
    customer: bool


def decision_scope(*, agent: Agent | None, policy: ActivePolicy) -> Scope:
    """Which scope locks a decision needs: the agent's when its daily cap or a rule reads the
    agent's sum; the customer's when a rule reads the customer's. A sum nothing acts on needs
    no lock (it is recorded as read, perhaps without a decision still in flight)."""
    daily_cap = agent is not None and agent.daily_refund_cap_minor is not None
    return Scope(
        agent=daily_cap or any(policy.reads(f) for f in AGENT_SUM_FACTS),
        customer=any(policy.reads(f) for f in CUSTOMER_SUM_FACTS),
    )


def _int4(value: int) -> int:
    # Ids above 2**31 wrap around: a collision only makes two unrelated decisions wait for
    # each other, never lets two related ones run at once.
    return (value + 2**31) % 2**32 - 2**31


def scope_keys(*, agent_id: int | None, customer_id: int | None) -> list[tuple[int, int]]:
    """The (namespace, key) pairs :func:`lock_decision_scope` locks, in locking order."""
    keys = []
    if agent_id is not None:
        keys.append((AGENT_NAMESPACE, _int4(agent_id)))
    if customer_id is not None:
        keys.append((CUSTOMER_NAMESPACE, _int4(customer_id)))
    return sorted(keys)


def lock_decision_scope(*, agent_id: int | None, customer_id: int | None) -> None:
    """Wait until no other decision for this agent or this customer is in flight.

    Call it inside the decision's ``transaction.atomic()``, before any row lock and before
    any fact that sums over orders is read; the lock lasts until that transaction ends.
    Always sorted, so two decisions sharing both an agent and a customer never deadlock.
    """
    if connection.vendor != "postgresql":
        return
    if not connection.in_atomic_block:
        # In autocommit the lock would be released as soon as it was taken.
        raise RuntimeError("lock_decision_scope() must run inside transaction.atomic()")
    with connection.cursor() as cursor:
        for namespace, key in scope_keys(agent_id=agent_id, customer_id=customer_id):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [namespace, key])


def is_conflict(exc: BaseException) -> bool:
    """A PostgreSQL serialization failure or deadlock (Django wraps psycopg's error)."""
    return (
        isinstance(exc, DatabaseError)
        and getattr(exc.__cause__, "sqlstate", None) in CONFLICT_SQLSTATES
    )


def retry_on_conflict(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` (which opens the decision transaction) again after a conflict.

    At most :data:`RETRIES` more times, after a short sleep with full jitter; then
    :class:`Busy` (503), never a 500. Inside an outer transaction nothing can be retried (the
    whole outer transaction is lost), so a conflict there is :class:`Busy` at once. Any other
    error, including an ``IntegrityError``, passes through untouched.
    """

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        attempts = 1 if connection.in_atomic_block else RETRIES + 1
        for attempt in range(1, attempts + 1):
            try:
                return fn(*args, **kwargs)
            except PolicyReplaced as exc:
                # Another version of the site's rules was switched on while this decision
                # ran: made again on the one now active. A version read before the
                # transaction and passed in is dropped, whatever its argument's name, so
                # the next attempt reads it afresh (the argument's default must mean that).
                for name in [n for n, value in kwargs.items() if isinstance(value, ReadBefore)]:
                    del kwargs[name]
                if attempt == attempts:
                    raise Busy(
                        "The site's refund rules changed while this refund was being decided; "
                        "nothing was refunded by this request. Retry after 1 second."
                    ) from exc
                logger.info("%s: %s; deciding again", fn.__qualname__, exc)
                continue
            except DatabaseError as exc:
                if not is_conflict(exc):
                    raise
                sqlstate = getattr(exc.__cause__, "sqlstate", None)
                if attempt == attempts:
                    logger.warning(
                        "%s: database conflict %s, giving up after %d attempt(s)",
                        fn.__qualname__, sqlstate, attempt,
                    )  # fmt: skip
                    raise Busy(
                        "Sill is busy with other refunds of this agent or customer right "
                        "now; nothing was refunded by this request. Retry after 1 second."
                    ) from exc
                logger.warning(
                    "%s: database conflict %s, retrying (attempt %d of %d)",
                    fn.__qualname__, sqlstate, attempt + 1, attempts,
                )  # fmt: skip
                time.sleep(random.uniform(0, RETRY_BASE_SECONDS * 2 ** (attempt - 1)))
        raise AssertionError("unreachable")  # pragma: no cover

    return run
