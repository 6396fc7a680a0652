"""One refund's or one agent purchase's evidence, checkable offline: ``manage.py audit bundle
--refund R`` / ``--order O`` and the downloads on the refund and order pages.

A bundle (``sill-evidence-bundle-v1``, JSON) holds the mandate's bytes as the agent sent them
(agent refunds, purchases), every record about its subject with its inclusion proof, a signed
checkpoint those proofs lead to, and the audit keys with their windows.
``audit/verify_export.py bundle.json`` checks it without Sill.

Its subject is a refund (every record naming it: decision, review, settlement, reversal…) or
a purchase, named by its order (the decision Sill took on the agent's mandate and its charge's
records; not the refunds of that order, each of which has its own bundle). One code path
serves both: a bundle names its subject by the body field its records name it by
(``refund_id`` or ``order_id``), so a refund's bundle is what it always was.

The audit app does not know refunds or orders: the refunds app registers where a subject's
mandate bytes come from (:func:`register_mandate_source`).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from django.db.models import QuerySet

from audit import checkpoints, tree
from audit.models import AuditKind, AuditRecord
from audit.selectors import CHAIN_FIELDS, key_listing
from sill.accounts.models import Site
from sill.errors import NotFound

FORMAT = "sill-evidence-bundle-v1"

# A purchase's story: the decision on the agent's mandate, then what its charge did. The
# order's other records (a refund's, a dispute's, a refund made outside Sill) are not it.
PURCHASE_KINDS = (
    AuditKind.APPROVED,
    AuditKind.REJECTED,
    AuditKind.CHARGE,
    AuditKind.NEEDS_ATTENTION,
    AuditKind.LEASE_LOST,
    AuditKind.ATTENTION_RESOLVED,
)


@dataclass(frozen=True)
class Subject:
    """What a bundle is the evidence of: a refund, or the purchase that placed an order."""

    kind: Literal["refund", "order"]
    id: str

    @property
    def field(self) -> str:
        """The key naming it in the bundle, and in its records' bodies."""
        return f"{self.kind}_id"

    @property
    def label(self) -> str:
        return f"refund {self.id}" if self.kind == "refund" else f"the purchase of order {self.id}"

    def records(self) -> QuerySet[AuditRecord]:
        if self.kind == "refund":
            return AuditRecord.objects.filter(subject_refund_id=self.id)
        # A refund of the order names the order too: its records name the refund as well.
        return AuditRecord.objects.filter(
            subject_order_id=self.id, subject_refund_id="", kind__in=PURCHASE_KINDS
        )


def refund(refund_id: str) -> Subject:
    return Subject("refund", refund_id)


def purchase(order_id: str) -> Subject:
    return Subject("order", order_id)


MandateSource = Callable[[Site, str], bytes | None]
_mandate_sources: dict[str, MandateSource] = {}


def register_mandate_source(kind: Literal["refund", "order"], source: MandateSource) -> None:
    """``source(site, subject id)`` → the mandate's bytes of that ``kind`` of subject, or None
    (a staff refund)."""
    _mandate_sources[kind] = source


def site_of(subject: Subject) -> Site:
    """The site whose log has records about ``subject`` (refund and order ids are unique)."""
    record = subject.records().select_related("site").first()
    if record is None:
        raise NotFound(f"No audit records about {subject.label}.")
    return record.site


def bundle(*, site: Site, subject: Subject) -> dict[str, Any]:
    """The evidence bundle of ``subject`` on ``site``; NotFound without records about it."""
    with contextlib.suppress(checkpoints.CheckpointInconsistent):
        checkpoints.write_checkpoint(site=site)  # so the newest records are in a checkpoint
    latest = checkpoints.latest_checkpoint(site_id=site.pk)
    rows = list(subject.records().filter(site=site).order_by("seq").values(*CHAIN_FIELDS))
    if not rows or latest is None:
        raise NotFound(f"No audit records about {subject.label}.")
    stored = tree.StoredTree(site.pk, latest.tree_size)
    records = []
    for row in rows:
        if row["seq"] > latest.tree_size:
            continue  # appended since the checkpoint (the next bundle has it)
        proof = stored.inclusion_proof(row["seq"] - 1)
        records.append(
            {
                **row,
                "leaf_index": row["seq"] - 1,
                "inclusion_proof": [base64.b64encode(h).decode("ascii") for h in proof],
            }
        )
    mandate = None
    source = _mandate_sources.get(subject.kind)
    raw = source(site, subject.id) if source is not None else None
    if raw is not None:
        mandate = {"bytes_b64": base64.b64encode(raw).decode("ascii")}
    return {
        "format": FORMAT,
        "site_id": site.pk,
        "origin": checkpoints.origin_for(site.pk),
        subject.field: subject.id,
        "mandate": mandate,
        "records": records,
        "checkpoint": latest.note,
        **key_listing(),
    }


def refund_bundle(*, site: Site, refund_id: str) -> dict[str, Any]:
    """The evidence bundle of ``refund_id`` on ``site``; NotFound without records about it."""
    return bundle(site=site, subject=refund(refund_id))


def purchase_bundle(*, site: Site, order_id: str) -> dict[str, Any]:
    """The evidence bundle of the agent purchase that placed ``order_id``: its decision and its
    charge's records; NotFound without any (an order Sill did not take from an agent)."""
    return bundle(site=site, subject=purchase(order_id))
