"""Shopify: refunds of orders paid on a store, through the Admin GraphQL API.

A Shopify charge in Sill is the order's successful sale/capture: ``provider_payment_id`` is
the order's numeric id, ``provider_charge_id`` the transaction's global id. A refund:

1. reads the shop's plan, the order's ``test`` flag and ``suggestedRefund`` for the amount
   in one query. Unless the deployment allows live money, only a test order on a development
   store is refunded: anything else (or a plan that could not be read) raises
   ``LiveNotAllowed`` before the mutation, on every call — a token does not say whether it
   moves real money, and a store can leave its development plan at any time;
2. sends ``refundCreate`` for the suggested transactions (the original payment, refunded to
   the gateway that took it), without line items, so nothing is restocked, with the
   ``@idempotent(key: "sill-refund-<id>")`` directive and the same key in the refund's note.

``find_refund`` recovers a refund whose answer was lost by reading the order's refunds and
matching the key in the note. The note, not amount and time: it is written by the same
mutation that creates the refund, so a refund made under the key always carries it, while a
refund of the same amount at about the same time may be a merchant's own in the admin; and
a retry after "not found" is still safe, because it carries the same idempotency key.

An order is read whole or marked otherwise (:meth:`ShopifyRail.order`, :meth:`ShopifyRail.orders`):
its line items are a connection, read on by cursor; its transactions and refunds are plain
lists that Shopify cuts at the ``first`` asked for, silently, with no cursor to read on. A list
that came back as long as asked is read again alone at the largest size one query may ask for
(``LISTS_MAX``); one that fills even that may hold more than can be read, and the order is
marked ``cut``: the sync never records it as whole, and reconciliation does not compare its
refunds. A refund's own transactions are a connection: a refund none of whose first ones
succeeded is read on by cursor (``_with_state``) until one did or they end, since its state
(a failed refund counts for nothing) comes from them.

Every size here keeps its query under Shopify's limit of 1,000 points for one query (a query
asking for more is refused, ``MAX_COST_EXCEEDED``, and never runs). By Shopify's documented
cost rules (an object 1, a scalar 0, a connection 2 plus ``first`` times one node, a plain list
``first`` times one item), one order of the order fragment costs
``8 + 3·lines + 3·transactions + (6 + REFUND_TRANSACTIONS)·refunds`` = 108 with the sizes read
with it, so a page of ``ORDERS_PAGE`` orders costs 2 + 8·108 + 1 = 867; a refund costs 11 with its
5 transactions and their ``pageInfo``, so refunds read alone stop at 90 (994 points),
transactions alone at 250 (751), line items at 250 a page (754) and a refund's transactions at
250 a page (254). tests/rails/test_shopify_query_cost.py computes the cost of
each query Sill sends and holds it under the limit.

The sync waits Shopify's rate limit out (:meth:`ShopifyRail.orders`): a throttled read did
nothing and its cursor stays good, so after the wait ``throttleStatus`` or ``Retry-After`` asks
for, the same read goes on where it was, within ``sync_throttle_seconds`` of waiting in all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sill.money import Money
from sill.rails.base import (
    CannotLookUp,
    ChargeRequest,
    ChargeResult,
    CustomerHistory,
    LiveNotAllowed,
    PermanentRailError,
    RailDispute,
    RailError,
    RailRefund,
    RefundFacts,
    RefundFactsRequest,
    RefundRequest,
    RefundResult,
)
from sill.rails.fact_reads import read_at_once
from sill.rails.shopify import queries
from sill.rails.shopify.client import (
    GraphQLResult,
    ShopifyClient,
    ShopifyThrottled,
    refused_key,
    refuses_key,
)
from sill.rails.shopify.orders import (
    ShopifyOrder,
    SkippedOrder,
    UnreadableOrder,
    order_gid,
    parse_order,
    parse_time,
    refund_state,
    shop_money,
)

logger = logging.getLogger(__name__)

# Sizes that keep each query under Shopify's 1,000 points (see the module's docstring).
ORDERS_PAGE = 8
# Line items read with an order, and then per read of the rest (by cursor).
LINES_WITH_ORDER = 10
LINES_PAGE = 250
# An order's line item pages, at most (Shopify paginates no list past 25,000 items).
MAX_LINE_PAGES = 100
# A refund's transactions read after those read with it, per read, and at most so many reads.
REFUND_TRANSACTIONS_PAGE = 250
MAX_REFUND_TRANSACTION_PAGES = 100
# Transactions and refunds read with an order; an order with as many of either is read again
# for that list alone, at most LISTS_MAX of it (what one query may ask for). A list as long as
# that may have been cut: Shopify's plain lists say nothing of what they left out.
LISTS_WITH_ORDER = 5
LISTS_MAX = {"transactions": 250, "refunds": 90}
_ORDER_LISTS = {
    "lines": LINES_WITH_ORDER,
    "transactions": LISTS_WITH_ORDER,
    "refunds": LISTS_WITH_ORDER,
}
# How long one sync waits for Shopify's rate limit in all before it ends with the error.
SYNC_THROTTLE_SECONDS = 300.0
# The most order pages one sync reads (a million orders): a store that never ends its list
# stops the sync with an error rather than running it forever.
MAX_ORDER_PAGES = 20_000
# Shops whose missing read_customers scope was already logged by this process.
_logged_no_customers: set[str] = set()


def is_development(plan: Any) -> bool:
    """A development store (Shopify Partners' test stores): no real money moves on it."""
    if not isinstance(plan, dict):
        return False
    return plan.get("partnerDevelopment") is True or plan.get("publicDisplayName") == "Development"


def live_money(shop: Any, order: Any) -> bool | None:
    """True when refunding ``order`` would move real money; None when unknown."""
    plan = shop.get("plan") if isinstance(shop, dict) else None
    if not isinstance(plan, dict) or not isinstance(order, dict) or "test" not in order:
        return None
    return not (is_development(plan) and order.get("test") is True)


class ShopifyRail:
    name = "shopify"

    def __init__(
        self,
        *,
        client: ShopifyClient,
        allow_live: bool = False,
        fact_timeout: float = 3.0,
        sync_throttle_seconds: float = SYNC_THROTTLE_SECONDS,
    ) -> None:
        self.client = client
        self.allow_live = allow_live
        self.fact_timeout = fact_timeout
        self.sync_throttle_seconds = sync_throttle_seconds
        # Seconds :meth:`orders` has waited for Shopify's rate limit (the sync reports it).
        self.throttled_seconds = 0.0
        # The disputes of the order ``list_refunds`` just read, by order id, for the
        # ``list_disputes`` that follows it (one order query for both).
        self._read_disputes: dict[str, list[RailDispute]] = {}

    def __repr__(self) -> str:
        return f"ShopifyRail({self.client!r}, allow_live={self.allow_live})"

    # --- the protocol -------------------------------------------------------------------

    def charge(self, request: ChargeRequest) -> ChargeResult:
        raise PermanentRailError(
            "Shopify orders are paid at the store's checkout; Sill takes no payments on Shopify"
        )

    def refund(self, request: RefundRequest) -> RefundResult:
        order_id = order_gid(request.provider_payment_id)
        planned = self.client.execute(
            queries.REFUND_PLAN,
            {"id": order_id, "amount": request.amount.major_str()},
            operation="SillRefundPlan",
        ).data
        order = planned.get("order")
        if not isinstance(order, dict):
            raise PermanentRailError(f"Shopify has no order {order_id}", code="rail_declined")
        if live_money(planned.get("shop"), order) is not False and not self.allow_live:
            raise LiveNotAllowed(
                f"Shopify order {order_id} is not a test order on a development store; Sill "
                "moves no real money unless it runs with SILL_ALLOW_LIVE=1"
            )
        transactions = self._suggested(order, request)
        answer = self.client.execute(
            queries.REFUND_CREATE,
            {
                "key": request.idempotency_key,
                "input": {
                    "orderId": order_id,
                    "note": f"Refunded by Sill ({request.idempotency_key})",
                    # Sill sends the buyer its own confirmation email.
                    "notify": False,
                    "transactions": transactions,
                },
            },
            operation="SillRefundCreate",
            mutation=True,
        ).data
        payload = answer.get("refundCreate") or {}
        errors = payload.get("userErrors") or []
        if errors:
            detail = "; ".join(str(e.get("message") or e) for e in errors)
            if refuses_key(detail):
                raise refused_key("Shopify SillRefundCreate", detail)
            raise PermanentRailError(f"Shopify refused the refund: {detail}", code="rail_declined")
        refund = payload.get("refund")
        if not isinstance(refund, dict):
            raise PermanentRailError("Shopify answered refundCreate without a refund")
        return _refund_result(refund)

    def find_refund(self, request: RefundRequest) -> RefundResult | None:
        order_id = order_gid(request.provider_payment_id)
        most = LISTS_MAX["refunds"]
        data = self.client.execute(
            queries.REFUNDS, {"id": order_id, "refunds": most}, operation="SillRefunds"
        ).data
        order = data.get("order")
        if not isinstance(order, dict):
            raise PermanentRailError(f"Shopify has no order {order_id}")
        listed = order.get("refunds") or []
        for refund in listed:
            if request.idempotency_key in str(refund.get("note") or ""):
                return _refund_result(_with_state(refund, self.client.execute))
        if _full(listed, most):
            # The refund may be past what one query lists: not found is no answer here.
            raise CannotLookUp(
                f"Shopify order {order_id} has {most} refunds or more, more than Sill can list "
                f"in one query: whether one was made under {request.idempotency_key} is unknown"
            )
        return None

    def _suggested(self, order: dict[str, Any], request: RefundRequest) -> list[dict[str, Any]]:
        """The transactions Shopify suggests for the amount: the original payment's."""
        if str(order.get("currencyCode")) != request.amount.currency:
            raise PermanentRailError(
                f"the order is in {order.get('currencyCode')}, the refund in "
                f"{request.amount.currency}"
            )
        # A multi-currency store refunds in the buyer's (presentment) currency, named in the
        # input, while Sill's amounts are the shop's: refuse rather than send shop amounts a
        # refund could read as the buyer's currency.
        paid_in = order.get("presentmentCurrencyCode")
        if paid_in is not None and str(paid_in) != request.amount.currency:
            raise PermanentRailError(
                f"Shopify order {order.get('id')} was paid in {paid_in}, not in the shop's "
                f"{request.amount.currency}: Sill refunds Shopify orders paid in the shop's "
                "currency only; refund this one in the Shopify admin",
                code="rail_declined",
            )
        suggested = (order.get("suggestedRefund") or {}).get("suggestedTransactions") or []
        transactions = []
        total = Money.zero(request.amount.currency)
        for t in suggested:
            amount = shop_money(t.get("amountSet"))
            parent = (t.get("parentTransaction") or {}).get("id")
            if not parent or not amount:
                continue
            total = total + amount
            transactions.append(
                {
                    "orderId": order["id"],
                    "parentId": parent,
                    "amount": amount.major_str(),
                    "gateway": t.get("gateway"),
                    "kind": "REFUND",
                }
            )
        if total != request.amount:
            # Less than asked: the order was refunded since Sill counted it (in the Shopify
            # admin, its webhook not in yet). Codes that say the rail's books are ahead, so the
            # refund core reads the order again (refunds.services.BOOKS_BEHIND_CODES).
            if total.amount_minor == 0:
                code = "already_refunded"
            elif total < request.amount:
                code = "exceeds_refundable"
            else:
                code = "rail_declined"
            raise PermanentRailError(
                f"Shopify can refund {total} of this order's payment, not {request.amount}",
                code=code,
            )
        return transactions

    # --- what Shopify holds for an order (reconciliation: sill.rails.base.ChargeReader) ----

    def list_refunds(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailRefund]:
        """Every refund of the charge's order (``provider_payment_id``: its numeric id),
        newest first. Raises ``PermanentRailError`` for an order with more refunds than
        Shopify lists: compared with a part, the refunds past it would look missing."""
        order = self._listed_order(provider_payment_id)
        if "refunds" in order.cut:
            raise PermanentRailError(
                f"Shopify order {order.gid} has {LISTS_MAX['refunds']} refunds or more, more "
                "than Sill can list in one query: its refunds cannot be compared"
            )
        self._read_disputes[provider_payment_id] = order.disputes
        return sorted(order.refunds, key=lambda r: r.created_at, reverse=True)

    def list_disputes(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailDispute]:
        """The order's Shopify Payments disputes: those of the order ``list_refunds`` has just
        read, else read now."""
        read = self._read_disputes.pop(provider_payment_id, None)
        if read is not None:
            return read
        return self._listed_order(provider_payment_id).disputes

    def _listed_order(self, provider_payment_id: str) -> ShopifyOrder:
        if not provider_payment_id:
            raise PermanentRailError(
                "the charge names no Shopify order", code="original_not_charged"
            )
        order = self.order(provider_payment_id)
        if order is None:
            raise PermanentRailError(
                f"Shopify has no order {order_gid(provider_payment_id)}", code="rail_declined"
            )
        return order

    # --- orders, for the sync ------------------------------------------------------------

    def order(self, legacy_or_gid: str) -> ShopifyOrder | None:
        """The order, read whole (or marked ``cut``); None when Shopify has no such order.
        Raises ``UnreadableOrder`` for one Sill cannot read."""
        result = self.client.execute(
            queries.ORDER, {"id": order_gid(legacy_or_gid), **_ORDER_LISTS}, operation="SillOrder"
        )
        node = result.data.get("order")
        if not isinstance(node, dict):
            return None
        return self._whole(node, customer_readable=self._customers_readable(result.denied))

    def orders(self, *, since: datetime | None = None) -> Iterator[ShopifyOrder | SkippedOrder]:
        """The store's orders updated at or after ``since`` (all pages), oldest update first,
        each read whole (or marked ``cut``); an order Sill cannot read comes as a
        ``SkippedOrder`` saying why. Shopify's rate limit is waited out, each read tried
        again where it was (:meth:`_read_waiting`); Shopify's errors (unreachable, refusing
        the token, throttling past ``sync_throttle_seconds``) raise: they are not one order's."""
        after: str | None = None
        seen: set[str] = set()
        query = f"updated_at:>='{since.astimezone(UTC).isoformat()}'" if since else None
        read = self._read_waiting
        for _ in range(MAX_ORDER_PAGES):
            result = read(
                queries.ORDERS,
                {"first": ORDERS_PAGE, "after": after, "query": query, **_ORDER_LISTS},
                operation="SillOrders",
            )
            page = result.data.get("orders") or {}
            readable = self._customers_readable(result.denied)
            for node in page.get("nodes") or []:
                found: ShopifyOrder | SkippedOrder
                try:
                    found = self._whole(node, customer_readable=readable, read=read)
                except UnreadableOrder as exc:
                    gid = node.get("id") if isinstance(node, dict) else None
                    found = SkippedOrder(gid=str(gid or ""), reason=exc.message)
                yield found
            info = page.get("pageInfo") or {}
            if not info.get("hasNextPage") or not info.get("endCursor"):
                return
            after = str(info["endCursor"])
            if after in seen:
                raise PermanentRailError(f"Shopify repeated the order page cursor {after!r}")
            seen.add(after)
        raise PermanentRailError(f"Shopify's order list went on past {MAX_ORDER_PAGES} pages")

    def _read_waiting(
        self, query: str, variables: dict[str, Any], *, operation: str
    ) -> GraphQLResult:
        """One read of the sync, Shopify's rate limit waited out: a throttled read did
        nothing, and the order list's cursor is still good after the wait, so the same read
        is sent again once ``throttleStatus`` (or ``Retry-After``) says it fits. Past
        ``sync_throttle_seconds`` of waiting in all, the throttle is raised: the sync ends
        with it, having recorded every order before it, rather than waiting on for good."""
        while True:
            try:
                return self.client.execute(query, variables, operation=operation)
            except ShopifyThrottled as exc:
                # Never a wait of nothing: a bucket that says it fits and still throttles.
                wait = max(exc.retry_after, 0.1)
                if self.throttled_seconds + wait > self.sync_throttle_seconds:
                    raise ShopifyThrottled(
                        f"{exc.message}; the sync had already waited "
                        f"{self.throttled_seconds:.0f} s for Shopify's rate limit and stops "
                        "here: run it again (the orders recorded so far come back unchanged)",
                        retry_after=exc.retry_after,
                    ) from None
                logger.info("Shopify throttled the sync's %s; waiting %.2f s", operation, wait)
                time.sleep(wait)
                self.throttled_seconds += wait

    def _whole(
        self, node: Any, *, customer_readable: bool, read: _Read | None = None
    ) -> ShopifyOrder:
        """The order an order query read (``_ORDER_LISTS``), with the rest of its line items
        and, where a list came back as long as asked, that list read again alone (by
        ``read``: the sync's waits out throttling)."""
        read = read or self.client.execute
        gid = node.get("id") if isinstance(node, dict) else None
        if not isinstance(gid, str) or not gid:
            return parse_order(node)  # raises UnreadableOrder, naming what is wrong
        node = dict(node)
        if _next_cursor(f"line items of order {gid}", node.get("lineItems")) is not None:
            node["lineItems"] = {"nodes": self._all_lines(gid, node["lineItems"], read)}
        for name, query, operation in (
            ("transactions", queries.ORDER_TRANSACTIONS, "SillOrderTransactions"),
            ("refunds", queries.REFUNDS, "SillRefunds"),
        ):
            if _full(node.get(name), LISTS_WITH_ORDER):
                node[name] = self._order_part(
                    read, gid, name, query, operation, **{name: LISTS_MAX[name]}
                )
        cut = tuple(
            name for name in ("transactions", "refunds") if _full(node.get(name), LISTS_MAX[name])
        )
        if isinstance(node.get("refunds"), list):
            node["refunds"] = [_with_state(r, read) for r in node["refunds"]]
        return parse_order(node, customer_readable=customer_readable, cut=cut)

    def _all_lines(self, gid: str, listed: dict[str, Any], read: _Read) -> list[Any]:
        """Every line item of the order: those ``listed`` with it, then the rest by cursor."""
        what = f"line items of order {gid}"
        nodes = _nodes(what, listed)
        seen: set[str] = set()
        while (after := _next_cursor(what, listed)) is not None:
            if after in seen or len(seen) >= MAX_LINE_PAGES:
                raise UnreadableOrder(
                    f"Shopify's line items of order {gid} go on without end (cursor {after!r})"
                )
            seen.add(after)
            listed = self._order_part(
                read,
                gid,
                "lineItems",
                queries.ORDER_LINES,
                "SillOrderLines",
                lines=LINES_PAGE,
                after=after,
            )
            nodes += _nodes(what, listed)
        return nodes

    def _order_part(
        self, read: _Read, gid: str, name: str, query: str, operation: str, **variables: Any
    ) -> Any:
        """One list of the order, read alone."""
        data = read(query, {"id": gid, **variables}, operation=operation).data
        order = data.get("order")
        if not isinstance(order, dict):
            raise UnreadableOrder(f"Shopify no longer has order {gid} (it went while read)")
        return order.get(name)

    def _customers_readable(self, denied: list[str]) -> bool:
        if any("customer" in path for path in denied):
            self._note_no_customers()
            return False
        return True

    def _note_no_customers(self) -> None:
        shop = self.client.shop_domain
        if shop not in _logged_no_customers:
            _logged_no_customers.add(shop)
            logger.warning(
                "the Shopify token of %s lacks read_customers: customer facts are unknown", shop
            )

    # --- facts --------------------------------------------------------------------------

    def read_refund_facts(self, request: RefundFactsRequest) -> RefundFacts:
        """The order (created, refunded, disputes, the currency the buyer paid in), the
        live-money check, the customer.

        Two independent reads, made at once (sill.rails.fact_reads), each waiting at most
        ``fact_timeout`` seconds; one that fails or times out leaves its facts unknown.
        Without ``read_customers`` the customer's age and history are unknown, logged once per
        shop and process.
        """
        client = self.client.with_timeout(self.fact_timeout)
        reads: dict[str, Any] = {"order": lambda: self._order_facts(client, request)}
        if request.provider_customer_id:
            # Not for a guest checkout, or a customer read without read_customers.
            reads["customer"] = lambda: self._customer_facts(client, request)
        found = read_at_once(reads, timeout=self.fact_timeout, rail="Shopify")
        base: RefundFacts = found["order"] or RefundFacts()
        if not request.provider_customer_id:
            return base
        customer_created, history = found["customer"] or (None, None)
        return replace(base, customer_created_at=customer_created, history=history)

    def _order_facts(self, client: ShopifyClient, request: RefundFactsRequest) -> RefundFacts:
        created: datetime | None = None
        disputed: bool | None = None
        refunded: int | None = None
        live: bool | None = None
        paid_in: str | None = None
        try:
            data = client.execute(
                queries.CHARGE_FACTS,
                {"id": request.provider_charge_id},
                operation="SillChargeFacts",
            ).data
            order = (data.get("node") or {}).get("order")
            if isinstance(order, dict):
                live = live_money(data.get("shop"), order)
                created = parse_time(order.get("createdAt"))
                # A list, empty or not, is an answer; anything else (null: the field
                # withheld) says nothing, and an unknown fact takes a rule's strict branch.
                disputes = order.get("disputes")
                disputed = bool(disputes) if isinstance(disputes, list) else None
                total_refunded = shop_money(order.get("totalRefundedSet"))
                if total_refunded.currency == request.currency:
                    refunded = total_refunded.amount_minor
                presentment = order.get("presentmentCurrencyCode")
                paid_in = presentment if isinstance(presentment, str) and presentment else None
        except RailError as exc:
            logger.warning("Shopify order could not be read for refund facts: %s", exc.message)
        return RefundFacts(
            charge_created_at=created,
            charge_disputed=disputed,
            charge_refunded_minor=refunded,
            live_money=live,
            presentment_currency=paid_in,
        )

    def _customer_facts(
        self, client: ShopifyClient, request: RefundFactsRequest
    ) -> tuple[datetime | None, CustomerHistory | None]:
        since = request.history_since.astimezone(UTC).isoformat()
        try:
            result = client.execute(
                queries.CUSTOMER_FACTS,
                {
                    "id": request.provider_customer_id,
                    "first": request.history_limit,
                    "query": f"created_at:>='{since}'",
                },
                operation="SillCustomerFacts",
            )
        except RailError as exc:
            logger.warning("Shopify customer could not be read for refund facts: %s", exc.message)
            return None, None
        customer = result.data.get("customer")
        if result.denied or not isinstance(customer, dict):
            if result.denied:
                self._note_no_customers()
            return None, None
        created = parse_time(customer["createdAt"]) if customer.get("createdAt") else None
        orders = customer.get("orders") or {}
        refunded = []
        for node in (orders.get("nodes") or [])[: request.history_limit]:
            amount = shop_money(node.get("totalRefundedSet"))
            if amount.currency == request.currency and amount.amount_minor > 0:
                refunded.append(amount.amount_minor)
        history = CustomerHistory(
            refunded_charges=len(refunded),
            refunded_minor=sum(refunded),
            truncated=bool((orders.get("pageInfo") or {}).get("hasNextPage")),
        )
        return created, history


# How an order is read: the client's ``execute``, or the sync's read that waits out throttling.
_Read = Callable[..., GraphQLResult]


def _nodes(what: str, connection: Any) -> list[Any]:
    """The nodes of a connection (``what``: its name in words, for the error)."""
    nodes = connection.get("nodes") if isinstance(connection, dict) else None
    if not isinstance(nodes, list):
        raise UnreadableOrder(f"Shopify sent unreadable {what}")
    return nodes


def _next_cursor(what: str, connection: Any) -> str | None:
    """Where a connection (an order's line items, a refund's transactions) goes on; None
    where it ends (or is not a connection: parsing the order says so)."""
    info = connection.get("pageInfo") if isinstance(connection, dict) else None
    if not isinstance(info, dict) or not info.get("hasNextPage"):
        return None
    cursor = info.get("endCursor")
    if not isinstance(cursor, str) or not cursor:
        raise UnreadableOrder(f"Shopify's {what} go on from no cursor")
    return cursor


def _with_state(refund: Any, read: _Read) -> Any:
    """The refund with enough of its transactions to tell its state: those read with it
    and, while none of them succeeded and Shopify says there are more, the rest by cursor
    (``Refund.transactions`` is a connection). Read from the first five alone, a refund that
    succeeded after five failed attempts was read as failed: an outside refund counted for
    nothing, and Sill's own settled refund reversed as failed after settlement."""
    if not isinstance(refund, dict) or not isinstance(refund.get("id"), str):
        return refund  # parsing the order says what is wrong
    rid = refund["id"]
    what = f"transactions of refund {rid}"
    listed = refund.get("transactions")
    after = _next_cursor(what, listed)
    if after is None:
        return refund
    nodes = list(_nodes(what, listed))
    seen: set[str] = set()
    while after is not None and not any(
        isinstance(t, dict) and t.get("status") == "SUCCESS" for t in nodes
    ):
        if after in seen or len(seen) >= MAX_REFUND_TRANSACTION_PAGES:
            raise UnreadableOrder(f"Shopify's {what} go on without end (cursor {after!r})")
        seen.add(after)
        data = read(
            queries.REFUND_TRANSACTIONS_AFTER,
            {"id": rid, "transactions": REFUND_TRANSACTIONS_PAGE, "after": after},
            operation="SillRefundTransactions",
        ).data
        found = data.get("refund")
        if not isinstance(found, dict):
            raise UnreadableOrder(f"Shopify no longer has refund {rid} (it went while read)")
        nodes += _nodes(what, found.get("transactions"))
        after = _next_cursor(what, found.get("transactions"))
    return refund | {"transactions": {"nodes": nodes, "pageInfo": {"hasNextPage": bool(after)}}}


def _full(listed: Any, asked: int) -> bool:
    """Whether a plain list came back as long as asked: Shopify may have cut it there."""
    return isinstance(listed, list) and len(listed) >= asked


def _refund_result(refund: dict[str, Any]) -> RefundResult:
    state = refund_state(refund)
    return RefundResult(
        provider_refund_id=str(refund["id"]),
        state="succeeded" if state == "succeeded" else "failed" if state == "failed" else "pending",
        amount=shop_money(refund.get("totalRefundedSet")),
        failure_message="Shopify's refund transaction failed" if state == "failed" else "",
    )
