"""A loopback Shopify Admin API: GraphQL over ``POST /admin/api/<version>/graphql.json`` and
``GET /admin/oauth/access_scopes.json``, with state (shop and plan, customers, orders,
transactions, refunds, disputes), answering in Shopify's shapes: ``data`` + ``extensions.cost``,
``userErrors``, ``THROTTLED`` errors with ``extensions.cost.throttleStatus`` (and, on request,
in the older shape whose error carries the message ``Throttled`` alone), ``MAX_COST_EXCEEDED``
for a query whose requested cost passes 1,000 points (tests/rails/shopify_cost.py, Shopify's
documented rules), ``ACCESS_DENIED`` errors with partial data when a scope is missing, 401 with
a string ``errors``, 429 with ``Retry-After``. Sill reaches it through the real ShopifyAPI
client (``api_base``); ``requests`` keeps each query's text as sent.

It dispatches on the operation name Sill sends (it parses no GraphQL), but checks what Shopify
would refuse: the access token, and ``refundCreate`` without ``@idempotent`` (2026-04). It cuts
an order's lists where Shopify does, reading each ``first`` (and ``after``) from the query's text
and variables: ``transactions`` and ``refunds`` are plain lists, cut at ``first`` without a word;
``lineItems`` and a refund's own ``transactions`` are connections, a page at a time with
``pageInfo`` (the rest of a refund's: ``SillRefundTransactions``, ``refund(id:)``).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.rails.loopback import StubServer as LoopbackServer
from tests.rails.shopify_cost import MAX_COST, requested_cost

TOKEN = "shpat_0123456789abcdef0123456789abcdef"
SHOP = "sill-dev.myshopify.com"
ALL_SCOPES = ["read_customers", "read_orders", "write_orders"]


# Currencies whose minor unit is not the hundredth, as Shopify writes their amounts.
_DECIMALS = {"JPY": 0, "KRW": 0, "BHD": 3, "JOD": 3, "KWD": 3, "OMR": 3, "TND": 3}


def _money(amount: Decimal, currency: str = "USD") -> dict[str, Any]:
    # Shopify writes 89.0 and 12.5: no trailing zeros, at least one decimal (1200.0 yen).
    unit = Decimal(1).scaleb(-_DECIMALS.get(currency, 2))
    text = format(amount.quantize(unit), "f")
    text = text.rstrip("0") if "." in text else text + "."
    text += "0" if text.endswith(".") else ""
    return {"shopMoney": {"amount": text, "currencyCode": currency}}


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class StubOrder:
    id: int
    name: str
    total: Decimal
    test: bool = True
    customer_id: int | None = None
    currency: str = "USD"
    # The buyer's currency, when a multi-currency store sold in another than the shop's.
    presentment_currency: str | None = None
    email: str = "buyer@example.com"
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC) - timedelta(days=3))
    lines: list[tuple[str, str, int, Decimal]] = field(default_factory=list)
    transactions: list[dict[str, Any]] = field(default_factory=list)
    refunds: list[dict[str, Any]] = field(default_factory=list)
    disputes: list[dict[str, Any]] = field(default_factory=list)
    # Fields of its GraphQL answer replaced as given: data Shopify should never send.
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def gid(self) -> str:
        return f"gid://shopify/Order/{self.id}"

    def refunded(self) -> Decimal:
        return sum((Decimal(r["amount"]) for r in self.refunds), Decimal(0))


@dataclass
class ShopifyStub:
    url: str = ""
    token: str = TOKEN
    scopes: list[str] = field(default_factory=lambda: list(ALL_SCOPES))
    plan: dict[str, Any] = field(
        default_factory=lambda: {"partnerDevelopment": True, "publicDisplayName": "Development"}
    )
    shop_name: str = "Sill Dev Store"
    orders: dict[int, StubOrder] = field(default_factory=dict)
    customers: dict[int, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Every GraphQL request as sent: operation name, query text, variables.
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    # Scripted trouble, each consumed by the next matching call.
    throttle: dict[str, int] = field(default_factory=dict)  # operation → THROTTLED answers
    throttle_wait: float = 0.2  # what the throttleStatus makes the wait
    # Throttled answers in the older shape: ``{"message": "Throttled"}`` with no code.
    throttle_without_code: bool = False
    http_429_retry_after: str = "0.2"
    http_429: dict[str, int] = field(default_factory=dict)
    http_500: dict[str, int] = field(default_factory=dict)
    user_errors: list[dict[str, Any]] = field(default_factory=list)
    # refundCreate answers with these @idempotent refusals (codes) first, one per call.
    idempotency_errors: list[str] = field(default_factory=list)
    # A broken store (or proxy): every order page says there is a next one, at the same cursor;
    # after 20 such pages the stub ends the list (so a sync that follows it still stops).
    repeat_cursor: bool = False
    slow_after_refund_seconds: float = 0.0  # answer refundCreate this late (after creating it)
    # Work on a new refundCreate this long before making the refund: meanwhile the same key
    # is answered IDEMPOTENCY_CONCURRENT_REQUEST and the order lists no refund for it.
    slow_before_refund_seconds: float = 0.0
    # operation → (entered, release): a call of it sets ``entered`` and waits (the stub's
    # lock released) until the test sets ``release``; once, then the pause is gone.
    pause: dict[str, tuple[threading.Event, threading.Event]] = field(default_factory=dict)
    _next_id: int = 9000
    _by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    _in_flight: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # --- state ------------------------------------------------------------------------

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def add_customer(self, *, email: str = "buyer@example.com", days_ago: int = 400) -> int:
        cid = self.new_id()
        self.customers[cid] = {
            "id": f"gid://shopify/Customer/{cid}",
            "email": email,
            "firstName": "Ada",
            "lastName": "Buyer",
            "createdAt": _iso(datetime.now(UTC) - timedelta(days=days_ago)),
        }
        return cid

    def add_order(
        self,
        *,
        total: str = "89.00",
        test: bool = True,
        customer_id: int | None = None,
        paid: bool = True,
        days_ago: int = 3,
        refunded: str | None = None,
        currency: str = "USD",
    ) -> StubOrder:
        oid = self.new_id()
        order = StubOrder(
            id=oid,
            name=f"#{1000 + len(self.orders) + 1}",
            total=Decimal(total),
            test=test,
            customer_id=customer_id,
            currency=currency,
            created_at=datetime.now(UTC) - timedelta(days=days_ago),
            lines=[("BEAN-1", "House blend", 2, Decimal(total) / 2)],
        )
        if paid:
            order.transactions.append(
                {
                    "id": f"gid://shopify/OrderTransaction/{self.new_id()}",
                    "kind": "SALE",
                    "status": "SUCCESS",
                    "test": test,
                    "gateway": "bogus",
                    "createdAt": _iso(order.created_at),
                    "processedAt": _iso(order.created_at),
                    "amount": Decimal(total),
                }
            )
        if refunded:
            self._make_refund(order, Decimal(refunded), note="Refunded in the Shopify admin")
        self.orders[oid] = order
        return order

    def _make_refund(self, order: StubOrder, amount: Decimal, *, note: str) -> dict[str, Any]:
        refund = {
            "id": f"gid://shopify/Refund/{self.new_id()}",
            "createdAt": _iso(datetime.now(UTC)),
            "note": note,
            "amount": amount,
            "transactions": [
                {
                    "id": f"gid://shopify/OrderTransaction/{self.new_id()}",
                    "status": "SUCCESS",
                    "kind": "REFUND",
                }
            ],
        }
        order.refunds.append(refund)
        return refund

    def refund_creates(self) -> list[dict[str, Any]]:
        return [v for op, v in self.calls if op == "SillRefundCreate"]

    # --- rendering --------------------------------------------------------------------

    def _customer_json(self, order: StubOrder) -> dict[str, Any] | None:
        return self.customers.get(order.customer_id) if order.customer_id else None

    def _refund_json(
        self,
        order: StubOrder,
        refund: dict[str, Any],
        query: str = "",
        v: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {
            "id": refund["id"],
            "createdAt": refund["createdAt"],
            "note": refund["note"],
            "totalRefundedSet": _money(refund["amount"], order.currency),
            "transactions": _refund_transactions(refund, query, v or {}),
        }

    def _order_json(
        self, order: StubOrder, query: str = "", v: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        v = v or {}
        lines = [
            {
                "sku": sku,
                "name": name,
                "quantity": qty,
                "originalUnitPriceSet": _money(price, order.currency),
            }
            for sku, name, qty, price in order.lines
        ]
        start = int(_argument(query, "lineItems", "after", v) or 0)
        first = _argument(query, "lineItems", "first", v)
        end = len(lines) if first is None else start + int(first)
        transactions = order.transactions[: _cut(query, "transactions", v)]
        refunds = order.refunds[: _cut(query, "refunds", v)]
        return {
            "id": order.gid,
            "name": order.name,
            "createdAt": _iso(order.created_at),
            "updatedAt": _iso(order.created_at),
            "test": order.test,
            "email": order.email,
            "cancelledAt": None,
            "currencyCode": order.currency,
            "totalPriceSet": _money(order.total, order.currency),
            "totalRefundedSet": _money(order.refunded(), order.currency),
            "customer": self._customer_json(order),
            "lineItems": {
                "nodes": lines[start:end],
                "pageInfo": {
                    "hasNextPage": end < len(lines),
                    "endCursor": str(min(end, len(lines))) if lines[start:end] else None,
                },
            },
            "transactions": [
                {
                    **{k: val for k, val in t.items() if k != "amount"},
                    "amountSet": _money(t["amount"], order.currency),
                }
                for t in transactions
            ],
            "refunds": [self._refund_json(order, r, query, v) for r in refunds],
            "disputes": order.disputes,
        } | order.overrides

    # --- operations -------------------------------------------------------------------

    def answer(self, op: str, query: str, v: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        denied: list[dict[str, Any]] = []

        def deny(path: list[Any]) -> None:
            denied.append(
                {
                    "message": "Access denied for customer field. Required access: "
                    "`read_customers` access scope.",
                    "locations": [{"line": 1, "column": 1}],
                    "path": path,
                    "extensions": {
                        "code": "ACCESS_DENIED",
                        "documentation": "https://shopify.dev/api/usage/access-scopes",
                        "requiredAccess": "`read_customers` access scope.",
                    },
                }
            )

        can_customers = "read_customers" in self.scopes
        data: dict[str, Any]
        if op in ("SillOrders", "SillOrder"):
            orders = sorted(self.orders.values(), key=lambda o: o.id)
            if op == "SillOrder":
                oid = int(str(v["id"]).rsplit("/", 1)[-1])
                picked = [self.orders[oid]] if oid in self.orders else []
            else:
                start = int(v.get("after") or 0)
                picked = orders[start : start + int(v["first"])]
            nodes = []
            for i, order in enumerate(picked):
                node = self._order_json(order, query, v)
                node.pop("totalRefundedSet")
                if not can_customers and node["customer"] is not None:
                    node["customer"] = None
                    deny(
                        ["order", "customer"]
                        if op == "SillOrder"
                        else ["orders", "nodes", i, "customer"]
                    )
                nodes.append(node)
            if op == "SillOrder":
                data = {"order": nodes[0] if nodes else None}
            else:
                start = int(v.get("after") or 0)
                more = start + len(picked) < len(orders)
                cursor = str(start + len(picked)) if picked else None
                if self.repeat_cursor:
                    asked = sum(1 for op_, _ in self.calls if op_ == "SillOrders")
                    more, cursor = asked < 20, str(start)
                data = {
                    "orders": {
                        "nodes": nodes,
                        "pageInfo": {"hasNextPage": more, "endCursor": cursor},
                    }
                }
        elif op in ("SillOrderLines", "SillOrderTransactions"):
            order = self.orders.get(int(str(v["id"]).rsplit("/", 1)[-1]))
            data = {"order": None}
            if order is not None:
                part = "lineItems" if op == "SillOrderLines" else "transactions"
                full = self._order_json(order, query, v)
                data = {"order": {"id": order.gid, part: full[part]}}
        elif op == "SillShop":
            data = {"shop": {"name": self.shop_name, "myshopifyDomain": SHOP, "plan": self.plan}}
        elif op == "SillRefundPlan":
            order = self.orders.get(int(str(v["id"]).rsplit("/", 1)[-1]))
            node = None
            if order is not None:
                sale = order.transactions[0]
                left = sale["amount"] - order.refunded()
                amount = min(Decimal(v["amount"]), left)
                node = {
                    "id": order.gid,
                    "test": order.test,
                    "currencyCode": order.currency,
                    "presentmentCurrencyCode": order.presentment_currency or order.currency,
                    "suggestedRefund": {
                        "suggestedTransactions": [
                            {
                                "gateway": sale["gateway"],
                                "kind": "SUGGESTED_REFUND",
                                "amountSet": _money(amount, order.currency),
                                "parentTransaction": {"id": sale["id"]},
                            }
                        ]
                        if amount > 0
                        else []
                    },
                }
            data = {"shop": {"plan": self.plan}, "order": node}
        elif op == "SillRefundCreate":
            if "write_orders" not in self.scopes:
                return 200, {
                    "errors": [
                        {
                            "message": "Access denied for refundCreate field.",
                            "extensions": {"code": "ACCESS_DENIED"},
                        }
                    ],
                    "data": {"refundCreate": None},
                }
            if not re.search(r"refundCreate\([^)]*\)\s*@idempotent\(key:", query):
                return 200, {
                    "errors": [
                        {
                            "message": "The @idempotent directive is required for this mutation.",
                            "extensions": {"code": "BAD_REQUEST"},
                        }
                    ]
                }
            key = str(v["key"])
            if self.idempotency_errors:
                return 200, _idempotency_error(self.idempotency_errors.pop(0), "Refused.")
            if key in self._in_flight:
                return 200, _idempotency_error(
                    "IDEMPOTENCY_CONCURRENT_REQUEST",
                    "This request is currently in progress, please try again.",
                )
            if key in self._by_key and self._by_key[key]["input"] != v["input"]:
                return 200, _idempotency_error(
                    "IDEMPOTENCY_KEY_PARAMETER_MISMATCH",
                    "The same idempotency key cannot be used with different operation parameters.",
                )
            if key in self._by_key:
                order, refund = self._by_key[key]["order"], self._by_key[key]["refund"]
                data = {
                    "refundCreate": {
                        "refund": self._refund_json(order, refund, query, v),
                        "userErrors": [],
                    }
                }
            elif self.user_errors:
                data = {"refundCreate": {"refund": None, "userErrors": [self.user_errors.pop(0)]}}
            else:
                inp = v["input"]
                if self.slow_before_refund_seconds:
                    delay, self.slow_before_refund_seconds = self.slow_before_refund_seconds, 0.0
                    self._in_flight.add(key)
                    self.lock.release()
                    try:
                        time.sleep(delay)
                    finally:
                        self.lock.acquire()
                        self._in_flight.discard(key)
                order = self.orders[int(str(inp["orderId"]).rsplit("/", 1)[-1])]
                amount = sum((Decimal(t["amount"]) for t in inp["transactions"]), Decimal(0))
                if amount + order.refunded() > order.transactions[0]["amount"]:
                    data = {
                        "refundCreate": {
                            "refund": None,
                            "userErrors": [
                                {
                                    "field": ["transactions", "0", "amount"],
                                    "message": "Refund amount must be less than or equal to the refundable amount",
                                }
                            ],
                        }
                    }
                else:
                    refund = self._make_refund(order, amount, note=inp.get("note") or "")
                    self._by_key[key] = {"order": order, "refund": refund, "input": inp}
                    data = {
                        "refundCreate": {
                            "refund": self._refund_json(order, refund, query, v),
                            "userErrors": [],
                        }
                    }
                    if self.slow_after_refund_seconds:
                        delay, self.slow_after_refund_seconds = self.slow_after_refund_seconds, 0.0
                        self.lock.release()
                        try:
                            time.sleep(delay)
                        finally:
                            self.lock.acquire()
        elif op == "SillRefunds":
            order = self.orders.get(int(str(v["id"]).rsplit("/", 1)[-1]))
            data = {"order": None}
            if order is not None:
                full = self._order_json(order, query, v)
                data = {
                    "order": {
                        k: full[k]
                        for k in ("id", "refunds", "disputes", "createdAt", "totalPriceSet")
                    }
                }
        elif op == "SillRefundTransactions":
            found = next(
                (r for o in self.orders.values() for r in o.refunds if r["id"] == v["id"]),
                None,
            )
            data = {"refund": None}
            if found is not None:
                data = {
                    "refund": {
                        "id": found["id"],
                        "transactions": _refund_transactions(found, query, v),
                    }
                }
        elif op == "SillChargeFacts":
            found = None
            for order in self.orders.values():
                for t in order.transactions:
                    if t["id"] == v["id"]:
                        full = self._order_json(order)
                        found = {
                            "id": t["id"],
                            "order": {
                                k: full[k]
                                for k in (
                                    "id",
                                    "createdAt",
                                    "test",
                                    "currencyCode",
                                    "totalPriceSet",
                                    "totalRefundedSet",
                                    "disputes",
                                )
                            },
                        }
                        # Shopify answers the fields a query asks for, and no others.
                        if re.search(r"\bpresentmentCurrencyCode\b", query):
                            found["order"]["presentmentCurrencyCode"] = (
                                order.presentment_currency or order.currency
                            )
            data = {"shop": {"plan": self.plan}, "node": found}
        elif op == "SillCustomerFacts":
            cid = int(str(v["id"]).rsplit("/", 1)[-1])
            if not can_customers:
                deny(["customer"])
                data = {"customer": None}
            elif cid not in self.customers:
                data = {"customer": None}
            else:
                since = re.search(r"created_at:>='([^']+)'", v["query"])
                start = datetime.fromisoformat(since.group(1)) if since else None
                mine = [
                    o
                    for o in sorted(self.orders.values(), key=lambda o: o.created_at, reverse=True)
                    if o.customer_id == cid and (start is None or o.created_at >= start)
                ]
                first = int(v["first"])
                data = {
                    "customer": {
                        "id": self.customers[cid]["id"],
                        "createdAt": self.customers[cid]["createdAt"],
                        "orders": {
                            "nodes": [
                                {
                                    "id": o.gid,
                                    "currencyCode": o.currency,
                                    "totalRefundedSet": _money(o.refunded(), o.currency),
                                }
                                for o in mine[:first]
                            ],
                            "pageInfo": {"hasNextPage": len(mine) > first},
                        },
                    }
                }
        else:
            return 200, {
                "errors": [
                    {"message": f"unknown operation {op}", "extensions": {"code": "BAD_REQUEST"}}
                ]
            }
        body: dict[str, Any] = {"data": data, "extensions": _cost(10, 1990.0)}
        if denied:
            body["errors"] = denied
        return 200, body


def _argument(query: str, field: str, name: str, v: dict[str, Any]) -> Any:
    """The value the query gives argument ``name`` of ``field`` at its first mention (in Sill's
    order fragment the order's own ``transactions`` come before its refunds'), a variable
    resolved; None when the query does not give it."""
    found = re.search(rf"\b{field}\(([^)]*)\)", query)
    given = re.search(rf"\b{name}:\s*(\$?\w+)", found.group(1)) if found else None
    if given is None:
        return None
    value = given.group(1)
    return v.get(value[1:]) if value.startswith("$") else value


def _refund_transactions(refund: dict[str, Any], query: str, v: dict[str, Any]) -> dict[str, Any]:
    """A refund's ``transactions``: a connection (``Refund.transactions``), a page of
    ``first`` after the ``after`` cursor that the query gives the refund's own list, with
    ``pageInfo``; all of them when the query gives no ``first``."""
    found = re.search(r"\brefunds?\s*[({][\s\S]*?\btransactions\(([^)]*)\)", query)
    arguments = found.group(1) if found else ""

    def given(name: str) -> Any:
        value = re.search(rf"\b{name}:\s*(\$?\w+)", arguments)
        if value is None:
            return None
        text = value.group(1)
        return v.get(text[1:]) if text.startswith("$") else text

    every = refund["transactions"]
    start = int(given("after") or 0)
    first = given("first")
    end = len(every) if first is None else start + int(first)
    return {
        "nodes": every[start:end],
        "pageInfo": {
            "hasNextPage": end < len(every),
            "endCursor": str(min(end, len(every))) if every[start:end] else None,
        },
    }


def _cut(query: str, field: str, v: dict[str, Any]) -> int | None:
    """Where Shopify cuts a plain list: at its ``first``, or nowhere without one."""
    first = _argument(query, field, "first", v)
    return None if first is None else int(first)


def _idempotency_error(code: str, message: str) -> dict[str, Any]:
    """How the stub answers a refundCreate its ``@idempotent`` key refuses: a GraphQL error
    with the code in its extensions (``UserError``, refundCreate's error type, has no code)."""
    return {
        "errors": [{"message": message, "path": ["refundCreate"], "extensions": {"code": code}}],
        "data": {"refundCreate": None},
    }


def _max_cost_exceeded(cost: int) -> dict[str, Any]:
    return {
        "errors": [
            {
                "message": f"Query cost is {cost}, which exceeds the single query max cost "
                f"limit ({MAX_COST}).",
                "extensions": {
                    "code": "MAX_COST_EXCEEDED",
                    "cost": cost,
                    "maxCost": MAX_COST,
                    "documentation": "https://shopify.dev/api/usage/rate-limits",
                },
            }
        ]
    }


def _cost(requested: float, available: float, rate: float = 100.0) -> dict[str, Any]:
    return {
        "cost": {
            "requestedQueryCost": requested,
            "actualQueryCost": requested,
            "throttleStatus": {
                "maximumAvailable": 2000.0,
                "currentlyAvailable": available,
                "restoreRate": rate,
            },
        }
    }


class _Handler(BaseHTTPRequestHandler):
    stub: ShopifyStub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        for k, val in (headers or {}).items():
            self.send_header(k, val)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(raw)  # the client may have timed out and left

    def _authorized(self) -> bool:
        if self.headers.get("X-Shopify-Access-Token") != self.stub.token:
            self._send(
                401,
                {
                    "errors": "[API] Invalid API key or access token (unrecognized login or wrong password)"
                },
            )
            return False
        return True

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/admin/oauth/access_scopes.json":
            self._send(404, {"errors": "Not Found"})
            return
        if self._authorized():
            self._send(200, {"access_scopes": [{"handle": s} for s in self.stub.scopes]})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not re.fullmatch(r"/admin/api/\d{4}-\d{2}/graphql\.json", self.path):
            self._send(404, {"errors": "Not Found"})
            return
        if not self._authorized():
            return
        request = json.loads(raw)
        op = str(request.get("operationName") or "")
        variables = request.get("variables") or {}
        stub = self.stub
        paused = stub.pause.pop(op, None)
        if paused is not None:
            entered, release = paused
            entered.set()
            release.wait(timeout=30)
        query = str(request.get("query") or "")
        with stub.lock:
            stub.calls.append((op, variables))
            stub.requests.append((op, query, variables))
            cost = requested_cost(query, variables)
            if cost > MAX_COST:
                # Refused before it runs, whatever the bucket holds; nothing is spent.
                self._send(200, _max_cost_exceeded(cost))
                return
            if stub.http_429.get(op):
                stub.http_429[op] -= 1
                self._send(
                    429,
                    {
                        "errors": "Exceeded 2 calls per second for api client. Reduce request rates to resume uninterrupted service."
                    },
                    {"Retry-After": stub.http_429_retry_after},
                )
                return
            if stub.http_500.get(op):
                stub.http_500[op] -= 1
                self._send(
                    500, {"errors": "Internal error. Looks like something went wrong on our end."}
                )
                return
            if stub.throttle.get(op):
                stub.throttle[op] -= 1
                rate = 100.0
                error: dict[str, Any] = {"message": "Throttled"}
                if not stub.throttle_without_code:
                    error["extensions"] = {
                        "code": "THROTTLED",
                        "documentation": "https://shopify.dev/api/usage/rate-limits",
                    }
                extensions = _cost(10 + stub.throttle_wait * rate, 10.0, rate)
                extensions["cost"]["actualQueryCost"] = None  # nothing ran
                self._send(200, {"errors": [error], "extensions": extensions})
                return
            status, body = stub.answer(op, query, variables)
        self._send(status, body)


class StubServer(LoopbackServer[ShopifyStub]):
    def __init__(self) -> None:
        super().__init__(ShopifyStub(), _Handler)
