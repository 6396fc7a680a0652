"""What Sill does when its cache (Redis at ``REDIS_URL``) cannot be reached.

The cache holds the counters and marks that guard requests: the API's rate limits
(:mod:`sill.api`), the PayPal verification budget and verified transmissions
(:mod:`sill.rails.paypal.webhooks`), Slack clicks already seen (:mod:`refunds.review.slack`),
password-reset counts (:mod:`sill.accounts.views_password`) and the "Test connection"
debounce (:mod:`sill.rails.connection`). A guard that cannot be read is not skipped: the
request fails closed, before it writes anything or calls a rail (each guard is read first), and
:class:`CacheUnreachableMiddleware` answers it ``503`` with ``Retry-After`` in place of a
``500`` (:func:`sill.error_pages.briefly_unavailable`: ``unavailable`` in the error shape for
programs, a page for people). One warning is logged per request, naming the error's class but
never the cache's address: ``REDIS_URL`` may carry a password.

The notices' back-off (:mod:`sill.accounts.notices`) is not a guard of a request: there a cache
that cannot be reached pauses the beat sweeps (they pick nothing, so nothing is claimed or
lost) and never fails a message already sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sill.error_pages import briefly_unavailable

logger = logging.getLogger(__name__)

# What Django's Redis cache raises when Redis is down, refuses the connection or does not
# answer in time (after redis-py's own retries). Not ``RedisError`` as a whole: a command Redis
# refuses (a wrong type, say) is a defect, and stays a 500.
CACHE_UNREACHABLE: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError)


class CacheUnreachableMiddleware:
    """A view (a DRF view too: Sill's exception handler leaves these errors to Django) that
    failed because the cache cannot be reached is answered ``503`` with ``Retry-After``,
    not a ``500``. Only the view's own error: a view that caught it has answered itself."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, CACHE_UNREACHABLE):
            return None
        # The class only: redis' message names the cache's host and port. The view by its
        # URL name: a path can carry a capability token.
        match = request.resolver_match
        logger.warning(
            "the cache cannot be reached (%s): %s %s answered 503 unavailable",
            type(exception).__name__,
            request.method,
            match.view_name if match is not None else "?",
        )
        response = briefly_unavailable(request)
        # Logged above, as a warning: not again by Django, as the error a 5xx is.
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response
