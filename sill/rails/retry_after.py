"""How long a rail asked Sill to wait: the ``Retry-After`` header of a 429 or 503.

One reading for every rail (PayPal, WooCommerce, Shopify, Stripe), so a wait is honoured the
same way wherever it comes from. The header is either delta-seconds (``Retry-After: 30``) or
an HTTP-date (``Retry-After: Sun, 06 Dec 2026 17:30:00 GMT``), RFC 9110 §10.2.3.

What a server sends here is not trusted: anything unreadable or negative is no wait at all
(the caller's own backoff applies), and a wait is capped at :data:`MAX_WAIT_SECONDS`, so a
broken or hostile server cannot park a refund for days. (Refund execution caps its countdown
lower still: ``SILL_EXECUTION_BACKOFF_CAP_SECONDS``.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

MAX_WAIT_SECONDS = 3600.0

# Digits, with a fraction some servers add ("2.0", Shopify's REST answers); never a sign,
# an exponent, "inf" or "nan", which float() would take. (A number too long for a float is
# infinite, then capped.)
_SECONDS = re.compile(r"\d+(?:\.\d+)?", re.ASCII)


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait that ``value`` (a ``Retry-After`` header) asks for, at most
    :data:`MAX_WAIT_SECONDS`; ``0.0`` for a date already passed; ``None`` when there is no
    header or it says nothing readable (garbage, a negative number)."""
    text = (value or "").strip()
    if not text:
        return None
    if _SECONDS.fullmatch(text):
        return min(float(text), MAX_WAIT_SECONDS)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, its offset unknown; an HTTP-date is GMT
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_WAIT_SECONDS)


def wait_asked(status: int, headers: Mapping[str, str] | None) -> float | None:
    """The wait a 429 (too many requests) or 503 (unavailable: maintenance, overload) asks
    for in its ``Retry-After``; ``None`` for any other status, whose header is no such ask."""
    return retry_after_from(headers) if status in (429, 503) else None


def retry_after_from(headers: Mapping[str, str] | None) -> float | None:
    """:func:`retry_after_seconds` of the ``Retry-After`` among ``headers``, whatever the
    case of its name (``requests``' headers ignore it; a plain dict would not)."""
    if not headers:
        return None
    value = headers.get("Retry-After")
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    return retry_after_seconds(value)
