"""The transparency log's public API: signed checkpoints, audit keys and Merkle proofs.

Public on purpose (anyone may check a log; nothing here reveals a record's content, only
hashes and sizes), rate-limited per address like every API, read-only:

- ``GET /.well-known/sill-audit-keys.json`` — every audit key with its validity window (a
  rotated key with the configured key's endorsement);
- ``GET /audit/<site_id>/checkpoint`` — the latest signed checkpoint (``text/plain``), and
  ``GET /audit/<site_id>/checkpoint/<size>`` — an earlier one;
- ``GET /audit/<site_id>/proof/inclusion?seq=N[&size=M]`` — the audit path of record ``N``
  in the tree of ``M`` records (default: the latest checkpoint's size);
- ``GET /audit/<site_id>/proof/consistency?from=A[&to=B]`` — that the tree of ``A`` records
  is a prefix of the tree of ``B`` (default: the latest checkpoint's size).

Hashes are standard base64, as in checkpoints. Errors are ``{"error": {"code", "message",
"field"}}``: ``not_found`` (no such site, checkpoint or record), ``invalid_field``.
"""

from __future__ import annotations

import base64
from typing import Any

from django.http import HttpResponse
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from audit import checkpoints, keys, merkle, tree
from audit.chain import b64url_encode
from audit.models import AuditChainHead, AuditCheckpoint
from audit.selectors import window_listing
from sill.api_view import ApiView
from sill.errors import NotFound, SillError


class InvalidProofRequest(SillError):
    code = "invalid_field"
    status = 400

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, field=field)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


class OneRepresentation(BaseContentNegotiation):
    """Each answer here has one form (a checkpoint is a text/plain signed note, the rest
    JSON): the client's ``Accept`` chooses nothing, so it never makes a 406. DRF's negotiation
    matched it against the JSON renderer alone, and refused ``Accept: text/plain`` (what a
    log monitor asks a checkpoint for) with 406 before the view ran."""

    def select_parser(self, request: Request, parsers: Any) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: Any, format_suffix: str | None = None
    ) -> tuple[Any, str]:
        return renderers[0], renderers[0].media_type


class PublicApi(ApiView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    content_negotiation_class = OneRepresentation


class AuditKeysApi(PublicApi):
    @extend_schema(
        operation_id="audit_keys",
        summary="Every audit signing key with its validity window",
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        listed = []
        for window in sorted(
            keys.key_windows().values(),
            key=lambda w: (w.valid_from is not None, w.valid_from or 0, w.key_id),
        ):
            listed.append(
                {
                    "key_id": window.key_id,
                    "algorithm": "Ed25519",
                    "public_key": b64url_encode(window.public_key),
                    **window_listing(window),
                }
            )
        response = Response(
            {
                "keys": listed,
                # A site's log is named <origin_prefix>/<site id>; its checkpoints are signed
                # notes by that name (c2sp.org/signed-note), verifier key:
                # <name>+<key id>+base64(0x01 || public key).
                "origin_prefix": checkpoints.origin_for("").rstrip("/"),
            }
        )
        response["Cache-Control"] = "public, max-age=60"
        return response


class CheckpointApi(PublicApi):
    @extend_schema(
        operation_id="audit_checkpoint_latest",
        summary="The latest signed checkpoint of a site's log (text/plain, C2SP signed note)",
        responses={(200, "text/plain"): OpenApiTypes.STR, 404: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, site_id: str) -> HttpResponse:
        return _checkpoint_answer(checkpoints.latest_checkpoint(site_id=site_id), latest=True)


class CheckpointAtApi(PublicApi):
    @extend_schema(
        operation_id="audit_checkpoint_at",
        summary="The signed checkpoint of a site's log at a tree size",
        responses={(200, "text/plain"): OpenApiTypes.STR, 404: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, site_id: str, size: int) -> HttpResponse:
        found = checkpoints.checkpoint_at(site_id=site_id, size=size)
        return _checkpoint_answer(found, latest=False)


def _checkpoint_answer(found: AuditCheckpoint | None, *, latest: bool) -> HttpResponse:
    if found is None:
        raise NotFound("No signed checkpoint of that log.")
    response = HttpResponse(found.note, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-cache" if latest else "public, max-age=86400"
    return response


class InclusionProofApi(PublicApi):
    @extend_schema(
        operation_id="audit_inclusion_proof",
        summary="The inclusion proof of one record in a signed tree",
        parameters=[
            OpenApiParameter("seq", int, required=True),
            OpenApiParameter("size", int, required=False),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, site_id: str) -> Response:
        seq = _int_param(request, "seq", minimum=1)
        size, checkpoint = _tree_size(request, site_id, "size")
        if seq > size:
            raise InvalidProofRequest(
                f"Record {seq} is not in the tree of {size} records.", field="seq"
            )
        stored = tree.StoredTree(site_id, size)
        try:
            proof = stored.inclusion_proof(seq - 1)
            leaf = stored.leaf(seq - 1)
        except merkle.ProofError as exc:
            raise NotFound(f"The stored tree cannot prove it: {exc}") from exc
        return _proof_answer(
            {
                "site_id": site_id,
                "seq": seq,
                "leaf_index": seq - 1,
                "tree_size": size,
                "leaf_hash": _b64(leaf),
                "proof": [_b64(h) for h in proof],
                "checkpoint": checkpoint.note if checkpoint else None,
            },
            fixed="size" in request.query_params and checkpoint is not None,
        )


class ConsistencyProofApi(PublicApi):
    @extend_schema(
        operation_id="audit_consistency_proof",
        summary="The consistency proof between two tree sizes",
        parameters=[
            OpenApiParameter("from", int, required=True),
            OpenApiParameter("to", int, required=False),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, site_id: str) -> Response:
        first = _int_param(request, "from", minimum=1)
        second, checkpoint = _tree_size(request, site_id, "to")
        if first > second:
            raise InvalidProofRequest(
                f"The tree of {first} records does not come before the tree of {second}.",
                field="from",
            )
        try:
            proof = tree.StoredTree(site_id, second).consistency_proof(first)
        except merkle.ProofError as exc:
            raise NotFound(f"The stored tree cannot prove it: {exc}") from exc
        return _proof_answer(
            {
                "site_id": site_id,
                "size1": first,
                "size2": second,
                "proof": [_b64(h) for h in proof],
                "checkpoint": checkpoint.note if checkpoint else None,
            },
            fixed="to" in request.query_params and checkpoint is not None,
        )


def _proof_answer(body: dict[str, Any], *, fixed: bool) -> Response:
    """``fixed``: the tree size was asked for and has a signed checkpoint, so the answer never
    changes and any cache may keep it, as it keeps that checkpoint. Otherwise the answer follows
    the latest checkpoint (or gains one when the size is signed): revalidated every time, like
    the latest checkpoint, so a monitor never holds a proof older than the checkpoint it saw."""
    response = Response(body)
    response["Cache-Control"] = "public, max-age=86400" if fixed else "no-cache"
    return response


def _int_param(request: Request, name: str, *, minimum: int) -> int:
    raw = request.query_params.get(name, "")
    if not raw.isascii() or not raw.isdigit() or len(raw) > 15 or int(raw) < minimum:
        raise InvalidProofRequest(f"{name} must be a whole number from {minimum}.", field=name)
    return int(raw)


def _tree_size(request: Request, site_id: str, name: str) -> tuple[int, AuditCheckpoint | None]:
    """The tree size asked for (default: the latest checkpoint's) and its checkpoint."""
    head = AuditChainHead.objects.filter(site_id=site_id).values_list("last_seq", flat=True)
    current = head.first()
    if current is None:
        raise NotFound("No such log.")
    if name in request.query_params:
        size = _int_param(request, name, minimum=1)
        if size > current:
            raise InvalidProofRequest(f"The log has {current} records.", field=name)
        return size, checkpoints.checkpoint_at(site_id=site_id, size=size)
    latest = checkpoints.latest_checkpoint(site_id=site_id)
    if latest is None:
        raise NotFound("The log has no signed checkpoint yet.")
    return latest.tree_size, latest


app_name = "transparency"
urlpatterns = [
    path(".well-known/sill-audit-keys.json", AuditKeysApi.as_view(), name="keys"),
    path("audit/<str:site_id>/checkpoint", CheckpointApi.as_view(), name="checkpoint"),
    path(
        "audit/<str:site_id>/checkpoint/<int:size>",
        CheckpointAtApi.as_view(),
        name="checkpoint-at",
    ),
    path(
        "audit/<str:site_id>/proof/inclusion", InclusionProofApi.as_view(), name="inclusion-proof"
    ),
    path(
        "audit/<str:site_id>/proof/consistency",
        ConsistencyProofApi.as_view(),
        name="consistency-proof",
    ),
]
