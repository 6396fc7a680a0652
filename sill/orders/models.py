"""The orders Sill refunds against, as Sill recorded them (never as a caller describes them)."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Upper

from sill.accounts.models import Agent, Site
from sill.ids import new_id
from sill.money import Money
from sill.rails.base import RailName as Rail

CURRENCY_RE = r"^[A-Z]{3}$"


def _order_id() -> str:
    return new_id("ord")


def _charge_id() -> str:
    return new_id("ch")


class Customer(models.Model):
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="customers")
    rail_customer_id = models.CharField(max_length=255, blank=True)
    email = models.EmailField()
    name = models.CharField(max_length=200, blank=True)
    provider_created_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["site", "rail_customer_id"],
                condition=~Q(rail_customer_id=""),
                name="customer_rail_id_unique_per_site",
            ),
        ]
        indexes = [
            models.Index(fields=["site", "email"]),
            # A purchase finds its buyer by email whatever the case (``email__iexact``, which
            # PostgreSQL runs as UPPER(email) = UPPER(%s)): without this, every purchase read
            # all of its site's customers.
            models.Index(F("site"), Upper("email"), name="customer_site_email_upper"),
        ]

    def __str__(self) -> str:
        return self.name or self.email


class OrderStatus(models.TextChoices):
    PENDING = "PENDING", "Pending"
    PAID = "PAID", "Paid"
    SHIPPED = "SHIPPED", "Shipped"
    DELIVERED = "DELIVERED", "Delivered"
    PARTIALLY_REFUNDED = "PARTIALLY_REFUNDED", "Partially refunded"
    REFUNDED = "REFUNDED", "Refunded"
    CANCELLED = "CANCELLED", "Cancelled"


REFUNDABLE_STATUSES = frozenset(
    {
        OrderStatus.PAID,
        OrderStatus.SHIPPED,
        OrderStatus.DELIVERED,
        OrderStatus.PARTIALLY_REFUNDED,
    }
)


class Order(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=_order_id, editable=False)
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="orders")
    number = models.CharField(max_length=40)
    # The purchase mandate that created the order, when an agent placed it.
    source_mandate_id = models.CharField(max_length=64, blank=True)
    placed_by_agent = models.ForeignKey(
        Agent, on_delete=models.PROTECT, null=True, blank=True, related_name="orders"
    )
    customer = models.ForeignKey(
        Customer, on_delete=models.PROTECT, null=True, blank=True, related_name="orders"
    )
    buyer_name = models.CharField(max_length=200, blank=True)
    buyer_email = models.EmailField(blank=True)
    status = models.CharField(
        max_length=20, choices=OrderStatus.choices, default=OrderStatus.PENDING
    )
    currency = models.CharField(max_length=3)
    total_minor = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["site", "number"], name="order_number_unique"),
            models.UniqueConstraint(
                fields=["site", "source_mandate_id"],
                condition=~Q(source_mandate_id=""),
                name="order_source_mandate_unique",
            ),
            models.CheckConstraint(condition=Q(total_minor__gte=0), name="order_total_gte_0"),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in OrderStatus]), name="order_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=CURRENCY_RE), name="order_currency_iso"
            ),
        ]
        indexes = [
            models.Index(fields=["site", "-created_at"]),
            models.Index(fields=["site", "status"]),
            models.Index(fields=["site", "buyer_email"]),
        ]

    def __str__(self) -> str:
        return f"Order {self.number}"

    @property
    def total(self) -> Money:
        return Money(self.total_minor, self.currency)


class OrderNumberCounter(models.Model):
    """The last sequential order number Sill gave a site's orders (``next_order_number``).

    One row per site, taken with a row lock by the transaction creating the order: two
    purchases at once get consecutive numbers, the second once the first has committed,
    and a number is found from this row, not from every order number of the site.
    """

    site = models.OneToOneField(Site, on_delete=models.CASCADE, primary_key=True, related_name="+")
    last_number = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.site_id}: {self.last_number}"


# The most a line's quantity holds (PositiveIntegerField: a PostgreSQL integer).
LINE_QUANTITY_MAX = 2**31 - 1


class LineItem(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items")
    sku = models.CharField(max_length=100)
    name = models.CharField(max_length=300)
    quantity = models.PositiveIntegerField()
    unit_price_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gte=1), name="lineitem_quantity_gte_1"),
            models.CheckConstraint(
                condition=Q(unit_price_minor__gte=0), name="lineitem_price_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=CURRENCY_RE), name="lineitem_currency_iso"
            ),
        ]

    @property
    def unit_price(self) -> Money:
        return Money(self.unit_price_minor, self.currency)

    @property
    def subtotal(self) -> Money:
        return Money(self.unit_price_minor * self.quantity, self.currency)


class ChargeStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class Charge(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=_charge_id, editable=False)
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="charges")
    rail = models.CharField(max_length=20, choices=Rail.choices)
    # e.g. Stripe PaymentIntent id and charge id; Shopify order + transaction id.
    provider_payment_id = models.CharField(max_length=255, blank=True)
    provider_charge_id = models.CharField(max_length=255, blank=True)
    # The account the payment's order belongs to, as the site's ``RailAccount`` named it then
    # (``connected_account``), where a rail's orders belong to one: a Shopify charge's shop
    # (its domain); a WooCommerce order's Stripe charge, its store (its URL: the account of
    # the site's ``woocommerce`` rail, sill.rails.registry.account_rail). After the site is
    # connected to another, this charge is refunded nowhere (sill.rails.registry.account_moved);
    # a Stripe charge is still reconciled, a Shopify one is not
    # (sill.rails.registry.readable_with_connected_account). Blank where Sill does not record
    # it (Sill's own purchases): the account connected now.
    provider_account = models.CharField(max_length=255, blank=True, default="", db_default="")
    # The account at the payment provider that holds the money, as the site's ``RailAccount``
    # named it when the charge was taken or brought in (``payment_account``; Stripe: its
    # ``acct_…`` and mode). Another account, or the other mode, holds no such payment: after
    # the site's key is replaced by one of another account this charge is refunded nowhere
    # (sill.rails.registry.payment_account_moved). Blank where Sill did not know it (charges
    # from before it kept it, a key whose account Stripe would not name): the one connected.
    payment_account = models.CharField(max_length=255, blank=True, default="", db_default="")
    amount_minor = models.BigIntegerField()
    amount_refunded_minor = models.BigIntegerField(default=0)
    # Held by refunds that are executing on the rail and not yet settled (see refunds.services).
    amount_reserved_minor = models.BigIntegerField(default=0)
    # Refunded at the rail outside Sill (e.g. in the Stripe dashboard), as its webhooks reported
    # (sill.orders.outside); kept apart from Sill's own refunds so neither is counted twice.
    amount_refunded_outside_minor = models.BigIntegerField(default=0, db_default=0)
    currency = models.CharField(max_length=3)
    captured_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=20, choices=ChargeStatus.choices, default=ChargeStatus.PENDING
    )
    failure_message = models.CharField(max_length=500, blank=True)
    # --- executing a pending charge (sill.orders.charging) ---
    # What the purchase asked to pay with, so a recovery sweep can retry without the mandate.
    payment_method = models.CharField(max_length=255, blank=True, default="", db_default="")
    attempts = models.PositiveIntegerField(default=0, db_default=0)
    # While set and in the future, one execution holds this charge; ``lease_token`` is its
    # fencing token: a worker whose token was replaced can no longer record a result.
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_token = models.CharField(max_length=32, blank=True, default="", db_default="")
    # Committed *before* the first rail call: from then on the charge is never failed until
    # the rail has said, for its idempotency key, that nothing was charged.
    rail_attempted_at = models.DateTimeField(null=True, blank=True)
    # What the rail last said of a payment it has not finished (Stripe ``processing`` or
    # ``requires_action``): the buyer may be charged, so the charge stays pending.
    rail_status = models.CharField(max_length=40, blank=True, default="", db_default="")
    # When the charge is next tried or asked about (by its task's retry, or by the sweep).
    next_check_at = models.DateTimeField(null=True, blank=True)
    # Past its attempt limit with an outcome only the rail (or a person) can settle.
    attention_since = models.DateTimeField(null=True, blank=True)
    attention_reason = models.CharField(max_length=300, blank=True, default="", db_default="")
    # When the site's owners were emailed that it needs attention: claimed by conditional
    # UPDATE before the send, given back if it fails (sill.orders.charge_attention).
    attention_notified_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["status", "next_check_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gte=0), name="charge_amount_gte_0"),
            models.CheckConstraint(
                condition=Q(amount_refunded_minor__gte=0), name="charge_refunded_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(amount_reserved_minor__gte=0), name="charge_reserved_gte_0"
            ),
            # Refunded plus in-flight never exceeds what was charged.
            models.CheckConstraint(
                condition=Q(
                    amount_refunded_minor__lte=F("amount_minor") - F("amount_reserved_minor")
                ),
                name="charge_refunded_lte_amount",
            ),
            models.CheckConstraint(
                condition=Q(amount_refunded_outside_minor__gte=0), name="charge_outside_gte_0"
            ),
            # What the rail refunded (by Sill or outside it) never exceeds what was charged. The
            # reservation is left out on purpose: an outside refund may arrive while Sill holds
            # one, and then the rail refuses Sill's refund, which releases it.
            models.CheckConstraint(
                condition=Q(
                    amount_refunded_minor__lte=F("amount_minor")
                    - F("amount_refunded_outside_minor")
                ),
                name="charge_all_refunds_lte_amount",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in ChargeStatus]),
                name="charge_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(rail__in=[r.value for r in Rail]), name="charge_rail_valid"
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=CURRENCY_RE), name="charge_currency_iso"
            ),
            models.UniqueConstraint(
                fields=["rail", "provider_charge_id"],
                condition=~Q(provider_charge_id=""),
                name="charge_provider_id_unique",
            ),
        ]

    @property
    def amount(self) -> Money:
        return Money(self.amount_minor, self.currency)

    @property
    def needs_attention(self) -> bool:
        return self.status == ChargeStatus.PENDING and self.attention_since is not None

    @property
    def amount_refunded(self) -> Money:
        return Money(self.amount_refunded_minor, self.currency)

    @property
    def amount_refunded_outside(self) -> Money:
        return Money(self.amount_refunded_outside_minor, self.currency)

    @property
    def remaining(self) -> Money:
        # Never below zero: an outside refund can overlap a reservation (see the constraints).
        left = (
            self.amount_minor
            - self.amount_refunded_minor
            - self.amount_refunded_outside_minor
            - self.amount_reserved_minor
        )
        return Money(max(left, 0), self.currency)


class DisputeStatus(models.TextChoices):
    NEEDS_RESPONSE = "needs_response", "Needs response"
    UNDER_REVIEW = "under_review", "Under review"
    WON = "won", "Won"
    LOST = "lost", "Lost"


OPEN_DISPUTE_STATUSES = frozenset({DisputeStatus.NEEDS_RESPONSE, DisputeStatus.UNDER_REVIEW})
# The disputes that stop a refund and make a charge "disputed" for the rules: open ones (the
# buyer's bank is taking the money back) and lost ones (it did: a refund would pay the buyer
# twice). A won dispute left the money with the merchant.
REFUND_BLOCKING_DISPUTE_STATUSES = OPEN_DISPUTE_STATUSES | {DisputeStatus.LOST}


class Dispute(models.Model):
    charge = models.ForeignKey(Charge, on_delete=models.CASCADE, related_name="disputes")
    provider_dispute_id = models.CharField(max_length=255, blank=True)
    reason = models.CharField(max_length=100)
    # Null, with no currency, when the rail gave the amount in a form Sill cannot read (not a
    # number, negative, past what a signed record holds): the dispute is recorded all the
    # same, since a recorded dispute is what refuses refunds of the charge.
    amount_minor = models.BigIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    status = models.CharField(max_length=20, choices=DisputeStatus.choices)
    opened_at = models.DateTimeField()
    # The rail's own status word (e.g. Stripe ``warning_needs_response``) and the time of the
    # newest event applied, so an older event delivered late never overwrites a newer one.
    rail_status = models.CharField(max_length=40, blank=True, default="", db_default="")
    rail_updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["charge", "provider_dispute_id"],
                condition=~Q(provider_dispute_id=""),
                name="dispute_provider_id_unique",
            ),
            models.CheckConstraint(condition=Q(amount_minor__gte=0), name="dispute_amount_gte_0"),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in DisputeStatus]),
                name="dispute_status_valid",
            ),
            # An amount and its currency, or neither (the amount is not known).
            models.CheckConstraint(
                condition=(
                    Q(amount_minor__isnull=False, currency__regex=CURRENCY_RE)
                    | Q(amount_minor__isnull=True, currency="")
                ),
                name="dispute_currency_iso_or_amount_unknown",
            ),
        ]

    @property
    def amount(self) -> Money | None:
        """The dispute's amount, or None when the rail's could not be read."""
        if self.amount_minor is None:
            return None
        return Money(self.amount_minor, self.currency)


class ExternalRefund(models.Model):
    """A refund made at the rail outside Sill, as the rail's webhooks reported it.

    ``counted_minor`` is what it currently adds to ``Charge.amount_refunded_outside_minor``:
    its amount while the rail reports it pending or succeeded, zero once failed or canceled.
    """

    charge = models.ForeignKey(Charge, on_delete=models.CASCADE, related_name="external_refunds")
    provider_refund_id = models.CharField(max_length=255)
    amount_minor = models.BigIntegerField()
    counted_minor = models.BigIntegerField(default=0)
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=40)
    reason = models.CharField(max_length=100, blank=True)
    created_at_rail = models.DateTimeField()
    rail_updated_at = models.DateTimeField()
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at_rail", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["charge", "provider_refund_id"], name="externalrefund_provider_id_unique"
            ),
            models.CheckConstraint(
                condition=Q(amount_minor__gt=0), name="externalrefund_amount_gt_0"
            ),
            models.CheckConstraint(
                condition=Q(counted_minor__gte=0) & Q(counted_minor__lte=F("amount_minor")),
                name="externalrefund_counted_within_amount",
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=CURRENCY_RE), name="externalrefund_currency_iso"
            ),
        ]

    def __str__(self) -> str:
        return f"external refund {self.provider_refund_id} {self.amount_minor} {self.currency}"

    @property
    def amount(self) -> Money:
        return Money(self.amount_minor, self.currency)
