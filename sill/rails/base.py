"""The contract between Sill and a payment rail.

Rails are the only code that talks to a payment provider. They take and return the frozen
dataclasses below, never models; credentials are per instance; every failure is a
``RailError`` that says whether it is permanent, retryable, or *ambiguous* (the provider may
or may not have acted: recover by looking the refund up and retrying with the same key).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from django.db.models import TextChoices

from sill.money import Money, format_money

RefundState = Literal["succeeded", "pending", "failed"]


@dataclass(frozen=True)
class ChargeRequest:
    order_id: str
    amount: Money
    payment_method: str  # e.g. "pm_card_visa" on Stripe, anything on the mock rail
    idempotency_key: str  # "sill-charge-<order id>"
    customer_email: str = ""
    description: str = ""


@dataclass(frozen=True)
class ChargeResult:
    provider_payment_id: str
    provider_charge_id: str
    captured_at: datetime
    provider_customer_id: str = ""


@dataclass(frozen=True)
class RefundRequest:
    refund_id: str  # Sill's refund id, also sent as metadata so a lookup can find it
    idempotency_key: str  # "sill-refund-<refund id>", identical on every attempt
    amount: Money
    provider_charge_id: str
    provider_payment_id: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RefundResult:
    provider_refund_id: str
    state: RefundState
    amount: Money
    failure_message: str = ""


class RailError(Exception):
    """A rail call that did not succeed. ``retryable``: the same call may be tried again.

    ``ambiguous``: the provider may have acted (a timeout, a dropped connection); the caller
    must look the refund up and, if it is not there, retry with the *same* idempotency key.
    """

    retryable = False
    ambiguous = False
    code = "rail_error"
    # Seconds the rail asked Sill to wait before trying again (a throttle's Retry-After or
    # its bucket's refill time), when it said; a retry never comes sooner (refunds.execution).
    retry_after: float | None = None

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class PermanentRailError(RailError):
    """Declined, invalid, not permitted: trying again will not help."""

    code = "rail_declined"


class CannotLookUp(PermanentRailError):
    """``find_refund`` could not ask the rail (PayPal: a capture that names no checkout order
    to read its refunds from). Not an answer: it must never be read as "no refund exists"."""

    code = "rail_cannot_look_up"


class RetryableRailError(RailError):
    """Nothing happened (rate limit, 5xx before processing): retry later, same key.

    ``retry_after``: the seconds the rail asked Sill to wait (a 429's or 503's
    ``Retry-After``, read by sill.rails.retry_after), when it said."""

    retryable = True
    code = "rail_unavailable"

    def __init__(
        self, message: str, *, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        if retry_after is not None:
            self.retry_after = retry_after


class RateLimited(RetryableRailError):
    """The rail refused the request unprocessed (a 429, a throttle): it did nothing, which a
    5xx does not promise. A refund whose retries all end so, each after a lookup that found
    no refund under its key, is known not to exist (refunds.execution)."""


class AmbiguousRailError(RailError):
    """The outcome is unknown (timeout): look up, then retry with the same key."""

    retryable = True
    ambiguous = True
    code = "rail_timeout"


@runtime_checkable
class Rail(Protocol):
    name: str

    def charge(self, request: ChargeRequest) -> ChargeResult:
        """Charge a purchase once per idempotency key."""
        ...

    def refund(self, request: RefundRequest) -> RefundResult:
        """Refund part or all of a charge, once per idempotency key."""
        ...

    def find_refund(self, request: RefundRequest) -> RefundResult | None:
        """The refund made earlier for ``request`` (by idempotency key or metadata); None only
        when the rail answered that there is none (:class:`CannotLookUp` when it cannot be
        asked)."""
        ...


# --- customer-balance credits (optional: Stripe) ---------------------------------------------


@dataclass(frozen=True)
class CreditRequest:
    """Credit ``amount`` to a customer's balance at the rail, once per idempotency key."""

    credit_id: str  # Sill's id of the credit (a Refund row), also sent as metadata
    idempotency_key: str  # "sill-credit-<credit id>", identical on every attempt
    amount: Money
    provider_customer_id: str
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CreditCustomer:
    """What the rail says about the customer a credit would go to."""

    exists: bool  # False: no such customer, or it was deleted
    currency: str | None = None  # the balance's currency (upper case); None: none set yet
    created_at: datetime | None = None
    balance_minor: int | None = None  # the rail's sign: negative is credit the customer holds


@runtime_checkable
class CustomerCreditor(Protocol):
    """A rail that can credit a customer's balance (Stripe's customer balance)."""

    def read_credit_customer(self, provider_customer_id: str) -> CreditCustomer: ...

    def credit_customer(self, request: CreditRequest) -> RefundResult: ...

    def find_credit(self, request: CreditRequest) -> RefundResult | None:
        """The credit made earlier for ``request`` (by its metadata), if any."""
        ...


@runtime_checkable
class CreditReader(Protocol):
    """A rail that can list a customer's balance transactions (reconciliation of credits).
    Reads never move money; a ``RailError`` means nothing could be read."""

    def list_credits(
        self, provider_customer_id: str, *, since: datetime | None
    ) -> list[RailRefund]:
        """The customer's balance transactions created at or after ``since`` (every one when
        it is None), newest first,
        each as a :class:`RailRefund`: ``amount_minor`` what it credits (positive for a
        credit), ``status`` ``succeeded`` (a balance transaction takes effect when it is
        made), ``sill_refund_id`` the Sill credit its metadata names, or ``""``."""
        ...


# --- facts for the policy engine (optional: a rail without them gives unknown facts) -----------


@dataclass(frozen=True)
class RefundFactsRequest:
    """What the policy engine asks the rail about a refund's original charge and customer.

    Provider ids are what a real provider is asked with. ``sill_charge_id`` and
    ``sill_customer_id`` let the mock rail, whose "provider database" is Sill's own records,
    find the same rows. The history covers charges created at or after ``history_since`` and
    reads one page of ``history_limit``: a longer history is reported as truncated.
    """

    provider_charge_id: str
    currency: str
    history_since: datetime
    provider_customer_id: str = ""
    sill_charge_id: str = ""
    sill_customer_id: int | None = None
    history_limit: int = 100


@dataclass(frozen=True)
class CustomerHistory:
    """The customer's charges in the request's currency that carry a refund (one page)."""

    refunded_charges: int  # a charge refunded twice counts once
    refunded_minor: int  # what was refunded on them, in the request's currency
    truncated: bool  # the page was full and more charges exist: both figures are lower bounds


@dataclass(frozen=True)
class RefundFacts:
    """What the rail could read; ``None`` is unknown (not sent, or a read that failed)."""

    charge_created_at: datetime | None = None
    charge_disputed: bool | None = None
    customer_created_at: datetime | None = None
    history: CustomerHistory | None = None
    # Everything refunded on the charge as the rail counts it, by Sill or anyone else.
    charge_refunded_minor: int | None = None
    # True: refunding this charge would move real money; False: a test order on a development
    # store; None: unknown. (Shopify: the shop's plan and the order's test flag.)
    live_money: bool | None = None
    # The currency the buyer paid in at checkout, on a rail whose charges can be paid in
    # another currency than the one Sill records and refunds (Shopify: the order's
    # ``presentmentCurrencyCode`` beside the shop's); None: unknown, or a rail without one.
    presentment_currency: str | None = None


class LiveNotAllowed(PermanentRailError):
    """The refund would move real money and ``SILL_ALLOW_LIVE`` is off: nothing was sent."""

    code = "live_not_allowed"


@runtime_checkable
class RefundFactsReader(Protocol):
    """A rail that can read refund facts. Reads never move money; each part that cannot be
    read comes back ``None`` instead of raising, and a ``RailError`` means nothing was read."""

    def read_refund_facts(self, request: RefundFactsRequest) -> RefundFacts: ...


# --- what the rail holds for a charge (optional: webhooks, reconciliation, decision time) -----


# A Sill refund id (sill.ids.new_id("rf")) where a rail's free text carries it (PayPal's
# ``custom_id``, a Shopify refund's note): a merchant's own text there is not taken for one.
SILL_REFUND_ID = re.compile(r"rf_[0-9A-HJKMNP-TV-Z]{26}")


@dataclass(frozen=True)
class RailRefund:
    """One refund of a charge as the rail reports it.

    ``status`` is the rail's own word (Stripe: ``pending``, ``requires_action``,
    ``succeeded``, ``failed``, ``canceled``). ``sill_refund_id`` is set when the refund's
    metadata names one of Sill's refunds: Sill made it, so it is never an outside refund.
    """

    provider_refund_id: str
    amount_minor: int
    currency: str
    status: str
    created_at: datetime
    sill_refund_id: str = ""
    reason: str = ""
    failure_reason: str = ""


@dataclass(frozen=True)
class RailDispute:
    """One dispute of a charge as the rail reports it (``status``: the rail's own word).
    ``amount_minor`` None, ``currency`` "": the rail's amount could not be read (the dispute
    is recorded all the same: it refuses refunds of the charge). ``details_read`` False: what
    the rail's list says of it, its details not read (PayPal: a resolved dispute's outcome);
    recorded all the same, and the charge's disputes count as not all read."""

    provider_dispute_id: str
    amount_minor: int | None
    currency: str
    reason: str
    status: str
    created_at: datetime
    details_read: bool = True


Item = TypeVar("Item")


class RailList(list[Item]):
    """What a rail listed for a charge, less the items it could not read.

    ``left_out``: each item the rail listed that it could not read (a refund without an amount,
    say), as its id and why, e.g. ``"re_123 (TypeError)"``. One such item must not hide the
    others, so they are listed; but the list is then not the rail's whole list, and must never
    be read as "these are all" (:func:`left_out`)."""

    def __init__(self, items: Iterable[Item] = (), *, left_out: Iterable[str] = ()) -> None:
        super().__init__(items)
        self.left_out = list(left_out)


def left_out(listed: list[Any]) -> list[str]:
    """The items a rail's list left out (:class:`RailList`); none for a plain list."""
    return list(getattr(listed, "left_out", []))


@runtime_checkable
class ChargeReader(Protocol):
    """A rail that can list what it holds for one of its charges. Reads never move money;
    a ``RailError`` means nothing could be read (never "there is nothing"). A listed item the
    rail cannot read is left out and named in the list's ``left_out`` (:class:`RailList`)."""

    def list_refunds(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailRefund]:
        """Every refund of the charge, newest first, all pages. ``provider_payment_id``: the
        charge's payment or order at the rail, for a rail whose refunds hang off it (Shopify's
        order); the others go by the charge's id."""
        ...

    def list_disputes(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailDispute]:
        """Every dispute of the charge (``provider_payment_id`` as for ``list_refunds``)."""
        ...


# --- charges whose outcome is unknown or unfinished (optional: see sill.orders.charging) ------


class ChargePending(RailError):
    """The provider took the payment but has not finished it (Stripe ``processing``,
    ``requires_action``, ``requires_capture``): the buyer may be charged, so this is no failure.

    Ask again later with :meth:`ChargeFinder.find_charge`; never charge under another key.
    """

    retryable = True
    code = "charge_pending"

    def __init__(self, message: str, *, provider_payment_id: str, provider_status: str) -> None:
        super().__init__(message)
        self.provider_payment_id = provider_payment_id
        self.provider_status = provider_status


@runtime_checkable
class ChargeFinder(Protocol):
    """A rail that can look a charge up by what Sill sent (``sill-charge-<order id>`` and the
    order id in metadata). The optional part of the ``Rail`` protocol for charges.

    ``find_charge`` returns the charge when it succeeded, ``None`` when the rail holds no
    charge that took money for the request (nothing, or only declined / canceled attempts:
    charging again with the same key is safe), raises :class:`ChargePending` when a payment
    exists but is unfinished, and another ``RailError`` when it could not look (even a
    permanent one, e.g. a revoked key, says nothing about whether the buyer was charged).
    """

    def find_charge(self, request: ChargeRequest) -> ChargeResult | None: ...


# --- a connection check (Settings → Rails' "Test connection") ---------------------------------


@dataclass(frozen=True)
class ConnectionInfo:
    """What one cheap read that moves nothing says about the credentials' account.

    ``name``: the account or shop as the provider names it ("" when it would not say);
    ``test_mode``: True for test keys / a sandbox / a development store, None unknown;
    ``missing_scopes``: permissions Sill needs that the credentials lack. A failed check is a
    ``RailError`` whose ``code`` is ``bad_key``, ``missing_scope`` or ``unreachable`` (or the
    rail's own), its message in words and free of secrets.
    """

    name: str
    test_mode: bool | None = None
    missing_scopes: tuple[str, ...] = ()


# --- rail names ------------------------------------------------------------------------------


class RailName(TextChoices):
    """The rails Sill knows, by the name stored on charges and refunds, and their labels.

    The one definition: ``sill.orders.models.Rail`` is this class (the model fields' choices).
    """

    MOCK = "mock", "Mock"
    STRIPE = "stripe", "Stripe"
    SHOPIFY = "shopify", "Shopify"
    WOOCOMMERCE = "woocommerce", "WooCommerce"
    PAYPAL = "paypal", "PayPal"


RAIL_LABELS: dict[str, str] = {name.value: str(name.label) for name in RailName}


def rail_label(rail: str) -> str:
    """``"paypal"`` → ``"PayPal"``; a name Sill does not know is shown as it is."""
    return RAIL_LABELS.get(rail, rail)


# How long after the payment a rail lets a refund reach it, in days, where it has a fixed limit
# (PayPal: 180 days from the capture). The refund core refuses an older charge at decision time
# (``refund_window_passed``); the rail refuses it again before its call.
RAIL_REFUND_WINDOW_DAYS: dict[str, int] = {"paypal": 180}


# The smallest amount a rail moves in a currency, in Sill's minor units (ISO 4217), where it is
# more than one of them. Stripe takes the three-decimal currencies with a last digit of 0 only
# ("its payment partners" need it: KWD 5.124 cannot be sent, 5.120 can); PayPal takes HUF and
# TWD without decimals (a decimal amount is refused, DECIMALS_NOT_SUPPORTED). The refund core
# keeps staff and agent amounts to these steps when it decides (refunds.staff.services,
# refunds.agent.intake); the rail refuses an amount off its step again before its call.
# WooCommerce orders are charged on Stripe, so their charges are Stripe's.
RAIL_AMOUNT_STEPS: dict[tuple[str, str], int] = {
    **{("stripe", code): 10 for code in ("BHD", "JOD", "KWD", "OMR", "TND")},
    ("paypal", "HUF"): 100,
    ("paypal", "TWD"): 100,
}


def amount_step(rail: str, currency: str) -> int:
    """The smallest amount ``rail`` moves in ``currency``, in minor units (1 for most)."""
    return RAIL_AMOUNT_STEPS.get((rail, currency), 1)


class OffStep(PermanentRailError):
    """An amount the rail cannot take in its currency (see :data:`RAIL_AMOUNT_STEPS`): nothing
    was sent, as the rail itself would have refused it (``rail_declined``)."""


def check_step(rail: str, money: Money) -> None:
    """Raise :class:`OffStep` unless ``rail`` can move ``money`` as it is."""
    step = amount_step(rail, money.currency)
    if money.amount_minor % step:
        raise OffStep(
            f"{rail_label(rail)} takes {money.currency} amounts only in steps of "
            f"{format_money(Money(step, money.currency))}: {format_money(money)} was not sent"
        )


# The currencies a rail charges, where it charges fewer than Sill knows (sill.money); a rail not
# named here charges every one (the mock rail). Stripe's are its documented presentment
# currencies (docs.stripe.com/currencies, "Supported presentment currencies", with the
# three-decimal BHD, JOD, KWD, OMR and TND it lists for accounts that take them): of the
# currencies Sill knows, it takes no CLF, IQD, LYD, UYI or UYW. An account's country can narrow
# the list further, which only Stripe knows: such a charge is declined (``charge_failed``).
# An agent's purchase in a currency its rail does not charge is refused at intake
# (refunds.agent.intake), before any order exists; the rail refuses it again before its call.
STRIPE_CURRENCIES: frozenset[str] = frozenset(
    {
        "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD",
        "BDT", "BGN", "BHD", "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BWP", "BYN", "BZD",
        "CAD", "CDF", "CHF", "CLP", "CNY", "COP", "CRC", "CVE", "CZK", "DJF", "DKK", "DOP",
        "DZD", "EGP", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GIP", "GMD", "GNF", "GTQ",
        "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "ISK", "JMD", "JOD", "JPY",
        "KES", "KGS", "KHR", "KMF", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD",
        "LSL", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MUR", "MVR", "MWK", "MXN",
        "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK",
        "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR", "SBD", "SCR",
        "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "STD", "SZL", "THB", "TJS", "TND", "TOP",
        "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VND", "VUV", "WST",
        "XAF", "XCD", "XOF", "XPF", "YER", "ZAR", "ZMW",
    }
)  # fmt: skip
RAIL_CURRENCIES: dict[str, frozenset[str]] = {"stripe": STRIPE_CURRENCIES}


def charges_currency(rail: str, currency: str) -> bool:
    """Whether ``rail`` can charge in ``currency`` (a code Sill knows)."""
    charged = RAIL_CURRENCIES.get(rail)
    return charged is None or currency in charged


class CurrencyNotCharged(PermanentRailError):
    """A charge in a currency the rail does not take (see :data:`RAIL_CURRENCIES`): nothing
    was sent, as the rail itself would have refused it (``rail_declined``)."""


def check_currency(rail: str, money: Money) -> None:
    """Raise :class:`CurrencyNotCharged` unless ``rail`` charges ``money``'s currency."""
    if not charges_currency(rail, money.currency):
        raise CurrencyNotCharged(
            f"{rail_label(rail)} does not charge {money.currency}: "
            f"{format_money(money)} was not sent"
        )


class RefundWindowPassed(PermanentRailError):
    """The charge is older than the rail lets a refund reach it (PayPal: 180 days; Stripe's
    ``charge_expired_for_refund``): nothing was sent, and the money goes back outside Sill."""

    code = "refund_window_passed"
