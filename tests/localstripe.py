"""localstripe (a fake Stripe server) as a subprocess for tests.

Use it from any test package by importing the fixture into that package's conftest::

    from tests.localstripe import localstripe_url  # noqa: F401

``localstripe_url`` is the base URL (``http://127.0.0.1:<port>``) of one server per test
session (started on first use, stopped at the end), emptied before every test. Point a rail
at it with ``StripeRail(secret_key="sk_test_…", api_base=localstripe_url)`` or a
``RailAccount(rail="stripe", api_base=localstripe_url)``.

localstripe writes its whole state to the fixed path ``/tmp/localstripe.pickle`` after every
POST, whatever its working directory, so parallel instances (xdist workers, two checkouts)
would clobber each other's file, and a file left by another user makes every POST fail.
The server is therefore started through a tiny bootstrap that turns that dump off: with
``--from-scratch`` the file is never read anyway.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCALSTRIPE_VENV = ROOT / ".localstripe-venv"
LOCALSTRIPE_BIN = LOCALSTRIPE_VENV / "bin" / "localstripe"

_BOOTSTRAP = (
    "import localstripe.resources as r\n"
    "r.Store.dump_to_disk = lambda self: None\n"
    "from localstripe.server import start\n"
    "start()\n"
)


class LocalStripe:
    """One running localstripe process."""

    def __init__(self, workdir: Path) -> None:
        if not LOCALSTRIPE_BIN.exists():
            raise RuntimeError(
                f"localstripe is not installed at {LOCALSTRIPE_BIN}: run `make localstripe` "
                "(or `make test`, which installs it)"
            )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "localstripe.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                str(LOCALSTRIPE_VENV / "bin" / "python"),
                "-c",
                _BOOTSTRAP,
                "--port",
                str(self.port),
                "--from-scratch",
            ],
            cwd=workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_until_ready()

    def reset(self) -> None:
        """Forget every object (customers, intents, charges, refunds)."""
        request = urllib.request.Request(f"{self.url}/_config/data", method="DELETE")
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log.close()

    def _wait_until_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                self._log.close()
                raise RuntimeError(
                    f"localstripe exited with {self.process.returncode}:\n{self._log_tail()}"
                )
            try:
                self.reset()
                return
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"localstripe did not answer on {self.url} within {timeout:.0f}s:\n"
                        f"{self._log_tail()}"
                    ) from None
                time.sleep(0.05)

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_server: LocalStripe | None = None


def _session_server(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> LocalStripe:
    # One process per test session, started lazily: sessions that never touch Stripe pay
    # nothing. A module global plus config.add_cleanup (rather than a second, session-scoped
    # fixture) keeps the import into other conftests to a single name.
    global _server
    if _server is None or _server.process.poll() is not None:
        _server = LocalStripe(tmp_path_factory.mktemp("localstripe"))

        def stop() -> None:
            global _server
            if _server is not None:
                _server.stop()
                _server = None

        config.add_cleanup(stop)
    return _server


@pytest.fixture
def localstripe_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """Base URL of a running, freshly emptied localstripe."""
    server = _session_server(request.config, tmp_path_factory)
    server.reset()
    return server.url
