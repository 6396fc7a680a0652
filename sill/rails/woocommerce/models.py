"""What Sill keeps of a WooCommerce store: which Woo order a Sill order is, and the record of
each Sill refund on its Woo order (``POST /wp-json/wc/v3/orders/{id}/refunds``).

The models belong to the ``rails`` app (imported by ``sill.rails.models``).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from sill.accounts.models import Site
from sill.money import Money
from sill.orders.models import CURRENCY_RE, Order


class WooOrderLink(models.Model):
    """A Sill order brought in from a WooCommerce store; its payment is a Stripe charge."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="woocommerce_orders")
    order = models.OneToOneField(Order, on_delete=models.CASCADE, related_name="woocommerce")
    # The store the order came from (its URL as connected): Woo order ids are per store, so
    # a site connected to another store later gets that store's orders beside these.
    store_url = models.CharField(max_length=255, default="", db_default="")
    woo_order_id = models.BigIntegerField()
    # The Woo order's ``date_modified_gmt`` as last applied: an older delivery changes nothing.
    woo_modified_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "rails"
        constraints = [
            models.UniqueConstraint(
                fields=["site", "store_url", "woo_order_id"], name="woolink_unique_per_store"
            ),
        ]

    def __str__(self) -> str:
        return f"WooCommerce order {self.woo_order_id} → {self.order_id}"


class WooRecordState(models.TextChoices):
    PENDING = "pending", "Waiting to be recorded"
    RECORDED = "recorded", "Recorded on the WooCommerce order"
    NOT_UPDATED = "not_updated", "WooCommerce order not updated (retried later)"
    GAVE_UP = "gave_up", "WooCommerce order not updated (gave up)"
    # Stripe reported the refund failed after Sill settled it (the money came back) before
    # its record was written: there is no refund to write on the Woo order any more.
    WITHDRAWN = "withdrawn", "Not recorded: the Stripe refund failed after settlement"


class WooRefundRecord(models.Model):
    """One Sill refund to be written on its WooCommerce order, once (never moves money)."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="woocommerce_records")
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="woocommerce_records")
    refund_id = models.CharField(max_length=40, unique=True)
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=300, blank=True)
    state = models.CharField(
        max_length=12, choices=WooRecordState.choices, default=WooRecordState.PENDING
    )
    woo_refund_id = models.CharField(max_length=40, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # Why the Woo order is not updated yet, in words a merchant can act on.
    last_error = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    recorded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "rails"
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gt=0), name="woorecord_amount_gt_0"),
            models.CheckConstraint(
                condition=Q(currency__regex=CURRENCY_RE), name="woorecord_currency_iso"
            ),
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in WooRecordState]),
                name="woorecord_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"WooCommerce record of {self.refund_id} ({self.state})"

    @property
    def amount(self) -> Money:
        return Money(self.amount_minor, self.currency)

    @property
    def why(self) -> str:
        """``last_error`` without its "The WooCommerce order was not updated…:" lead, for the
        order page, which says that itself."""
        for lead in _LEADS:
            if self.last_error.startswith(lead):
                rest = self.last_error[len(lead) :]
                return (rest[:1].upper() + rest[1:]).rstrip(". ")
        # Without a trailing period: the page goes on with "; Sill retries every 15 minutes."
        return self.last_error.rstrip(". ")


_LEADS = (
    "The WooCommerce order was not updated yet: ",
    "The WooCommerce order was not updated: ",
)
