"""Per-site rail credentials, and the mock rail's own "provider database"."""

from __future__ import annotations

import logging

from django.db import DatabaseError, models, transaction
from django.db.models import Q

from sill.accounts.models import Site
from sill.orders.models import Rail
from sill.rails.secrets import (
    RailSecretUnreadable,
    SecretBinding,
    encrypt_secret,
    open_secret,
)

logger = logging.getLogger(__name__)


class RailMode(models.TextChoices):
    TEST = "test", "Test"
    LIVE = "live", "Live"


class RailAccount(models.Model):
    """One site's configuration of one rail. The API key is stored encrypted (secrets.py)."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="rail_accounts")
    rail = models.CharField(max_length=20, choices=Rail.choices)
    enabled = models.BooleanField(default=True)
    mode = models.CharField(max_length=4, choices=RailMode.choices, default=RailMode.TEST)
    secret_encrypted = models.BinaryField(blank=True, default=b"")
    # The rail's webhook signing secrets, one per line (several while one is being rotated),
    # encrypted like the API key but bound to their own field name.
    webhook_secrets_encrypted = models.BinaryField(blank=True, default=b"", db_default=b"")
    # Stripe Connect: sent as the Stripe-Account header when set.
    connected_account = models.CharField(max_length=255, blank=True)
    # The provider account the saved credentials act on, as the provider named it after they
    # were saved (sill.rails.payment_account; Stripe: ``acct_… (test mode)``), so that a charge
    # records which account holds its money (``Charge.payment_account``). Blank until it is
    # read, or where the provider would not say: unknown, nothing is refused for it.
    payment_account = models.CharField(max_length=255, blank=True, default="", db_default="")
    # Overrides the provider's API address, e.g. http://127.0.0.1:8420 for localstripe.
    api_base = models.URLField(max_length=255, blank=True)
    # Mock rail scripting (see sill.rails.mock); ignored by the other rails.
    config = models.JSONField(default=dict, blank=True)
    # WooCommerce: the store's orders modified up to this time were read by a sync (the last
    # complete page's newest); the next sync reads on from it. None: read from the start.
    orders_synced_through = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["site_id", "rail"]
        constraints = [
            models.UniqueConstraint(fields=["site", "rail"], name="railaccount_one_per_site"),
            models.CheckConstraint(
                condition=Q(mode__in=[m.value for m in RailMode]), name="railaccount_mode_valid"
            ),
            models.CheckConstraint(
                condition=Q(rail__in=[r.value for r in Rail]), name="railaccount_rail_valid"
            ),
        ]

    def __str__(self) -> str:
        # Never the secret: this also serves as the model's repr.
        state = "enabled" if self.enabled else "disabled"
        return f"{self.rail} rail of {self.site_id} ({self.mode}, {state})"

    @property
    def has_secret(self) -> bool:
        return bool(self.secret_encrypted)

    def secret_binding(self) -> SecretBinding:
        """What the stored credential is bound to (secrets.py): this site and this rail."""
        if not self.site_id or not self.rail:
            raise ValueError("set the account's site and rail before its secret")
        return SecretBinding(site_id=str(self.site_id), rail=self.rail)

    def set_secret(self, plain: str) -> None:
        """Encrypt ``plain`` into ``secret_encrypted`` for this site and rail (the caller saves)."""
        self.secret_encrypted = encrypt_secret(plain, binding=self.secret_binding())

    def webhook_secrets_binding(self) -> SecretBinding:
        """The webhook signing secrets' binding: this site and rail, their own field."""
        return SecretBinding(**{**self.secret_binding().__dict__, "field": "webhook_secrets"})

    def get_secret(self) -> str:
        """The plain secret, ``""`` if none; raises ``RailSecretUnreadable`` if no key opens it.

        A secret stored in the legacy format or under a fallback key is re-encrypted with the
        current ``SECRET_KEY`` right away (``manage.py rails reencrypt-secrets`` does it for every
        sealed secret at once).
        """
        opened = open_secret(self.secret_encrypted, binding=self.secret_binding())
        if not opened.current and self.pk is not None:
            self._store_reencrypted(opened.plain, opened.stale_because, quiet=True)
        return opened.plain

    def secret_opens(self) -> bool:
        """Whether a key opens the stored secret (True when none is stored), writing nothing.

        For decisions: :meth:`get_secret` may rewrite a blob stored under a fallback key, and
        a decision only needs to know that the rail will be able to read its key. No work
        at all for an account without a secret (the mock rail).
        """
        if not self.has_secret:
            return True
        try:
            open_secret(self.secret_encrypted, binding=self.secret_binding())
        except RailSecretUnreadable:
            return False
        return True

    @property
    def has_webhook_secrets(self) -> bool:
        return bool(self.webhook_secrets_encrypted)

    def set_webhook_secrets(self, secrets: list[str]) -> None:
        """Encrypt the signing secrets (blank ones dropped) for this site and rail."""
        plain = "\n".join(s.strip() for s in secrets if s.strip())
        self.webhook_secrets_encrypted = encrypt_secret(
            plain, binding=self.webhook_secrets_binding()
        )

    def get_webhook_secrets(self) -> list[str]:
        """The signing secrets; raises ``RailSecretUnreadable`` if no key opens them."""
        plain = open_secret(
            self.webhook_secrets_encrypted, binding=self.webhook_secrets_binding()
        ).plain
        return [line for line in plain.splitlines() if line]

    def _store_reencrypted(self, plain: str, stale_because: str, *, quiet: bool = False) -> bool:
        old = bytes(self.secret_encrypted or b"")
        new = encrypt_secret(plain, binding=self.secret_binding())
        try:
            # A savepoint, so a failed write never poisons the caller's transaction (reads
            # happen inside refund execution); conditional on the old blob, so a key saved
            # meanwhile on Settings → Rails is never overwritten by the old one.
            with transaction.atomic():
                updated = RailAccount.objects.filter(pk=self.pk, secret_encrypted=old).update(
                    secret_encrypted=new
                )
        except DatabaseError as exc:
            if not quiet:
                raise
            # The class only: a driver's message may quote the statement's parameters.
            logger.warning(
                "could not re-encrypt the %s rail credential of site %s (stored under %s): "
                "%s; it stays readable and is retried on the next read",
                self.rail,
                self.site_id,
                stale_because,
                type(exc).__name__,
            )
            return False
        if not updated:
            return False
        self.secret_encrypted = new
        logger.info(
            "re-encrypted the %s rail credential of site %s with the current SECRET_KEY "
            "(it was stored under %s)",
            self.rail,
            self.site_id,
            stale_because,
        )
        return True


class MockEntryKind(models.TextChoices):
    CHARGE = "charge", "Charge"
    REFUND = "refund", "Refund"


class MockLedgerEntry(models.Model):
    """The mock provider's own record of what it did (never Sill's view of it).

    It lives in Sill's database only because the mock has no server of its own; Sill's refund
    code must still treat it as the provider's state and reach it only through ``MockRail``,
    so that recovery after a crashed worker is exercised the way it would be on Stripe.
    """

    site_id = models.CharField(max_length=26, db_index=True)
    kind = models.CharField(max_length=10, choices=MockEntryKind.choices)
    idempotency_key = models.CharField(max_length=255)
    # mock_pi_… for a charge, mock_re_… for a refund.
    provider_id = models.CharField(max_length=64, unique=True)
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    # A charge: its own mock_ch_… id. A refund: the charge it refunded.
    provider_charge_id = models.CharField(max_length=64, db_index=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name_plural = "mock ledger entries"
        constraints = [
            # Idempotency keys are scoped per merchant account, as on real providers.
            models.UniqueConstraint(
                fields=["site_id", "idempotency_key"], name="mockledger_key_unique_per_site"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in MockEntryKind]),
                name="mockledger_kind_valid",
            ),
            models.CheckConstraint(condition=Q(amount_minor__gt=0), name="mockledger_amount_gt_0"),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="mockledger_currency_iso"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.provider_id} {self.amount_minor} {self.currency}"


class MockCallCount(models.Model):
    """How many times the mock rail was called with one idempotency key.

    Scripted failures with ``fail_times`` need the count across processes (tasks retry in
    other workers), and a call that "times out" leaves no ledger entry to count on.
    """

    site_id = models.CharField(max_length=26)
    operation = models.CharField(max_length=10, choices=MockEntryKind.choices)
    idempotency_key = models.CharField(max_length=255)
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["site_id", "operation", "idempotency_key"],
                name="mockcallcount_unique",
            ),
        ]


class WebhookEvent(models.Model):
    """One event a rail delivered, kept once per id: a redelivery finds it and changes nothing."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="webhook_events")
    rail = models.CharField(max_length=20, choices=Rail.choices)
    event_id = models.CharField(max_length=255)
    type = models.CharField(max_length=100)
    # The verified raw body, as received (text: the signature covers exactly these bytes).
    payload = models.TextField()
    # The store that sent it, whose secret verified it: the site's connected store at receipt
    # (WooCommerce: its URL; Shopify: its shop domain). Processing files the event under this
    # store, and settles it unapplied if the site is connected to another store by then.
    # Blank: Stripe's and PayPal's events (their payment ids are global: no store to name), or
    # an event applied before Sill kept it (migration 0008 named the waiting ones'); for a blank
    # one processing takes the store connected now, as before.
    sender = models.CharField(max_length=255, blank=True, default="", db_default="")
    # Shopify and WooCommerce sign the body alone, not the delivery id beside it: the
    # sha256 (hex) of the signed body, kept once per site and rail, so a captured delivery
    # replayed under fresh ids is a duplicate (sill.rails.webhook_common.body_digest).
    # Blank: Stripe's and PayPal's events (their ids are signed), or a body another stored
    # event already held when Sill began keeping digests (migration 0009).
    body_sha256 = models.CharField(max_length=64, blank=True, default="", db_default="")
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    # What processing concluded, e.g. "external refund recorded" or "not Sill's charge".
    outcome = models.CharField(max_length=300, blank=True)
    # Processing attempts started (sill.rails.event_attempts): a crash mid-attempt counts too,
    # so an event that kills its worker is bounded like one that raises.
    attempts = models.PositiveIntegerField(default=0, db_default=0)
    # When the last attempt started, or the retry task last re-enqueued the event.
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    # Why the last failed attempt failed; kept after a later success, as its history.
    last_error = models.CharField(max_length=500, blank=True, default="", db_default="")
    # Set once the attempts ran out: the retry task stops and says so, loudly, once.
    gave_up_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["received_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["site", "rail", "event_id"], name="webhookevent_unique_per_site_rail"
            ),
            models.UniqueConstraint(
                fields=["site", "rail", "body_sha256"],
                condition=~Q(body_sha256=""),
                name="webhookevent_body_once_per_site_rail",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rail} event {self.event_id} ({self.type})"


# The WooCommerce models live in their package; imported here so the app registers them.
from sill.rails.woocommerce.models import WooOrderLink, WooRefundRecord  # noqa: E402, F401
