"""DRF authentication with a member's bearer token, pinned to that membership's site."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from sill.accounts.access import TOKEN_REFUSED, SiteContext, remember_site_context
from sill.accounts.models import Membership, MemberToken
from sill.accounts.services import token_sha256
from sill.bearer import bearer_token

PREFIX = "sill_mt_"


class MemberTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer sill_mt_…`` from ``manage.py members token``.

    The request acts on the token's site only (the session's site switcher does not apply),
    with the membership's current role. No CSRF: the token is not ambient like a cookie.
    """

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        token = bearer_token(request.META.get("HTTP_AUTHORIZATION", ""))
        if token is None or not token.startswith(PREFIX):
            return None
        found = (
            MemberToken.objects.select_related("membership__user", "membership__site")
            .filter(token_sha256=token_sha256(token), revoked_at__isnull=True)
            .first()
        )
        if found is None or not found.membership.user.is_active:
            raise AuthenticationFailed(TOKEN_REFUSED)
        membership: Membership = found.membership
        ctx = SiteContext(
            user=membership.user,
            site=membership.site,
            membership=membership,
            memberships=(membership,),
        )
        remember_site_context(request._request, ctx)
        return (membership.user, found)

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


class MemberTokenScheme(OpenApiAuthenticationExtension):
    target_class = "sill.accounts.api_auth.MemberTokenAuthentication"
    name = "memberToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "`manage.py members token`"}
