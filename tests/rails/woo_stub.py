"""A loopback WooCommerce REST API v3 with state, answering in WooCommerce's shapes.

- ``GET /wp-json/wc/v3/orders?per_page=&page=`` with ``X-WP-Total`` / ``X-WP-TotalPages``,
  by ``date_modified`` (``orderby=modified``, oldest first, then by id), and only orders
  modified after ``modified_after`` (GMT with ``dates_are_gmt=true``, else the store's zone,
  UTC here) when it is given; each list query is kept in ``order_queries``.
- ``GET /wp-json/wc/v3/orders/{id}/refunds?per_page=&page=`` (10 a page unless asked, at most
  100; newest first) with ``X-WP-Total`` / ``X-WP-TotalPages``, and ``POST`` (``amount``,
  ``reason``, ``api_refund``) → 201 with the refund; the order's ``refunds`` list grows.
- Authentication as WooCommerce checks it: over plain http an OAuth 1.0a signed query
  (``oauth_consumer_key``, ``oauth_signature``…), over https basic auth or
  ``consumer_key``/``consumer_secret`` query parameters; a wrong key is 401
  ``woocommerce_rest_cannot_view``. Keys with ``read`` permission only get 401
  ``woocommerce_rest_cannot_create`` on every write.
- Scripted failures for the refund POST (``fail_next``): ``"429"`` (a host's or security
  plugin's rate limit) or ``"503"`` (maintenance mode, an overloaded host), nothing written;
  ``retry_after``, when set, goes out as their ``Retry-After`` header.
Sill reaches it through the real ``woocommerce`` client library.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.rails.loopback import StubServer as LoopbackServer

CONSUMER_KEY = "ck_" + "0123456789abcdef" * 2 + "01234567"
CONSUMER_SECRET = "cs_" + "fedcba9876543210" * 2 + "76543210"


def _gmt(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass
class StubOrder:
    id: int
    total: Decimal
    stripe_intent: str = ""
    stripe_charge: str = ""
    status: str = "processing"
    currency: str = "USD"
    paid: bool = True
    email: str = "buyer@example.com"
    modified_at: datetime = field(default_factory=lambda: datetime.now(UTC) - timedelta(days=1))
    refunds: list[dict[str, Any]] = field(default_factory=list)
    # Odd data a store may send: merged over the order's JSON.
    overrides: dict[str, Any] = field(default_factory=dict)
    # The store's address: WooCommerce's REST answer (and so its webhook body) links the order
    # at ``<store>/wp-json/wc/v3/orders/<id>``.
    store_url: str = ""

    def json(self) -> dict[str, Any]:
        created = self.modified_at - timedelta(hours=1)
        meta = []
        if self.stripe_intent:
            meta.append({"id": 1, "key": "_stripe_intent_id", "value": self.stripe_intent})
        if self.stripe_charge:
            meta.append({"id": 2, "key": "_stripe_charge_id", "value": self.stripe_charge})
        return {
            "id": self.id,
            "number": str(self.id),
            "status": self.status,
            "currency": self.currency,
            "total": f"{self.total:.2f}",
            "date_created_gmt": _gmt(created),
            "date_modified_gmt": _gmt(self.modified_at),
            "date_paid_gmt": _gmt(created) if self.paid else None,
            "billing": {"first_name": "Ada", "last_name": "Buyer", "email": self.email},
            "payment_method": "stripe",
            "payment_method_title": "Credit Card (Stripe)",
            "transaction_id": self.stripe_charge,
            "meta_data": meta,
            "line_items": [
                {
                    "id": 7,
                    "name": "Beans",
                    "sku": "BEAN-1",
                    "quantity": 2,
                    "price": float(self.total / 2),
                    "total": f"{self.total:.2f}",
                },
            ],
            "refunds": [
                {"id": r["id"], "reason": r["reason"], "total": "-" + r["amount"]}
                for r in self.refunds
            ],
            "_links": {
                "self": [{"href": f"{self.store_url}/wp-json/wc/v3/orders/{self.id}"}],
                "collection": [{"href": f"{self.store_url}/wp-json/wc/v3/orders"}],
            },
        } | self.overrides


class WooStub:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.url = ""
        self.orders: dict[int, StubOrder] = {}
        self.read_only = False
        self.fail_next: list[str] = []
        self.retry_after = ""
        self.refund_posts: list[dict[str, Any]] = []
        # Set by a test: the next refund POST waits for it before it is handled (a request the
        # store is still working on when another arrives).
        self.hold_next_refund_post: threading.Event | None = None
        self.auth_seen: list[str] = []
        self.order_queries: list[dict[str, list[str]]] = []
        # Called (under the stub's lock) after each order list page is served: the store
        # changing while Sill reads it.
        self.after_order_page: Any = None
        self.next_refund_id = 500

    def add_order(self, **kwargs: Any) -> StubOrder:
        with self.lock:
            order_id = 1000 + len(self.orders) + 1
            total = Decimal(str(kwargs.pop("total", "89.00")))
            order = StubOrder(id=order_id, total=total, store_url=self.url, **kwargs)
            self.orders[order_id] = order
            return order


def _error(code: str, message: str, status: int) -> dict[str, Any]:
    return {"code": code, "message": message, "data": {"status": status}}


class _Handler(BaseHTTPRequestHandler):
    stub: WooStub

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def _route(self) -> tuple[list[str], dict[str, list[str]]] | None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        # OAuth 1.0a over http (the client signs the query), as WooCommerce checks it.
        key = (query.get("oauth_consumer_key") or query.get("consumer_key") or [""])[0]
        signed = bool(query.get("oauth_signature")) and query.get("oauth_signature_method") == [
            "HMAC-SHA256"
        ]
        with self.stub.lock:
            self.stub.auth_seen.append("oauth1" if signed else "none")
        if key != CONSUMER_KEY or not signed:
            self._send(
                401,
                _error("woocommerce_rest_cannot_view", "Sorry, you cannot list resources.", 401),
            )
            return None
        path = parts.path.removeprefix("/wp-json/wc/v3/").strip("/").split("/")
        return path, query

    def do_GET(self) -> None:
        routed = self._route()
        if routed is None:
            return
        path, query = routed
        with self.stub.lock:
            if path == ["orders"]:
                per_page = int(query.get("per_page", ["10"])[0])
                page = int(query.get("page", ["1"])[0])
                self.stub.order_queries.append(query)
                everything = sorted(self.stub.orders.values(), key=lambda o: (o.modified_at, o.id))
                after = query.get("modified_after", [""])[0]
                if after:
                    # WooCommerce compares at its one-second resolution, after the instant.
                    since = datetime.fromisoformat(after).replace(tzinfo=UTC)
                    everything = [
                        o for o in everything if o.modified_at.replace(microsecond=0) > since
                    ]
                pages = max((len(everything) + per_page - 1) // per_page, 1)
                batch = everything[(page - 1) * per_page : page * per_page]
                self._send(
                    200,
                    [o.json() for o in batch],
                    {"X-WP-Total": str(len(everything)), "X-WP-TotalPages": str(pages)},
                )
                if self.stub.after_order_page is not None:
                    self.stub.after_order_page(len(self.stub.order_queries))
                return
            if len(path) == 3 and path[0] == "orders" and path[2] == "refunds":
                order = self.stub.orders.get(int(path[1]))
                if order is not None:
                    per_page = int(query.get("per_page", ["10"])[0])
                    page = int(query.get("page", ["1"])[0])
                    if not 1 <= per_page <= 100:
                        self._send(
                            400,
                            _error("rest_invalid_param", "Invalid parameter(s): per_page", 400),
                        )
                        return
                    # Newest first, as WooCommerce lists an order's refunds.
                    newest = sorted(
                        order.refunds,
                        key=lambda r: (r["date_created_gmt"], r["id"]),
                        reverse=True,
                    )
                    pages = max((len(newest) + per_page - 1) // per_page, 1)
                    self._send(
                        200,
                        newest[(page - 1) * per_page : page * per_page],
                        {"X-WP-Total": str(len(newest)), "X-WP-TotalPages": str(pages)},
                    )
                    return
        self._send(404, _error("woocommerce_rest_shop_order_invalid_id", "Invalid ID.", 404))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        routed = self._route()
        if routed is None:
            return
        path, _query = routed
        if not (len(path) == 3 and path[0] == "orders" and path[2] == "refunds"):
            self._send(404, _error("rest_no_route", "No route was found.", 404))
            return
        body = json.loads(raw or b"{}")
        held, self.stub.hold_next_refund_post = self.stub.hold_next_refund_post, None
        if held is not None:
            held.wait(10)
        with self.stub.lock:
            self.stub.refund_posts.append(body)
            script = self.stub.fail_next.pop(0) if self.stub.fail_next else ""
            if script in ("429", "503"):
                wait = {"Retry-After": self.stub.retry_after} if self.stub.retry_after else {}
                error = ("too_many_requests", "Too many requests.")
                if script == "503":
                    error = ("maintenance", "Briefly unavailable for scheduled maintenance.")
                self._send(int(script), _error(*error, int(script)), wait)
                return
            if self.stub.read_only:
                self._send(
                    401,
                    _error(
                        "woocommerce_rest_cannot_create",
                        "Sorry, you are not allowed to create resources.",
                        401,
                    ),
                )
                return
            order = self.stub.orders.get(int(path[1]))
            if order is None:
                self._send(
                    404, _error("woocommerce_rest_shop_order_invalid_id", "Invalid ID.", 404)
                )
                return
            amount = Decimal(str(body.get("amount")))
            done = sum((Decimal(r["amount"]) for r in order.refunds), Decimal(0))
            if amount <= 0 or done + amount > order.total:
                self._send(
                    400,
                    _error(
                        "woocommerce_rest_cannot_create_order_refund", "Invalid refund amount.", 400
                    ),
                )
                return
            self.stub.next_refund_id += 1
            refund = {
                "id": self.stub.next_refund_id,
                "date_created_gmt": _gmt(datetime.now(UTC)),
                "amount": f"{amount:.2f}",
                "reason": body.get("reason") or "",
                "refunded_payment": bool(body.get("api_refund", True)),
                "line_items": [],
            }
            order.refunds.append(refund)
            order.modified_at = datetime.now(UTC)
            self._send(201, refund)


class StubServer(LoopbackServer[WooStub]):
    def __init__(self) -> None:
        super().__init__(WooStub(), _Handler)
