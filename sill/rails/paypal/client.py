"""PayPal's REST API over plain HTTP (``requests``): an OAuth token, then JSON calls.

Why not ``paypal-server-sdk``: it has no base-URL option (tests would subclass its
configuration to reach a loopback stub), it retries on its own (a retry must keep Sill's
``PayPal-Request-Id``, and Sill decides when to retry), and Sill needs four endpoints.

The access token (client-credentials grant) is cached per API address and client, in this
process, until a minute before PayPal says it expires; one lock makes concurrent threads fetch
it once. A 401 on a call means the token was revoked early: it is dropped and fetched once
more. The client secret and tokens never appear in ``repr`` or in an error message.

Connections are kept alive: every client for the same API address and credentials uses one
``requests.Session`` of the process (sill.rails.keepalive), shared safely by its threads.

Errors become ``RailError``: 429 and 5xx retryable (a 429's or 503's ``Retry-After`` is the
error's ``retry_after``: a retry sooner is refused again); 422 ``UNPROCESSABLE_ENTITY``
permanent, keeping PayPal's issue code (``PayPalRefused.issue``) in the message; a timeout or
dropped connection after the request left is *ambiguous* for a write (PayPal may have acted)
and merely retryable for a read. So is, for a write, PayPal's word about the
``PayPal-Request-Id`` itself (a 409 such as ``PREVIOUS_REQUEST_IN_PROGRESS``: a resend while
PayPal still works on the first request, or an issue saying the id was used before): an
earlier request under the id exists and may have refunded, so it is no refusal of the refund.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from typing import Any

import requests

from sill.rails import keepalive
from sill.rails.base import (
    AmbiguousRailError,
    PermanentRailError,
    RailError,
    RateLimited,
    RefundWindowPassed,
    RetryableRailError,
)
from sill.rails.retry_after import wait_asked

SANDBOX_API = "https://api-m.sandbox.paypal.com"
LIVE_API = "https://api-m.paypal.com"
# Refreshed this long before PayPal's ``expires_in`` runs out, so a call never carries a
# token that expires on the way.
TOKEN_MARGIN_SECONDS = 60
# The longest token lifetime Sill believes (PayPal's are hours): a day.
MAX_TOKEN_SECONDS = 86400

# A REST app's id as PayPal names it in a token's answer ("APP-80W284485P519543T").
APP_ID = re.compile(r"[A-Za-z0-9-]{1,64}")

# PayPal issue codes with a stable Sill code of their own; any other issue is rail_declined.
ISSUE_CODES: dict[str, str] = {
    "REFUND_TIME_LIMIT_EXCEEDED": "refund_window_passed",
    "CAPTURE_FULLY_REFUNDED": "already_refunded",
    "REFUND_AMOUNT_EXCEEDED": "exceeds_refundable",
    "REFUND_CAPTURE_CURRENCY_MISMATCH": "currency_mismatch",
    "TRANSACTION_DISPUTED": "disputed",
    "REFUND_NOT_ALLOWED": "rail_declined",
}


# Issues about the PayPal-Request-Id, not about the refund: an earlier request under the id
# exists, and PayPal may have acted on it.
REQUEST_ID_ISSUES = frozenset(
    {"PREVIOUS_REQUEST_IN_PROGRESS", "DUPLICATE_REQUEST_ID", "PAYPAL_REQUEST_ID_PREVIOUSLY_USED"}
)


class PayPalRefused(PermanentRailError):
    """PayPal answered 4xx (422 ``UNPROCESSABLE_ENTITY``: a business rule): not retried."""

    def __init__(self, message: str, *, code: str | None = None, issue: str = "") -> None:
        super().__init__(message, code=code)
        self.issue = issue


class PayPalNotFound(PayPalRefused):
    """PayPal answered 404 to a read: it holds no such resource (for these credentials)."""


class PayPalUnreadable(RetryableRailError):
    """PayPal answered what Sill cannot read: no JSON object, or a field of another shape
    than PayPal's (a list that is a number, an id that is an object). A partial outage or a
    change in PayPal's API, so retryable; nothing is recorded from the answer, and a read it
    ends counts as not done (never as "nothing there")."""

    # Said once in the log by the rail, which knows whose account it is.
    logged = False


class _TokenCache:
    """Tokens by (API address, client id, secret digest): a new secret gets a new token."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, str, str], tuple[str, float]] = {}

    def get(self, key: tuple[str, str, str], fetch: Any) -> str:
        with self._lock:
            found = self._tokens.get(key)
            if found is not None and found[1] > time.monotonic():
                return found[0]
            token, expires_in = fetch()
            self._tokens[key] = (
                token,
                time.monotonic() + max(expires_in - TOKEN_MARGIN_SECONDS, 0),
            )
            return token

    def drop(self, key: tuple[str, str, str], token: str) -> None:
        with self._lock:
            if self._tokens.get(key, ("", 0.0))[0] == token:
                del self._tokens[key]

    def clear(self) -> None:
        with self._lock:
            self._tokens.clear()


TOKENS = _TokenCache()


class PayPalClient:
    def __init__(
        self, *, client_id: str, client_secret: str, api_base: str, timeout: float = 20.0
    ) -> None:
        self.client_id = client_id
        self.api_base = api_base.rstrip("/")
        self.timeout = timeout
        self._secret = client_secret
        digest = hashlib.sha256(client_secret.encode("utf-8")).hexdigest()
        self._session = keepalive.session_for("paypal", self.api_base, client_id, digest)
        self._cache_key = (self.api_base, client_id, digest)
        self._last_app_id = ""

    def has_credentials(self) -> bool:
        return bool(self.client_id and self._secret)

    def __repr__(self) -> str:
        return f"PayPalClient(api_base={self.api_base!r}, client_id={self.client_id!r})"

    # --- calls ------------------------------------------------------------------------------

    def get(self, path: str, *, doing: str, timeout: float | None = None) -> dict[str, Any]:
        """``timeout``: this read's own bound (a fact read's), instead of the client's."""
        return self._call("GET", path, doing=doing, write=False, timeout=timeout)

    def post(
        self, path: str, body: dict[str, Any], *, doing: str, request_id: str = ""
    ) -> dict[str, Any]:
        headers = {"Prefer": "return=representation"}
        if request_id:
            # PayPal's idempotency key: the same id answers the first call's result.
            headers["PayPal-Request-Id"] = request_id
        return self._call("POST", path, body=body, headers=headers, doing=doing, write=True)

    def sign_in(self) -> None:
        """Fetch (or reuse) the access token: Settings → Rails' check of the client id and
        secret. Raises ``PermanentRailError`` (``rail_auth_failed``) when PayPal refuses them."""
        TOKENS.get(self._cache_key, self._fetch_token)

    def fresh_sign_in(self) -> str:
        """Ask PayPal for a new access token, bypassing the cache (the connection check);
        the app id PayPal names in its answer, or "". Raises like :meth:`sign_in`."""
        self._fetch_token()
        return self._last_app_id

    def verify_webhook_signature(
        self, *, headers: dict[str, str], webhook_id: str, event: bytes
    ) -> bool:
        """PayPal's verdict on one delivery (``POST /v1/notifications/verify-webhook-signature``).

        ``event`` is the delivery's raw body, already read as strict JSON by the caller; it is
        sent back verbatim inside the request, never re-serialised, because PayPal checks the
        signature over the bytes it sent (a parser that reorders keys or rewrites numbers
        would turn a genuine delivery into a FAILURE). Raises ``RailError`` when PayPal gives
        no verdict; the caller answers 400 then too, and PayPal redelivers."""
        fields = {
            "auth_algo": headers["PAYPAL-AUTH-ALGO"],
            "cert_url": headers["PAYPAL-CERT-URL"],
            "transmission_id": headers["PAYPAL-TRANSMISSION-ID"],
            "transmission_sig": headers["PAYPAL-TRANSMISSION-SIG"],
            "transmission_time": headers["PAYPAL-TRANSMISSION-TIME"],
            "webhook_id": webhook_id,
        }
        head = json.dumps(fields)[:-1].encode("utf-8")
        raw = head + b', "webhook_event": ' + event.strip() + b"}"
        answer = self._call(
            "POST",
            "/v1/notifications/verify-webhook-signature",
            data=raw,
            headers={"Content-Type": "application/json"},
            doing="webhook verification",
            write=False,
        )
        return answer.get("verification_status") == "SUCCESS"

    def _call(
        self,
        method: str,
        path: str,
        *,
        doing: str,
        write: bool,
        body: dict[str, Any] | None = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        seconds = self.timeout if timeout is None else timeout
        for attempt in (1, 2):
            token = TOKENS.get(self._cache_key, lambda: self._fetch_token(seconds))
            try:
                response = self._session.request(
                    method,
                    self.api_base + path,
                    json=body,
                    data=data,
                    headers={
                        **(headers or {}),
                        "Authorization": f"Bearer {token}",
                        "Accept": "application/json",
                    },
                    timeout=seconds,
                )
            except requests.ConnectTimeout:
                raise RetryableRailError(f"PayPal {doing}: PayPal could not be reached") from None
            except (requests.Timeout, requests.ConnectionError):
                if write:
                    raise AmbiguousRailError(
                        f"PayPal {doing}: no answer from PayPal (it may have acted)"
                    ) from None
                raise RetryableRailError(f"PayPal {doing}: no answer from PayPal") from None
            if response.status_code == 401 and attempt == 1:
                # Revoked or expired early: fetch a new token once (a refund under the same
                # PayPal-Request-Id is still made at most once).
                TOKENS.drop(self._cache_key, token)
                continue
            if response.status_code < 300:
                return _json(response, doing)
            raise self._error(response, doing, write=write)
        raise AssertionError("unreachable")  # pragma: no cover

    def _fetch_token(self, timeout: float | None = None) -> tuple[str, float]:
        try:
            response = self._session.post(
                self.api_base + "/v1/oauth2/token",
                data={"grant_type": "client_credentials"},
                auth=(self.client_id, self._secret),
                headers={"Accept": "application/json"},
                timeout=self.timeout if timeout is None else timeout,
            )
        except requests.RequestException:
            # Nothing was refunded yet: only the token was asked for.
            raise RetryableRailError("PayPal sign-in: no answer from PayPal") from None
        if response.status_code in (400, 401, 403):
            raise PermanentRailError(
                "PayPal refused the client id and secret (invalid_client): enter them again "
                "on Settings → Rails.",
                code="rail_auth_failed",
            )
        if response.status_code >= 300:
            raise RetryableRailError(
                f"PayPal sign-in failed (HTTP {response.status_code})",
                retry_after=wait_asked(response.status_code, response.headers),
            )
        data = _json(response, "sign-in")
        app_id = data.get("app_id")
        # Shown on Settings → Rails: only an id as PayPal writes them ("APP-80W2…"), else none.
        self._last_app_id = app_id if isinstance(app_id, str) and APP_ID.fullmatch(app_id) else ""
        token = data.get("access_token")
        if not isinstance(token, str) or not token:
            raise RetryableRailError("PayPal sign-in answered no access token")
        expires_in = data.get("expires_in")
        # PayPal says 9 hours or so; a lifetime past a float (OverflowError), not a number, or
        # not positive is read as five minutes.
        if isinstance(expires_in, int | float) and 0 < expires_in < MAX_TOKEN_SECONDS:
            return token, float(expires_in)
        return token, 300.0

    def _error(self, response: requests.Response, doing: str, *, write: bool) -> RailError:
        status = response.status_code
        try:
            data = response.json()
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        name = str(data.get("name") or data.get("error") or f"HTTP {status}")
        # Only PayPal's words for the message: a body of another shape says none.
        listed = data.get("details")
        details = [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
        issue = str(details[0].get("issue") or "") if details else ""
        said = str(
            (details[0].get("description") if details else "")
            or data.get("message")
            or data.get("error_description")
            or ""
        )
        debug_id = str(data.get("debug_id") or "")
        words = f"{name}{': ' + issue if issue else ''}{' — ' + said if said else ''}"
        words = self._scrub(words + (f" (debug_id {debug_id})" if debug_id else ""))
        message = f"PayPal {doing} failed: {words}"
        if status == 429:
            return RateLimited(message, retry_after=wait_asked(status, response.headers))
        if status >= 500:
            return RetryableRailError(message, retry_after=wait_asked(status, response.headers))
        if status in (401, 403):
            return PermanentRailError(message, code="rail_auth_failed")
        if write and (status == 409 or issue in REQUEST_ID_ISSUES):
            return AmbiguousRailError(
                f"{message}. An earlier request under the same PayPal-Request-Id may have "
                "refunded: Sill looks it up and retries under the same id."
            )
        code = ISSUE_CODES.get(issue, "rail_declined")
        if status == 404 and not write:
            return PayPalNotFound(message, code=code, issue=issue)
        if code == "refund_window_passed":
            return RefundWindowPassed(
                f"{message}. PayPal no longer refunds this capture: refund the buyer in PayPal "
                "directly."
            )
        return PayPalRefused(message, code=code, issue=issue)

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "[redacted]") if self._secret else text


def _json(response: requests.Response, doing: str) -> dict[str, Any]:
    # Every call Sill makes is answered with a JSON object: an empty answer read as {} was a
    # checkout order without refunds.
    if not response.content:
        raise PayPalUnreadable(f"PayPal {doing}: the answer is empty")
    try:
        data = response.json()
    except ValueError:
        raise PayPalUnreadable(f"PayPal {doing}: the answer is not JSON") from None
    if not isinstance(data, dict):
        raise PayPalUnreadable(f"PayPal {doing}: the answer is not a JSON object")
    return data
