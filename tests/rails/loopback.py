"""Loopback servers that keep connections alive, count them, and see requests overlap.

The rail stubs (paypal_stub, shopify_stub, woo_stub, stripe_facts_stub) answer HTTP/1.0 by
default, closing every connection. :func:`keepalive_server` serves a stub's handler over
HTTP/1.1 instead (every stub answer carries Content-Length) and counts the TCP connections it
accepts, so a test can tell a client that reuses its connection from one that opens a new one
per call. :class:`Overlap` lets a handler record how many requests are in flight at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseServer
from typing import Any, Generic, TypeVar

S = TypeVar("S")

# How often a serving loop looks for shutdown(): the standard library's 0.5 s is how long every
# shutdown() waited, and every test with a loopback server paid it in its teardown.
POLL_INTERVAL = 0.005


def start_serving(server: BaseServer) -> threading.Thread:
    """Run ``server.serve_forever`` in a daemon thread that stops soon after ``shutdown()``."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL}, daemon=True
    )
    thread.start()
    return thread


class CountingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.connections = 0
        self._count = threading.Lock()

    def get_request(self) -> Any:
        accepted = super().get_request()
        with self._count:
            self.connections += 1
        return accepted

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Overlap:
    """Requests in flight: each waits (at most ``hold`` seconds) for a second one to arrive,
    so clients that send at once are seen at once; ``most`` is the largest number seen."""

    def __init__(self, hold: float = 1.0) -> None:
        self.hold = hold
        self.now = 0
        self.most = 0
        self._cond = threading.Condition()

    @contextmanager
    def request(self) -> Iterator[None]:
        with self._cond:
            self.now += 1
            self.most = max(self.most, self.now)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self.now >= 2, timeout=self.hold)
        try:
            yield
        finally:
            with self._cond:
                self.now -= 1


def overlapping(base: type[BaseHTTPRequestHandler], overlap: Overlap) -> type:
    """``base`` with every GET and POST counted by ``overlap``."""

    class Handler(base):  # type: ignore[valid-type,misc]
        def do_GET(self) -> None:
            with overlap.request():
                super().do_GET()

        def do_POST(self) -> None:
            with overlap.request():
                super().do_POST()

    return Handler


@contextmanager
def keepalive_server(base: type[BaseHTTPRequestHandler], **attrs: Any) -> Iterator[CountingServer]:
    """Serve ``base`` (with class attributes ``attrs``, e.g. ``stub=``) over HTTP/1.1."""
    handler = type("Handler", (base,), {"protocol_version": "HTTP/1.1", **attrs})
    server = CountingServer(handler)
    start_serving(server)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a loopback port in a thread; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    start_serving(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class StubServer(Generic[S]):
    """``with``: a stub's ``handler`` (given the stub as its ``stub`` class attribute) served on
    a loopback port in a thread, the stub's ``url`` set to the server's (plus ``path``); the
    block gets the stub. Each rail stub module's ``StubServer`` is one of these."""

    def __init__(self, stub: S, handler: type[BaseHTTPRequestHandler], path: str = "") -> None:
        self.stub = stub
        self.server = ThreadingHTTPServer(
            ("127.0.0.1", 0), type("Handler", (handler,), {"stub": stub})
        )
        self.server.daemon_threads = True
        stub.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"  # type: ignore[attr-defined]

    def __enter__(self) -> S:
        start_serving(self.server)
        return self.stub

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
