"""The PayPal rail: refunds of captures (``POST /v2/payments/captures/{id}/refund``).

A PayPal order's charge carries the capture id as ``provider_charge_id``. Every refund call
sends ``PayPal-Request-Id: <the refund's idempotency key>`` (``sill-refund-<id>``), identical
on every attempt, so PayPal makes the refund once and answers it again for a retry; the body
names the amount in the currency's precision and ``custom_id`` = Sill's refund id.

The 180-day window: PayPal refuses refunds of captures older than 180 days. ``refund`` reads
the capture first and refuses such a refund itself (``RefundWindowPassed``) with nothing
sent; ``refund_window_days`` lets the refund core refuse it at decision time from
``read_refund_facts().charge_created_at``.

``find_refund`` (after a timeout) only reads: the capture's ``up`` link names the checkout
order, whose ``payments.refunds`` list Sill's refund by ``custom_id``. Where the capture has
no readable order (a capture not made through Orders v2), it raises ``CannotLookUp``, never
``None`` (which would say PayPal holds no such refund): a retry then sends the refund again
with the same ``PayPal-Request-Id``, which PayPal answers with the refund it already made (it
keeps request ids for 45 days), so money still moves at most once; a refund needing attention,
which is only looked up, stays so until PayPal can answer or a person records what it shows.

Reconciliation (``ChargeReader``): ``list_refunds`` reads the same order's refunds of the
capture; ``list_disputes`` the capture's disputes from Customer Disputes v1, a resolved one's
outcome from its own details.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import quote, urlsplit

from sill.money import Money, MoneyError, parse_major, recordable
from sill.rails.base import (
    RAIL_REFUND_WINDOW_DAYS,
    CannotLookUp,
    ChargeRequest,
    ChargeResult,
    PermanentRailError,
    RailDispute,
    RailError,
    RailList,
    RailRefund,
    RefundFacts,
    RefundFactsRequest,
    RefundRequest,
    RefundResult,
    RefundState,
    RefundWindowPassed,
    RetryableRailError,
)
from sill.rails.fact_reads import read_at_once
from sill.rails.paypal.client import PayPalClient, PayPalNotFound, PayPalUnreadable
from sill.rails.paypal.resources import (
    dispute_money,
    dispute_reason,
    dispute_word,
    identifier,
    listed,
    money_value,
    objects,
    part,
    rail_refund,
    text,
)
from sill.rails.paypal.resources import time as paypal_time

logger = logging.getLogger(__name__)

REFUND_WINDOW_DAYS = RAIL_REFUND_WINDOW_DAYS["paypal"]
# A merchant account's id as PayPal writes it (its payer id; a capture's ``payee.merchant_id``).
MERCHANT_ID = re.compile(r"[2-9A-HJ-NP-Z]{13}")
# PayPal's largest page of disputes; a capture has a handful at most. A list that goes on (a
# ``next`` link) is read on, at most DISPUTE_PAGES pages.
DISPUTE_PAGE_SIZE = 50
DISPUTE_PAGES = 20

_STATES: dict[str, RefundState] = {
    "COMPLETED": "succeeded",
    "PENDING": "pending",
    "CANCELLED": "failed",
    "FAILED": "failed",
}

P = ParamSpec("P")
R = TypeVar("R")


def _says_unreadable(
    read: Callable[Concatenate[PayPalRail, P], R],
) -> Callable[Concatenate[PayPalRail, P], R]:
    """``read`` logs an answer it cannot read (``PayPalUnreadable``, raised on) once, naming
    the site: on-call finds why a capture counts as not read, and whose it is."""

    @functools.wraps(read)
    def reading(rail: PayPalRail, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return read(rail, *args, **kwargs)
        except PayPalUnreadable as exc:
            rail.note_unreadable(exc)
            raise

    return reading


WINDOW_WORDS = (
    "PayPal refunds a capture for 180 days only, and this one was captured on {date}: "
    "refund the buyer in PayPal directly."
)


class PayPalRail:
    name = "paypal"
    refund_window_days = REFUND_WINDOW_DAYS

    def __init__(
        self,
        *,
        client: PayPalClient,
        mode: str = "test",
        fact_timeout: float = 3.0,
        site_id: str = "",
    ) -> None:
        self.client = client
        self.mode = mode
        self.fact_timeout = fact_timeout
        # Whose account this is, for the log lines of what the rail leaves out (never sent).
        self.site_id = site_id

    def __repr__(self) -> str:
        return f"PayPalRail(mode={self.mode!r}, client={self.client!r})"

    def note_unreadable(self, exc: PayPalUnreadable) -> None:
        """Log ``exc`` once (a read within a read raises it through both)."""
        if not exc.logged:
            exc.logged = True
            logger.warning(
                "Sill cannot read what PayPal answered for site %s, so it counts as not read: %s",
                self.site_id or "?",
                exc.message,
            )

    # --- the protocol -----------------------------------------------------------------------

    def charge(self, request: ChargeRequest) -> ChargeResult:
        raise PermanentRailError(
            "Sill takes no PayPal payments: PayPal orders come in already captured.",
            code="rail_unsupported",
        )

    @_says_unreadable
    def refund(self, request: RefundRequest) -> RefundResult:
        capture_id = _capture_id(request)
        # Part of a forint (OffStep) is refused before anything is sent.
        value = money_value(request.amount)
        captured_at = paypal_time(self.capture(capture_id).get("create_time"))
        if captured_at is not None and self.window_passed(captured_at):
            raise RefundWindowPassed(WINDOW_WORDS.format(date=captured_at.date().isoformat()))
        body = {
            "amount": {
                "value": value,
                "currency_code": request.amount.currency,
            },
            "custom_id": request.refund_id[:127],
            "note_to_payer": "Refund",
        }
        answer = self.client.post(
            f"/v2/payments/captures/{quote(capture_id, safe='')}/refund",
            body,
            doing="refund",
            request_id=request.idempotency_key,
        )
        return _result(answer, fallback=request.amount)

    @_says_unreadable
    def find_refund(self, request: RefundRequest) -> RefundResult | None:
        capture_id = _capture_id(request)
        refunds = self._order_refunds(capture_id)
        if refunds is None:
            raise CannotLookUp(
                f"PayPal names no checkout order for capture {capture_id}, so Sill cannot ask "
                "whether this refund exists"
            )
        for refund in refunds:
            if refund.get("custom_id") == request.refund_id:
                return _result(refund, fallback=request.amount)
        return None

    # --- what PayPal holds for a capture (reconciliation: sill.rails.base.ChargeReader) -------

    @_says_unreadable
    def list_refunds(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailRefund]:
        """Every refund of the capture, newest first, as its checkout order lists them."""
        refunds = self._order_refunds(provider_charge_id)
        if refunds is None:
            raise PermanentRailError(
                "PayPal names no checkout order for this capture, so its refunds cannot be listed",
                code="rail_unsupported",
            )
        now = datetime.now(UTC)
        listed = [rail_refund(raw, default_time=now) for raw in refunds]
        return sorted(listed, key=lambda r: r.created_at, reverse=True)

    @_says_unreadable
    def list_disputes(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailDispute]:
        """Every dispute of the capture (``GET /v1/customer/disputes?disputed_transaction_id``).
        The list gives a summary: a resolved dispute's outcome (who won) is read from its own
        details, since RESOLVED alone does not say. Every page is read (its ``next`` link):
        one page alone left a dispute past it unrecorded, and the capture refundable."""
        path = (
            "/v1/customer/disputes?disputed_transaction_id="
            f"{quote(provider_charge_id, safe='')}&page_size={DISPUTE_PAGE_SIZE}"
        )
        items: list[Any] = []
        for _ in range(DISPUTE_PAGES):
            page = self.client.get(path, doing="dispute list")
            items += listed(page, "items", what="dispute list")
            path = _next_page(page)
            if not path:
                break
        else:
            raise RetryableRailError(
                f"PayPal's disputes of capture {provider_charge_id} go on past "
                f"{DISPUTE_PAGES} pages: which it has is unknown"
            )
        now = datetime.now(UTC)
        found: RailList[RailDispute] = RailList()
        for item in items:
            if not isinstance(item, dict) or not item.get("dispute_id"):
                # Listed, so the capture has it; with nothing to record it under, it goes
                # to the sync without an id (sill.rails.charge_sync records none such).
                found.append(
                    RailDispute(
                        provider_dispute_id="",
                        amount_minor=None,
                        currency="",
                        reason="general",
                        status="OPEN",
                        created_at=now,
                    )
                )
                continue
            dispute_id = str(item["dispute_id"])
            details_read = True
            if str(item.get("status") or "").upper() == "RESOLVED" and not item.get(
                "dispute_outcome"
            ):
                details = self._dispute_details(dispute_id, provider_charge_id)
                details_read = details is not None
                item = details or item
            minor, currency = dispute_money(item)
            if minor is None:
                # Recorded all the same (it refuses refunds of the capture), its amount not
                # known: said, so that whoever wonders why Sill does not show it finds why.
                logger.warning(
                    "PayPal dispute %s of capture %s of site %s: its amount %.80r cannot be "
                    "read; recorded with its amount not known",
                    dispute_id,
                    provider_charge_id,
                    self.site_id or "?",
                    item.get("dispute_amount"),
                )
            found.append(
                RailDispute(
                    provider_dispute_id=dispute_id,
                    amount_minor=minor,
                    currency=currency,
                    reason=dispute_reason(item),
                    status=dispute_word(item),
                    created_at=paypal_time(item.get("create_time")) or now,
                    details_read=details_read,
                )
            )
        return found

    def _dispute_details(self, dispute_id: str, capture_id: str) -> dict[str, Any] | None:
        """A listed dispute's details (a resolved one's outcome); None when PayPal does not
        give them (404, 5xx, an answer for another dispute): the dispute is then recorded as
        the list says, RESOLVED alone (lost: it refuses refunds), and the list counts as not
        all read. One failed read no longer kept the capture's other disputes unrecorded."""
        try:
            details = self.client.get(
                f"/v1/customer/disputes/{quote(dispute_id, safe='')}", doing="dispute lookup"
            )
            if str(details.get("dispute_id") or "") != dispute_id:
                raise PayPalUnreadable("PayPal's dispute details are of another dispute")
        except RailError as exc:
            logger.warning(
                "PayPal dispute %s of capture %s of site %s: its details could not be read "
                "(%s); recorded as the list says, its outcome not known",
                dispute_id,
                capture_id,
                self.site_id or "?",
                exc.message,
            )
            return None
        return details

    # --- one refund or dispute as PayPal holds it (sill.rails.paypal.events) ------------------

    def held_refund(self, refund_id: str) -> dict[str, Any] | None:
        """``GET /v2/payments/refunds/{id}``; None when PayPal holds no such refund."""
        return self._held(f"/v2/payments/refunds/{quote(refund_id, safe='')}", "refund lookup")

    def held_dispute(self, dispute_id: str) -> dict[str, Any] | None:
        """``GET /v1/customer/disputes/{id}`` (its outcome included once resolved); None when
        PayPal holds no such dispute."""
        return self._held(f"/v1/customer/disputes/{quote(dispute_id, safe='')}", "dispute lookup")

    def _held(self, path: str, doing: str) -> dict[str, Any] | None:
        try:
            return self.client.get(path, doing=doing)
        except PayPalNotFound:
            return None

    # --- which merchant account (sill.rails.payment_account) -----------------------------------

    def payment_account(self) -> str:
        """The PayPal merchant account these credentials act on (its payer id); ``""`` where
        PayPal does not say.

        A REST app is one merchant's, and a capture is its payee's alone: another merchant's
        app is answered 404 for it. PayPal names the app's own account in the balances
        report's ``account_id`` (``GET /v1/reporting/balances``, client credentials), which
        needs the app's balances scope (Transaction Search): without it PayPal answers 403,
        and the account is unknown, never guessed.
        """
        try:
            answer = self.client.get("/v1/reporting/balances", doing="balances read")
        except RailError as exc:
            logger.info("PayPal did not name the app's merchant account: %s", exc.code)
            return ""
        return _merchant_id(answer.get("account_id"))

    def capture_account(self, capture_id: str) -> str:
        """The merchant account ``capture_id`` was paid to (its ``payee.merchant_id``), read
        with these credentials; ``""`` when PayPal does not show it to them (another
        merchant's capture is 404) or does not name it."""
        try:
            capture = self.capture(capture_id)
        except RailError:
            return ""
        payee = capture.get("payee")
        return _merchant_id(payee.get("merchant_id") if isinstance(payee, dict) else None)

    # --- reads ------------------------------------------------------------------------------

    def capture(self, capture_id: str, *, timeout: float | None = None) -> dict[str, Any]:
        return self.client.get(
            f"/v2/payments/captures/{quote(capture_id, safe='')}",
            doing="capture lookup",
            timeout=timeout,
        )

    def window_passed(self, captured_at: datetime, *, now: datetime | None = None) -> bool:
        return (now or datetime.now(UTC)) - captured_at > timedelta(days=self.refund_window_days)

    def read_refund_facts(self, request: RefundFactsRequest) -> RefundFacts:
        """The capture's time (``charge_created_at``) and, when its order can be read, what
        PayPal counts as refunded on it. PayPal has no customer history to offer.

        The order is named by the capture, so the two reads follow each other; together they
        wait at most ``fact_timeout`` seconds (sill.rails.fact_reads), and what was not read
        by then is unknown."""
        found = read_at_once(
            {"capture": lambda: self._facts(request)}, timeout=self.fact_timeout, rail="PayPal"
        )
        return found["capture"] or RefundFacts(live_money=self.mode == "live")

    def _facts(self, request: RefundFactsRequest) -> RefundFacts:
        timeout = self.fact_timeout
        try:
            capture = self.capture(request.provider_charge_id, timeout=timeout)
        except (RetryableRailError, PermanentRailError) as exc:
            if isinstance(exc, PayPalUnreadable):
                self.note_unreadable(exc)
            return RefundFacts(live_money=self.mode == "live")
        refunded: int | None = None
        try:
            refunds = self._order_refunds(
                request.provider_charge_id, capture=capture, timeout=timeout
            )
        except (RetryableRailError, PermanentRailError) as exc:
            if isinstance(exc, PayPalUnreadable):
                self.note_unreadable(exc)
            refunds = None
        if refunds is not None:
            # Read as the refund list reads them (_order_refunds checked each): a refund
            # PayPal lists without a status is completed there, and counted here too.
            now = datetime.now(UTC)
            refunded = sum(
                read.amount_minor
                for read in (rail_refund(refund, default_time=now) for refund in refunds)
                if read.currency == request.currency and read.status in ("succeeded", "pending")
            )
        return RefundFacts(
            charge_created_at=paypal_time(capture.get("create_time")),
            charge_refunded_minor=refunded,
            live_money=self.mode == "live",
        )

    def _order_refunds(
        self,
        capture_id: str,
        *,
        capture: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[dict[str, Any]] | None:
        """The refunds of ``capture_id`` listed on its checkout order; ``None`` when the
        capture names no order to read. ``PayPalUnreadable`` when the order, or any refund of
        the capture on it, is of another shape than PayPal's: every reader of the list (the
        sync, the facts, a lookup) then has no answer, rather than one without that refund."""
        capture = capture if capture is not None else self.capture(capture_id, timeout=timeout)
        order_path = _link(capture, "up", what="capture")
        if not order_path or "/v2/checkout/orders/" not in order_path:
            return None
        order = self.client.get(order_path, doing="refund lookup", timeout=timeout)
        units = objects(order, "purchase_units", what="checkout order")
        if not units:
            # Every order PayPal holds has one: this is no order's answer (an empty one, say).
            raise PayPalUnreadable("PayPal's checkout order is unreadable: it has no purchase unit")
        found: list[dict[str, Any]] = []
        now = datetime.now(UTC)
        for unit in units:
            payments = part(unit, "payments", what="checkout order")
            for refund in objects(payments, "refunds", what="checkout order"):
                if _refunds_capture(refund, capture_id):
                    rail_refund(refund, default_time=now)  # PayPalUnreadable if unreadable
                    found.append(refund)
        return found


def _merchant_id(value: Any) -> str:
    """``value`` when it is a merchant id as PayPal writes them; else ``""`` (unknown)."""
    text = value if isinstance(value, str) else ""
    return text if MERCHANT_ID.fullmatch(text) else ""


def _capture_id(request: RefundRequest) -> str:
    capture_id = request.provider_charge_id
    if not capture_id:
        raise PermanentRailError("the refund names no PayPal capture", code="original_not_charged")
    return capture_id


def _href(resource: dict[str, Any], rel: str, *, what: str) -> str:
    """The address of ``resource``'s link ``rel``; "" when it has none."""
    for link in objects(resource, "links", what=what):
        if link.get("rel") == rel and link.get("href"):
            return str(link["href"])
    return ""


def _link(resource: dict[str, Any], rel: str, *, what: str) -> str:
    """The path of ``resource``'s link ``rel`` (PayPal links are absolute URLs)."""
    return urlsplit(_href(resource, rel, what=what)).path


def _next_page(page: dict[str, Any]) -> str:
    """The path and query of a list page's ``next`` link; "" on its last page."""
    parts = urlsplit(_href(page, "next", what="dispute list"))
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _refunds_capture(refund: dict[str, Any], capture_id: str) -> bool:
    up = _link(refund, "up", what="refund")
    # Without an ``up`` link the order's only capture is meant; with one, it must match.
    return not up or up.rstrip("/").endswith("/" + capture_id)


def _money(value: Any) -> Money | None:
    if not isinstance(value, dict):
        return None
    try:
        return recordable(parse_major(str(value.get("value")), str(value.get("currency_code"))))
    except MoneyError:
        return None


def _result(answer: dict[str, Any], *, fallback: Money) -> RefundResult:
    """PayPal's refund as the refund core reads it; ``PayPalUnreadable`` (retryable: PayPal
    answers the same ``PayPal-Request-Id`` with the same refund) when Sill cannot read it."""
    refund_id = identifier(answer, "id", what="refund")
    status = text(answer, "status", what="refund") or "PENDING"
    details = part(answer, "status_details", what="refund")
    reason = text(details, "reason", what="refund's status details")
    return RefundResult(
        provider_refund_id=refund_id,
        state=_STATES.get(status, "pending"),
        amount=_money(answer.get("amount")) or fallback,
        failure_message=f"PayPal: {status} {reason}".strip()
        if status in ("CANCELLED", "FAILED")
        else "",
    )
