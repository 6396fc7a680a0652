"""One refund's evidence, checkable offline: ``manage.py audit bundle --refund R`` and the
download on the refund page.

A bundle (``sill-evidence-bundle-v1``, JSON) holds the mandate's bytes as the agent sent them
(agent refunds), every record about the refund (decision, review, settlement, reversal…) with
its inclusion proof, a signed checkpoint those proofs lead to, and the audit keys with their
windows. ``audit/verify_export.py bundle.json`` checks it without Sill.

The audit app does not know refunds: the refunds app registers where a refund's mandate bytes
come from (:func:`register_mandate_source`).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable
from typing import Any

from audit import checkpoints, tree
from audit.models import AuditRecord
from audit.selectors import CHAIN_FIELDS, key_listing
from sill.accounts.models import Site
from sill.errors import NotFound

FORMAT = "sill-evidence-bundle-v1"

MandateSource = Callable[[Site, str], bytes | None]
_mandate_sources: list[MandateSource] = []


def register_mandate_source(source: MandateSource) -> None:
    """``source(site, refund_id)`` → the mandate's bytes, or None (a staff refund)."""
    if source not in _mandate_sources:
        _mandate_sources.append(source)


def site_of_refund(refund_id: str) -> Site:
    """The site whose log has records about ``refund_id`` (refund ids are unique ULIDs)."""
    record = AuditRecord.objects.filter(subject_refund_id=refund_id).select_related("site").first()
    if record is None:
        raise NotFound(f"No audit records about refund {refund_id}.")
    return record.site


def refund_bundle(*, site: Site, refund_id: str) -> dict[str, Any]:
    """The evidence bundle of ``refund_id`` on ``site``; NotFound without records about it."""
    with contextlib.suppress(checkpoints.CheckpointInconsistent):
        checkpoints.write_checkpoint(site=site)  # so the newest records are in a checkpoint
    latest = checkpoints.latest_checkpoint(site_id=site.pk)
    rows = list(
        AuditRecord.objects.filter(site=site, subject_refund_id=refund_id)
        .order_by("seq")
        .values(*CHAIN_FIELDS)
    )
    if not rows or latest is None:
        raise NotFound(f"No audit records about refund {refund_id}.")
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
    for source in _mandate_sources:
        raw = source(site, refund_id)
        if raw is not None:
            mandate = {"bytes_b64": base64.b64encode(raw).decode("ascii")}
            break
    return {
        "format": FORMAT,
        "site_id": site.pk,
        "origin": checkpoints.origin_for(site.pk),
        "refund_id": refund_id,
        "mandate": mandate,
        "records": records,
        "checkpoint": latest.note,
        **key_listing(),
    }
