"""A loopback Stripe answering ``GET /v1/events`` (events.list) in Stripe's wire format.

localstripe has no events endpoint and emits no refund or dispute events, so replay tests
point a rail account's ``api_base`` at ``serving_events_stub()`` and drive it through the real stripe SDK
(``StripeRail.events_since``). What it does, as Stripe documents it:

- ``Authorization: Bearer <key>``: any other key is ``401`` with an ``invalid_request_error``
  whose message quotes the key (Stripe masks part of it; quoting all of it proves Sill
  scrubs it).
- newest first; ``created[gte|gt|lte|lt]``; ``types[]`` or ``types[N]`` (at most 20, else
  400); ``limit`` 1..100 (default 10, else 400); ``starting_after`` = the id of the last
  event of the previous page; ``has_more``.
- every request is recorded (path, query, headers), e.g. to check ``Stripe-Account``.

It also lists a charge's refunds and disputes (``GET /v1/refunds?charge=``,
``GET /v1/disputes?charge=``: ``refunds.list``, ``disputes.list``) from ``refunds`` and
``disputes``, held as given (a dispute Stripe's API might send oddly shaped, say), one page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.rails.loopback import start_serving

KEY = "sk_test_sill_webhooks_0001"  # what tests.rails.stripe_events.stripe_account stores


@dataclass
class Seen:
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]

    def values(self, name: str) -> list[str]:
        """Every value of ``name``; ``types`` matches ``types[]`` and ``types[0]``…"""
        return [v for k, v in self.query if k == name or k.startswith(name + "[")]


@dataclass
class EventsStub:
    url: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    key: str = KEY
    refunds: list[dict[str, Any]] = field(default_factory=list)
    disputes: list[dict[str, Any]] = field(default_factory=list)

    def add(self, *events: dict[str, Any]) -> None:
        self.events.extend(events)

    def answer(self, path: str, query: list[tuple[str, str]], auth: str) -> tuple[int, Any]:
        if auth != f"Bearer {self.key}":
            given = auth.removeprefix("Bearer ")
            return 401, _error(f"Invalid API Key provided: {given}")
        params = dict(query)
        listed_by_charge = {"/v1/refunds": self.refunds, "/v1/disputes": self.disputes}
        if (held := listed_by_charge.get(urlsplit(path).path)) is not None:
            data = [o for o in held if o.get("charge") == params.get("charge")]
            return 200, {
                "object": "list",
                "url": urlsplit(path).path,
                "has_more": False,
                "data": data,
            }
        if urlsplit(path).path != "/v1/events":
            return 404, _error(f"Unrecognized request URL (GET: {urlsplit(path).path}).")
        types = [v for k, v in query if k == "types[]" or k.startswith("types[")]
        if len(types) > 20:
            return 400, _error("types: at most 20 values", param="types")
        try:
            limit = int(params.get("limit", "10"))
        except ValueError:
            return 400, _error("Invalid integer: limit", param="limit")
        if not 1 <= limit <= 100:
            return 400, _error("limit must be between 1 and 100", param="limit")
        bounds = {
            op: int(params[f"created[{op}]"])
            for op in ("gte", "gt", "lte", "lt")
            if f"created[{op}]" in params
        }
        listed = sorted(self.events, key=lambda e: (e["created"], e["id"]), reverse=True)
        listed = [e for e in listed if _within(e["created"], bounds)]
        if types:
            listed = [e for e in listed if e["type"] in types]
        after = params.get("starting_after")
        if after:
            ids = [e["id"] for e in listed]
            if after not in ids:
                return 400, _error(f"No such event: '{after}'", param="starting_after")
            listed = listed[ids.index(after) + 1 :]
        page = listed[:limit]
        return 200, {
            "object": "list",
            "url": "/v1/events",
            "has_more": len(listed) > limit,
            "data": page,
        }


def _within(created: int, bounds: dict[str, int]) -> bool:
    return (
        created >= bounds.get("gte", created)
        and created > bounds.get("gt", created - 1)
        and created <= bounds.get("lte", created)
        and created < bounds.get("lt", created + 1)
    )


def _error(message: str, *, param: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": "invalid_request_error", "message": message}
    if param:
        error["param"] = param
    return {"error": error}


@contextmanager
def serving_events_stub() -> Iterator[EventsStub]:
    """A stub listening on a free loopback port (``stub.url``) until the block ends."""
    stub = EventsStub()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qsl(urlsplit(self.path).query, keep_blank_values=True)
            stub.seen.append(Seen(self.path, query, dict(self.headers)))
            status, body = stub.answer(self.path, query, self.headers.get("Authorization", ""))
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Request-Id", f"req_stub_{len(stub.seen)}")
            self.end_headers()
            self.wfile.write(payload)

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
