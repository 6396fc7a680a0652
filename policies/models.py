"""Policy versions: a site's rules and AUTO-REFUND settings, one immutable row per change."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from sill.accounts.models import Site
from sill.orders.models import CURRENCY_RE

BASELINE_NUMBER = 1  # v1-default, the built-in baseline every site starts on (never stored)


class PolicyVersion(models.Model):
    """One version of a site's policy. Never edited: a change writes the next version.

    ``active`` marks the version decisions use (one per site, by a database constraint).
    Compiled rules are cached by ``rules_digest``, the hash of the rules themselves, so a
    cache entry can never describe other rules than the ones it was compiled from.
    """

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="policy_versions")
    number = models.PositiveIntegerField()
    rules = models.JSONField(default=list, blank=True)
    # sha256 of the canonical rules: the compile cache's key (content, not a reusable row id).
    rules_digest = models.CharField(max_length=64)
    auto_refund_enabled = models.BooleanField(default=False)
    auto_refund_cap_minor = models.BigIntegerField(default=0)
    auto_refund_currency = models.CharField(max_length=3, default="USD")
    active = models.BooleanField(default=True)
    # What this change did, as people read it ("Applied template conservative (enforced)").
    summary = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="policy_versions",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["site_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["site", "number"], name="policyversion_number_unique"),
            models.UniqueConstraint(
                fields=["site"], condition=Q(active=True), name="policyversion_one_active"
            ),
            models.CheckConstraint(
                condition=Q(number__gt=BASELINE_NUMBER), name="policyversion_number_after_v1"
            ),
            models.CheckConstraint(
                condition=Q(auto_refund_cap_minor__gte=0), name="policyversion_cap_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(auto_refund_currency__regex=CURRENCY_RE),
                name="policyversion_currency_iso",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.label} of {self.site_id}"

    @property
    def label(self) -> str:
        return f"v{self.number}"
