"""A loopback Stripe for customer balances, in Stripe's wire format.

localstripe has no customer balance transactions, so the credit tests point a Stripe rail
account's ``api_base`` at ``serving_balance_stub()`` and drive it through the real stripe SDK.
What it does, as Stripe documents it (API reference: Customers, Customer Balance
Transactions, Idempotent requests):

- ``Authorization: Bearer <key>``; any other key is ``401``.
- ``GET /v1/customers/{id}``: the customer (``currency`` null until its first balance
  transaction or invoice), ``404 resource_missing`` for an unknown id, ``{"deleted": true}``
  for a deleted one.
- ``POST /v1/customers/{id}/balance_transactions`` (form-encoded ``amount``, ``currency``,
  ``description``, ``metadata[...]``): negative amounts are credits; the first one sets the
  customer's currency, another currency afterwards is ``400 invalid_request_error``. An
  ``Idempotency-Key`` seen before with the same parameters answers the first response
  (``Idempotent-Replayed: true``); with other parameters ``400 idempotency_error``.
- ``GET /v1/customers/{id}/balance_transactions``: newest first, ``limit``,
  ``starting_after`` (the next page after that transaction), ``has_more``.
- ``drop_next_post``: the next POST is carried out but its connection closes without an
  answer (what a lost response looks like to the client).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.rails.loopback import start_serving

KEY = "sk_test_sill_balance_0001"
_ids = itertools.count(1)


@dataclass
class Seen:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]


@dataclass
class BalanceStub:
    url: str = ""
    key: str = KEY
    customers: dict[str, dict[str, Any]] = field(default_factory=dict)
    transactions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    idempotency: dict[str, tuple[dict[str, str], int, Any]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    drop_next_post: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_customer(
        self, customer_id: str, *, currency: str | None = None, days_old: int = 400
    ) -> dict[str, Any]:
        customer = {
            "id": customer_id,
            "object": "customer",
            "created": int(time.time()) - days_old * 86400,
            "currency": currency,
            "balance": 0,
            "email": f"{customer_id}@example.com",
            "livemode": False,
            "metadata": {},
        }
        self.customers[customer_id] = customer
        return customer

    def delete_customer(self, customer_id: str) -> None:
        self.customers[customer_id] = {"id": customer_id, "object": "customer", "deleted": True}

    def add_transaction(
        self, customer_id: str, *, amount: int, currency: str = "usd", **fields: Any
    ) -> dict[str, Any]:
        """A balance transaction made at Stripe outside the API Sill calls (the dashboard,
        an invoice, another integration); ``fields`` override the stored object's."""
        txn = {
            "id": f"cbtxn_stub{next(_ids):06d}",
            "object": "customer_balance_transaction",
            "amount": amount,
            "currency": currency,
            "customer": customer_id,
            "created": int(time.time()),
            "description": None,
            "ending_balance": 0,
            "livemode": False,
            "type": "adjustment",
            "metadata": {},
            **fields,
        }
        self.transactions.setdefault(customer_id, []).append(txn)
        return txn

    def posts(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"]

    # --- the API ------------------------------------------------------------------------

    def answer(
        self, method: str, path: str, params: dict[str, str], headers: dict[str, str]
    ) -> tuple[int, Any]:
        if headers.get("Authorization") != f"Bearer {self.key}":
            return 401, _error("Invalid API Key provided", type_="invalid_request_error")
        parts = urlsplit(path).path.strip("/").split("/")
        if len(parts) < 3 or parts[:2] != ["v1", "customers"]:
            return 404, _error(f"Unrecognized request URL ({method}: {path}).")
        customer = self.customers.get(parts[2])
        if customer is None:
            return 404, _error(
                f"No such customer: '{parts[2]}'", code="resource_missing", param="id"
            )
        if len(parts) == 3 and method == "GET":
            return 200, customer
        if parts[3:] == ["balance_transactions"] and not customer.get("deleted"):
            if method == "GET":
                return 200, self._list(customer["id"], params)
            if method == "POST":
                return self._create(customer, params, headers.get("Idempotency-Key", ""))
        return 404, _error(f"Unrecognized request URL ({method}: {path}).")

    def _list(self, customer_id: str, params: dict[str, str]) -> dict[str, Any]:
        limit = int(params.get("limit", "10"))
        listed = list(reversed(self.transactions.get(customer_id, [])))
        after = params.get("starting_after")
        if after:
            ids = [txn["id"] for txn in listed]
            listed = listed[ids.index(after) + 1 :] if after in ids else []
        return {
            "object": "list",
            "url": f"/v1/customers/{customer_id}/balance_transactions",
            "has_more": len(listed) > limit,
            "data": listed[:limit],
        }

    def _create(
        self, customer: dict[str, Any], params: dict[str, str], key: str
    ) -> tuple[int, Any]:
        if key and key in self.idempotency:
            first_params, status, body = self.idempotency[key]
            if first_params != params:
                return 400, _error(
                    "Keys for idempotent requests can only be used with the same parameters "
                    "they were first used with.",
                    type_="idempotency_error",
                )
            return status, body
        status, body = self._apply(customer, params)
        if key:
            self.idempotency[key] = (params, status, body)
        return status, body

    def _apply(self, customer: dict[str, Any], params: dict[str, str]) -> tuple[int, Any]:
        try:
            amount = int(params["amount"])
        except (KeyError, ValueError):
            return 400, _error("Missing required param: amount.", param="amount")
        currency = params.get("currency", "").lower()
        if not currency:
            return 400, _error("Missing required param: currency.", param="currency")
        if customer["currency"] and customer["currency"] != currency:
            return 400, _error(
                f"The currency {currency} does not match the customer's currency "
                f"{customer['currency']}.",
                param="currency",
            )
        customer["currency"] = currency
        customer["balance"] += amount
        txn = {
            "id": f"cbtxn_stub{next(_ids):06d}",
            "object": "customer_balance_transaction",
            "amount": amount,
            "currency": currency,
            "customer": customer["id"],
            "created": int(time.time()),
            "description": params.get("description"),
            "ending_balance": customer["balance"],
            "livemode": False,
            "type": "adjustment",
            "metadata": {
                k[len("metadata[") : -1]: v for k, v in params.items() if k.startswith("metadata[")
            },
        }
        self.transactions.setdefault(customer["id"], []).append(txn)
        return 200, txn


def _error(
    message: str, *, type_: str = "invalid_request_error", code: str = "", param: str = ""
) -> dict[str, Any]:
    error: dict[str, Any] = {"type": type_, "message": message}
    if code:
        error["code"] = code
    if param:
        error["param"] = param
    return {"error": error}


@contextmanager
def serving_balance_stub() -> Iterator[BalanceStub]:
    """A stub listening on a free loopback port (``stub.url``) until the block ends."""
    stub = BalanceStub()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            query = urlsplit(self.path).query
            params = dict(parse_qsl(raw if method == "POST" else query, keep_blank_values=True))
            headers = dict(self.headers)
            with stub.lock:
                stub.seen.append(Seen(method, urlsplit(self.path).path, params, headers))
                replayed = method == "POST" and headers.get("Idempotency-Key") in stub.idempotency
                status, body = stub.answer(method, self.path, params, headers)
                drop = method == "POST" and stub.drop_next_post
                if drop:
                    stub.drop_next_post = False
            if drop:
                # Carried out, never answered: the client sees the connection close.
                self.close_connection = True
                self.connection.close()
                return
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Request-Id", f"req_stub_{len(stub.seen)}")
            if replayed:
                self.send_header("Idempotent-Replayed", "true")
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    start_serving(server)
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
