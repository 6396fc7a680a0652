"""A thin wrapper over the ShopifyAPI package: a session per call, GraphQL, access scopes.

ShopifyAPI keeps its session (site, access token) in per-thread class state, so every call
activates this client's session and clears it afterwards: a worker thread never carries one
site's token into another site's call. ``shopify.GraphQL`` (which builds the endpoint,
``<site>/graphql.json``, and the token header) sends with ``urllib``: a new connection per
call, no timeout, error bodies printed to stdout. The subclass below sends the same request
on the shop's kept-alive session instead (sill.rails.keepalive: one per shop and token), with
a timeout, and returns the error instead of printing it.

Errors become ``RailError``s that say what Shopify's answer means (see :meth:`execute`), with
the token scrubbed from every message. Throttling follows Shopify's cost-based limit: a
``THROTTLED`` answer carries ``extensions.cost.throttleStatus`` (``currentlyAvailable``,
``restoreRate``), from which the wait until the query fits is computed; a short wait is slept
here and the call tried once more (a throttled request was not executed, so this is safe even
for ``refundCreate``), a longer one is raised as retryable for the refund task's backoff.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyactiveresource.connection
import requests
import shopify

from sill.rails import keepalive
from sill.rails.base import (
    AmbiguousRailError,
    PermanentRailError,
    RailError,
    RateLimited,
    RetryableRailError,
)
from sill.rails.retry_after import retry_after_from

logger = logging.getLogger(__name__)

API_VERSION = "2026-04"
SHOP_DOMAIN_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,98}\.myshopify\.com$")
_TOKEN_RE = re.compile(r"\bshp(?:at|ca|pa|ss)_[A-Za-z0-9]+")
# Throttled waits at most this long in-process before the refund task's backoff takes over.
MAX_INLINE_WAIT_SECONDS = 2.0


# Refusals by refundCreate's ``@idempotent`` key: another request under the key is still being
# worked on, or one was made with other values. Either way a request under the key exists and
# may have refunded, so neither is a declined refund (see :func:`refused_key`).
IDEMPOTENCY_REFUSALS = frozenset(
    {"IDEMPOTENCY_CONCURRENT_REQUEST", "IDEMPOTENCY_KEY_PARAMETER_MISMATCH"}
)
# The same refusals in a user error's words (refundCreate's UserError carries no code).
_IDEMPOTENCY_WORDS = re.compile(r"idempoten|currently in progress", re.IGNORECASE)


def refused_key(doing: str, what: str) -> AmbiguousRailError:
    """The error for a refusal of the idempotency key: retried under the same key (the lookup
    first), and after the last retry left for a person, never failed."""
    return AmbiguousRailError(
        f"{doing}: Shopify refused the idempotency key ({what}); an earlier request under it "
        "may have refunded"
    )


def refuses_key(message: str) -> bool:
    """Whether a user error's words are about the idempotency key, not about the refund."""
    return bool(_IDEMPOTENCY_WORDS.search(message))


class ShopifyThrottled(RateLimited):
    """Shopify's cost-based limit or a 429: nothing was executed; retry after the wait."""

    code = "rail_throttled"
    retry_after: float  # always known: throttleStatus or Retry-After says it

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message, retry_after=retry_after)


@dataclass(frozen=True)
class GraphQLResult:
    """``data`` of an answer, and the paths Shopify denied (``ACCESS_DENIED``: a missing scope)."""

    data: dict[str, Any]
    denied: list[str] = field(default_factory=list)


class _GraphQL(shopify.GraphQL):
    """``shopify.GraphQL`` on a kept-alive session with a timeout; answers every status."""

    def __init__(self, session: requests.Session, timeout: float) -> None:
        super().__init__()
        self.session = session
        self.timeout = timeout

    def post(self, query: str, variables: dict[str, Any], operation_name: str) -> requests.Response:
        headers = self.merge_headers(
            {"Accept": "application/json", "Content-Type": "application/json"}, self.headers
        )
        body = json.dumps(
            {"query": query, "variables": variables, "operationName": operation_name}
        ).encode("utf-8")
        return self.session.post(self.endpoint, data=body, headers=headers, timeout=self.timeout)


class ShopifyClient:
    """One shop's Admin API, reached with one access token (never in ``repr`` or messages)."""

    def __init__(
        self,
        *,
        shop_domain: str,
        token: str,
        api_base: str = "",
        api_version: str = API_VERSION,
        timeout: float = 20.0,
    ) -> None:
        self.shop_domain = shop_domain
        self.api_base = api_base.rstrip("/")
        self.api_version = api_version
        self.timeout = timeout
        self._token = token
        self._http = keepalive.session_for("shopify", shop_domain, self.api_base, token)

    def __repr__(self) -> str:
        return f"ShopifyClient(shop_domain={self.shop_domain!r}, api_base={self.api_base!r})"

    def with_timeout(self, timeout: float) -> ShopifyClient:
        """The same shop and token (and kept-alive session) with another timeout."""
        return ShopifyClient(
            shop_domain=self.shop_domain,
            token=self._token,
            api_base=self.api_base,
            api_version=self.api_version,
            timeout=timeout,
        )

    @contextmanager
    def _session(self) -> Iterator[None]:
        session = shopify.Session(self.shop_domain, self.api_version, self._token)
        shopify.ShopifyResource.activate_session(session)
        if self.api_base:
            # Session always rewrites the host to https://<shop>.myshopify.com; tests and
            # development point the same client at a loopback server instead.
            shopify.ShopifyResource.set_site(f"{self.api_base}/admin/api/{self.api_version}")
        shopify.ShopifyResource.set_timeout(self.timeout)
        try:
            yield
        finally:
            shopify.ShopifyResource.clear_session()

    # --- access scopes ------------------------------------------------------------------

    def access_scopes(self) -> list[str]:
        """The token's scopes (``GET /admin/oauth/access_scopes.json``)."""
        try:
            with self._session():
                found = shopify.AccessScope.find()
        except pyactiveresource.connection.UnauthorizedAccess:
            raise PermanentRailError(
                "Shopify refused the access token (401)", code="shopify_unauthorized"
            ) from None
        except pyactiveresource.connection.ForbiddenAccess:
            raise PermanentRailError(
                "Shopify refused the access token (403)", code="shopify_unauthorized"
            ) from None
        except (pyactiveresource.connection.Error, OSError) as exc:
            raise RetryableRailError(
                f"Shopify could not be reached: {self._scrub(type(exc).__name__)}"
            ) from None
        return sorted(str(scope.handle) for scope in found)

    # --- GraphQL ------------------------------------------------------------------------

    def execute(
        self,
        query: str,
        variables: dict[str, Any] | None = None,
        *,
        operation: str,
        mutation: bool = False,
    ) -> GraphQLResult:
        """Run one GraphQL operation; a short throttle is waited out once.

        Raises ``ShopifyThrottled`` (``THROTTLED``, 429: nothing was executed),
        ``RetryableRailError`` (5xx, and a lost connection on a read), ``AmbiguousRailError``
        (a mutation whose answer was lost: a timeout or a 5xx, after which Shopify may have
        acted), ``PermanentRailError`` (401, 403, 4xx, ``MAX_COST_EXCEEDED`` as
        ``rail_error``, other GraphQL errors). ``ACCESS_DENIED`` errors are returned in
        ``denied`` with the partial data, so a missing optional scope only blanks its fields.
        """
        for attempt in range(2):
            try:
                return self._execute_once(query, variables or {}, operation, mutation)
            except ShopifyThrottled as exc:
                if attempt or exc.retry_after > MAX_INLINE_WAIT_SECONDS:
                    raise
                logger.info("Shopify throttled %s; waiting %.2f s", operation, exc.retry_after)
                time.sleep(exc.retry_after)
        raise AssertionError("unreachable")

    def _execute_once(
        self, query: str, variables: dict[str, Any], operation: str, mutation: bool
    ) -> GraphQLResult:
        doing = f"Shopify {operation}"
        try:
            with self._session():
                response = _GraphQL(self._http, self.timeout).post(query, variables, operation)
        except requests.ConnectTimeout:
            raise RetryableRailError(f"{doing}: Shopify could not be reached") from None
        except requests.Timeout:
            raise self._lost(doing, "no answer in time", mutation) from None
        except requests.RequestException:
            # Refused, unresolvable or dropped: retryable (a refundCreate carries its
            # @idempotent key, so sending it again cannot refund twice).
            raise RetryableRailError(f"{doing}: Shopify could not be reached") from None
        status = response.status_code
        if status >= 400:
            self._raise_http(doing, status, response.headers, mutation)
        try:
            answer = json.loads(response.text)
        except ValueError:
            raise self._lost(doing, "an answer that is not JSON", mutation) from None
        return self._read_answer(doing, answer)

    def _raise_http(self, doing: str, status: int, headers: Any, mutation: bool) -> None:
        if status == 429:
            raise ShopifyThrottled(
                f"{doing}: rate limited (429)", retry_after=_retry_after(headers)
            )
        if status in (401, 403):
            raise PermanentRailError(
                f"{doing}: Shopify refused the access token ({status})",
                code="shopify_unauthorized",
            )
        if status >= 500:
            # 503 and 502 may come from in front of the API; 500 after it acted.
            raise self._lost(doing, f"HTTP {status}", mutation, retryable_only=status in (502, 503))
        raise PermanentRailError(f"{doing}: HTTP {status}")

    def _read_answer(self, doing: str, answer: Any) -> GraphQLResult:
        if not isinstance(answer, dict):
            raise PermanentRailError(f"{doing}: unexpected answer")
        errors = answer.get("errors") or []
        if isinstance(errors, str):  # e.g. {"errors": "[API] Invalid API key or access token"}
            raise PermanentRailError(f"{doing}: {self._scrub(errors)}")
        denied: list[str] = []
        for error in errors:
            code = str((error.get("extensions") or {}).get("code") or "")
            if code == "THROTTLED" or (not code and error.get("message") == "Throttled"):
                # Older answers name it by the message alone ({"message": "Throttled"}): read
                # as any other error, a throttled refund was failed as if Shopify declined it.
                cost = (answer.get("extensions") or {}).get("cost") or {}
                raise ShopifyThrottled(f"{doing}: throttled", retry_after=_throttle_wait(cost))
            if code == "MAX_COST_EXCEEDED":
                # Sill's query asks for too much (refused before it ran): Sill's to fix, and
                # no answer about the refund or order it asked after, so not a decline.
                raise PermanentRailError(
                    f"{doing}: Shopify refused the query as too costly "
                    f"({self._scrub(str(error.get('message') or code))})",
                    code="rail_error",
                )
            if code == "ACCESS_DENIED":
                denied.append(".".join(str(p) for p in error.get("path") or []) or "?")
                continue
            if code in IDEMPOTENCY_REFUSALS:
                raise refused_key(doing, code)
            if code == "INTERNAL_SERVER_ERROR":
                raise RetryableRailError(f"{doing}: {self._scrub(str(error.get('message')))}")
            raise PermanentRailError(
                f"{doing}: {self._scrub(str(error.get('message') or code))}"
                + (f" ({code})" if code else "")
            )
        data = answer.get("data")
        if not isinstance(data, dict):
            raise PermanentRailError(f"{doing}: the answer has no data")
        return GraphQLResult(data=data, denied=denied)

    def _lost(
        self, doing: str, what: str, mutation: bool, *, retryable_only: bool = False
    ) -> RailError:
        message = f"{doing}: {what}"
        if mutation and not retryable_only:
            return AmbiguousRailError(message)
        return RetryableRailError(message)

    def _scrub(self, text: str) -> str:
        if self._token:
            text = text.replace(self._token, "[redacted]")
        return _TOKEN_RE.sub("[redacted]", text)


def _throttle_wait(cost: dict[str, Any]) -> float:
    """Seconds until the requested cost fits in the bucket (Shopify's leaky bucket)."""
    status = cost.get("throttleStatus") or {}
    try:
        requested = float(cost.get("requestedQueryCost") or 0)
        available = float(status.get("currentlyAvailable") or 0)
        rate = float(status.get("restoreRate") or 50)
    except (TypeError, ValueError):
        return 1.0
    if rate <= 0:
        return 1.0
    return max(0.0, math.ceil(max(requested - available, 0) / rate * 100) / 100)


def _retry_after(headers: Any) -> float:
    """A 429's wait (sill.rails.retry_after); a second when it says none it can be read by."""
    wait = retry_after_from(headers)
    return 1.0 if wait is None else wait
