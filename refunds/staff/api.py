"""The staff refund API: ``POST /api/order/{order_id}/refund``.

Body: exactly one of ``{"amount": 15.00}``, ``{"percentage": 25}`` or ``{"full": true}``, plus
``reasonId`` (an active leaf of the site's reason tree) and an optional ``reason`` text (kept
as the refund's note). Optional ``expectedRemaining``: the refundable amount the caller last
saw; if it changed, nothing is refunded (409 ``order_changed``), which makes a retried
request safe.

Authentication is the browser session with CSRF (DRF's ``SessionAuthentication``) or a
member's bearer token from ``manage.py members token`` (pinned to that token's site). Access
is the same check as the order page: ``Cap.REFUND`` on the caller's site; another site's order
is a 404.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.http import Http404
from django.utils.text import capfirst
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from refunds.labels import attention_words
from refunds.models import Refund, RefundStatus
from refunds.quote import charged_charge, held_total
from refunds.reasons.selectors import pickable_reason
from refunds.staff import idempotency
from refunds.staff.forms import parse_money_field, parse_refund_size
from refunds.staff.services import OrderSnapshot, create_staff_refund
from sill.accounts.access import Cap, can, site_context
from sill.accounts.api_auth import MemberTokenAuthentication
from sill.accounts.models import MemberToken
from sill.api import StrictJSONParser
from sill.api_fields import StrictBooleanField
from sill.api_view import ApiView
from sill.errors import NotFound, PermissionDenied, SillError
from sill.money import Money
from sill.orders.models import Charge
from sill.orders.selectors import order_for


@extend_schema_field(
    {"oneOf": [{"type": "number"}, {"type": "string", "pattern": r"^-?\d+(\.\d+)?$"}]}
)
class DecimalTextField(serializers.Field[str, Any, str, Any]):
    """A number or a decimal string, kept as exact text (``"15.00"``); floats are refused."""

    default_error_messages = {"invalid": 'Send a decimal number, e.g. 15.00 or "15.00".'}

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, bool | float):
            self.fail("invalid")
        if isinstance(data, Decimal):
            return format(data, "f")
        if isinstance(data, int | str):
            return str(data).strip()
        self.fail("invalid")
        return ""  # pragma: no cover - fail() raises

    def to_representation(self, value: Any) -> str:
        return str(value)


class StaffRefundInput(serializers.Serializer[None]):  # input only: no instance
    amount = DecimalTextField(required=False, help_text="Major units of the order's currency.")
    percentage = DecimalTextField(
        required=False, help_text="Of the order total; up to 2 decimals; rounded half up."
    )
    full = StrictBooleanField(required=False, help_text="Everything left to refund.")
    reasonId = serializers.CharField(max_length=20, help_text="An active leaf reason.")
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=1000, help_text="Free text, kept as a note."
    )
    expectedRemaining = DecimalTextField(
        required=False, help_text="Refuse (409) unless this much is still refundable."
    )


_REFUND = inline_serializer(
    "StaffRefund",
    {
        "refund_id": serializers.CharField(),
        "order_id": serializers.CharField(),
        "origin": serializers.CharField(),
        "decision": serializers.ChoiceField(["approved", "escalated", "rejected"]),
        "status": serializers.ChoiceField([s.value for s in RefundStatus]),
        "reason": serializers.CharField(allow_null=True, help_text="Rejection/failure code."),
        "amount": serializers.CharField(),
        "currency": serializers.CharField(),
        "rail": serializers.CharField(),
        "refund_reason": serializers.DictField(),
        "note": serializers.CharField(),
        "requested_by": serializers.CharField(),
        "rules": serializers.ListField(child=serializers.DictField()),
        "provider_refund_id": serializers.CharField(allow_null=True),
        "remaining": serializers.CharField(
            help_text="What is still refundable on the order, after its held refunds."
        ),
        "order_status": serializers.CharField(),
        "message": serializers.CharField(),
        "created_at": serializers.DateTimeField(),
    },
)
_ERROR = inline_serializer(
    "StaffRefundError",
    {
        "error": inline_serializer(
            "StaffRefundErrorBody",
            {
                "code": serializers.CharField(),
                "message": serializers.CharField(),
                "field": serializers.CharField(allow_null=True),
            },
        )
    },
)

_MESSAGES: dict[str, str] = {
    RefundStatus.PROCESSING: "Sent to the rail; pending until the rail confirms it.",
    RefundStatus.SUCCEEDED: "Refunded on the rail.",
    RefundStatus.HELD: "Held for review by an owner or admin; nothing moves until approved.",
    RefundStatus.REJECTED: "Refused by the site's policy; nothing moved.",
    RefundStatus.FAILED: "The rail refused the refund; nothing moved.",
}


def _message(refund: Refund) -> str:
    """``refund``'s state in a sentence; one that needs attention says what is known of it."""
    if refund.status == RefundStatus.NEEDS_ATTENTION:
        return (
            f"{capfirst(attention_words(refund))}; the amount stays reserved while Sill asks "
            "the rail again, or until an owner records what the provider shows."
        )
    return _MESSAGES.get(refund.status, "")


def _remaining_after_holds(charge: Charge) -> Money:
    held, _count = held_total(charge)
    return Money(max(0, charge.remaining.amount_minor - held.amount_minor), charge.currency)


def refund_output(refund: Refund) -> dict[str, Any]:
    order = refund.order
    assert order is not None
    charge = charged_charge(order)
    return {
        "refund_id": refund.id,
        "order_id": order.id,
        "origin": refund.origin,
        "decision": refund.decision,
        "status": refund.status,
        "reason": refund.outcome_code or None,
        "amount": refund.amount.major_str(),
        "currency": refund.currency,
        "rail": refund.rail,
        "refund_reason": {
            "id": refund.refund_reason_id,
            "path": refund.reason_path,
            "label": refund.reason_label,
            "code": refund.reason_code or None,
        },
        "note": refund.note,
        "requested_by": refund.requested_by.get_username() if refund.requested_by else None,
        "rules": refund.rules,
        "provider_refund_id": refund.provider_refund_id or None,
        # Net of the charge's held refunds, as a new refund's quote (and expectedRemaining) is.
        "remaining": _remaining_after_holds(charge).major_str() if charge else "0",
        "order_status": order.status,
        "message": _message(refund),
        "created_at": refund.created_at.isoformat(),
    }


class StaffRefundCreateApi(ApiView):
    authentication_classes = [MemberTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    # Strict JSON, numbers as Decimal: 15.00 is never a float on its way to money.
    parser_classes = [StrictJSONParser]

    @extend_schema(
        operation_id="staff_order_refund_create",
        summary="Refund an order as staff (full, fixed amount or percentage)",
        request=StaffRefundInput,
        parameters=[
            OpenApiParameter(
                idempotency.HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                required=False,
                description=(
                    "1 to 255 printable ASCII characters, e.g. a UUID. The same key with the same "
                    "body answers the stored response (same status, same body) with "
                    "`Idempotent-Replayed: true` and never refunds twice; the same key with "
                    "another body is 422 `idempotency_conflict`; while the first request "
                    "runs it is 409 `idempotency_in_flight`. Keys are kept at least 24 hours, "
                    "per site and member. A body refused before the refund is decided "
                    "(`malformed`, `invalid_field` from the schema) and `rail_disabled` are "
                    "not stored: retry with the same key."
                ),
            ),
            OpenApiParameter(
                idempotency.REPLAYED_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                response=True,
                enum=["true"],
                description="Present when the response is the stored answer to an earlier "
                "request with the same Idempotency-Key.",
            ),
        ],
        responses={
            201: _REFUND,
            400: _ERROR,
            403: _ERROR,
            404: _ERROR,
            409: OpenApiResponse(
                _ERROR,
                description="`order_changed`, `order_not_refundable`, `rail_disabled`, or "
                "`idempotency_in_flight` (a request with this Idempotency-Key is running).",
            ),
            413: OpenApiResponse(
                _ERROR,
                description="`too_large`: the body is over 64 KiB (`SILL_API_MAX_BODY_BYTES`); "
                "nothing was done.",
            ),
            422: OpenApiResponse(
                _ERROR,
                description="`idempotency_conflict`: the Idempotency-Key was used with "
                "another body.",
            ),
        },
        examples=[
            OpenApiExample(
                "Partial refund",
                value={"amount": 15.00, "reasonId": "12", "reason": "Scratched mug"},
                request_only=True,
            ),
            OpenApiExample(
                "Too much",
                value={
                    "error": {
                        "code": "exceeds_refundable",
                        "message": "At most $39.00 can be refunded on this order; "
                        "$50.00 is too much.",
                        "field": "amount",
                    }
                },
                response_only=True,
                status_codes=["400"],
            ),
            OpenApiExample(
                "Key reused with another body",
                value={
                    "error": {
                        "code": "idempotency_conflict",
                        "message": "This Idempotency-Key was already used for a different "
                        "request; nothing was done. Send a new key for a new request.",
                        "field": None,
                    }
                },
                response_only=True,
                status_codes=["422"],
            ),
        ],
    )
    def post(self, request: Request, order_id: str) -> Response:
        # Access first: a wrong role or another site's order never claims a key.
        ctx = site_context(request)
        if ctx is None or not can(ctx.membership, Cap.REFUND):
            raise PermissionDenied("You don't have permission to refund orders on this site.")
        try:
            order = order_for(ctx.site, order_id)
        except Http404:
            raise NotFound("No such order on this site.") from None
        key = idempotency.parse_idempotency_key(request.headers.get(idempotency.HEADER))
        # The body's own validation stores nothing: a fixed body may be sent with the same key.
        data = StaffRefundInput(data=request.data)
        data.is_valid(raise_exception=True)
        given = {k: v for k, v in data.validated_data.items() if k in ("amount", "percentage")}
        if data.validated_data.get("full"):
            given["full"] = True
        if len(given) != 1:
            raise SillError(
                'Send exactly one of "amount", "percentage" or "full": true.',
                code="invalid_field",
            )
        size = parse_refund_size(
            kind=next(iter(given)),
            amount=given.get("amount"),
            percentage=given.get("percentage"),
            currency=order.currency,
        )
        expected = None
        if "expectedRemaining" in data.validated_data:
            seen = parse_money_field(
                data.validated_data["expectedRemaining"], order.currency, "expectedRemaining"
            )
            expected = OrderSnapshot(remaining_minor=seen.amount_minor)

        def work(on_opened: Any) -> Refund:
            # Checked here too so that a bad reason names the API's field; the service checks
            # again inside its transaction. It depends on the site's reasons, so it is part of
            # the answer a key stores.
            pickable_reason(ctx.site, data.validated_data["reasonId"], field="reasonId")
            return create_staff_refund(
                site=ctx.site,
                order=order,
                actor=request.user,
                kind=size.kind,
                amount=size.amount,
                percentage=size.percentage,
                reason=data.validated_data["reasonId"],
                note=data.validated_data.get("reason", ""),
                expected=expected,
                on_opened=on_opened,
                # Checked again as the refund is decided: revoked meanwhile, it refunds nothing.
                token_id=request.auth.pk if isinstance(request.auth, MemberToken) else None,
            )

        if key is None:
            refund = work(None)
            refund = Refund.objects.select_related("order", "requested_by").get(pk=refund.pk)
            return Response(refund_output(refund), status=201)
        answer = idempotency.run_idempotently(
            site=ctx.site,
            user=request.user,
            key=key,
            fingerprint=idempotency.request_fingerprint(
                method=request.method or "POST", path=request.path, body=request.data
            ),
            work=work,
            respond=refund_output,
            success_status=201,
        )
        headers = {idempotency.REPLAYED_HEADER: "true"} if answer.replayed else None
        return Response(answer.body, status=answer.status, headers=headers)
