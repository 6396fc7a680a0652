"""Template filters every page uses: money per currency, status badges, and times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import format_html

from sill.money import Money, MoneyError, format_money
from sill.rails.base import rail_label

register = template.Library()

_BADGE_TONES = {
    "PAID": "ok", "SHIPPED": "info", "DELIVERED": "ok", "PARTIALLY_REFUNDED": "warn",
    "REFUNDED": "muted", "CANCELLED": "muted", "PENDING": "info",
    "succeeded": "ok", "processing": "info", "pending": "info", "held": "warn",
    "failed": "bad", "rejected": "bad", "expired": "muted", "needs_attention": "bad",
    "approved": "ok", "escalated": "warn",
}  # fmt: skip


@register.filter
def money(value: object, currency: str | None = None) -> str:
    """``{{ order.total|money }}`` or ``{{ refund.amount_minor|money:refund.currency }}``."""
    try:
        if isinstance(value, Money):
            return format_money(value)
        if isinstance(value, int) and currency:
            return format_money(Money(value, currency))
    except MoneyError:
        pass
    return "—"


@register.filter
def badge(status: str, label: str | None = None) -> str:
    tone = _BADGE_TONES.get(str(status), "muted")
    text = label or str(status).replace("_", " ").capitalize()
    return format_html('<span class="badge badge-{}">{}</span>', tone, text)


@register.filter
def rail(name: str) -> str:
    """``{{ refund.rail|rail }}`` → "Stripe", "Mock" (the rail's name in words)."""
    return rail_label(str(name)) or "—"


@register.filter
def humanize_code(code: str) -> str:
    """``product_not_received`` → "Product not received" (a provider's code in words)."""
    return str(code or "").replace("_", " ").strip().capitalize() or "—"


# English, as the rest of Sill; written directly (Django's date_format costs ~0.1 ms a call and a
# list page calls this several times a row).
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@register.filter
def when(value: object, style: str = "") -> str:
    """``{{ refund.created_at|when }}``: a time in the site's zone, with its abbreviation.

    ``<time datetime="…Z" title="Tue, Dec 1, 2026, 10:39:07 EST">Dec 1, 10:39 EST</time>``;
    the year shows when it is not this year's. ``|when:"ago"`` says "4 min ago" (or "in 3 h")
    within a day of now and falls back to the date beyond; ``|when:"date"`` is the day only.
    The zone is the active one (``SiteTimeZoneMiddleware`` activates the site's). A dash for
    no time.
    """
    if not isinstance(value, datetime):
        return "—"
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    now = timezone.localtime()
    day = f"{_MONTHS[local.month - 1]} {local.day}"
    year = "" if local.year == now.year else f", {local.year}"
    zone = local.tzname() or ""
    full = f"{_DAYS[local.weekday()]}, {day}, {local.year}, {local:%H:%M:%S} {zone}"
    if style == "date":
        text = f"{day}, {local.year}"
    elif style == "ago" and abs(elapsed := _elapsed(value, now)) < timedelta(days=1):
        text = relative(elapsed)
    else:
        text = f"{day}{year}, {local:%H:%M} {zone}"
    iso = value.astimezone(UTC).isoformat() if timezone.is_aware(value) else value.isoformat()
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, full, text)


def _elapsed(value: datetime, now: datetime) -> timedelta:
    """The time that passed from ``value`` to ``now``, in UTC: two times in one zone subtract
    as wall clocks (Python ignores the offset of a shared tzinfo), so across a DST change an
    hour read as two, or as none."""
    if timezone.is_naive(value):
        return timezone.make_naive(now) - value
    return now.astimezone(UTC) - value.astimezone(UTC)


def relative(elapsed: timedelta) -> str:
    """``4 min ago``, ``just now``, ``2 h ago``, ``in 3 h`` (within a day either way), for the
    time that passed since (negative: still to come)."""
    seconds = int(elapsed.total_seconds())
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 45:
        return "just now" if not future else "in a moment"
    if seconds < 3600:
        amount = f"{max(1, round(seconds / 60))} min"
    else:
        amount = f"{round(seconds / 3600)} h"
    return f"in {amount}" if future else f"{amount} ago"
