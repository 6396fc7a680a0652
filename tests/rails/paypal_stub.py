"""A loopback PayPal REST API with state, answering in PayPal's shapes.

- ``POST /v1/oauth2/token`` (HTTP basic client id + secret, ``grant_type=client_credentials``)
  → ``{"access_token", "token_type": "Bearer", "expires_in"}``; 401 ``invalid_client``.
- ``GET /v2/payments/captures/{id}`` → the capture with ``create_time``, ``payee``
  (``merchant_id``: the merchant account it was paid to) and ``links`` (``self``, ``refund``,
  ``up`` → its checkout order).
- ``GET /v1/reporting/balances`` → ``{"balances", "account_id"}``: the payer id of the merchant
  the credentials act on (403 ``NOT_AUTHORIZED`` for an app without the balances scope:
  ``no_balances``).

Each REST app (client id and secret) is one merchant's (``MERCHANT_ID`` for ``CLIENT_ID``;
``add_app`` adds another merchant's). A capture is its merchant's alone: PayPal answers 404
``RESOURCE_NOT_FOUND`` to another merchant's token for it, its order and its refunds, and to a
refund of it (its disputes are not kept apart here).
- ``POST /v2/payments/captures/{id}/refund`` with ``PayPal-Request-Id``: the same id answers
  the same refund (200 the second time, 201 the first) and never refunds twice; 422
  ``UNPROCESSABLE_ENTITY`` with ``details[].issue`` for over-refunds and 180-day-old captures.
- ``GET /v2/checkout/orders/{id}`` → ``purchase_units[].payments.{captures,refunds}``.
- ``GET /v2/payments/refunds/{id}`` → one refund, made by the refund call or held with
  ``add_refund`` (a refund made in PayPal's dashboard); 404 ``RESOURCE_NOT_FOUND`` otherwise.
- ``POST /v1/notifications/verify-webhook-signature`` → ``verification_status``.
- ``GET /v1/customer/disputes?disputed_transaction_id={capture id}&page_size=`` → ``items``:
  each dispute's summary (no ``dispute_outcome``, as PayPal's list gives), a page at a time
  (``page_size``, 10 unless asked) with a ``next`` link while there are more (its
  ``next_page_token``), and ``GET /v1/customer/disputes/{id}``
  → the whole dispute, its outcome included once resolved (``add_dispute``).

Scripted failures for the refund call (``fail_next``): ``"429"``, ``"500"``, ``"503"``, an
issue name (422), or ``"slow"`` (the refund is made, then the answer comes after
``slow_seconds``). ``retry_after``: when set, a scripted 429 or 503 carries it as its
``Retry-After`` header (delta-seconds or an HTTP-date, or anything a broken server sends).
``slow_before_refund_seconds`` makes the next refund wait that long *before* it is made; while
it waits, a request under the same ``PayPal-Request-Id`` is answered 409 ``RESOURCE_CONFLICT``
with the issue ``PREVIOUS_REQUEST_IN_PROGRESS``, as PayPal answers two simultaneous requests
under one id.
``fail_next_lookup``: scripted statuses (``"429"``, ``"503"``) for the next reads of one
refund or dispute by id (``lookups`` lists the paths read).
An expired or unknown bearer token is 401 ``invalid_token``.

``reshape(path, edit, status=..., times=...)``: PayPal answering oddly (a partial outage, an
API change). An answer to a request whose path (without the query) starts with ``path`` is sent
as ``edit`` returns it, given the answer the stub would send (a copy): an edited JSON value, or
None for an empty body; ``status`` replaces the answer's status; ``times``: only the next so
many answers (every one when 0).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl

from tests.rails.loopback import StubServer as LoopbackServer

CLIENT_ID = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789sillclient"
CLIENT_SECRET = "EFgHiJkLmNoPqRsTuVwXyZ0123456789sillsecretvalue"
WEBHOOK_ID = "8PT597110X687430LKGECATA"
SIGNING_KEY = b"paypal-stub-cert"
# PayPal's payer ids of merchant accounts (13 of 2-9 and A-Z without I and O).
MERCHANT_ID = "7KNGBPH2U58GQ"


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Currencies PayPal takes and writes without decimals: "1000" HUF, never "1000.00" (a decimal
# amount is refused, DECIMALS_NOT_SUPPORTED, as PayPal's currency codes reference says).
NO_DECIMALS = ("JPY", "HUF", "TWD")


def _value(amount: Decimal, currency: str) -> str:
    places = 0 if currency in NO_DECIMALS else 2
    return format(amount.quantize(Decimal(1).scaleb(-places)), "f")


@dataclass
class StubCapture:
    id: str
    order_id: str
    amount: Decimal
    currency: str = "USD"
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC) - timedelta(days=3))
    refunds: list[dict[str, Any]] = field(default_factory=list)
    # False: the capture's links name no checkout order (an ``up`` link is left out).
    order_link: bool = True
    # The merchant account it was paid to (its ``payee``): only that merchant's apps see it.
    merchant: str = MERCHANT_ID

    def refunded(self) -> Decimal:
        total = Decimal(0)
        for refund in self.refunds:
            # A refund a test gave another shape than PayPal's counts nothing here.
            with contextlib.suppress(KeyError, TypeError, InvalidOperation):
                if refund.get("status") != "CANCELLED":
                    total += Decimal(refund["amount"]["value"])
        return total


class PayPalStub:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.url = ""
        self.captures: dict[str, StubCapture] = {}
        # token -> (expiry, the client id of the app it was given to)
        self.tokens: dict[str, tuple[float, str]] = {}
        # client id -> (secret, merchant id): the REST apps PayPal knows.
        self.apps: dict[str, tuple[str, str]] = {CLIENT_ID: (CLIENT_SECRET, MERCHANT_ID)}
        # Client ids of apps without the balances scope (GET /v1/reporting/balances is 403).
        self.no_balances: set[str] = set()
        self.token_lifetime = 32400
        self.token_requests = 0
        self.by_request_id: dict[str, dict[str, Any]] = {}
        self.refund_calls: list[dict[str, Any]] = []
        self.fail_next: list[str] = []
        self.retry_after = ""
        self.slow_seconds = 2.0
        self.slow_before_refund_seconds = 0.0
        self.in_flight: set[str] = set()
        self.verifications: list[dict[str, Any]] = []
        self.disputes: dict[str, dict[str, Any]] = {}
        # Scripted answers to the next reads of one refund or dispute ("429", "503").
        self.fail_next_lookup: list[str] = []
        self.lookups: list[str] = []
        # [path prefix, edit, status or 0, answers left or 0]: odd answers (reshape).
        self.reshaped: list[list[Any]] = []

    # --- state for tests --------------------------------------------------------------------

    def reshape(
        self, path: str, edit: Callable[[Any], Any], *, status: int = 0, times: int = 0
    ) -> None:
        """Answer requests under ``path`` with ``edit(answer)`` (see the module docstring)."""
        with self.lock:
            self.reshaped.append([path, edit, status, times])

    def reshaped_answer(self, path: str, status: int, body: Any) -> tuple[int, Any]:
        for shape in list(self.reshaped):
            prefix, edit, new_status, left = shape
            if path.partition("?")[0].startswith(prefix):
                body = edit(json.loads(json.dumps(body)))
                status = new_status or status
                if left == 1:
                    self.reshaped.remove(shape)
                shape[3] = left - 1 if left else 0
        return status, body

    def add_app(self, *, client_id: str, secret: str, merchant: str) -> None:
        """Another REST app, of ``merchant`` (another merchant account, or the same one's)."""
        with self.lock:
            self.apps[client_id] = (secret, merchant)

    def add_capture(
        self,
        *,
        amount: str = "89.00",
        currency: str = "USD",
        days_ago: int = 3,
        merchant: str = MERCHANT_ID,
    ):
        with self.lock:
            n = len(self.captures) + 1
            capture = StubCapture(
                id=f"{n:02d}CAPTURE{secrets.token_hex(4).upper()}",
                order_id=f"{n:02d}ORDER{secrets.token_hex(4).upper()}",
                amount=Decimal(amount),
                currency=currency,
                created_at=datetime.now(UTC) - timedelta(days=days_ago),
                merchant=merchant,
            )
            self.captures[capture.id] = capture
            return capture

    def add_dispute(
        self, capture: StubCapture, *, status: str = "OPEN", outcome: str = "", value: str = ""
    ) -> dict[str, Any]:
        """A dispute of ``capture`` in Customer Disputes v1's shape (``outcome``: the
        ``dispute_outcome.outcome_code`` of a resolved one)."""
        with self.lock:
            dispute_id = f"PP-D-{len(self.disputes) + 27000}"
            now = _iso(datetime.now(UTC))
            dispute: dict[str, Any] = {
                "dispute_id": dispute_id,
                "create_time": now,
                "update_time": now,
                "disputed_transactions": [{"seller_transaction_id": capture.id}],
                "reason": "MERCHANDISE_OR_SERVICE_NOT_RECEIVED",
                "status": status,
                "dispute_amount": {
                    "currency_code": capture.currency,
                    "value": value or _value(capture.amount, capture.currency),
                },
                "dispute_life_cycle_stage": "CHARGEBACK",
                "links": [
                    {
                        "href": f"{self.url}/v1/customer/disputes/{dispute_id}",
                        "rel": "self",
                        "method": "GET",
                    }
                ],
            }
            if outcome:
                dispute["dispute_outcome"] = {"outcome_code": outcome}
            self.disputes[dispute_id] = dispute
            return dispute

    def add_refund(
        self,
        capture: StubCapture,
        *,
        value: str,
        status: str = "COMPLETED",
        refund_id: str = "",
        custom_id: str = "",
        when: str = "",
    ) -> dict[str, Any]:
        """A refund of ``capture`` made in PayPal, not through the stub's refund call (the
        merchant's dashboard, say); its order lists it and ``GET /v2/payments/refunds/{id}``
        answers it."""
        with self.lock:
            refund_id = refund_id or f"RF{secrets.token_hex(6).upper()}"
            when = when or _iso(datetime.now(UTC))
            refund: dict[str, Any] = {
                "id": refund_id,
                "status": status,
                "amount": {"value": value, "currency_code": capture.currency},
                **({"custom_id": custom_id} if custom_id else {}),
                "create_time": when,
                "update_time": when,
                "links": [
                    {
                        "href": f"{self.url}/v2/payments/refunds/{refund_id}",
                        "rel": "self",
                        "method": "GET",
                    },
                    {
                        "href": f"{self.url}/v2/payments/captures/{capture.id}",
                        "rel": "up",
                        "method": "GET",
                    },
                ],
            }
            capture.refunds.append(refund)
            return refund

    def held_refund(self, refund_id: str) -> dict[str, Any] | None:
        for capture in self.captures.values():
            for refund in capture.refunds:
                if refund["id"] == refund_id:
                    return refund
        return None

    def put_dispute(self, dispute: dict[str, Any]) -> None:
        """Hold ``dispute`` (Customer Disputes v1's shape) as given, replacing one of its id."""
        with self.lock:
            self.disputes[dispute["dispute_id"]] = json.loads(json.dumps(dispute))

    def disputes_of(
        self, capture_id: str, *, page_size: int = 10, token: str = ""
    ) -> dict[str, Any]:
        """One page of the capture's disputes (``page_size``, PayPal's default 10), from the
        ``next_page_token`` the previous page's ``next`` link carried."""
        summary = ("dispute_id", "create_time", "update_time", "reason", "status",
                   "dispute_amount", "links")  # fmt: skip
        items = [
            {key: d[key] for key in summary if key in d}
            for d in self.disputes.values()
            if any(t["seller_transaction_id"] == capture_id for t in d["disputed_transactions"])
        ]
        start = int(token or 0)
        end = start + page_size
        query = f"disputed_transaction_id={capture_id}&page_size={page_size}"
        links = [
            {"href": f"{self.url}/v1/customer/disputes?{query}", "rel": "self", "method": "GET"}
        ]
        if end < len(items):
            links.append(
                {
                    "href": f"{self.url}/v1/customer/disputes?{query}&next_page_token={end}",
                    "rel": "next",
                    "method": "GET",
                }
            )
        return {"items": items[start:end], "links": links}

    def expire_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()

    def sign(self, *, transmission_id: str, transmission_time: str, body: bytes) -> str:
        """The signature PayPal would send for ``body`` (the stub's stand-in for its cert)."""
        message = f"{transmission_id}|{transmission_time}|{WEBHOOK_ID}|{zlib.crc32(body)}"
        digest = hmac.new(SIGNING_KEY, message.encode(), hashlib.sha256).digest()
        return base64.b64encode(digest).decode()

    # --- resources --------------------------------------------------------------------------

    def capture_json(self, capture: StubCapture) -> dict[str, Any]:
        base = self.url
        refunded = capture.refunded()
        status = (
            "REFUNDED"
            if refunded >= capture.amount
            else "PARTIALLY_REFUNDED"
            if refunded
            else "COMPLETED"
        )
        return {
            "id": capture.id,
            "status": status,
            "amount": {
                "currency_code": capture.currency,
                "value": _value(capture.amount, capture.currency),
            },
            "final_capture": True,
            "payee": {
                "email_address": f"sb-{capture.merchant.lower()}@business.example.com",
                "merchant_id": capture.merchant,
            },
            "create_time": _iso(capture.created_at),
            "update_time": _iso(capture.created_at),
            "links": [
                {
                    "href": f"{base}/v2/payments/captures/{capture.id}",
                    "rel": "self",
                    "method": "GET",
                },
                {
                    "href": f"{base}/v2/payments/captures/{capture.id}/refund",
                    "rel": "refund",
                    "method": "POST",
                },
                {
                    "href": f"{base}/v2/checkout/orders/{capture.order_id}",
                    "rel": "up",
                    "method": "GET",
                },
            ][: None if capture.order_link else 2],
        }

    def order_json(self, order_id: str) -> dict[str, Any] | None:
        captures = [c for c in self.captures.values() if c.order_id == order_id]
        if not captures:
            return None
        capture = captures[0]
        return {
            "id": order_id,
            "status": "COMPLETED",
            "intent": "CAPTURE",
            "purchase_units": [
                {
                    "reference_id": "default",
                    "payments": {
                        "captures": [self.capture_json(capture)],
                        "refunds": list(capture.refunds),
                    },
                }
            ],
        }

    def refund(self, capture: StubCapture, body: dict[str, Any], request_id: str):
        """Returns (status, json) as PayPal would."""
        if request_id and request_id in self.by_request_id:
            return 200, self.by_request_id[request_id]
        amount = body.get("amount") or {
            "value": _value(capture.amount - capture.refunded(), capture.currency),
            "currency_code": capture.currency,
        }
        if datetime.now(UTC) - capture.created_at > timedelta(days=180):
            return 422, _unprocessable("REFUND_TIME_LIMIT_EXCEEDED", "too old to refund")
        if amount.get("currency_code") != capture.currency:
            return 422, _unprocessable("REFUND_CAPTURE_CURRENCY_MISMATCH", "currency mismatch")
        if capture.currency in NO_DECIMALS and "." in str(amount.get("value")):
            return 422, _unprocessable(
                "DECIMALS_NOT_SUPPORTED", "Currency does not support decimals."
            )
        value = Decimal(str(amount.get("value")))
        if capture.refunded() >= capture.amount:
            return 422, _unprocessable("CAPTURE_FULLY_REFUNDED", "already fully refunded")
        if value <= 0 or capture.refunded() + value > capture.amount:
            return 422, _unprocessable(
                "REFUND_AMOUNT_EXCEEDED",
                "The refund amount must be less than or equal to "
                "the capture amount that has not yet been refunded.",
            )
        refund_id = f"RF{secrets.token_hex(6).upper()}"
        now = _iso(datetime.now(UTC))
        refund = {
            "id": refund_id,
            "status": "COMPLETED",
            "amount": {"value": _value(value, capture.currency), "currency_code": capture.currency},
            "custom_id": body.get("custom_id"),
            "note_to_payer": body.get("note_to_payer"),
            "create_time": now,
            "update_time": now,
            "links": [
                {
                    "href": f"{self.url}/v2/payments/refunds/{refund_id}",
                    "rel": "self",
                    "method": "GET",
                },
                {
                    "href": f"{self.url}/v2/payments/captures/{capture.id}",
                    "rel": "up",
                    "method": "GET",
                },
            ],
        }
        capture.refunds.append(refund)
        if request_id:
            self.by_request_id[request_id] = refund
        return 201, refund


def _unprocessable(issue: str, description: str) -> dict[str, Any]:
    return {
        "name": "UNPROCESSABLE_ENTITY",
        "message": "The requested action could not be performed, semantically incorrect, or "
        "failed business validation.",
        "debug_id": secrets.token_hex(6),
        "details": [{"issue": issue, "description": description}],
    }


def _in_progress() -> dict[str, Any]:
    return {
        "name": "RESOURCE_CONFLICT",
        "message": "The server has detected a conflict while processing this request.",
        "debug_id": secrets.token_hex(6),
        "details": [
            {
                "issue": "PREVIOUS_REQUEST_IN_PROGRESS",
                "description": "A previous request on this resource is currently in progress. "
                "Please wait for sometime and try again. It is best to space out the initial "
                "and the subsequent request(s) to avoid receiving this error.",
            }
        ],
    }


class _Handler(BaseHTTPRequestHandler):
    stub: PayPalStub
    client_id = ""  # the app whose token the request carries (_authorized)
    merchant = ""  # the merchant that app acts on

    def _mine(self, capture: StubCapture | None) -> StubCapture | None:
        """``capture`` when the token's merchant was paid it; PayPal shows no one else."""
        return capture if capture is not None and capture.merchant == self.merchant else None

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        status, body = self.stub.reshaped_answer(self.path, status, body)
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("Paypal-Debug-Id", secrets.token_hex(6))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        # Sill may have stopped waiting (its timeout): then PayPal's answer is lost on the way.
        with contextlib.suppress(BrokenPipeError):
            self.wfile.write(raw)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _authorized(self) -> bool:
        """Whether the bearer token is live; ``self.merchant`` is then its app's merchant."""
        header = self.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ")
        with self.stub.lock:
            expires, self.client_id = self.stub.tokens.get(token, (0.0, ""))
            self.merchant = self.stub.apps.get(self.client_id, ("", ""))[1]
        if not header.startswith("Bearer ") or not self.merchant or expires < time.time():
            self._send(
                401,
                {
                    "error": "invalid_token",
                    "error_description": "Token signature verification failed",
                },
            )
            return False
        return True

    def do_POST(self) -> None:
        stub = self.stub
        raw = self._body()
        if self.path == "/v1/oauth2/token":
            given = self.headers.get("Authorization", "")
            with stub.lock:
                apps = dict(stub.apps)
            client_id = secret = ""
            with contextlib.suppress(ValueError):
                client_id, _, secret = (
                    base64.b64decode(given.removeprefix("Basic ")).decode().partition(":")
                )
            known = apps.get(client_id)
            if (
                not given.startswith("Basic ")
                or known is None
                or not hmac.compare_digest(known[0], secret)
                or raw != b"grant_type=client_credentials"
            ):
                self._send(
                    401,
                    {
                        "error": "invalid_client",
                        "error_description": "Client Authentication failed",
                    },
                )
                return
            token = "A21AA" + secrets.token_urlsafe(24)
            with stub.lock:
                stub.token_requests += 1
                stub.tokens[token] = (time.time() + stub.token_lifetime, client_id)
                scopes = ["https://uri.paypal.com/services/payments/refund"]
                if client_id not in stub.no_balances:
                    scopes.append("https://uri.paypal.com/services/reporting/balances/read")
            self._send(
                200,
                {
                    "scope": " ".join(scopes),
                    "access_token": token,
                    "token_type": "Bearer",
                    "app_id": "APP-80W284485P519543T",
                    "expires_in": stub.token_lifetime,
                    "nonce": secrets.token_hex(8),
                },
            )
            return
        if not self._authorized():
            return
        if self.path == "/v1/notifications/verify-webhook-signature":
            body = json.loads(raw)
            with stub.lock:
                stub.verifications.append(body)
            event = json.dumps(body.get("webhook_event"), separators=(",", ":")).encode()
            # PayPal signs the bytes it sent; Sill sends the event back as it parsed it.
            good = body.get("webhook_id") == WEBHOOK_ID and hmac.compare_digest(
                str(body.get("transmission_sig")),
                stub.sign(
                    transmission_id=str(body.get("transmission_id")),
                    transmission_time=str(body.get("transmission_time")),
                    body=event,
                ),
            )
            self._send(200, {"verification_status": "SUCCESS" if good else "FAILURE"})
            return
        parts = self.path.strip("/").split("/")
        if len(parts) == 5 and parts[:3] == ["v2", "payments", "captures"] and parts[4] == "refund":
            request_id = self.headers.get("PayPal-Request-Id", "")
            body = json.loads(raw or b"{}")
            with stub.lock:
                stub.refund_calls.append({"request_id": request_id, "body": body})
                script = stub.fail_next.pop(0) if stub.fail_next else ""
                capture = self._mine(stub.captures.get(parts[3]))
                wait = {"Retry-After": stub.retry_after} if stub.retry_after else {}
            if script == "429":
                self._send(
                    429, {"name": "RATE_LIMIT_REACHED", "message": "Too many requests."}, wait
                )
                return
            if script == "503":
                self._send(
                    503,
                    {"name": "SERVICE_UNAVAILABLE", "message": "Service Unavailable."},
                    wait,
                )
                return
            if script == "500":
                self._send(
                    500,
                    {
                        "name": "INTERNAL_SERVER_ERROR",
                        "message": "An internal server error occurred.",
                    },
                )
                return
            if script and script != "slow":
                self._send(422, _unprocessable(script, "scripted"))
                return
            if capture is None:
                self._send(
                    404,
                    {"name": "RESOURCE_NOT_FOUND", "details": [{"issue": "INVALID_RESOURCE_ID"}]},
                )
                return
            with stub.lock:
                in_flight = request_id in stub.in_flight
                delay, stub.slow_before_refund_seconds = stub.slow_before_refund_seconds, 0.0
                if delay and request_id:
                    stub.in_flight.add(request_id)
            if in_flight:
                self._send(409, _in_progress())
                return
            if delay:
                time.sleep(delay)
            with stub.lock:
                stub.in_flight.discard(request_id)
                status, answer = stub.refund(capture, body, request_id)
            if script == "slow":
                time.sleep(stub.slow_seconds)
            self._send(status, answer)
            return
        self._send(404, {"name": "RESOURCE_NOT_FOUND"})

    def do_GET(self) -> None:
        if not self._authorized():
            return
        path, _, query = self.path.partition("?")
        parts = path.strip("/").split("/")
        with self.stub.lock:
            if parts == ["v1", "reporting", "balances"]:
                self._balances()
                return
            if parts == ["v1", "customer", "disputes"]:
                asked = dict(parse_qsl(query))
                self._send(
                    200,
                    self.stub.disputes_of(
                        asked.get("disputed_transaction_id", ""),
                        page_size=int(asked.get("page_size") or 10),
                        token=asked.get("next_page_token", ""),
                    ),
                )
                return
            if len(parts) == 4 and parts[:3] in (
                ["v1", "customer", "disputes"],
                ["v2", "payments", "refunds"],
            ):
                self.stub.lookups.append(path)
                script = self.stub.fail_next_lookup.pop(0) if self.stub.fail_next_lookup else ""
                if script:
                    self._send(
                        int(script),
                        {"name": "SERVICE_UNAVAILABLE", "message": "Service Unavailable."},
                    )
                    return
            if len(parts) == 4 and parts[:3] == ["v2", "payments", "refunds"]:
                refund = self.stub.held_refund(parts[3])
                if refund is not None and self._mine(self._refunded(refund)):
                    self._send(200, refund)
                    return
            if len(parts) == 4 and parts[:3] == ["v1", "customer", "disputes"]:
                dispute = self.stub.disputes.get(parts[3])
                if dispute is not None:
                    self._send(200, dispute)
                    return
            if len(parts) == 4 and parts[:3] == ["v2", "payments", "captures"]:
                capture = self._mine(self.stub.captures.get(parts[3]))
                if capture is not None:
                    self._send(200, self.stub.capture_json(capture))
                    return
            if len(parts) == 4 and parts[:3] == ["v2", "checkout", "orders"]:
                order = self.stub.order_json(parts[3])
                paid = [c for c in self.stub.captures.values() if c.order_id == parts[3]]
                if order is not None and self._mine(paid[0]):
                    self._send(200, order)
                    return
        self._send(
            404, {"name": "RESOURCE_NOT_FOUND", "details": [{"issue": "INVALID_RESOURCE_ID"}]}
        )

    def _refunded(self, refund: dict[str, Any]) -> StubCapture | None:
        for capture in self.stub.captures.values():
            if refund in capture.refunds:
                return capture
        return None

    def _balances(self) -> None:
        """``GET /v1/reporting/balances`` as PayPal answers it: the token's merchant's payer
        id in ``account_id``, or 403 for an app without the balances scope."""
        stub = self.stub
        if self.client_id in stub.no_balances:
            self._send(
                403,
                {
                    "name": "NOT_AUTHORIZED",
                    "message": "Authorization failed due to insufficient permissions.",
                    "debug_id": secrets.token_hex(6),
                    "details": [{"issue": "PERMISSION_DENIED"}],
                },
            )
            return
        now = _iso(datetime.now(UTC))
        self._send(
            200,
            {
                "balances": [
                    {
                        "currency": "USD",
                        "primary": True,
                        "total_balance": {"currency_code": "USD", "value": "0.00"},
                    }
                ],
                "account_id": self.merchant,
                "as_of_time": now,
                "last_refresh_time": now,
            },
        )


class StubServer(LoopbackServer[PayPalStub]):
    def __init__(self) -> None:
        super().__init__(PayPalStub(), _Handler)
