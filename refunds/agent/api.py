"""The agent API: ``POST /api/v1/mandates`` and ``GET /api/v1/refunds/{mandate_id}``."""

from __future__ import annotations

from typing import Any, cast, get_args

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.parsers import BaseParser
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from policies.engine import Action, Mode
from refunds.agent.intake import answer_for, submit_mandate
from refunds.agent.mandates import MAX_BODY_BYTES, MandateError
from refunds.models import Mandate
from sill.accounts.models import Agent, AgentToken
from sill.accounts.services import token_sha256
from sill.api import error_response
from sill.api_schema import ERROR, NO_LENGTH, NOT_ACCEPTABLE, NOT_JSON, UNAVAILABLE
from sill.api_view import ApiView
from sill.bearer import bearer_token
from sill.errors import NotFound

# Why a mandate was refused or its refund ended as it did (README "The agent API").
_REASON = (
    "Null unless refused or failed. `decision` `rejected` (answered 201): "
    "`original_not_charged`, `already_executed`, `exceeds_refundable`, `scope_unsupported`, "
    "`rail_disabled`, `live_not_allowed`, `disputed`, `policy_denied`, `method_not_allowed`, "
    "`agent_cap_exceeded`, `refund_window_passed`, `currency_mismatch`; for a credit also "
    "`unknown_customer`, `rail_unavailable`. A held refund or credit not approved: `decision` "
    "and `status` `rejected` with `rejected_by_reviewer` (or what the facts refuse when it is "
    "approved, e.g. `disputed`), or `status` `expired` with `expired`. A purchase whose charge "
    "was declined: `failed` with `charge_failed`. A refund the rail failed: `failed` or "
    "`needs_attention` with the rail's code (`rail_declined`, `rail_unavailable`, "
    "`rail_timeout`, …); one its rules approved whose agent was deactivated before it was "
    "sent: `failed` with `agent_deactivated` (nothing was sent), or with `key_revoked` when "
    "the key that signed it was revoked before it was sent."
)
_RESULT = inline_serializer(
    "MandateResult",
    {
        "mandate_id": serializers.CharField(),
        "refund_id": serializers.CharField(required=False),
        "order_id": serializers.CharField(required=False),
        "decision": serializers.ChoiceField(["approved", "escalated", "rejected"]),
        "status": serializers.ChoiceField(
            ["held", "processing", "needs_attention", "succeeded", "failed", "rejected", "expired"]
        ),
        "reason": serializers.CharField(allow_null=True, help_text=_REASON),
        "amount": serializers.CharField(),
        "currency": serializers.CharField(),
        "rail": serializers.CharField(allow_null=True),
        # The rules that fired (policies.engine.FiredRule.as_dict).
        "rules": serializers.ListField(
            child=inline_serializer(
                "FiredRule",
                {
                    "id": serializers.CharField(),
                    "action": serializers.ChoiceField(list(get_args(Action))),
                    "mode": serializers.ChoiceField(list(get_args(Mode))),
                },
            )
        ),
        "expires_at": serializers.DateTimeField(allow_null=True),
        "receipt": inline_serializer(
            "DecisionReceipt",
            {
                "statement": serializers.CharField(),
                "key_id": serializers.CharField(),
                "signature": serializers.CharField(),
            },
            allow_null=True,
        ),
    },
)
# The read endpoints' shared refusals (README "The agent API").
_TOKEN_REFUSED = OpenApiResponse(
    ERROR,
    description="`not_authenticated`: no bearer token, an unknown or revoked one, or a "
    "deactivated agent's (the message says so) (`WWW-Authenticate: Bearer`).",
)
_READ_RATE_LIMITED = OpenApiResponse(
    ERROR,
    description="`rate_limited`: over the token's limit; `Retry-After` says in how many "
    "seconds to ask again.",
)
_READ_UNAVAILABLE = OpenApiResponse(ERROR, description=UNAVAILABLE)
_READ_FAILED = OpenApiResponse(
    ERROR, description="`server_error`: Sill failed (its log says why). Ask again later."
)
_EXAMPLE_REQUEST: dict[str, Any] = {
    "signed": {
        "mandate_id": "mnd_01K6HBK7MK753DH3YBX4NVCYTT",
        "site_id": "01JDEMOSITE00000000000MAIN",
        "agent_id": "agent_acme_shopper",
        "issued_at": "2026-09-30T15:38:00.000Z",
        "expires_at": "2026-09-30T15:38:30.000Z",
        "nonce": "Q8sLm2Vx7Tb4Nc1Rp9Kd3w",
        "replay_window_seconds": 30,
        "principal": {"type": "human", "verification": "delegated"},
        "intent": {
            "action": "request_refund",
            "merchant": "northwind-coffee.example",
            "original_mandate_id": "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN",
            "reason_code": "wrong_item",
            "scope": "full",
            "max_amount": 89.00,
            "currency": "USD",
        },
        "protocol_context": {"protocol": "a2a", "version": "1.2"},
    },
    "envelope": {"algorithm": "ed25519", "key_id": "acme-2026-10", "signature": "<86 chars>"},
}
_EXAMPLE_RESULT: dict[str, Any] = {
    "mandate_id": "mnd_01K6HBK7MK753DH3YBX4NVCYTT",
    "refund_id": "rf_01K6HBK8P0W9S3ZC2J1YF5TQ0V",
    "decision": "approved",
    "status": "processing",
    "reason": None,
    "amount": "89.00",
    "currency": "USD",
    "rail": "stripe",
    "rules": [],
    "expires_at": None,
    "receipt": {
        "statement": '{"amount_minor":8900,"audit_leaf_hash":"…","audit_record_hash":"…",'
        '"audit_seq":42,"currency":"USD","decision":"approved",…}',
        "key_id": "sill-4f0c2a9d1e7b3c55",
        "signature": "<86 base64url characters>",
    },
}


class RawBodyParser(BaseParser):
    """Takes JSON and leaves the body alone: the mandate is verified over the exact bytes
    received. DRF chooses a parser by the request's Content-Type, so a mandate sent as
    anything else is ``415 unsupported_media_type``, as on every other API POST."""

    media_type = "application/json"

    # Any, like the base's Mapping | DataAndFiles: nothing is parsed, so there is no data.
    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        return None


class MandateCreateApi(ApiView):
    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]
    parser_classes = [RawBodyParser]

    @extend_schema(
        operation_id="mandates_create",
        summary="Submit a signed refund or purchase mandate",
        request={"application/json": dict},
        responses={
            200: _RESULT,
            201: _RESULT,
            400: OpenApiResponse(
                ERROR,
                description="`malformed` (not a JSON object of `signed` and `envelope`, "
                "duplicate keys, too deep…), `unsupported_algorithm`, `expired`, "
                "`not_yet_valid`, `window_too_long`.",
            ),
            401: OpenApiResponse(
                ERROR,
                description="`unknown_key` (no such key for the agent on the site, revoked, "
                "not valid at `issued_at`, or its agent deactivated: the message says so once "
                "the signature holds; also when the key is revoked or the agent deactivated "
                "while the mandate is being decided: nothing of it is stored), `bad_signature`.",
            ),
            409: OpenApiResponse(
                ERROR,
                description="`replay`: the nonce was used by another mandate; "
                "`mandate_conflict`: this `mandate_id` was received with another body, or (a "
                "purchase) it already names one of the site's orders. Nothing was done.",
            ),
            406: NOT_ACCEPTABLE,
            411: NO_LENGTH,
            413: OpenApiResponse(ERROR, description="`too_large`: over 64 KiB."),
            415: NOT_JSON,
            422: OpenApiResponse(
                ERROR,
                description="`forbidden_field`, `unknown_field`, `invalid_field`; `field` "
                "names the offending one. A purchase in a currency its rail does not charge, "
                "or whose total is off the rail's step, is `invalid_field`: nothing is stored "
                "or sent.",
            ),
            429: OpenApiResponse(
                ERROR,
                description="`rate_limited`: over the address's or the signing key's limit; "
                "`Retry-After` says in how many seconds to send again.",
            ),
            500: OpenApiResponse(
                ERROR,
                description="`server_error`: Sill failed (its log says why). Send the same "
                "signed mandate again later: it is never acted on twice.",
            ),
            503: OpenApiResponse(
                ERROR,
                description="`busy`: the decision kept conflicting with concurrent ones; "
                "nothing was done. Send the same mandate again after a second. " + UNAVAILABLE,
            ),
        },
        examples=[
            OpenApiExample("Refund request", value=_EXAMPLE_REQUEST, request_only=True),
            OpenApiExample("Approved", value=_EXAMPLE_RESULT, response_only=True),
        ],
    )
    def post(self, request: Request) -> Response:
        # DRF's parser choice: Content-Type not JSON is 415 (nothing read; the parser reads
        # nothing either, the body is read below once its length is checked).
        _ = request.data
        length = request.META.get("CONTENT_LENGTH") or "0"
        # At most 15 digits: int() refuses more than 4300 (a 500), and no body is that large.
        ok = length.isascii() and length.isdigit() and len(length) <= 15
        if not ok or int(length) > MAX_BODY_BYTES:
            return error_response(
                MandateError("too_large", f"a mandate is at most {MAX_BODY_BYTES} bytes")
            )
        raw = request._request.body  # the exact bytes: never re-serialised before verifying
        answer = submit_mandate(raw=raw)
        return Response(answer.body, status=answer.status)


class AgentTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer <token>`` from ``manage.py agents token``; only hashes stored."""

    def authenticate(self, request: Request) -> tuple[None, Agent] | None:
        token = bearer_token(request.META.get("HTTP_AUTHORIZATION", ""))
        if token is None:
            return None
        found = (
            AgentToken.objects.select_related("agent", "agent__site")
            .filter(token_sha256=token_sha256(token), revoked_at__isnull=True)
            .first()
        )
        if found is None:
            raise AuthenticationFailed("unknown or revoked token")
        if not found.agent.active:
            # Whoever holds the token may hear why: "unknown or revoked" sent the agent's
            # author looking for a new token, which is refused the same way.
            raise AuthenticationFailed(
                f"agent {found.agent.agent_id} is deactivated on this site: its tokens are "
                "refused until an owner or admin of the site reactivates it"
            )
        return (None, found.agent)

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


def _agent_of(request: Request) -> Agent:
    # AgentTokenAuthentication (behind HasAgent) put the Agent in ``request.auth``; DRF's stubs
    # type ``auth`` as its own Token model or Any, so only a cast can say which.
    return cast(Agent, request.auth)


class HasAgent(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return request.auth is not None


class AgentMeApi(ApiView):
    """The agent a bearer token belongs to: lets an agent author check a token."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [HasAgent]

    @extend_schema(
        operation_id="agent_me",
        summary="The agent this token belongs to",
        responses={
            200: inline_serializer(
                "AgentMe",
                {
                    "agent_id": serializers.CharField(),
                    "site_id": serializers.CharField(),
                    "name": serializers.CharField(),
                },
            ),
            401: _TOKEN_REFUSED,
            406: NOT_ACCEPTABLE,
            429: _READ_RATE_LIMITED,
            500: _READ_FAILED,
            503: _READ_UNAVAILABLE,
        },
    )
    def get(self, request: Request) -> Response:
        agent = _agent_of(request)
        return Response({"agent_id": agent.agent_id, "site_id": agent.site_id, "name": agent.name})


class RefundDetailApi(ApiView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [HasAgent]

    @extend_schema(
        operation_id="refunds_retrieve",
        summary="A mandate's refund (or purchase) as it stands now",
        responses={
            200: _RESULT,
            401: _TOKEN_REFUSED,
            404: OpenApiResponse(
                ERROR, description="`not_found`: no mandate with this id from this agent."
            ),
            406: NOT_ACCEPTABLE,
            429: _READ_RATE_LIMITED,
            500: _READ_FAILED,
            503: _READ_UNAVAILABLE,
        },
        examples=[OpenApiExample("Succeeded", value={**_EXAMPLE_RESULT, "status": "succeeded"})],
    )
    def get(self, request: Request, mandate_id: str) -> Response:
        agent = _agent_of(request)
        mandate = Mandate.objects.filter(
            site_id=agent.site_id, agent=agent, mandate_id=mandate_id
        ).first()
        if mandate is None:
            raise NotFound(f"no mandate {mandate_id} from this agent")
        return Response(answer_for(mandate))


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "refunds.agent.api.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "`manage.py agents token`"}
