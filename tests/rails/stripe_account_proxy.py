"""localstripe behind a loopback proxy that names each key's Stripe account.

localstripe has no ``GET /v1/account`` (it answers 404) and keeps one store for every key, so
two keys cannot be told apart there. Stripe answers ``GET /v1/account`` with the key's
account (``{"id": "acct_…", "object": "account"}``, API reference: Accounts, "Retrieve
account"). The proxy answers that one read from ``accounts`` (key → account id; any other
key is Stripe's 401) and passes every other request to localstripe as it came, noting the
refunds posted (``refund_posts``), so a test can say nothing was sent to Stripe, and the key
and the Idempotency-Key of each payment posted (``charge_keys``, ``charge_idempotency_keys``).
With ``charges_fail`` set, a payment posted is answered Stripe's 500 (without passing it on):
an attempt whose outcome Sill cannot know. With ``hold_charge_answers``, a payment posted is
passed on (localstripe charges the buyer) and its answer held back until that event is set
(``charges_held`` counts them): a caller killed meanwhile never hears that it charged. With
``hold_lookups``, a listing of payments is held back the same way (``lookups_held``): a slow
lookup.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.rails.loopback import StubServer as LoopbackServer

_PASSED_HEADERS = ("Authorization", "Content-Type", "Idempotency-Key", "Stripe-Version")


@dataclass
class AccountProxy:
    localstripe: str
    accounts: dict[str, str] = field(default_factory=dict)
    refund_posts: list[str] = field(default_factory=list)
    charge_keys: list[str] = field(default_factory=list)
    charge_idempotency_keys: list[str] = field(default_factory=list)
    charges_fail: bool = False
    hold_charge_answers: threading.Event | None = None
    charges_held: int = 0
    hold_lookups: threading.Event | None = None
    lookups_held: int = 0
    # The key of every request passed to localstripe, with its method and path (localstripe
    # keeps one store for all keys: a test asserts which key was asked, not what it saw).
    asked: list[tuple[str, str, str]] = field(default_factory=list)
    url: str = ""


class Handler(BaseHTTPRequestHandler):
    stub: AccountProxy
    protocol_version = "HTTP/1.0"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/v1/account":
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            account = self.stub.accounts.get(key)
            if account is None:
                error = {"type": "invalid_request_error", "message": "Invalid API Key provided"}
                self._send(401, json.dumps({"error": error}).encode())
            else:
                self._send(200, json.dumps({"id": account, "object": "account"}).encode())
            return
        answer = self._forward("GET")
        hold = self.stub.hold_lookups if self.path.split("?")[0] == "/v1/payment_intents" else None
        if hold is not None:
            self.stub.lookups_held += 1
        self._answer(*answer, hold=hold)

    def do_POST(self) -> None:
        if self.path.split("?")[0] == "/v1/refunds":
            self.stub.refund_posts.append(self.path)
        if self.path.split("?")[0] == "/v1/payment_intents":
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            self.stub.charge_keys.append(key)
            self.stub.charge_idempotency_keys.append(self.headers.get("Idempotency-Key", ""))
            if self.stub.charges_fail:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                error = {"type": "api_error", "message": "An unknown error occurred"}
                self._send(500, json.dumps({"error": error}).encode())
                return
            answer = self._forward("POST")  # localstripe has charged the buyer
            if self.stub.hold_charge_answers is not None:
                self.stub.charges_held += 1
            self._answer(*answer, hold=self.stub.hold_charge_answers)
            return
        self._pass("POST")

    def do_DELETE(self) -> None:
        self._pass("DELETE")

    def _pass(self, method: str) -> None:
        self._answer(*self._forward(method))

    def _forward(self, method: str) -> tuple[int, bytes]:
        """The request passed on to localstripe: its status and body."""
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        self.stub.asked.append((key, method, self.path.split("?")[0]))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        request = urllib.request.Request(
            self.stub.localstripe + self.path, data=body, method=method
        )
        for name in _PASSED_HEADERS:
            if value := self.headers.get(name):
                request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read()

    def _answer(self, status: int, body: bytes, hold: threading.Event | None = None) -> None:
        if hold is None:
            self._send(status, body)
            return
        hold.wait(timeout=120)
        # The caller may have died waiting: then nobody is left to hear the answer.
        with contextlib.suppress(OSError):
            self._send(status, body)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class StubServer(LoopbackServer[AccountProxy]):
    def __init__(self, stub: AccountProxy) -> None:
        super().__init__(stub, Handler)
