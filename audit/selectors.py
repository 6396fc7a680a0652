"""Reading the audit log: records of a site, verification, export. All scoped to one site."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet

from audit import chain, keys
from audit.models import AuditChainHead, AuditRecord
from sill.accounts.models import Site

EXPORT_FORMAT = "sill-audit-export-v1"
CHAIN_FIELDS = ("site_id", "seq", "kind", "payload", "prev_hash", "hash", "signature", "key_id")


def records_for(site: Site, *, kind: str | None = None) -> QuerySet[AuditRecord]:
    records = AuditRecord.objects.filter(site=site)
    if kind is not None:
        records = records.filter(kind=kind)
    return records.order_by("seq")


def records_about(
    *, site: Site, refund_id: str | None = None, order_id: str | None = None
) -> QuerySet[AuditRecord]:
    """The site's records whose body names ``refund_id`` (and/or ``order_id``), in seq order.

    Matched on the subject columns ``append_record`` fills from the body's top-level
    ``refund_id`` / ``order_id``: exact ids, never a substring of the payload. Naming
    neither raises ``ValueError`` (that would be every record of the site).
    """
    if not refund_id and not order_id:
        raise ValueError("records_about needs a refund_id or an order_id")
    records = AuditRecord.objects.filter(site=site)
    if refund_id:
        records = records.filter(subject_refund_id=refund_id)
    if order_id:
        records = records.filter(subject_order_id=order_id)
    return records.order_by("seq")


def record_by_hash(site: Site, hash: str) -> AuditRecord | None:
    return AuditRecord.objects.filter(site=site, hash=hash).first()


def chain_rows_for(site: Site) -> Iterator[dict[str, Any]]:
    """The site's records as :func:`audit.chain.verify_chain` reads them, in seq order."""
    return AuditRecord.objects.filter(site=site).order_by("seq").values(*CHAIN_FIELDS).iterator()


def chain_verification(site: Site) -> chain.VerifyResult:
    """Verify ``site``'s whole chain against Sill's public keys and its chain head.

    The head check catches records deleted from the end, which the chain alone cannot.
    """
    head = AuditChainHead.objects.filter(site=site).values_list("last_seq", "last_hash").first()
    rows = (
        AuditRecord.objects.filter(site=site)
        .order_by("seq")
        .values(*CHAIN_FIELDS, *(column for column, _ in chain.SUBJECT_COLUMNS))
        .iterator()
    )
    return chain.verify_chain(
        rows,
        {key_id: bytes(key) for key_id, key in keys.public_keys().items()},
        expected_head=head or (0, chain.GENESIS_HASH),
    )


def export_lines(site: Site) -> Iterator[str]:
    """JSON lines: a header with the public keys, then one line per record in seq order."""
    header = {
        "type": "header",
        "format": EXPORT_FORMAT,
        "site_id": site.pk,
        "public_keys": {
            key_id: chain.b64url_encode(bytes(key)) for key_id, key in keys.public_keys().items()
        },
    }
    yield json.dumps(header, ensure_ascii=False)
    for row in chain_rows_for(site):
        yield json.dumps({"type": "record", **row}, ensure_ascii=False)
