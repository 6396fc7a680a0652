"""Agent mandates in: verify, replay/idempotency, then a refund request or a purchase.

``submit_mandate`` is the one entry point of ``POST /api/v1/mandates``. The order of the
steps matters:

1. Shape checks only (size, JSON), then look for an earlier mandate with the same id: an
   identical resend answers what Sill answered before (200), even after expiry; another body
   under that id is ``mandate_conflict``.
2. Full verification (key, signature, schema, time); a purchase's text must also fit the
   columns that store it (``invalid_field``).
3. In one transaction: store the mandate verbatim (the (agent, nonce) constraint is the replay
   guard), quote from Sill's own records, decide, reserve, write the decision record. The rail
   call happens later, in a Celery task enqueued on commit. A unique constraint refusing a
   write of that transaction is answered by its name: the mandate's id (a concurrent send:
   the resend answer or ``mandate_conflict``), its nonce (``replay``), a purchase's order
   already placed under this mandate id (``mandate_conflict``); any other is not the agent's
   doing, and stays an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Field, Model, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from audit.chain import MAX_SAFE_INTEGER
from policies.facts import (
    agent_day_start,
    agent_live_totals_select,
    agent_totals_from,
    prefetch_rail_facts,
)
from policies.selectors import UNREAD, Unread, active_policy_for, active_version_columns
from policies.types import ReadBefore, RefundContext
from refunds.agent import mandates
from refunds.agent.answers import purchase_payload, refund_payload
from refunds.agent.caps import agent_cap_refusal
from refunds.agent.credits import CustomerRead, open_credit, read_customer
from refunds.agent.mandates import MandateError, VerifiedMandate
from refunds.locks import decision_scope, lock_decision_scope, retry_on_conflict
from refunds.models import Decision, Mandate, Refund, RefundOrigin, RefundStatus
from refunds.quote import (
    RefundRefused,
    charged_charge,
    locked_order_and_charge,
    original_refusal,
    quote_refund,
)
from refunds.reconcile.inbox import catch_up_charge
from refunds.services import (
    decide_and_open,
    record_decision,
    record_purchase_decision,
    unsaved_refund,
)
from sill.accounts.models import Agent, AgentKey, Site
from sill.api import spend_mandate_budget
from sill.constraints import violated
from sill.money import Money, format_money, min_money
from sill.orders.models import Charge, ChargeStatus, Customer, LineItem, Order, OrderStatus
from sill.orders.purchases import Purchase, place_order
from sill.orders.services import NewLine
from sill.rails.base import RefundFacts, amount_step, charges_currency, rail_label
from sill.rails.models import RailAccount
from sill.rails.registry import connected_account_of, on_connected_account
from sill.rails.woocommerce.models import WooOrderLink
from sill.sql import Carried, Columns, cols, fetch_row, insert


@dataclass(frozen=True)
class _Prefetched:
    """The refund's original as read before the decision's transaction (unlocked): its order
    and first successful charge, the charge's enabled rail account, and the rail's facts."""

    order: Order
    charge: Charge
    account: RailAccount | None
    facts: RefundFacts


@dataclass(frozen=True)
class _Charged:
    """What :func:`_charged_original` answers for ``mandate_id``, read with the agent's key."""

    mandate_id: str
    charge: Charge | None
    account: RailAccount | None


@dataclass(frozen=True)
class MandateAnswer:
    status: int
    body: dict[str, Any]


def _key_lookup(
    site_id: str, agent_id: str, key_id: str, *, active: bool = True
) -> mandates.KeyRecord | None:
    key = (
        AgentKey.objects.filter(
            agent__site_id=site_id, agent__agent_id=agent_id, agent__active=active, key_id=key_id
        )
        .only("public_key", "valid_from", "valid_until", "revoked_at")
        .first()
    )
    return _key_record(key) if key is not None else None


def _refuse_if_deactivated(raw: bytes, loaded: mandates.LoadedMandate, *, now: datetime) -> None:
    """``unknown_key`` saying the mandate's agent is deactivated on its site, when it is and
    the mandate verifies with that agent's key (its time aside): "No such key" sent the
    agent's author looking for a key that exists. A mandate that does not verify returns, to
    hear the plain refusal: nothing unsigned learns whether an agent is deactivated."""
    _mandate_id, site_id, agent_id, key_id = loaded.identity
    key = _key_lookup(site_id, agent_id, key_id, active=False)
    if key is None:
        return
    try:
        mandates.verify_mandate(
            raw, key_lookup=lambda *_: key, now=now, check_time=False, loaded=loaded
        )
    except MandateError:
        return
    raise _deactivated(agent_id)


def _deactivated(agent_id: str) -> MandateError:
    return MandateError(
        "unknown_key",
        f"Agent {agent_id} is deactivated on this site: its mandates are refused until an owner "
        "or admin of the site reactivates it (Settings → Agents).",
        field="signed.agent_id",
    )


def _standing_select(agent_pk: int, key_id: str) -> Carried:
    """Whether the mandate's agent is still active and its key still unrevoked, as a value
    for a statement of the decision's transaction to select: ``''`` when both hold,
    ``'deactivated'``, ``'revoked'``, or NULL (no such key any more); :func:`_check_standing`
    judges it.

    The key and its agent were read before the transaction (:func:`_agent_key`), and a
    refund's facts or a credit's customer are read at the rail after that, for seconds at
    worst: an owner who deactivated the agent or revoked the key meanwhile was told so, and
    the decision must not go on as if they had not. The rows are locked in share until the
    decision commits (``FOR KEY SHARE``, as the mandate's foreign key already locks the
    agent's): a deactivation or revocation (each locks its row ``FOR UPDATE``) that comes
    after this read waits for the decision, and the owner hears of it only once the decision
    is made; one that came before is what this reads. SQLite serialises its writers: a read
    in the transaction is enough there."""
    return Carried(_standing_sql(connection.vendor), (agent_pk, key_id))


@cache
def _standing_sql(vendor: str) -> str:
    lock = " FOR KEY SHARE OF a, k" if vendor == "postgresql" else ""
    return f"""(SELECT CASE WHEN NOT a.active THEN 'deactivated'
                    WHEN k.revoked_at IS NOT NULL THEN 'revoked' ELSE '' END
        FROM accounts_agent a JOIN accounts_agentkey k ON k.agent_id = a.id
        WHERE a.id = %s AND k.key_id = %s{lock})"""  # noqa: S608  (formatted in: a constant)


def _standing_now(standing: Carried) -> str | None:
    """What :func:`_standing_select`'s ``standing`` selects, in a statement of its own."""
    row = fetch_row(f"SELECT {standing.sql}", standing.params)
    assert row is not None
    return row[0]


def _check_standing(standing: str | None, *, agent_id: str) -> None:
    """The refusal intake gives a mandate of a deactivated agent, or one signed with a revoked
    or unknown key, when :func:`_standing_select` says so (nothing of the decision stays:
    raised inside its transaction)."""
    if standing == "deactivated":
        raise _deactivated(agent_id)
    if standing == "revoked":
        raise MandateError("unknown_key", mandates.KEY_REVOKED, field="envelope.key_id")
    if standing is None:
        raise MandateError(
            "unknown_key", "No such key for this agent on this site.", field="envelope.key_id"
        )


def _agent_key(
    site_id: str,
    agent_id: str,
    key_id: str,
    *,
    mandate_id: str,
    original_mandate_id: str | None = None,
) -> AgentKey | None:
    """The active agent's key, with its agent and site (the decision reuses them); as
    ``earlier_sha256`` the digest of the site's mandate ``mandate_id`` if one is stored; as
    ``policy_version`` the site's active policy version (None: the baseline); and as
    ``charged`` what :func:`_charged_original` reads for ``original_mandate_id`` (a
    refund's original as its body names it before verification; None reads nothing). One
    query for the resend check, the key, the policy and the original (hand-written: every
    mandate runs it).

    The version is read here, before the decision's transaction, rather than inside it: the
    read takes no lock either way, so a version activated while the request runs is missed
    (or not) just as it would be a few milliseconds later. So is the original, which the
    decision's transaction reads again under its lock; nothing read here is used unless the
    signature verifies, and only for the original the verified mandate names.
    """
    key, agent, site = cols(AgentKey, "k"), cols(Agent, "a"), cols(Site, "s")
    version = active_version_columns("v")
    original, *_ = _charged_original_select()
    row = fetch_row(
        f"""SELECT {key.sql}, {agent.sql}, {site.sql}, {version.sql}, x.*,
            (SELECT m.body_sha256 FROM refunds_mandate m
             WHERE m.site_id = %s AND m.mandate_id = %s LIMIT 1)
        FROM accounts_agentkey k
        JOIN accounts_agent a ON a.id = k.agent_id
        JOIN accounts_site s ON s.id = a.site_id
        LEFT JOIN policies_policyversion v ON v.site_id = s.id AND v.active = %s
        LEFT JOIN ({original}) x ON 1 = 1
        WHERE a.site_id = %s AND a.agent_id = %s AND a.active = %s AND k.key_id = %s
        ORDER BY k.id
        LIMIT 1""",  # noqa: S608  (formatted in: column lists and a constant query only)
        [
            site_id,
            mandate_id,
            True,
            *_charged_original_params(site_id, original_mandate_id),
            site_id,
            agent_id,
            True,
            key_id,
        ],
    )
    if row is None:
        return None
    found = key.build(row)
    found.agent = agent.build(row, len(key))
    at = len(key) + len(agent)
    found.agent.site = site.build(row, at)
    at += len(site)
    found.policy_version = version.build(row, at) if row[at] is not None else None  # type: ignore[attr-defined]
    at += len(version)
    if original_mandate_id is not None:
        found.charged = _Charged(original_mandate_id, *_charged_from(row, at))  # type: ignore[attr-defined]
    found.earlier_sha256 = row[-1]  # type: ignore[attr-defined]
    return found


def _key_record(key: AgentKey) -> mandates.KeyRecord:
    return mandates.KeyRecord(
        public_key=bytes(key.public_key),
        valid_from=key.valid_from,
        valid_until=key.valid_until,
        revoked_at=key.revoked_at,
    )


def answer_for(mandate: Mandate) -> dict[str, Any]:
    """The API object for a stored mandate, as it stands now."""
    if mandate.action == "purchase":
        order = Order.objects.filter(site_id=mandate.site_id, source_mandate_id=mandate.mandate_id)
        return purchase_payload(mandate, order.prefetch_related("charges").first())
    return refund_payload(mandate, Refund.objects.filter(mandate=mandate).first())


def _earlier(
    site_id: str, mandate_id: str, body_sha256: str, *, raw: bytes, now: datetime
) -> MandateAnswer | None:
    """The stored answer for an identical resend; ``mandate_conflict`` for another body.

    A different body must pass verification before it hears "conflict", so an unsigned
    request learns nothing about which mandate ids exist.
    """
    earlier = Mandate.objects.filter(site_id=site_id, mandate_id=mandate_id).first()
    if earlier is None:
        return None
    if earlier.body_sha256 != body_sha256:
        mandates.verify_mandate(raw, key_lookup=_key_lookup, now=now)
        raise MandateError(
            "mandate_conflict",
            f"mandate {mandate_id} was already received with a different body",
            field="signed.mandate_id",
        )
    return MandateAnswer(200, answer_for(earlier))


def submit_mandate(*, raw: bytes, now: datetime | None = None) -> MandateAnswer:
    now = now or timezone.now()
    # Parsed and canonicalised once: the resend check, the signature and the digest share it.
    loaded = mandates.load_mandate(raw)
    identity = mandates.peek_identity(loaded.doc)
    mandate_id, site_id, agent_id, key_id = identity
    body_sha256 = loaded.sha256
    key = _agent_key(
        site_id,
        agent_id,
        key_id,
        mandate_id=mandate_id,
        original_mandate_id=mandates.peek_original_mandate_id(loaded.doc),
    )
    # No key (or an inactive agent) says nothing about stored mandates: look them up alone.
    maybe_resent = key is None or getattr(key, "earlier_sha256", None) is not None
    if maybe_resent and (answer := _earlier(site_id, mandate_id, body_sha256, raw=raw, now=now)):
        return answer

    if key is None:
        _refuse_if_deactivated(raw, loaded, now=now)

    def key_lookup(*asked: str) -> mandates.KeyRecord | None:
        if asked != identity[1:]:  # never expected: verify_mandate asks for the same key
            return _key_lookup(*asked)
        return _key_record(key) if key is not None else None

    verified = mandates.verify_mandate(raw, key_lookup=key_lookup, now=now, loaded=loaded)
    assert key is not None  # the signature verified with it
    if isinstance(verified.intent, mandates.PurchaseIntent):
        _check_purchase_fits(verified.intent)  # the schema's last check: nothing is spent yet
    elif isinstance(verified.intent, mandates.CreditIntent):
        _check_recordable(verified.intent.amount, "signed.intent.amount")
    # The key's rate limit, counted only now that the signature holds (sill/api.py).
    spend_mandate_budget(site_id=site_id, agent_id=verified.agent_id, key_id=verified.key_id)
    prefetched = _prefetch_rail_facts(verified, now=now, charged=getattr(key, "charged", None))
    # A credit's customer is read at the rail now, outside the transaction, like refund facts.
    credit_read = read_customer(verified) if verified.action == "credit_customer" else None
    try:
        body = _decide(
            verified=verified,
            agent=key.agent,
            now=now,
            prefetched=prefetched,
            credit_read=credit_read,
            policy_version=ReadBefore(key.policy_version),  # type: ignore[attr-defined]  # read by _agent_key
        )
    except IntegrityError as exc:
        return _refused_write(
            exc, site_id=site_id, mandate_id=mandate_id, body_sha256=body_sha256, raw=raw, now=now
        )
    return MandateAnswer(201, body)


def _refused_write(
    exc: IntegrityError,
    *,
    site_id: str,
    mandate_id: str,
    body_sha256: str,
    raw: bytes,
    now: datetime,
) -> MandateAnswer:
    """The answer to a decision whose write a unique constraint refused, by its name (module
    doc, step 3); ``exc`` raised again for any other constraint."""
    id_taken = violated(exc, Mandate, "mandate_id_unique")
    nonce_taken = violated(exc, Mandate, "mandate_nonce_unique")
    if id_taken or nonce_taken:
        # A concurrent send of this mandate won the insert (either constraint may be the one
        # that refused ours): answer what it stored, or mandate_conflict for another body.
        answer = _earlier(site_id, mandate_id, body_sha256, raw=raw, now=now)
        if answer is not None:
            return answer
    if nonce_taken:
        raise MandateError(
            "replay", "this nonce was already used by another mandate", field="signed.nonce"
        ) from None
    if violated(exc, Order, "order_source_mandate_unique"):
        # An order of this site already names this mandate id as the one that placed it (an
        # order that came with no stored mandate, as the demo's do).
        raise MandateError(
            "mandate_conflict",
            f"an order on this site was already placed under mandate {mandate_id}",
            field="signed.mandate_id",
        ) from None
    raise exc


@retry_on_conflict  # a deadlock or serialization failure runs it again; never a 500
def _decide(
    *,
    verified: VerifiedMandate,
    agent: Agent,
    now: datetime,
    prefetched: _Prefetched | None,
    credit_read: CustomerRead | None = None,
    policy_version: ReadBefore | Unread = UNREAD,
) -> dict[str, Any]:
    """Store, decide and answer ``verified`` in one transaction (step 3 above).

    An ``IntegrityError`` (a concurrent insert of this mandate or nonce, an order already
    placed under this mandate id) is not retried: it passes through to ``submit_mandate``,
    which answers it by the constraint that refused the write.
    """
    # The answer (its receipt signed) is built after COMMIT: the decision's audit append
    # holds the site's chain head locked until then, and nothing else should run under it.
    with transaction.atomic():
        mandate = _store(verified, agent=agent)
        if verified.action != "request_refund":
            # A refund reads this with its order's lock (_request_refund).
            standing = _standing_now(_standing_select(agent.pk, verified.key_id))
            _check_standing(standing, agent_id=agent.agent_id)
        if credit_read is not None:
            credit = open_credit(mandate=mandate, verified=verified, read=credit_read, now=now)
        elif verified.action == "request_refund":
            refund = _request_refund(
                mandate=mandate,
                verified=verified,
                now=now,
                prefetched=prefetched,
                policy_version=policy_version,
            )
        else:
            # A purchase's answer shows its charge as the transaction left it (a worker
            # may charge it as soon as it commits).
            return purchase_payload(mandate, _purchase(mandate, verified, now=now))
    return refund_payload(mandate, credit if credit_read is not None else refund)


def _purchase(mandate: Mandate, verified: VerifiedMandate, *, now: datetime) -> Order:
    """Place the order a purchase mandate asks for, with its signed decision record (in the
    caller's transaction): the record of taking the money exists before any charge is tried,
    and stays whatever becomes of the charge."""
    intent = verified.intent
    assert isinstance(intent, mandates.PurchaseIntent)
    order = place_order(
        purchase=Purchase(
            site=mandate.site,
            agent=mandate.agent,
            mandate_id=mandate.mandate_id,
            lines=[
                NewLine(sku=li.sku, name=li.name, quantity=li.quantity, unit_price=li.unit_price)
                for li in intent.line_items
            ],
            currency=intent.currency,
            buyer_name=intent.buyer_name,
            buyer_email=intent.buyer_email,
            rail=intent.payment_rail,
            payment_method=intent.payment_method,
        )
    )
    # place_order cancels a fresh order only when its rail cannot take the money: a refusal
    # (the answer says rail_disabled: refunds.agent.answers), as a refund's rejection is.
    refused = order.status == OrderStatus.CANCELLED
    record_purchase_decision(
        mandate=mandate,
        order=order,
        rail=intent.payment_rail,
        reason="rail_disabled" if refused else None,
        now=now,
    )
    return order


def _check_purchase_fits(intent: mandates.PurchaseIntent) -> None:
    """``invalid_field`` for a purchase's text longer than a column it is stored in (the
    schema takes up to ``MAX_TEXT`` characters, some of these columns fewer), a total larger
    than its signed records hold, a currency its rail does not charge
    (``sill.rails.base.charges_currency``), or a total its rail cannot charge
    (``sill.rails.base.amount_step``)."""
    path = "signed.intent"
    _check_recordable(intent.quoted_total, f"{path}.quoted_total")
    for i, line in enumerate(intent.line_items):
        _fits(line.sku, f"{path}.line_items.{i}.sku", (LineItem, "sku"))
        _fits(line.name, f"{path}.line_items.{i}.name", (LineItem, "name"))
    # The buyer's name and email go on the order, and on the customer a first purchase makes.
    _fits(intent.buyer_name, f"{path}.buyer.name", (Order, "buyer_name"), (Customer, "name"))
    _fits(intent.buyer_email, f"{path}.buyer.email", (Order, "buyer_email"), (Customer, "email"))
    # A currency the rail does not charge (Stripe takes no IQD) is refused here too, rather than
    # placed as an order whose charge the rail then declines (charge_failed).
    if not charges_currency(intent.payment_rail, intent.currency):
        raise MandateError(
            "invalid_field",
            f"{rail_label(intent.payment_rail)} does not charge {intent.currency}: "
            "nothing was placed; send the purchase in a currency it charges",
            field=f"{path}.currency",
        )
    # A total the rail cannot charge in its currency (Stripe's KWD 10.125: its three-decimal
    # currencies go in steps of 10) is refused here, as a refund's amount is, rather than
    # placed as an order whose charge the rail then declines.
    step = amount_step(intent.payment_rail, intent.currency)
    if intent.quoted_total.amount_minor % step:
        raise MandateError(
            "invalid_field",
            f"{rail_label(intent.payment_rail)} charges {intent.currency} only in steps of "
            f"{format_money(Money(step, intent.currency))}: "
            f"{format_money(intent.quoted_total)} can't be charged",
            field=f"{path}.quoted_total",
        )
    _fits(intent.payment_method, f"{path}.payment.payment_method", (Charge, "payment_method"))


def _check_recordable(amount: Money, field: str) -> None:
    """``invalid_field`` for an amount its signed decision record cannot hold: a record holds
    integers up to 2**53 - 1 only (``audit.chain``), and a purchase's total (its charge's too)
    or a credit's amount is written there in minor units. A larger one failed that write, a
    500 the agent was told to send again, failing the same way every time."""
    if amount.amount_minor > MAX_SAFE_INTEGER:
        largest = Money(MAX_SAFE_INTEGER, amount.currency)
        raise MandateError(
            "invalid_field",
            f"{field} must be at most {format_money(largest)}: nothing was done",
            field=field,
        )


def _fits(value: str, field: str, *columns: tuple[type[Model], str]) -> None:
    longest = min(_max_length(model, name) for model, name in columns)
    if len(value) > longest:
        raise MandateError(
            "invalid_field", f"{field} must be at most {longest} characters.", field=field
        )


@cache
def _max_length(model: type[Model], name: str) -> int:
    field = model._meta.get_field(name)
    assert isinstance(field, Field) and field.max_length is not None, f"{model}.{name}"
    return field.max_length


def _store(verified: VerifiedMandate, *, agent: Agent) -> Mandate:
    """Insert the mandate as received; ``IntegrityError`` when its id or nonce is stored.

    The unique constraints on (site, mandate_id) and (agent, nonce) are the checks: a
    conflicting INSERT ends this transaction (no savepoint: it leaves ``atomic`` at once),
    and ``submit_mandate`` answers it as a resend (the same mandate, stored by an identical
    send running beside this one), a conflict or a replay.
    """
    site = agent.site  # read with the key (``_agent_key``)
    if verified.intent.merchant != site.merchant_domain:
        raise MandateError(
            "invalid_field",
            f"merchant {verified.intent.merchant!r} is not this site's merchant",
            field="signed.intent.merchant",
        )
    return insert(
        Mandate(
            site=site,
            agent=agent,
            mandate_id=verified.mandate_id,
            key_id=verified.key_id,
            nonce=verified.nonce,
            action=verified.action,
            raw=verified.raw,
            body_sha256=verified.body_sha256,
            issued_at=verified.issued_at,
            expires_at=verified.expires_at,
        )
    )


def _prefetch_rail_facts(
    verified: VerifiedMandate, *, now: datetime, charged: _Charged | None = None
) -> _Prefetched | None:
    """The original and the rail's facts about its charge, read before any transaction or lock.

    A provider's network calls (Stripe: up to three) must not hold the order's row lock, nor
    SQLite's write lock, while they wait. None when there is no charged original to ask about
    (the request will be rejected anyway, from what the transaction reads).
    """
    intent = verified.intent
    if not isinstance(intent, mandates.RefundIntent):
        return None
    # The order with its first successful charge (and its rail account) in one query (read
    # with the key, ``charged``, when it named this original); the order alone only if none.
    if intent.original_order is None:
        if charged is not None and charged.mandate_id == intent.original_mandate_id:
            charge, account = charged.charge, charged.account
        else:
            charge, account = _charged_original(verified.site_id, intent.original_mandate_id)
    else:
        charge = (
            Charge.objects.select_related("order")
            .filter(order__in=originals(verified.site_id, intent), status=ChargeStatus.SUCCEEDED)
            .order_by("created_at")
            .first()
        )
        account = None
        if charge is not None:
            account = RailAccount.objects.filter(
                site_id=verified.site_id, rail=charge.rail, enabled=True
            ).first()
    order = charge.order if charge is not None else originals(verified.site_id, intent).first()
    if original_refusal(order, charge) is not None:
        return None
    assert order is not None and charge is not None
    facts = prefetch_rail_facts(
        site_id=verified.site_id, order=order, charge=charge, now=now, account=account,
        catch_up=catch_up_charge,
    )  # fmt: skip
    return _Prefetched(order=order, charge=charge, account=account, facts=facts)


def _charged_original(
    site_id: str, mandate_id: str | None
) -> tuple[Charge | None, RailAccount | None]:
    """The first successful charge of the order purchase mandate ``mandate_id`` placed, with
    its order, and the site's enabled account of the charge's rail (or None): one
    hand-written query (:func:`_charged_original_select`). Agent intake reads it with the
    key (:func:`_agent_key`); this is for an original that read did not name."""
    sql, *_ = _charged_original_select()
    row = fetch_row(sql, _charged_original_params(site_id, mandate_id))
    return _charged_from(row, 0) if row is not None else (None, None)


def _charged_original_select() -> tuple[str, Columns[Charge], Columns[Order], Columns[RailAccount]]:
    """The query :func:`_charged_original` runs and its columns, for this connection's
    database (:func:`_charged_original_select_on`)."""
    return _charged_original_select_on(connection.vendor)


@cache
def _charged_original_select_on(
    vendor: str,
) -> tuple[str, Columns[Charge], Columns[Order], Columns[RailAccount]]:
    """The query :func:`_charged_original` runs, and its three models' columns (in the order
    it selects them; all NULL in a row of ``LEFT JOIN (query)`` that found no charge).

    ``source_mandate_id <> ''`` is the predicate of the unique index the order is found by
    (store orders have no mandate): written out, it lets the prepared statement's generic
    plan use that index, so PostgreSQL stops planning the statement afresh on every run
    (tests/refunds/test_decision_plans.py)."""
    charge, order, account = cols(Charge, "c"), cols(Order, "o"), cols(RailAccount, "ra")
    sql = f"""SELECT {charge.sql}, {order.sql}, {account.sql}
        FROM orders_charge c
        JOIN orders_order o ON o.id = c.order_id
        LEFT JOIN rails_railaccount ra
            ON ra.site_id = o.site_id AND ra.rail = c.rail AND ra.enabled = %s
        WHERE o.site_id = %s AND o.source_mandate_id = %s AND o.source_mandate_id <> ''
            AND c.status = %s
        ORDER BY c.created_at
        LIMIT 1"""  # noqa: S608  (formatted in: column lists only)
    return sql, charge, order, account


def _charged_original_params(site_id: str, mandate_id: str | None) -> list[object]:
    return [True, site_id, mandate_id, ChargeStatus.SUCCEEDED]


def _charged_from(row: Sequence[Any], at: int) -> tuple[Charge | None, RailAccount | None]:
    """The charge (with its order) and account :func:`_charged_original_select`'s columns
    hold from ``row[at]`` on: (None, None) where they are NULL."""
    _sql, charge, order, account = _charged_original_select()
    if row[at] is None:  # the charge's id
        return None, None
    found = charge.build(row, at)
    at += len(charge)
    found.order = order.build(row, at)
    at += len(order)
    return found, account.build(row, at) if row[at] is not None else None


def originals(site_id: str, intent: mandates.RefundIntent) -> QuerySet[Order]:
    """The site's order the refund intent names (at most one): the order its purchase mandate
    placed, or the store order (``original_order``) whose charge on that rail carries the
    store's order id, among the orders of the shop or store connected now (Shopify: the
    charge's ``provider_payment_id``; WooCommerce: the order sync's link)."""
    named = intent.original_order
    if named is None:
        return Order.objects.filter(site_id=site_id, source_mandate_id=intent.original_mandate_id)
    if named.rail == "woocommerce":
        # Paid on Stripe: the store's order is linked to Sill's by the order sync. Woo order
        # ids are per store and the mandate names none: the store connected now (an earlier
        # store's order of the same id is someone else's, its charge not this refund's).
        links = WooOrderLink.objects.filter(
            site_id=site_id,
            woo_order_id=int(named.order_id),
            store_url=connected_account_of(site_id=site_id, rail=named.rail),
        )
        return Order.objects.filter(site_id=site_id, pk__in=links.values("order_id"))
    # Shopify: the order of the shop connected now (the mandate names no shop). An order of a
    # shop the site was connected to before is that shop's, refunded nowhere through Sill; a
    # charge that names no shop is read as the connected shop's, as before charges named one.
    charges = Charge.objects.filter(
        on_connected_account(site_id=site_id, rail=named.rail),
        order__site_id=site_id,
        rail=named.rail,
        provider_payment_id=named.order_id,
    )
    return Order.objects.filter(site_id=site_id, pk__in=charges.values("order_id"))


def _check_currency(asked: str, charged: str) -> None:
    if asked != charged:
        raise MandateError(
            "invalid_field",
            f"the original order is in {charged}, not {asked}",
            field="signed.intent.currency",
        )


def _within_rail_step(amount: Money, rail: str) -> Money:
    """``amount`` down to the rail's step (``sill.rails.base.amount_step``: KWD 7.005 on Stripe
    is 7.000), never above the mandate's ``max_amount``; 422 ``invalid_field`` when that leaves
    nothing (KWD 0.005 on Stripe), as the rail would refuse the refund when it ran."""
    step = amount_step(rail, amount.currency)
    kept = Money(amount.amount_minor - amount.amount_minor % step, amount.currency)
    if not kept:
        raise MandateError(
            "invalid_field",
            f"{rail_label(rail)} refunds {amount.currency} only in steps of "
            f"{format_money(Money(step, amount.currency))}: {format_money(amount)} can't be "
            "refunded",
            field="signed.intent.max_amount",
        )
    return kept


def _request_refund(
    *,
    mandate: Mandate,
    verified: VerifiedMandate,
    now: datetime,
    prefetched: _Prefetched | None = None,
    policy_version: ReadBefore | Unread = UNREAD,
) -> Refund:
    intent = verified.intent
    assert isinstance(intent, mandates.RefundIntent)
    site = mandate.site
    base = {
        "site": site,
        "origin": RefundOrigin.AGENT,
        "mandate": mandate,
        "agent": mandate.agent,
        "reason_code": intent.reason_code,
        "currency": intent.currency,
        "amount_minor": 0,
    }

    def rejected(code: str, **found: Any) -> Refund:
        refund = unsaved_refund(
            **{**base, **found},
            decision=Decision.REJECTED,
            status=RefundStatus.REJECTED,
            outcome_code=code,
        )
        return record_decision(refund=refund, outcome=None, now=now)

    agent = mandate.agent

    standing = _standing_select(agent.pk, verified.key_id)

    def check_standing(value: str | None) -> None:
        _check_standing(value, agent_id=agent.agent_id)

    if not agent.refund_enabled:
        # The seed's refund method is switched on per agent; off, nothing is looked up.
        check_standing(_standing_now(standing))
        return rejected("method_not_allowed")
    # The agent's and the customer's other decisions first (their sums are facts), then the
    # order: the lock order of refunds.locks. The order's customer never changes, so reading
    # it before the row lock is safe (so is reading it before the transaction).
    if prefetched is not None:
        customer_id = prefetched.order.customer_id
    else:
        customer_id = originals(site.pk, intent).values_list("customer_id", flat=True).first()
    # Only the sums a rule or a cap acts on need the scope locks (refunds.locks): decisions
    # of one agent on different orders do not queue behind one another for nothing.
    policy = active_policy_for(site, version=policy_version)
    scope = decision_scope(agent=agent, policy=policy)
    lock_decision_scope(
        agent_id=mandate.agent_id if scope.agent else None,
        customer_id=customer_id if scope.customer else None,
    )
    # The row lock on the order serialises every refund of this order (DESIGN: reserve). Its
    # charge is locked too, read with what the quote asks of the charge's other rows
    # (disputes, refunds): with the order, in one statement, when the prefetch found it.
    # The same statement reads the agent's refunds today for the policy's facts (under the
    # agent's scope lock when a rule or cap acts on them: refunds.locks).
    # The agent's and its key's standing too (_standing_select): read with the order, or in a
    # statement of its own where nothing selects it (SQLite; no such original).
    totals: list[tuple[str, int]] | None = None
    if prefetched is not None:
        carried = agent_live_totals_select(agent.pk, agent_day_start(site, now))
        order, charge, selected = locked_order_and_charge(
            site.pk, prefetched.order.pk, also=[standing, *([carried] if carried else [])]
        )
        if selected is None:  # not selected (SQLite, or no such order)
            check_standing(_standing_now(standing))
        else:
            check_standing(selected[0])
            if carried is not None:  # else the facts read them
                totals = agent_totals_from(selected[1])
    else:
        order = (
            originals(site.pk, intent)
            .select_for_update()
            .annotate(standing=RawSQL(standing.sql, standing.params))  # noqa: S611  (a constant)
            .first()
        )
        check_standing(order.standing if order is not None else _standing_now(standing))
        charge = charged_charge(order, lock=True, checks=True) if order is not None else None
    if order is not None:
        order.site = site  # the quote's refund window reads it: no second read of the site
    # A mandate in the wrong currency is the agent's error (422), before any business refusal.
    if order is not None and original_refusal(order, charge) is None:
        _check_currency(intent.currency, order.currency)
    try:
        same = prefetched is not None and charge is not None and prefetched.charge.pk == charge.pk
        rail_facts = prefetched.facts if same and prefetched else None
        quote = quote_refund(
            order=order,
            charge=charge,
            origin=RefundOrigin.AGENT,
            check_rail=True,
            rail_facts=rail_facts,
            rail_account=prefetched.account if same and prefetched else None,
        )
    except RefundRefused as refused:
        # The refusal in full as the rejection's note (an agent writes none), as a credit's
        # rejection keeps it (refunds.agent.credits): the refund page shows it.
        note = refused.message[:500]
        if refused.charge is None:  # no refundable original: the rejection names no charge
            return rejected(refused.code, note=note, order=refused.order)
        return rejected(
            refused.code,
            note=note,
            order=refused.order,
            charge=refused.charge,
            rail=refused.charge.rail,
        )
    found = {"order": quote.order, "charge": quote.charge, "rail": quote.charge.rail}
    if not isinstance(intent.scope, str):
        return rejected("scope_unsupported", **found)
    amount = _within_rail_step(min_money(quote.remaining, intent.max_amount), quote.charge.rail)
    over = agent_cap_refusal(agent=agent, site=site, amount=amount, now=now, today=totals)
    if over is not None:
        return rejected(over, **found)
    context = RefundContext(
        site=site,
        order=quote.order,
        charge=quote.charge,
        amount=amount,
        origin="agent",  # RefundOrigin.AGENT, as the Literal RefundContext.origin takes it
        agent=mandate.agent,
        user=None,
        reason=intent.reason_code,
        now=now,
        rail_facts=rail_facts,
        policy=policy,
        agent_totals_today=totals,
    )
    return decide_and_open(context=context, fields=base)
