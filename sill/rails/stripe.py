"""Stripe: PaymentIntents for charges, Refunds for refunds, through the official SDK.

Every POST carries Sill's own idempotency key (stripe-python would otherwise invent a random
one per call, which makes a retry a second refund). Refunds also carry ``sill_refund_id`` in
metadata because Stripe cannot be queried by idempotency key: that is how ``find_refund``
recovers a refund whose response was lost.

The API key never leaves this object: it is not in ``repr``, and every error message is
scrubbed of it (and of anything shaped like a Stripe key) before it is raised.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn, TypedDict, TypeVar, cast

import stripe

from sill.money import Money
from sill.rails import keepalive
from sill.rails.base import (
    AmbiguousRailError,
    ChargePending,
    ChargeRequest,
    ChargeResult,
    ConnectionInfo,
    CreditCustomer,
    CreditRequest,
    CustomerHistory,
    PermanentRailError,
    RailDispute,
    RailError,
    RailList,
    RailRefund,
    RateLimited,
    RefundFacts,
    RefundFactsRequest,
    RefundRequest,
    RefundResult,
    RefundState,
    RefundWindowPassed,
    RetryableRailError,
    check_currency,
    check_step,
)
from sill.rails.fact_reads import read_at_once
from sill.rails.retry_after import retry_after_from

logger = logging.getLogger(__name__)

_KEY_RE = re.compile(r"\b(?:sk|rk|pk)_(?:test|live)_[A-Za-z0-9]+")
# A Stripe account id as Stripe writes them (acct_ and 16 letters and digits today).
STRIPE_ACCOUNT_ID = re.compile(r"acct_[A-Za-z0-9]{1,64}")

# Currencies whose Stripe API amounts are not ISO 4217 minor units. ISK and UGX have none (Sill
# counts whole krónur and shillings), but Stripe's "special cases" keep both two-decimal for
# backwards compatibility: an amount of 100 is 1 króna, or 1 shilling (whole units only). Sent
# as minor units, ISK 5,000 would be charged as ISK 50, and UGX 50,000 as UGX 500.
_STRIPE_UNITS_PER_MINOR: dict[str, int] = {"ISK": 100, "UGX": 100}


def to_stripe_amount(money: Money) -> int:
    """``money`` as Stripe's API counts its currency."""
    return money.amount_minor * _STRIPE_UNITS_PER_MINOR.get(money.currency, 1)


def from_stripe_amount(amount: Any, currency: Any) -> int:
    """An amount Stripe's API reports in ``currency``, in Sill's minor units (ISO 4217)."""
    return int(amount) // _STRIPE_UNITS_PER_MINOR.get(str(currency).upper(), 1)


def dispute_money(amount: Any, currency: Any) -> tuple[int | None, str]:
    """A Stripe dispute's ``amount`` and ``currency`` in Sill's minor units; ``(None, "")``
    unless Stripe's integer (a JSON ``true`` is an int to Python, and ``1.5`` would be cut to
    1) with a currency. ``sill.orders.outside.record_dispute`` records the dispute all the
    same, and records as not known too an amount the books cannot hold (negative, past what a
    signed record holds, a currency Sill does not know)."""
    if isinstance(amount, bool) or not isinstance(amount, int) or not isinstance(currency, str):
        return None, ""
    return from_stripe_amount(amount, currency), currency.upper()


class _Target(TypedDict, total=False):
    """What a refund or refund lookup names: one of these two (see StripeRail._target)."""

    charge: str
    payment_intent: str


_REFUND_STATES: dict[str, RefundState] = {
    "succeeded": "succeeded",
    "pending": "pending",
    "requires_action": "pending",
    "failed": "failed",
    "canceled": "failed",
}


@functools.lru_cache(maxsize=256)
def _http_client(key_fingerprint: str, timeout: float, pid: int) -> stripe.RequestsClient:
    # One kept-alive session per key (sill.rails.keepalive), shared by every thread and by
    # both timeouts (calls, fact reads): the concurrent fact reads reuse its connections.
    # ``pid``: a forked worker makes its own (its parent's sockets are not its to reuse).
    return stripe.RequestsClient(
        timeout=timeout, session=keepalive.session_for("stripe", key_fingerprint)
    )


def http_client_for(secret_key: str, timeout: float) -> stripe.RequestsClient:
    """The kept-alive HTTP client for ``secret_key`` (cached by the key's SHA-256, never the
    key itself): a new StripeRail per call no longer means a new TLS session per call."""
    return _http_client(
        hashlib.sha256(secret_key.encode("utf-8")).hexdigest(), timeout, os.getpid()
    )


class StripeRail:
    name = "stripe"

    def __init__(
        self,
        *,
        secret_key: str,
        connected_account: str = "",
        api_base: str = "",
        mode: str = "test",
        timeout: float = 20.0,
        fact_timeout: float = 3.0,
    ) -> None:
        self.connected_account = connected_account
        self.api_base = api_base
        self.mode = mode
        self.fact_timeout = fact_timeout
        self._secret_key = secret_key
        self._client = self._sdk(timeout)
        self._fact_client: stripe.StripeClient | None = None

    def _sdk(self, timeout: float) -> stripe.StripeClient:
        return stripe.StripeClient(
            self._secret_key,
            stripe_account=self.connected_account or None,
            base_addresses={"api": self.api_base} if self.api_base else None,
            # Sill retries itself, always with the same key, after looking the refund up.
            max_network_retries=0,
            http_client=http_client_for(self._secret_key, timeout),
        )

    def __repr__(self) -> str:
        return (
            f"StripeRail(mode={self.mode!r}, connected_account={self.connected_account!r}, "
            f"api_base={self.api_base!r})"
        )

    # --- Settings → Rails' connection check -------------------------------------------

    def check_connection(self) -> ConnectionInfo:
        """Read the balance (any working key may), then the account's name if the key may.

        Restricted keys without account access, and localstripe, have no account to read:
        the name is then the connected account id or "".
        """
        try:
            balance = self._client.v1.balance.retrieve()
        except stripe.AuthenticationError:
            raise PermanentRailError(
                "Stripe refused the API key: it is mistyped, rolled or deleted.", code="bad_key"
            ) from None
        except stripe.PermissionError:
            raise PermanentRailError(
                "The restricted key may not read the balance: give it Balance read access.",
                code="missing_scope",
            ) from None
        except stripe.APIConnectionError:
            raise RetryableRailError(
                "Stripe could not be reached (no answer in time).", code="unreachable"
            ) from None
        except stripe.StripeError as exc:
            self._raise(exc, doing="connection check", read=True)
        name = self.connected_account
        try:
            account = self._client.v1.accounts.retrieve_current()
        except stripe.StripeError:
            pass
        else:
            settings = getattr(account, "settings", None)
            dashboard = getattr(settings, "dashboard", None) if settings else None
            profile = getattr(account, "business_profile", None)
            name = (
                str(getattr(dashboard, "display_name", "") or "")
                or str(getattr(profile, "name", "") or "")
                or str(account.id or "")
            )
        return ConnectionInfo(name=name, test_mode=not bool(getattr(balance, "livemode", False)))

    def payment_account(self) -> str:
        """Which Stripe account, in which mode, this rail's payments are on: ``acct_…
        (test mode)`` or ``acct_… (live mode)``; ``""`` where Stripe does not say.

        A charge is another account's (or the other mode's) to refund once the key is replaced,
        so Sill records this with each charge (sill.rails.payment_account). A Connect account
        (the Stripe-Account header) holds the payments itself; otherwise the key's own account
        is read (GET /v1/account). A restricted key without account access, and localstripe,
        have none to read: unknown, never a guess. The mode is the key's (Stripe's test and
        live data share one account id).
        """
        account_id = self.connected_account
        if not account_id:
            try:
                account_id = str(self._client.v1.accounts.retrieve_current().id or "")
            except stripe.StripeError as exc:
                logger.info("Stripe did not name the key's account: %s", type(exc).__name__)
                return ""
        if not STRIPE_ACCOUNT_ID.fullmatch(account_id):
            # Not an account id as Stripe writes them (a proxy's page, a field too long to
            # store): unknown, as when Stripe does not say.
            logger.info("Stripe named the key's account in an unexpected form; not recorded")
            return ""
        mode = "live" if "_live_" in self._secret_key[:8] else "test"
        return f"{account_id} ({mode} mode)"

    # --- the protocol -------------------------------------------------------------------

    def charge(self, request: ChargeRequest) -> ChargeResult:
        # IQD and the like: Stripe would refuse it; nothing is sent (RAIL_CURRENCIES).
        check_currency(self.name, request.amount)
        params: dict[str, Any] = {
            "amount": to_stripe_amount(request.amount),
            "currency": request.amount.currency.lower(),
            "payment_method": request.payment_method,
            "payment_method_types": ["card"],
            "confirm": True,
            "metadata": {"sill_order_id": request.order_id},
        }
        try:
            intent = self._client.v1.payment_intents.create(
                # payment_method_types is a real API parameter (localstripe needs it) that
                # stripe's PaymentIntentCreateParams no longer lists.
                params=cast("stripe.params.PaymentIntentCreateParams", params),
                options={"idempotency_key": request.idempotency_key},
            )
        except stripe.StripeError as exc:
            self._raise(exc, doing="charge")
        if intent.status in _UNFINISHED_INTENT_STATES:
            # The buyer may be (or become) charged: not a failure. Sill asks again later.
            raise ChargePending(
                f"Stripe has not finished the payment {intent.id} (status {intent.status})",
                provider_payment_id=intent.id,
                provider_status=str(intent.status),
            )
        if intent.status != "succeeded":
            # requires_payment_method (declined on confirm), canceled: no money moved.
            raise PermanentRailError(
                f"Stripe did not complete the payment {intent.id} (status {intent.status})"
            )
        return _charge_result(intent)

    def find_charge(self, request: ChargeRequest) -> ChargeResult | None:
        """The PaymentIntent Sill created for ``request`` (by ``sill_order_id`` metadata).

        Stripe cannot be asked by idempotency key, so the metadata is searched. A succeeded
        intent wins; an unfinished one raises ``ChargePending``; declined or canceled ones
        took no money, so they count as none (the caller may charge again with the same key).
        Search is eventually consistent on Stripe (about a minute): Sill looks up only after
        an attempt's lease lapsed or a retry's backoff, and retries under the same key, which
        Stripe answers with the original intent for 24 hours.
        """
        unfinished = None
        for intent in self._intents_for_order(request.order_id):
            if (
                int(intent.amount) != to_stripe_amount(request.amount)
                or str(intent.currency).upper() != request.amount.currency
            ):
                continue
            if intent.status == "succeeded":
                return _charge_result(intent)
            if intent.status in _UNFINISHED_INTENT_STATES:
                unfinished = intent
        if unfinished is not None:
            raise ChargePending(
                f"Stripe has not finished the payment {unfinished.id} (status {unfinished.status})",
                provider_payment_id=unfinished.id,
                provider_status=str(unfinished.status),
            )
        return None

    def _intents_for_order(self, order_id: str) -> list[Any]:
        """Every PaymentIntent whose metadata names ``order_id``.

        The Search API answers directly; where it does not exist (localstripe, and regions
        without search) the newest intents are listed, a bounded number of pages: a charge
        being recovered is minutes or hours old. When those pages hold none of the order's
        and there are more, that is no answer (the intent may be older): ``RetryableRailError``,
        never an empty list, which would let Sill fail a charge the buyer paid.
        """
        query = f"metadata['sill_order_id']:'{order_id}'"
        try:
            try:
                found = self._client.v1.payment_intents.search(
                    params={"query": query, "limit": 100}
                )
                return [i for i in found.auto_paging_iter() if _is_for(i, order_id)]
            except stripe.InvalidRequestError as exc:
                if exc.http_status != 404:
                    raise
            matches: list[Any] = []
            page = self._client.v1.payment_intents.list(params={"limit": 100})
            for _ in range(_LIST_PAGES):
                matches.extend(i for i in page.data if _is_for(i, order_id))
                if not page.has_more or not page.data:
                    return matches
                page = self._client.v1.payment_intents.list(
                    params={"limit": 100, "starting_after": page.data[-1].id}
                )
        except stripe.StripeError as exc:
            self._raise(exc, doing="charge lookup", read=True)
        if matches:
            return matches
        raise RetryableRailError(
            f"Stripe charge lookup: the newest {_LIST_PAGES * 100} PaymentIntents hold none for "
            f"order {order_id}, and Stripe cannot search this account for older ones"
        )

    def refund(self, request: RefundRequest) -> RefundResult:
        # KWD 1.235 and the like: Stripe would refuse it; nothing is sent (RAIL_AMOUNT_STEPS).
        check_step(self.name, request.amount)
        params: stripe.params.RefundCreateParams = {
            "amount": to_stripe_amount(request.amount),
            "metadata": {
                **request.metadata,
                "sill_refund_id": request.refund_id,
                "sill_idempotency_key": request.idempotency_key,
            },
            **self._target(request),
        }
        # No reason=: Sill keeps its own reasons (and localstripe rejects the parameter).
        try:
            refund = self._client.v1.refunds.create(
                params=params,
                options={"idempotency_key": request.idempotency_key},
            )
        except stripe.StripeError as exc:
            self._raise(exc, doing="refund")
        return _refund_result(refund)

    def find_refund(self, request: RefundRequest) -> RefundResult | None:
        try:
            page = self._client.v1.refunds.list(params={**self._target(request), "limit": 100})
            for refund in page.auto_paging_iter():
                if _metadata(refund).get("sill_refund_id") == request.refund_id:
                    return _refund_result(refund)
        except stripe.StripeError as exc:
            self._raise(exc, doing="refund lookup", read=True)
        return None

    # --- customer-balance credits ------------------------------------------------------

    def read_credit_customer(self, provider_customer_id: str) -> CreditCustomer:
        """The customer's balance currency and age (``customers.retrieve``)."""
        try:
            customer = self._client.v1.customers.retrieve(provider_customer_id)
        except stripe.InvalidRequestError as exc:
            if getattr(exc, "code", None) == "resource_missing":
                return CreditCustomer(exists=False)
            self._raise(exc, doing="customer lookup", read=True)
        except stripe.StripeError as exc:
            self._raise(exc, doing="customer lookup", read=True)
        if getattr(customer, "deleted", False):
            return CreditCustomer(exists=False)
        currency = getattr(customer, "currency", None)
        created = getattr(customer, "created", None)
        balance = getattr(customer, "balance", None)
        return CreditCustomer(
            exists=True,
            currency=str(currency).upper() if currency else None,
            created_at=datetime.fromtimestamp(int(created), tz=UTC) if created else None,
            balance_minor=(
                from_stripe_amount(balance, currency or "") if isinstance(balance, int) else None
            ),
        )

    def credit_customer(self, request: CreditRequest) -> RefundResult:
        """A customer balance transaction crediting ``request.amount`` (Stripe's sign: a
        credit is negative), with Sill's idempotency key and ``sill_credit_id`` metadata."""
        params: stripe.params.CustomerBalanceTransactionCreateParams = {
            "amount": -to_stripe_amount(request.amount),
            "currency": request.amount.currency.lower(),
            "metadata": {
                **request.metadata,
                "sill_credit_id": request.credit_id,
                "sill_idempotency_key": request.idempotency_key,
            },
        }
        if request.description:
            params["description"] = request.description[:350]
        try:
            txn = self._client.v1.customers.balance_transactions.create(
                request.provider_customer_id,
                params=params,
                options={"idempotency_key": request.idempotency_key},
            )
        except stripe.StripeError as exc:
            self._raise(exc, doing="customer credit")
        return _credit_result(txn)

    def find_credit(self, request: CreditRequest) -> RefundResult | None:
        """The balance transaction an earlier attempt made (by ``sill_credit_id``), if any."""
        for credit in self._credits(request.provider_customer_id, since=None):
            if credit.sill_refund_id == request.credit_id:
                return RefundResult(
                    provider_refund_id=credit.provider_refund_id,
                    state="succeeded",
                    amount=Money(credit.amount_minor, credit.currency),
                )
        return None

    def list_credits(
        self, provider_customer_id: str, *, since: datetime | None
    ) -> list[RailRefund]:
        """The customer's balance transactions back to ``since`` (newest first: pages are
        read until one is older; all of them without ``since``), Stripe's sign turned round
        so a credit is positive."""
        return list(self._credits(provider_customer_id, since=since))

    def _credits(
        self, provider_customer_id: str, *, since: datetime | None
    ) -> Iterator[RailRefund]:
        """``list_credits`` a page at a time: a lookup that finds its credit reads no more."""
        cutoff = since.timestamp() if since is not None else None
        try:
            page = self._client.v1.customers.balance_transactions.list(
                provider_customer_id, params={"limit": 100}
            )
            for txn in page.auto_paging_iter():
                if cutoff is not None and int(txn.created) < cutoff:
                    return
                yield _rail_credit(txn)
        except stripe.StripeError as exc:
            self._raise(exc, doing="customer credit list", read=True)

    # --- what Stripe holds for a charge, and its events ---------------------------------

    def list_refunds(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailRefund]:
        """Every refund of the charge (``refunds.list`` by charge, all pages); one Sill cannot
        read (no amount, say) is left out and named (:class:`RailList`), the others listed."""
        try:
            page = self._client.v1.refunds.list(params={"charge": provider_charge_id, "limit": 100})
            return _read_each(page.auto_paging_iter(), _rail_refund)
        except stripe.StripeError as exc:
            self._raise(exc, doing="refund list", read=True)

    def list_disputes(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailDispute]:
        """Every dispute of the charge (``disputes.list`` by charge, all pages); one Sill
        cannot read is left out and named (:class:`RailList`), the others listed."""
        try:
            page = self._client.v1.disputes.list(
                params={"charge": provider_charge_id, "limit": 100}
            )
            return _read_each(page.auto_paging_iter(), _rail_dispute)
        except stripe.StripeError as exc:
            self._raise(exc, doing="dispute list", read=True)

    def events_since(self, since: datetime, *, types: list[str]) -> Iterator[dict[str, Any]]:
        """The account's events of ``types`` created at or after ``since``, oldest first,
        each as the JSON object Stripe sends to a webhook endpoint (``events.list``).

        Stripe keeps events for 30 days; the pages come newest first and are reversed here,
        so they are applied in the order they happened.
        """
        params: stripe.params.EventListParams = {
            "created": {"gte": int(since.timestamp())},
            "limit": 100,
        }
        if types:
            params["types"] = types
        try:
            page = self._client.v1.events.list(params=params)
            events = [e.to_dict() for e in page.auto_paging_iter()]
        except stripe.StripeError as exc:
            self._raise(exc, doing="event list", read=True)
        events.sort(key=lambda e: (int(e.get("created") or 0), str(e.get("id"))))
        yield from events

    # --- facts for Sill and its tests ---------------------------------------------------

    def charge_amount_refunded(self, provider_charge_id: str) -> Money:
        """What Stripe says has been refunded on a charge, by anyone."""
        try:
            charge = self._client.v1.charges.retrieve(provider_charge_id)
        except stripe.StripeError as exc:
            self._raise(exc, doing="charge lookup", read=True)
        refunded = from_stripe_amount(charge.amount_refunded, charge.currency)
        return Money(refunded, charge.currency.upper())

    def read_refund_facts(self, request: RefundFactsRequest) -> RefundFacts:
        """The charge, its customer and the customer's 90-day history, as Stripe reports them.

        Three independent reads, made at once (sill.rails.fact_reads) when the request names
        the customer; otherwise the charge is read first (it names the customer), then the
        other two at once. Each waits at most ``fact_timeout`` seconds; one that fails or
        times out (a restricted key that cannot read customers, a deleted customer, a slow
        answer) leaves its facts unknown instead of failing the rest. The history is one page
        of ``history_limit`` charges: ``has_more`` means truncated.
        """
        if self._fact_client is None:
            self._fact_client = self._sdk(self.fact_timeout)
        client = self._fact_client
        customer_id = request.provider_customer_id
        reads: dict[str, Any] = {"charge": lambda: self._charge_facts(client, request)}
        if customer_id:
            reads |= self._customer_reads(client, customer_id, request)
        found = read_at_once(reads, timeout=self.fact_timeout, rail="Stripe")
        charge: _ChargeFacts = found["charge"] or _ChargeFacts()
        if not customer_id and charge.customer_id:
            customer_id = charge.customer_id
            found |= read_at_once(
                self._customer_reads(client, customer_id, request),
                timeout=self.fact_timeout,
                rail="Stripe",
            )
        if not customer_id:
            # A guest checkout: no customer, so no age and no history.
            return RefundFacts(
                charge_created_at=charge.created_at,
                charge_disputed=charge.disputed,
                charge_refunded_minor=charge.refunded,
            )
        return RefundFacts(
            charge_created_at=charge.created_at,
            charge_disputed=charge.disputed,
            charge_refunded_minor=charge.refunded,
            customer_created_at=found["customer"],
            history=found["customer history"],
        )

    def _customer_reads(
        self, client: stripe.StripeClient, customer_id: str, request: RefundFactsRequest
    ) -> dict[str, Any]:
        return {
            "customer": lambda: self._customer_created_at(client, customer_id),
            "customer history": lambda: self._customer_history(client, customer_id, request),
        }

    def _charge_facts(
        self, client: stripe.StripeClient, request: RefundFactsRequest
    ) -> _ChargeFacts | None:
        try:
            charge = client.v1.charges.retrieve(request.provider_charge_id)
        except stripe.StripeError as exc:
            self._note_unreadable("charge", exc)
            return None
        flag = getattr(charge, "disputed", None)
        owner = getattr(charge, "customer", None)
        return _ChargeFacts(
            created_at=datetime.fromtimestamp(int(charge.created), tz=UTC),
            disputed=flag if isinstance(flag, bool) else None,
            refunded=(
                from_stripe_amount(charge.amount_refunded or 0, charge.currency)
                if str(charge.currency).upper() == request.currency
                else None
            ),
            customer_id=owner if isinstance(owner, str) else getattr(owner, "id", "") or "",
        )

    def _customer_created_at(
        self, client: stripe.StripeClient, customer_id: str
    ) -> datetime | None:
        try:
            customer = client.v1.customers.retrieve(customer_id)
        except stripe.StripeError as exc:
            self._note_unreadable("customer", exc)
            return None
        created = getattr(customer, "created", None)
        if getattr(customer, "deleted", False) or created is None:
            return None
        return datetime.fromtimestamp(int(created), tz=UTC)

    def _customer_history(
        self, client: stripe.StripeClient, customer_id: str, request: RefundFactsRequest
    ) -> CustomerHistory | None:
        # created[gt] = since - 1 s is created >= since (and all localstripe supports).
        since = int(request.history_since.timestamp()) - 1
        try:
            page = client.v1.charges.list(
                params={
                    "customer": customer_id,
                    "created": {"gt": since},
                    "limit": request.history_limit,
                }
            )
        except stripe.StripeError as exc:
            self._note_unreadable("customer history", exc)
            return None
        refunded = [
            from_stripe_amount(c.amount_refunded, c.currency)
            for c in page.data[: request.history_limit]
            if str(c.currency).upper() == request.currency and int(c.amount_refunded or 0) > 0
        ]
        return CustomerHistory(
            refunded_charges=len(refunded),
            refunded_minor=sum(refunded),
            truncated=bool(page.has_more),
        )

    def _note_unreadable(self, what: str, exc: stripe.StripeError) -> None:
        # The facts become unknown (rules take their restrictive branch); say why, scrubbed.
        detail = self._scrub(exc.user_message or type(exc).__name__)
        logger.warning("Stripe %s could not be read for refund facts: %s", what, detail)

    # --- helpers ------------------------------------------------------------------------

    @staticmethod
    def _target(request: RefundRequest) -> _Target:
        if request.provider_charge_id:
            return {"charge": request.provider_charge_id}
        if request.provider_payment_id:
            return {"payment_intent": request.provider_payment_id}
        raise PermanentRailError("the refund names no Stripe charge or payment intent")

    def _scrub(self, text: str) -> str:
        if self._secret_key:
            text = text.replace(self._secret_key, "[redacted]")
        return _KEY_RE.sub("[redacted]", text)

    def _raise(self, exc: stripe.StripeError, *, doing: str, read: bool = False) -> NoReturn:
        """Translate a Stripe error into a ``RailError`` whose message holds no secret.

        ``read``: the call changed nothing, so a lost connection is merely retryable.
        """
        detail = self._scrub(exc.user_message or type(exc).__name__)
        code = getattr(exc, "code", None)
        if code:
            detail = f"{detail} ({code})"
        message = f"Stripe {doing} failed: {detail}"
        error: RailError
        if code == "charge_expired_for_refund":
            # Stripe's own time limit for refunds, not a decline: say so, with its own code.
            error = RefundWindowPassed(
                f"Stripe no longer refunds this charge: it is older than Stripe's refund time "
                f"limit ({code}). Refund the buyer another way, e.g. a credit or transfer."
            )
        elif code in _BOOKS_AHEAD:
            # Refunded in Stripe's dashboard (or a WooCommerce admin's Stripe gateway) since
            # Sill decided, or charged back: a code of its own, on which the refund core reads
            # the charge at once (refunds.services.BOOKS_BEHIND_CODES).
            error = PermanentRailError(message, code=_BOOKS_AHEAD[code])
        elif isinstance(exc, stripe.RateLimitError):
            # stripe-python keeps the answer's headers: Stripe documents no Retry-After on a
            # 429 (it advises a backoff), but one it or a proxy in front of it sends is kept.
            error = RateLimited(message, retry_after=retry_after_from(exc.headers))
        elif isinstance(exc, stripe.IdempotencyError) and not read:
            # Stripe's word about the key, not the request: an earlier request under it exists
            # and may have moved the money. Looked up and retried under the same key.
            error = AmbiguousRailError(message)
        elif isinstance(
            exc,
            stripe.CardError
            | stripe.InvalidRequestError
            | stripe.IdempotencyError  # a read's: it moved nothing
            | stripe.PermissionError
            | stripe.AuthenticationError,
        ):
            error = PermanentRailError(message)
        elif isinstance(exc, stripe.APIConnectionError):
            # The request may have reached Stripe before the connection dropped.
            error = (RetryableRailError if read else AmbiguousRailError)(
                f"Stripe {doing}: no answer from Stripe"
            )
        else:
            # APIError (5xx, 409 key in use) and anything newer: Stripe may have acted.
            error = (RetryableRailError if read else AmbiguousRailError)(message)
        # "from None": the SDK's exception carries the raw request context; keep it out of
        # tracebacks and logs. The type and code above are what callers need.
        raise error from None


# Stripe's refusals of a refund that say it holds more than Sill counted, with Sill's code.
_BOOKS_AHEAD: dict[str, str] = {
    "charge_already_refunded": "already_refunded",
    "charge_disputed": "disputed",
}


@dataclass(frozen=True)
class _ChargeFacts:
    """What the charge read gave (``None``: Stripe did not say)."""

    created_at: datetime | None = None
    disputed: bool | None = None
    refunded: int | None = None
    customer_id: str = ""


# PaymentIntent states in which the buyer may be charged but the payment is not finished.
_UNFINISHED_INTENT_STATES = frozenset({"processing", "requires_action", "requires_capture"})
# How many pages of 100 intents ``find_charge`` lists where search is unavailable.
_LIST_PAGES = 10


def _is_for(intent: Any, order_id: str) -> bool:
    return _metadata(intent).get("sill_order_id") == order_id


def _charge_result(intent: Any) -> ChargeResult:
    charge = intent.latest_charge  # an id, or the Charge itself when expanded
    charge_id = charge if isinstance(charge, str) else getattr(charge, "id", "")
    created = getattr(charge, "created", None) or intent.created
    customer = intent.customer
    return ChargeResult(
        provider_payment_id=intent.id,
        provider_charge_id=charge_id or "",
        captured_at=datetime.fromtimestamp(created, tz=UTC),
        provider_customer_id=(customer if isinstance(customer, str) else "") or "",
    )


def _metadata(obj: Any) -> dict[str, Any]:
    metadata = getattr(obj, "metadata", None)
    return metadata.to_dict() if metadata is not None else {}


Read = TypeVar("Read")


def _read_each(objects: Iterable[Any], read: Callable[[Any], Read]) -> RailList[Read]:
    """Each object Stripe listed, read; one that cannot be (a field missing or of another
    type) is left out and named, so that it hides neither the others nor itself."""
    listed: RailList[Read] = RailList()
    for obj in objects:
        try:
            listed.append(read(obj))
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
            name = getattr(obj, "id", None)
            listed.left_out.append(f"{str(name or '(no id)')[:80]} ({type(exc).__name__})")
    return listed


def _integer(value: Any) -> int:
    """A Stripe amount: an integer (not a JSON ``true``, not ``1.5`` cut to 1, not missing)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not an integer amount: {type(value).__name__}")
    return value


def _rail_refund(refund: Any) -> RailRefund:
    created = getattr(refund, "created", None)
    return RailRefund(
        provider_refund_id=refund.id,
        amount_minor=from_stripe_amount(_integer(refund.amount), refund.currency),
        currency=str(refund.currency).upper(),
        status=str(getattr(refund, "status", None) or "pending"),
        created_at=(
            datetime.fromtimestamp(int(created), tz=UTC) if created else datetime.now(tz=UTC)
        ),
        sill_refund_id=str(_metadata(refund).get("sill_refund_id") or ""),
        reason=str(getattr(refund, "reason", "") or ""),
        failure_reason=str(getattr(refund, "failure_reason", "") or ""),
    )


def _rail_dispute(dispute: Any) -> RailDispute:
    """One listed dispute as Sill reads a rail's, whatever the shape of its fields: without an
    id, its ``provider_dispute_id`` is "" (sill.rails.charge_sync records none such); an
    amount Sill cannot read is not known."""
    # Never raises: one dispute that did ended the read of the list, and the charge's other
    # disputes were not recorded.
    fields = dispute.to_dict() if isinstance(dispute, stripe.StripeObject) else {}
    dispute_id = fields.get("id")
    minor, currency = dispute_money(fields.get("amount"), fields.get("currency"))
    return RailDispute(
        provider_dispute_id=dispute_id if isinstance(dispute_id, str) else "",
        amount_minor=minor,
        currency=currency,
        reason=str(fields.get("reason") or "general"),
        status=str(fields.get("status") or "needs_response"),
        created_at=_created(fields.get("created")),
    )


def _created(value: Any) -> datetime:
    """A Stripe ``created`` (Unix seconds); now when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            pass
    return datetime.now(tz=UTC)


def _rail_credit(txn: Any) -> RailRefund:
    return RailRefund(
        provider_refund_id=str(txn.id),
        amount_minor=from_stripe_amount(-int(txn.amount), txn.currency),
        currency=str(txn.currency).upper(),
        status="succeeded",
        created_at=datetime.fromtimestamp(int(txn.created), tz=UTC),
        sill_refund_id=str(_metadata(txn).get("sill_credit_id") or ""),
    )


def _credit_result(txn: Any) -> RefundResult:
    # A balance transaction takes effect when it is created: there is no pending state.
    return RefundResult(
        provider_refund_id=str(txn.id),
        state="succeeded",
        amount=Money(from_stripe_amount(-int(txn.amount), txn.currency), str(txn.currency).upper()),
    )


def _refund_result(refund: Any) -> RefundResult:
    return RefundResult(
        provider_refund_id=refund.id,
        state=_REFUND_STATES.get(refund.status or "", "pending"),
        amount=Money(from_stripe_amount(refund.amount, refund.currency), refund.currency.upper()),
        failure_message=getattr(refund, "failure_reason", None) or "",
    )
