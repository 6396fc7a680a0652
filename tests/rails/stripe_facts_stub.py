"""A loopback Stripe answering the three reads of a refund's facts, in Stripe's wire format.

- ``GET /v1/charges/{id}`` → a charge (``created``, ``currency``, ``amount_refunded``,
  ``customer``, ``disputed``);
- ``GET /v1/customers/{id}`` → a customer (``created``);
- ``GET /v1/charges?customer=…`` → a list of that customer's charges (``has_more``);
- ``GET /v1/refunds?charge=…`` and ``GET /v1/disputes?charge=…`` → the refunds and disputes
  held in ``refunds`` and ``disputes`` for that charge, as they are (one page): a test can
  hold an object Stripe would never send (no amount, say).

``slow`` delays one read's answer (``{"charge": 2.0}``) to outlast a timeout. Anything else is
404 in Stripe's error shape. localstripe (used elsewhere) cannot be slowed or observed.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

KEY = "sk_test_51SillFactsStubKeyNeverSent"


@dataclass
class StripeFactsStub:
    created: int = field(default_factory=lambda: int(time.time()) - 3 * 86400)
    customer: str = "cus_facts"
    customer_created: int = field(default_factory=lambda: int(time.time()) - 400 * 86400)
    slow: dict[str, float] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    refunds: list[dict[str, Any]] = field(default_factory=list)
    disputes: list[dict[str, Any]] = field(default_factory=list)

    def answer(
        self, path: str, query: dict[str, list[str]], method: str = "GET"
    ) -> tuple[int, dict[str, Any], str]:
        parts = path.strip("/").split("/")
        if parts == ["v1", "charges"] and query.get("customer"):
            return (
                200,
                {"object": "list", "url": "/v1/charges", "has_more": False, "data": []},
                ("customer history"),
            )
        if method == "GET" and parts in (["v1", "refunds"], ["v1", "disputes"]):
            # Listed, not made: a POST /v1/refunds (a refund asked for) is 404 as ever.
            held = self.refunds if parts[1] == "refunds" else self.disputes
            charge = (query.get("charge") or [""])[0]
            data = [obj for obj in held if obj.get("charge") == charge]
            return (
                200,
                {"object": "list", "url": f"/v1/{parts[1]}", "has_more": False, "data": data},
                parts[1],
            )
        if len(parts) == 3 and parts[:2] == ["v1", "charges"]:
            return 200, {
                "id": parts[2], "object": "charge", "created": self.created, "amount": 8900,
                "amount_refunded": 0, "currency": "usd", "customer": self.customer,
                "disputed": False, "livemode": False,
            }, "charge"  # fmt: skip
        if len(parts) == 3 and parts[:2] == ["v1", "customers"]:
            return (
                200,
                {"id": parts[2], "object": "customer", "created": self.customer_created},
                ("customer"),
            )
        error = {"type": "invalid_request_error", "message": f"No such object: {path}"}
        return 404, {"error": error}, ""


class Handler(BaseHTTPRequestHandler):
    stub: StripeFactsStub

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        status, body, read = self.stub.answer(parts.path, parse_qs(parts.query), self.command)
        self.stub.seen.append(read or parts.path)
        if read in self.stub.slow:
            time.sleep(self.stub.slow[read])
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("Request-Id", "req_stub")
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(raw)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))  # keep the stream in step
        self.do_GET()
