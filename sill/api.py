"""The DRF exception handler (every API error is ``{"error": {"code", "message", "field"}}``),
the strict JSON parser every API view reads bodies with (to a size limit), the API's rate
limits and who may read the OpenAPI schema."""

from __future__ import annotations

import contextlib
import hashlib
import math
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.http import Http404
from rest_framework import exceptions
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import exception_handler as drf_exception_handler

from sill import jsonbody
from sill.accounts.models import Agent, MemberToken
from sill.bearer import bearer_token
from sill.client_address import client_address
from sill.errors import SillError

if TYPE_CHECKING:
    # Not at run time: rest_framework.views imports this module while it defines APIView.
    from rest_framework.views import APIView

_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "not_authenticated",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.ParseError: "malformed",
    exceptions.Throttled: "rate_limited",
    exceptions.ValidationError: "invalid_field",
}


class RateLimited(SillError):
    """Over a rate limit; ``retry_after`` seconds until the next request would be allowed."""

    code = "rate_limited"
    status = 429

    def __init__(self, *, retry_after: int) -> None:
        super().__init__(_too_many(retry_after))
        self.retry_after = retry_after


def _too_many(seconds: int | None) -> str:
    if not seconds:
        return "Too many requests: slow down and try again."
    return f"Too many requests: try again in {seconds} second{'s' if seconds != 1 else ''}."


def error_response(error: SillError) -> Response:
    response = Response(error.as_dict(), status=error.status)
    if isinstance(error, RateLimited):
        response["Retry-After"] = str(error.retry_after)
    return response


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, SillError):
        return error_response(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, Http404):
        code = "not_found"
    else:
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    field = None
    message = "Request refused."
    detail = getattr(exc, "detail", None)
    if isinstance(exc, exceptions.Throttled):
        # DRF has set Retry-After (whole seconds) already; the message says the same.
        message = _too_many(getattr(exc, "wait", None))
    elif isinstance(detail, dict) and detail:
        field, first = next(iter(detail.items()))
        message = str(first[0] if isinstance(first, list) and first else first)
        if field == "non_field_errors":
            field = None
    elif isinstance(detail, list) and detail:
        message = str(detail[0])
    elif detail is not None:
        message = str(detail)
    response.data = {"error": {"code": code, "message": message, "field": field}}
    return response


class StrictJSONParser(BaseParser):
    """JSON bodies with the project's rules (:func:`sill.jsonbody.loads`), read to a limit.

    The default parser of every API view (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``):
    numbers with a fraction are ``Decimal``; nesting deeper than 32 levels, duplicate keys,
    ``NaN``/``Infinity``, out-of-range numbers, NUL and lone surrogates are a ``ParseError``,
    which :func:`exception_handler` answers as ``400`` with code ``malformed``.

    A body longer than ``settings.SILL_API_MAX_BODY_BYTES`` is ``413 too_large``
    (:class:`sill.jsonbody.BodyTooLarge`), written nowhere: refused on its Content-Length
    before any of it is read, and a body without one is read one byte past the limit at most
    (:func:`sill.jsonbody.read_at_most`). Not a subclass of DRF's ``JSONParser``: DRF hands
    those ``request.body``, the whole body already read into memory (up to Django's
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``, 2.5 MB, and past it Django's HTML 400 page); any other
    parser gets the request's stream, which is read here only as far as the limit.
    """

    media_type = "application/json"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        context = parser_context or {}
        encoding = context.get("encoding") or "utf-8"
        request = context.get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        limit: int = settings.SILL_API_MAX_BODY_BYTES
        raw = b"" if stream is None else jsonbody.read_at_most(stream, limit, declared=declared)
        try:
            return jsonbody.loads(raw, encoding=encoding)
        except jsonbody.MalformedJSON as exc:
            raise exceptions.ParseError(exc.message) from None


# --- Rate limits -------------------------------------------------------------------------------


class _Throttle(SimpleRateThrottle):
    """DRF's cache throttle, counting in fixed windows with atomic increments, with its rate
    read from ``settings.SILL_API_RATES[scope]`` on every request (``None``: no limit) and
    addresses from :func:`sill.client_address.client_address`.

    A limit of N per minute allows N requests in each clock minute (``<key>:<window>``, one
    counter per window, in the default cache). DRF's own window (a list of request times
    read, trimmed and written back) lost updates: requests racing each other each wrote back
    the list they had read without the others' entries, so 8 concurrent clients went through
    a limit of 30 with 96 requests out of 96. An increment cannot be lost (Redis ``INCR``,
    ``LocMemCache`` under its lock). The price of fixed windows: a client can spend one
    window's budget at its end and the next one's at its start, at most 2N in any minute.
    """

    # The window's counter the last :meth:`take_key` counted in (None: none yet, or no limit).
    counter: str | None = None

    def get_rate(self) -> str | None:
        rates: dict[str, str | None] = settings.SILL_API_RATES
        return rates.get(self.scope or "")

    def get_ident(self, request: Request) -> str:
        return client_address(request._request) or "unknown"

    def key_for(self, ident: str) -> str:
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request: Request, view: APIView) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        return key is None or self.take_key(key)

    def take_key(self, key: str) -> bool:
        """Count one request against ``key``'s budget in the current window: False when the
        window's budget is spent."""
        num_requests, duration = self.parse_rate(self.rate)
        if num_requests is None or duration is None:
            return True
        now = self.timer()
        window = int(now // duration)
        self.retry_after = (window + 1) * duration - now
        counter = f"{key}:{window}"
        self.counter = counter
        try:
            count = self.cache.incr(counter)
        except ValueError:  # the window's first request (or a racing one, just before)
            # Kept for two windows: a counter never expires while its window is current
            # (an increment of an expired key would make a counter that never expires).
            count = 1 if self.cache.add(counter, 1, 2 * duration) else self.cache.incr(counter)
        # A refused request stays counted: it changes nothing within its window, and a flood
        # of them costs one increment each, nothing more.
        return count <= num_requests

    def wait(self) -> float | None:
        """Seconds until the window a refused request was counted in ends."""
        return getattr(self, "retry_after", None)


class AddressThrottle(_Throttle):
    """Requests with no credential, per client address: above all ``POST /api/v1/mandates``,
    counted here before its body is parsed or its signature checked (the cheap check first)."""

    scope = "address"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        user = request.user
        if request.auth is not None or (user is not None and user.is_authenticated):
            return None
        return self.key_for(self.get_ident(request))


class AgentTokenThrottle(_Throttle):
    """An agent's reads (``GET /api/v1/...`` with its bearer token), per token."""

    scope = "agent_token"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not isinstance(request.auth, Agent):
            return None
        token = bearer_token(request.META.get("HTTP_AUTHORIZATION", "")) or ""
        return self.key_for(hashlib.sha256(token.encode()).hexdigest())


class MemberTokenThrottle(_Throttle):
    """The staff API with a member's API token (``manage.py members token``), per token."""

    scope = "member_token"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not isinstance(request.auth, MemberToken):
            return None
        return self.key_for(str(request.auth.pk))


class MemberSessionThrottle(_Throttle):
    """The API from a logged-in member's browser session, per user."""

    scope = "member_session"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        user = request.user
        if request.auth is not None or user is None or not user.is_authenticated:
            return None
        return self.key_for(str(user.pk))


class _MandateKeyThrottle(_Throttle):
    scope = "mandate_key"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        return None  # not a view throttle: see spend_mandate_budget

    def take(self, ident: str) -> bool:
        """:meth:`allow_request` for a key the caller names (same window, same cache)."""
        return self.take_key(self.key_for(ident))


class _PayPalVerifyThrottle(_MandateKeyThrottle):
    scope = "paypal_verify"


class _PayPalVerifyAddressThrottle(_MandateKeyThrottle):
    scope = "paypal_verify_address"


def spend_paypal_verification(*, site_id: str, address: str) -> str | None:
    """Count one ``verify-webhook-signature`` call for the site's PayPal webhooks against the
    client address's share, then against the site's budget, or raise :class:`RateLimited`:
    each costs a call with the merchant's credentials, which anyone who knows the site's
    webhook address could otherwise spend (its refunds need that budget).

    The share is counted first, so an address past it spends nothing of the site's budget:
    one client's junk cannot use up what PayPal's own deliveries need. Returns the share's
    counter, for :func:`return_paypal_verification` once PayPal verified the delivery (None
    while the share is off)."""
    share = _PayPalVerifyAddressThrottle()
    if not share.take(hashlib.sha256(f"{site_id}\n{address or 'unknown'}".encode()).hexdigest()):
        raise RateLimited(retry_after=max(1, math.ceil(share.wait() or 1)))
    throttle = _PayPalVerifyThrottle()
    if not throttle.take(hashlib.sha256(site_id.encode()).hexdigest()):
        raise RateLimited(retry_after=max(1, math.ceil(throttle.wait() or 1)))
    return share.counter


def return_paypal_verification(counter: str | None) -> None:
    """Give a delivery PayPal verified back to its address's share (not to the site's budget:
    the call was made). PayPal sends every site's webhooks from a few addresses of its own, so
    the share bounds only what an address sent that PayPal did not sign."""
    if counter is None:
        return
    # ValueError: the window's counter is gone (expired, or the cache evicted it).
    with contextlib.suppress(ValueError):
        _PayPalVerifyAddressThrottle.cache.decr(counter)


def spend_mandate_budget(*, site_id: str, agent_id: str, key_id: str) -> None:
    """Count one mandate against its signing key's budget, or raise :class:`RateLimited`.

    Call it only once the mandate's signature verified: a forged mandate naming somebody
    else's key must not spend that agent's budget (unsigned floods are the address limit's).
    """
    ident = hashlib.sha256(f"{site_id}\n{agent_id}\n{key_id}".encode()).hexdigest()
    throttle = _MandateKeyThrottle()
    if not throttle.take(ident):
        raise RateLimited(retry_after=max(1, math.ceil(throttle.wait() or 1)))


# --- The OpenAPI schema ------------------------------------------------------------------------


class SchemaAccess(BasePermission):
    """``/api/schema/`` for any logged-in user; for everyone when DEBUG or SILL_PUBLIC_SCHEMA."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        if settings.DEBUG or settings.SILL_PUBLIC_SCHEMA:
            return True
        user = request.user
        return bool(user is not None and user.is_authenticated)
