"""Template filters every page uses: money per currency, and status badges."""

from __future__ import annotations

from django import template
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
