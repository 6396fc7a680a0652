"""The policy API: the gallery (session auth with CSRF, like the pages) and the rules.

``GET /api/v1/policy-templates``: the catalog, for any signed-in member.
``POST /api/v1/sites/{site}/rules/from-template``: apply (or, with ``dryRun``, preview) a
template or pack on a site the user belongs to, as an owner or admin.
``GET /api/v1/sites/{site}/rules``: the active version, its rules and auto-refund (members);
``POST`` the same path with one rule (``id`` optional, ``when`` with one or more conditions,
``then``, ``mode``) adds it as a new version (owners, admins); ``DELETE
/api/v1/sites/{site}/rules/{rule_id}`` removes one (a new version). The rules endpoints take a
member's session (with CSRF) or API token (``manage.py members token``). Another site answers
404, never 403, so site ids cannot be probed.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from policies import catalog as cat
from policies.rules import MODES, json_safe_rules
from policies.selectors import ActivePolicy, active_policy_for
from policies.services import ApplyResult, add_rule, apply_catalog_item, delete_rule
from sill.accounts import two_factor
from sill.accounts.access import Cap, can
from sill.accounts.api_auth import MemberTokenAuthentication
from sill.accounts.models import Membership, MemberToken, Site
from sill.api_fields import StrictBooleanField
from sill.api_view import ApiView
from sill.errors import NotFound, PermissionDenied, SillError
from sill.money import Money

_ERROR = inline_serializer(
    "PolicyError",
    {
        "error": inline_serializer(
            "PolicyErrorBody",
            {
                "code": serializers.CharField(),
                "message": serializers.CharField(),
                "field": serializers.CharField(allow_null=True),
            },
        )
    },
)


class FromTemplateInput(serializers.Serializer):
    templateId = serializers.CharField(required=False, max_length=64)
    packId = serializers.CharField(required=False, max_length=64)
    params = serializers.DictField(required=False, default=dict)
    mode = serializers.ChoiceField(choices=list(MODES), required=False, default="enforced")
    dryRun = StrictBooleanField(required=False, default=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise SillError(
                f"Unknown field {unknown[0]!r}: send templateId or packId, params, mode, dryRun.",
                code="invalid_field",
                field=unknown[0],
            )
        return attrs


class PolicyTemplateListApi(ApiView):
    @extend_schema(
        operation_id="policy_templates_list",
        summary="The catalog of policy templates and packs",
        responses={200: dict, 403: _ERROR},
    )
    def get(self, request: Request) -> Response:
        if not Membership.objects.filter(user=_user(request)).exists():
            raise PermissionDenied("You are not a member of any site.")
        return Response(cat.catalog())


class RulesFromTemplateApi(ApiView):
    @extend_schema(
        operation_id="rules_from_template",
        summary="Apply a policy template or pack to a site (or preview it with dryRun)",
        request=FromTemplateInput,
        responses={
            200: dict,
            201: dict,
            400: _ERROR,
            403: _ERROR,
            404: _ERROR,
            409: _ERROR,
            413: _ERROR,
        },
    )
    def post(self, request: Request, site_id: str) -> Response:
        site = _member_site(request, site_id, Cap.EDIT_RULES)
        if not isinstance(request.data, dict):
            raise SillError("The body must be a JSON object.", code="malformed")
        data = FromTemplateInput(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        if not body["dryRun"]:
            _require_two_factor(request, site)
        item = cat.find_item(template_id=body.get("templateId"), pack_id=body.get("packId"))
        result = apply_catalog_item(
            site=site,
            actor=request.user,
            item=item,
            params=body["params"],
            mode=body["mode"],
            dry_run=body["dryRun"],
        )
        return Response(_result(result), status=201 if result.status == "applied" else 200)


class RulesApi(ApiView):
    authentication_classes = [MemberTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="rules_list",
        summary="The site's active policy: version, rules and auto-refund",
        responses={200: dict, 401: _ERROR, 404: _ERROR},
    )
    def get(self, request: Request, site_id: str) -> Response:
        site = _member_site(request, site_id, Cap.VIEW_RULES)
        return Response(_policy(active_policy_for(site)))

    @extend_schema(
        operation_id="rules_add",
        summary="Add one rule of the merchant's own (a new policy version)",
        request=dict,
        responses={
            201: dict,
            400: _ERROR,
            401: _ERROR,
            403: _ERROR,
            404: _ERROR,
            409: _ERROR,
            413: _ERROR,
        },
    )
    def post(self, request: Request, site_id: str) -> Response:
        site = _member_site(request, site_id, Cap.EDIT_RULES)
        if not isinstance(request.data, dict):
            raise SillError("The body must be one rule, a JSON object.", code="malformed")
        _require_two_factor(request, site)
        label, rule = add_rule(
            site=site,
            actor=request.user,
            rule=request.data,
            field="rule",
            token_id=_token_id(request),
        )
        return Response({"version": label, "rule": json_safe_rules([rule])[0]}, status=201)


class RuleDeleteApi(ApiView):
    authentication_classes = [MemberTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="rules_delete",
        summary="Delete one rule (a new policy version)",
        responses={200: dict, 401: _ERROR, 403: _ERROR, 404: _ERROR},
    )
    def delete(self, request: Request, site_id: str, rule_id: str) -> Response:
        site = _member_site(request, site_id, Cap.EDIT_RULES)
        _require_two_factor(request, site)
        # Deleting a hold or deny rule widens what may be refunded: a fresh code, judged by
        # the service under its lock (deleting an allow or observe rule does not need one).
        membership = Membership.objects.select_related("site").get(user=_user(request), site=site)
        try:
            label = delete_rule(
                site=site,
                actor=request.user,
                rule_id=rule_id,
                second_factor=two_factor.freshness(request._request, membership),
                token_id=_token_id(request),
            )
        except two_factor.TwoFactorRequired as refused:
            raise SillError(refused.message, code="two_factor_required", status=403) from None
        return Response({"version": label, "deleted": rule_id})


def _policy(active: ActivePolicy) -> dict[str, Any]:
    return {
        "version": active.label,
        "rules": json_safe_rules(list(active.rules)),
        "autoRefund": {
            "enabled": active.auto_refund.enabled,
            "cap": Money(active.auto_refund.cap_minor, active.auto_refund.currency).major_str(),
            "currency": active.auto_refund.currency,
        },
    }


def _token_id(request: Request) -> int | None:
    """The member token the request came with (None: a browser session), checked again as
    the change is written (``policies.services``)."""
    return request.auth.pk if isinstance(request.auth, MemberToken) else None


def _user(request: Request) -> User:
    # IsAuthenticated, the default permission class, has run: never the anonymous user.
    return cast(User, request.user)


def _member_site(request: Request, site_id: str, cap: Cap) -> Site:
    if isinstance(request.auth, MemberToken) and request.auth.membership.site_id != site_id:
        raise NotFound("No such site.")  # a token acts on its own site only
    membership = (
        Membership.objects.filter(user=_user(request), site_id=site_id)
        .select_related("site")
        .first()
    )
    if membership is None:
        raise NotFound("No such site.")
    if not can(membership, cap):
        raise PermissionDenied(
            "Changing rules needs an owner or an admin."
            if cap == Cap.EDIT_RULES
            else "Your role cannot read the rules."
        )
    return membership.site


def _require_two_factor(request: Request, site: Site) -> None:
    """A change (not a preview) by an owner or admin of a site requiring two factors needs a
    session verified with one (sill.accounts.two_factor), the same rule as the rules pages."""
    membership = Membership.objects.select_related("site").get(user=_user(request), site=site)
    refused = two_factor.refusal(request._request, membership)
    if refused is not None:
        raise SillError(refused.message, code="two_factor_required", status=403)


def _result(result: ApplyResult) -> dict[str, Any]:
    key = "packId" if result.item.kind == "pack" else "templateId"
    if result.status == "already_applied":
        message = f"Already applied: {cat.rule_names(result.already)}."
    elif result.status == "preview":
        message = "Preview only: nothing was written."
    else:
        message = f"Applied: {cat.rule_names(result.rules)}."
    return {
        "status": result.status,
        key: result.item.id,
        "mode": result.mode,
        "version": result.version_label,
        "message": message,
        "rules": result.rules,
        "alreadyApplied": result.already,
        "preview": result.preview.as_dict() if result.preview else None,
    }
