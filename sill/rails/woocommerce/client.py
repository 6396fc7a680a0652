"""The WooCommerce REST API v3 through the ``woocommerce`` client (``woocommerce.API``).

Authentication is the client's own: over https the consumer key and secret go as HTTP basic
auth; over plain http (allowed only for a loopback test store) the client signs each request
with OAuth 1.0a, as WooCommerce requires there. The client returns a raw ``requests``
response and never raises for a status: this module turns statuses into ``RailError``s and
keeps the consumer secret out of every message.

``woocommerce.API`` sends every request with ``requests.request``: a new session, so a new
connection, per call. :class:`_KeptAliveAPI` sends the same request (the client's own URL
and authentication, above) on the store's kept-alive session instead (sill.rails.keepalive:
one per store and keys).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import requests
from woocommerce import API

from sill.rails import keepalive
from sill.rails.base import (
    AmbiguousRailError,
    PermanentRailError,
    RailError,
    RateLimited,
    RetryableRailError,
)
from sill.rails.retry_after import wait_asked

PAGE_SIZE = 100
MAX_PAGES = 200


class WooCannotWrite(PermanentRailError):
    """The keys may read but not write (401/403 ``woocommerce_rest_cannot_create``)."""

    code = "woocommerce_read_only"


class _KeptAliveAPI(API):
    """``woocommerce.API`` whose requests go through one kept-alive session.

    The library exposes no session; its one sending function, ``API.__request`` (name-mangled
    to ``_API__request``), is overridden here with the same steps (its own URL and OAuth
    helpers, basic auth over https) and ``session.request`` in place of ``requests.request``.
    """

    def __init__(self, *, session: requests.Session, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session = session

    def _API__request(  # the library's name-mangled method
        self,
        method: str,
        endpoint: str,
        data: Any,
        params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> requests.Response:
        params = dict(params or {})
        url = self._API__get_url(endpoint)
        auth = None
        headers = {"user-agent": self.user_agent, "accept": "application/json"}
        if self.is_ssl and not self.query_string_auth:
            auth = requests.auth.HTTPBasicAuth(self.consumer_key, self.consumer_secret)
        elif self.is_ssl:
            params.update(
                {"consumer_key": self.consumer_key, "consumer_secret": self.consumer_secret}
            )
        else:
            url = f"{url}?{urlencode(params)}"
            url = self._API__get_oauth_url(url, method, **kwargs)
        body = None
        if data is not None:
            body = json.dumps(data, ensure_ascii=False).encode("utf-8")
            headers["content-type"] = "application/json;charset=utf-8"
        return self.session.request(
            method=method,
            url=url,
            verify=self.verify_ssl,
            auth=auth,
            params=params,
            data=body,
            timeout=self.timeout,
            headers=headers,
        )


class WooClient:
    def __init__(
        self, *, store_url: str, consumer_key: str, consumer_secret: str, timeout: float = 20.0
    ) -> None:
        self.store_url = store_url
        self._secret = consumer_secret
        self._key = consumer_key
        self._api = _KeptAliveAPI(
            session=keepalive.session_for("woocommerce", store_url, consumer_key, consumer_secret),
            url=store_url,
            consumer_key=consumer_key,
            consumer_secret=consumer_secret,
            version="wc/v3",
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"WooClient(store_url={self.store_url!r})"

    def order_pages(
        self, *, modified_after: datetime | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """The store's orders page by page, oldest modified first; only those modified after
        ``modified_after`` (UTC; WooCommerce keeps whole seconds) when given.

        Each request asks for what was modified after the newest order read so far (less a
        second, those already read left out), not for the next page number: the list is
        sorted by modification time, so an order the store changes while Sill reads moves
        to its end, and by page number every later order moved up a place and one was
        never read (nor, the next sync reading on from the newest order read, ever after).
        Only a page whose orders were all modified within one second is read on by page
        number. More than ``MAX_PAGES`` requests end with an error after the last page read:
        the newest orders were not read, and a sync must not look complete (run it again:
        it reads on from the last page it saved)."""
        since, page = modified_after, 1
        read: dict[Any, Any] = {}  # the last page's orders: id → date_modified_gmt
        for _ in range(MAX_PAGES):
            params: dict[str, Any] = {
                "per_page": PAGE_SIZE,
                "page": page,
                "orderby": "modified",
                "order": "asc",
            }
            if since is not None:
                params["modified_after"] = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
                params["dates_are_gmt"] = "true"
            response = self._send("get", "orders", params=params, doing="order list")
            batch = _json(response, "order list")
            if not isinstance(batch, list):
                raise RetryableRailError("WooCommerce order list: the answer is not a list")
            orders = [o for o in batch if isinstance(o, dict)]
            if not orders:
                return  # past the end
            new = [
                o for o in orders if read.get(o.get("id"), _UNSEEN) != o.get("date_modified_gmt")
            ]
            if new:
                yield new
            if len(batch) < PAGE_SIZE:
                return  # the last page
            dated = [when for when in map(_modified, orders) if when is not None]
            if len(dated) < len(orders) or min(dated) == max(dated):
                page += 1  # a page within one second (or undated): on by page number
            else:
                since, page = max(dated) - timedelta(seconds=1), 1
            read = {o.get("id"): o.get("date_modified_gmt") for o in orders}
        raise PermanentRailError(
            f"WooCommerce order list: more than the {MAX_PAGES} pages one sync reads; what "
            "was read is saved: run the sync again to read on"
        )

    def check_access(self) -> None:
        """Settings → Rails' check of the keys: ``GET orders?per_page=1``, the cheapest call
        that needs what Sill uses them for (reading orders). ``system_status`` would need the
        ``manage_woocommerce`` capability Sill never uses, and answers a large report of the
        server, its plugins and database. No read can tell whether the keys may *write*: a
        read-only key passes here, and the first refund record says so (record.py)."""
        self._send("get", "orders", params={"per_page": 1}, doing="key check")

    def refunds(self, order_id: int) -> list[dict[str, Any]]:
        """Every refund of the order, page by page. WooCommerce lists 10 a page unless asked
        (at most 100), newest first: the first page alone left older refunds out, and a
        record looked for among them was written again. An answer that is not a list, or a
        list past ``MAX_PAGES``, raises: it says nothing of which refunds the order has."""
        found: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            response = self._send(
                "get",
                f"orders/{order_id}/refunds",
                params={"per_page": PAGE_SIZE, "page": page},
                doing="refund list",
            )
            batch = _json(response, "refund list")
            if not isinstance(batch, list):
                raise RetryableRailError("WooCommerce refund list: the answer is not a list")
            found += [r for r in batch if isinstance(r, dict)]
            if len(batch) < PAGE_SIZE or page >= _total_pages(response, default=page + 1):
                return found
        raise PermanentRailError(
            f"WooCommerce refund list: order {order_id} lists more than "
            f"{MAX_PAGES * PAGE_SIZE} refunds, more than Sill reads"
        )

    def create_refund(self, order_id: int, *, amount: str, reason: str) -> dict[str, Any]:
        # api_refund False: WooCommerce only records it; no gateway moves money (Stripe did).
        body = {"amount": amount, "reason": reason, "api_refund": False}
        response = self._send(
            "post", f"orders/{order_id}/refunds", data=body, doing="refund record", write=True
        )
        data = _json(response, "refund record")
        if not isinstance(data, dict) or "id" not in data:
            raise RetryableRailError("WooCommerce refund record: the answer names no refund")
        return data

    def _send(
        self,
        method: str,
        endpoint: str,
        *,
        doing: str,
        data: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        write: bool = False,
    ) -> requests.Response:
        try:
            if method == "post":
                response = self._api.post(endpoint, data, params=params)
            else:
                response = self._api.get(endpoint, params=params)
        except requests.ConnectTimeout:
            raise RetryableRailError(
                f"WooCommerce {doing}: the store could not be reached"
            ) from None
        except requests.RequestException:
            error = AmbiguousRailError if write else RetryableRailError
            raise error(f"WooCommerce {doing}: no answer from the store") from None
        if response.status_code >= 300:
            raise self._error(response, doing)
        return response

    def _error(self, response: requests.Response, doing: str) -> RailError:
        status = response.status_code
        try:
            data = response.json()
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        code = str(data.get("code") or f"HTTP {status}")
        # Neither half of the credential is ever quoted back into Sill's words and logs (the
        # settings page itself shows only the key's last characters).
        said = str(data.get("message") or "")
        for credential in (self._secret, self._key):
            if credential:
                said = said.replace(credential, "[redacted]")
        message = f"WooCommerce {doing} failed: {code}{' — ' + said if said else ''}"
        if status == 429 or status >= 500:
            # A host's or security plugin's rate limit, maintenance mode: a 429 or 503 may
            # say how long (Retry-After); asked again sooner, the store refuses again.
            error = RateLimited if status == 429 else RetryableRailError
            return error(message, retry_after=wait_asked(status, response.headers))
        if status in (401, 403):
            return WooCannotWrite(message)
        return PermanentRailError(message, code="woocommerce_refused")


_UNSEEN = object()


def _modified(order: dict[str, Any]) -> datetime | None:
    """An order's ``date_modified_gmt`` (UTC), or None when it is missing or unreadable."""
    text = order.get("date_modified_gmt")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        return None


def _total_pages(response: requests.Response, *, default: int) -> int:
    """The list's ``X-WP-TotalPages``; ``default`` when the store (or a proxy) left it out."""
    try:
        return int(response.headers.get("X-WP-TotalPages", ""))
    except ValueError:
        return default


def _json(response: requests.Response, doing: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise RetryableRailError(f"WooCommerce {doing}: the answer is not JSON") from None
