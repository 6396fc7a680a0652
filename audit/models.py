"""The append-only, hash-chained, signed audit log (one chain per site).

Records are written only by :func:`audit.services.append_record`. The model refuses updates
and deletes (``save()`` of an existing row, ``delete()``, ``QuerySet.update/delete``) and is
deliberately not registered in the Django admin. That guards against accidents; tampering
with the database directly is what the hash chain and signatures detect
(``manage.py audit verify``).
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import models
from django.db.models import Q

from audit.chain import SUBJECT_MAX_LENGTH
from sill.accounts.models import Site


class AuditKind(models.TextChoices):
    """Stable kind strings; they are hashed into every payload, so never rename one."""

    # Decisions (the payload body carries "decision" too).
    APPROVED = "approved", "Approved"
    ESCALATED = "escalated", "Escalated (held for review)"
    ESCALATED_APPROVED = "escalated_approved", "Escalated, then approved"
    ESCALATED_REJECTED = "escalated_rejected", "Escalated, then rejected"
    REJECTED = "rejected", "Rejected"
    # Everything else that changes money or the rules that move it.
    SETTLEMENT = "settlement", "Settlement"
    REVIEW = "review", "Review"
    POLICY_CHANGE = "policy_change", "Policy change"
    KEY_CHANGE = "key_change", "Key change"
    REASON_CHANGE = "reason_change", "Reason change"
    EXTERNAL_REFUND = "external_refund", "External refund"
    DISPUTE = "dispute", "Dispute"
    # The money path's own events.
    CHARGE = "charge", "Charge"
    NEEDS_ATTENTION = "needs_attention", "Needs attention"
    ATTENTION_RESOLVED = "attention_resolved", "Attention resolved"
    # A failed refund an owner or admin marked handled: off the to-do lists, nothing moved.
    FAILURE_HANDLED = "failure_handled", "Failed refund marked handled"
    LEASE_LOST = "lease_lost", "Execution lease lost"
    # What the rail reported afterwards: a settled refund that failed there.
    REFUND_REVERSED = "refund_reversed", "Refund failed after settlement"
    # Reconciliation: a difference between Sill's books and the rail's, and its resolution.
    RECONCILIATION_FOUND = "reconciliation_found", "Reconciliation difference found"
    RECONCILIATION_RESOLVED = "reconciliation_resolved", "Reconciliation difference resolved"
    # Administration of the site.
    MEMBER_CHANGE = "member_change", "Member change"
    AGENT_CHANGE = "agent_change", "Agent change"
    RAIL_CHANGE = "rail_change", "Rail change"
    SETTINGS_CHANGE = "settings_change", "Settings change"


DECISION_KINDS = frozenset(
    {
        AuditKind.APPROVED,
        AuditKind.ESCALATED,
        AuditKind.ESCALATED_APPROVED,
        AuditKind.ESCALATED_REJECTED,
        AuditKind.REJECTED,
    }
)


# Sill's ids (refunds, orders) are at most 40 characters.


class AuditLogImmutable(Exception):
    """Raised on any attempt to change or remove an audit record through the ORM."""


class AuditRecordQuerySet(models.QuerySet["AuditRecord"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise AuditLogImmutable("audit records are append-only")

    def delete(self) -> NoReturn:
        raise AuditLogImmutable("audit records are append-only")


class AuditRecord(models.Model):
    # (site, seq) is unique and indexed: no index of the site alone (one less per append).
    site = models.ForeignKey(
        Site, on_delete=models.PROTECT, db_index=False, related_name="audit_records"
    )
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=32, choices=AuditKind.choices)
    # The exact RFC 8785 text that was hashed (a JSONField would re-serialise it).
    payload = models.TextField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    # ed25519, base64url without padding: 86 characters.
    signature = models.CharField(max_length=88)
    key_id = models.CharField(max_length=64)
    # The payload's recorded_at (millisecond precision); a column so it can be indexed/shown.
    created_at = models.DateTimeField()
    # What the record is about, copied from its body so lookups need not search the payload.
    # Not hashed or signed: the payload stays the only evidence; these are an index into it
    # ("" when the body names no refund / order).
    subject_refund_id = models.CharField(
        max_length=SUBJECT_MAX_LENGTH, blank=True, default="", db_default=""
    )
    subject_order_id = models.CharField(
        max_length=SUBJECT_MAX_LENGTH, blank=True, default="", db_default=""
    )

    objects = AuditRecordQuerySet.as_manager()

    class Meta:
        ordering = ["site_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["site", "seq"], name="auditrecord_unique_seq"),
            models.UniqueConstraint(fields=["site", "hash"], name="auditrecord_unique_hash"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="auditrecord_seq_positive"),
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in AuditKind]), name="auditrecord_kind_valid"
            ),
        ]
        indexes = [
            # Lookups are per site, in chain order (audit.selectors.records_about).
            models.Index(fields=["site", "subject_refund_id", "seq"], name="auditrecord_refund"),
            models.Index(fields=["site", "subject_order_id", "seq"], name="auditrecord_order"),
            # Activity's date filter (audit/activity.py).
            models.Index(fields=["site", "created_at"], name="auditrecord_site_time"),
        ]

    def __str__(self) -> str:
        return f"{self.site_id}#{self.seq} {self.kind}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AuditLogImmutable("audit records are append-only")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AuditLogImmutable("audit records are append-only")


class AuditChainHead(models.Model):
    """The last ``(seq, hash)`` of a site's chain.

    Appends lock this row (``select_for_update``) inside the caller's transaction, so on
    PostgreSQL they serialise per site and the sequence has no gaps or duplicates; it also lets
    ``audit verify`` notice records deleted from the end of a chain.
    """

    site = models.OneToOneField(
        Site, on_delete=models.PROTECT, primary_key=True, related_name="audit_chain_head"
    )
    last_seq = models.BigIntegerField(default=0)
    last_hash = models.CharField(max_length=64)
    # The Merkle tree's right edge at last_seq leaves: the roots of its perfect subtrees, left
    # to right, hex, space-separated (audit/tree.py). Appends grow it under the same lock.
    tree_frontier = models.TextField(blank=True, default="", db_default="")
    # The last record's recorded_at: the next one is never timed before it (audit.services),
    # so a host whose clock runs behind another's cannot sign with a key the chain has
    # already moved past. NULL on a new site's head (and on heads of versions before it).
    last_recorded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(last_seq__gte=0), name="auditchainhead_seq_nonnegative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.site_id} @ {self.last_seq}"


class AuditTreeNode(models.Model):
    """A complete subtree of a site's RFC 6962 Merkle tree over its records (audit/tree.py).

    Level 0 holds the leaf hashes (``index`` = seq - 1); a node at ``level`` L and ``index`` i
    is the root of leaves ``[i * 2**L, (i + 1) * 2**L)``. Written once when it completes,
    beside the record that completes it; proofs read them.
    """

    # (site, level, index) is unique and indexed: no index of the site alone.
    site = models.ForeignKey(
        Site, on_delete=models.PROTECT, db_index=False, related_name="audit_tree_nodes"
    )
    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["site", "level", "index"], name="audittreenode_unique_position"
            ),
            models.CheckConstraint(condition=Q(index__gte=0), name="audittreenode_index_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.site_id} L{self.level}#{self.index}"


class AuditCheckpoint(models.Model):
    """A signed checkpoint of a site's tree (C2SP tlog-checkpoint; audit/checkpoints.py).

    ``note`` is the whole signed note as published; ``tree_size``/``root_hash`` repeat its text
    for lookups. Each is consistent with the one before (checked before signing).
    """

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="audit_checkpoints")
    tree_size = models.BigIntegerField()
    root_hash = models.CharField(max_length=64)
    note = models.TextField()
    key_id = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    # When every configured destination (SILL_AUDIT_CHECKPOINT_DIR / _URL) took it.
    published_at = models.DateTimeField(null=True, blank=True)
    publish_attempts = models.PositiveIntegerField(default=0)
    last_publish_error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["site", "tree_size"], name="auditcheckpoint_unique_size"
            ),
            models.CheckConstraint(
                condition=Q(tree_size__gte=1), name="auditcheckpoint_size_positive"
            ),
        ]
        indexes = [models.Index(fields=["site", "-tree_size"], name="auditcheckpoint_latest")]

    def __str__(self) -> str:
        return f"{self.site_id} checkpoint @ {self.tree_size}"


class AuditKey(models.Model):
    """A rotated audit signing key (``manage.py audit rotate-key``; audit/keys.py).

    The key configured in settings (or generated under the data dir) signs until the first of
    these becomes valid; each then signs from its ``valid_from`` until the next one's. The seed
    is sealed with SECRET_KEY (sill.rails.secrets), bound to the key id. ``endorsement`` is
    the configured key's signature over the key id, public key and ``valid_from``
    (:func:`audit.keys.endorsement_statement`): a row without a valid one is ignored, so
    database access alone cannot add a key.
    """

    key_id = models.CharField(max_length=64, unique=True)
    public_key = models.CharField(max_length=64)  # base64url, 32 bytes
    sealed_seed = models.BinaryField()
    valid_from = models.DateTimeField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # ed25519, base64url without padding: 86 characters ("" = not endorsed, never trusted).
    endorsement = models.CharField(max_length=88, blank=True, default="", db_default="")

    class Meta:
        ordering = ["valid_from"]

    def __str__(self) -> str:
        return f"{self.key_id} from {self.valid_from:%Y-%m-%d %H:%M}"


# Why a check ended failed without reading the log to an answer (audit/verification.py): it
# says nothing about the chain, and Activity says "not verified", never "broken".
CHECK_LOST = "the check did not finish (its worker stopped); start it again"
CHECK_NOT_STARTED = (
    "the check could not be started: Sill's task queue did not answer; start it again in a "
    "minute, and if it keeps failing, tell whoever runs Sill"
)


class AuditVerification(models.Model):
    """One check of a site's whole log, run by a worker (audit/verification.py), never inside
    a page request; Activity shows its progress and result."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        OK = "ok", "Verified"
        FAILED = "failed", "Broken"

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="audit_verifications")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.RUNNING)
    requested_by = models.CharField(max_length=254, blank=True, default="")
    total = models.BigIntegerField(default=0)
    checked = models.BigIntegerField(default=0)
    first_bad_seq = models.BigIntegerField(null=True, blank=True)
    problem = models.TextField(blank=True, default="")
    started_at = models.DateTimeField()
    # When the worker last wrote progress (every 1,000 records): a check is lost once it has
    # said nothing for audit.verification.STALE_AFTER, however long it has been running.
    progress_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["site", "-started_at"], name="auditverification_latest")]

    def __str__(self) -> str:
        return f"{self.site_id} verification {self.status}"

    @property
    def unanswered(self) -> bool:
        """Failed without an answer about the chain: its worker stopped, or it never started."""
        return self.status == self.Status.FAILED and self.problem in (
            CHECK_LOST,
            CHECK_NOT_STARTED,
        )
