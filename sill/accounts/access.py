"""The one place that resolves who is acting, on which site, with which role.

Every view, API view and service asks this module: ``site_context(request)`` for the current
user's site and membership, ``can(membership, capability)`` for what the role allows, and
``@site_view(capability)`` to guard a view. Objects are always looked up scoped to
``ctx.site``, so another site's ids answer 404, never 403.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache, wraps
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, cast

from django.contrib.auth import get_user_model
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from sill import errors
from sill.accounts import two_factor
from sill.accounts.models import Membership, MemberToken, Role, Site
from sill.sql import Columns, cols, fetch_row

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails
    from rest_framework.request import Request

SESSION_SITE_KEY = "sill_site_id"
# Where site_context() caches its answer: on the request object itself (a Django request, or
# a DRF one that proxies reads to it), so it is not a declared attribute of either class.
_CACHE_ATTR = "_sill_site_ctx"

P = ParamSpec("P")


class Cap(StrEnum):
    VIEW_ORDERS = "view_orders"
    REFUND = "refund"
    VIEW_HELD = "view_held"
    DECIDE_HELD = "decide_held"
    VIEW_RULES = "view_rules"
    EDIT_RULES = "edit_rules"
    VIEW_ACTIVITY = "view_activity"
    MANAGE_SETTINGS = "manage_settings"
    # Every member: their own password and sessions (Settings → Your account).
    OWN_ACCOUNT = "own_account"


# Changes under these need the second factor where the site requires it (two_factor.refusal):
# held refunds and reconciliation, rules, and every Settings page but your own account.
TWO_FACTOR_CAPS = frozenset({Cap.DECIDE_HELD, Cap.EDIT_RULES, Cap.MANAGE_SETTINGS})


_ROLE_CAPS: dict[str, frozenset[Cap]] = {
    Role.OWNER: frozenset(Cap),
    Role.ADMIN: frozenset(Cap),
    Role.REVIEWER: frozenset(
        {Cap.VIEW_ORDERS, Cap.VIEW_HELD, Cap.VIEW_RULES, Cap.VIEW_ACTIVITY, Cap.OWN_ACCOUNT}
    ),
    # REFUND is added for staff with can_refund (see can()).
    Role.STAFF: frozenset({Cap.VIEW_ORDERS, Cap.VIEW_RULES, Cap.OWN_ACCOUNT}),
}


# The words of require_member's refusal of a role, a removed member or a switched-off account.
ROLE_REFUSED = "Your role on this site does not allow this."
# The words of a member token that is unknown, revoked, or whose account is switched off
# (sill.accounts.api_auth), also when that happens while a refund it asked for is decided.
TOKEN_REFUSED = "unknown or revoked token"


def can(membership: Membership | None, cap: Cap) -> bool:
    if membership is None:
        return False
    if membership.role == Role.STAFF and cap == Cap.REFUND:
        return membership.can_refund
    return cap in _ROLE_CAPS.get(membership.role, frozenset())


def require_member(actor: Any, site_id: str, cap: Cap, *, owner: bool = False) -> Membership:
    """The services' own role check: ``actor``'s membership of site ``site_id``, when its role
    allows ``cap`` (and is an owner's, with ``owner``); otherwise
    :class:`sill.errors.PermissionDenied` (403 ``forbidden``), before the service reads or
    writes anything of the change.

    Views check first (:func:`site_view`, and their own words for an owner-only action); a
    service that changes money or a site's rules checks again, so that a caller which did not
    (a task, Slack, a script, a new API) cannot act beyond the member's role. ``actor`` is a
    user; no user (a system caller), a deactivated one or one without a membership of the
    site is refused like a role that does not allow ``cap``.
    """
    membership = None
    if getattr(actor, "is_authenticated", False) and getattr(actor, "is_active", False):
        membership = Membership.objects.filter(user_id=actor.pk, site_id=site_id).first()
    return _allowed(membership, cap, owner=owner)


def _allowed(membership: Membership | None, cap: Cap, *, owner: bool) -> Membership:
    """:func:`require_member`'s refusals of ``membership`` (None: no member)."""
    if membership is None or not can(membership, cap):
        raise errors.PermissionDenied(ROLE_REFUSED)
    if owner and membership.role != Role.OWNER:
        raise errors.PermissionDenied("Only an owner of this site can do this.")
    return membership


class TokenRefused(errors.SillError):
    """A member token revoked (or its member removed, its account switched off) while the
    request it authenticated was being decided (:func:`hold_member`)."""

    code = "not_authenticated"
    status = 401


def hold_member(
    actor: Any,
    site_id: str,
    cap: Cap,
    *,
    owner: bool = False,
    token_id: int | None = None,
    check: Callable[[Membership | None], None] | None = None,
) -> Membership:
    """:func:`require_member` again, inside the caller's transaction, where its change is
    decided: ``actor``'s membership of site ``site_id``, its account (and the member token
    ``token_id`` the request came with) read afresh and locked until the transaction ends
    (``FOR SHARE``; the account ``FOR KEY SHARE``). Call it before the transaction appends to
    the site's audit chain.

    A service checks the member first, then reads a rail's facts, for seconds at worst, then
    decides: an owner who removed or demoted the member meanwhile (or revoked their token, or
    switched their account off) was told so, and the decision must not go on as if they had
    not. A change that came first is what this reads, refused as the check before it refuses
    (403 ``forbidden``; with ``token_id``, a token revoked or gone with its member, or an
    account switched off, 401 :class:`TokenRefused` in :data:`TOKEN_REFUSED`, as
    ``sill.accounts.api_auth`` refuses it). One that comes later waits for the caller's
    transaction (a member's removal, role change or token revocation updates or deletes these
    rows, and the Django admin's switch-off locks the account's FOR UPDATE, each of which waits
    for these locks): the owner is told once the decision is made. ``check(membership)``
    (None: no such member any more) runs first, for a caller's own refusal in its own words (a
    Slack click's link). SQLite serialises its writers: a read in the transaction is enough
    there.
    """
    row = None
    if getattr(actor, "is_authenticated", False):
        tokens = [] if token_id is None else [token_id]
        sql = _held_member_sql(connection.vendor, bool(tokens))
        row = fetch_row(sql, [*tokens, actor.pk, site_id])
    membership = None
    if row is not None:
        membership = _member_cols().build(row)
        membership.user = _user_cols().build(row, len(_member_cols()))
    if token_id is not None and (membership is None or not membership.user.is_active):
        raise TokenRefused(TOKEN_REFUSED)
    if check is not None:
        check(membership)
    if membership is not None and not membership.user.is_active:
        membership = None
    return _allowed(membership, cap, owner=owner)


def _member_cols() -> Columns[Membership]:
    return cols(Membership, "m")


def _user_cols() -> Columns[Any]:
    return cols(get_user_model(), "u", only=("is_active",))


@cache
def _held_member_sql(vendor: str, with_token: bool) -> str:
    def table(model: type[Any]) -> str:
        return connection.ops.quote_name(model._meta.db_table)

    token = (
        f"JOIN {table(MemberToken)} t ON t.membership_id = m.id AND t.id = %s "
        "AND t.revoked_at IS NULL "
        if with_token
        else ""
    )
    # The account's row in key share only (as a refund's foreign key to it locks it): a
    # sign-in updates it (last_login), and must not wait for a refund; the Django admin's
    # switch-off locks it FOR UPDATE first (sill.accounts.admin), which waits.
    lock = (
        f" FOR SHARE OF m{', t' if with_token else ''} FOR KEY SHARE OF u"
        if vendor == "postgresql"
        else ""
    )
    # Formatted in: the models' column lists and tables, constants.
    return f"""SELECT {_member_cols().sql}, {_user_cols().sql}
        FROM {table(Membership)} m JOIN {table(get_user_model())} u ON u.id = m.user_id
        {token}WHERE m.user_id = %s AND m.site_id = %s{lock}"""  # noqa: S608


@dataclass(frozen=True)
class SiteContext:
    """The acting user, their current site and membership, and every site they belong to."""

    user: Any
    site: Site
    membership: Membership
    memberships: tuple[Membership, ...]

    @property
    def role(self) -> str:
        return self.membership.role

    def can(self, cap: Cap | str) -> bool:
        return can(self.membership, Cap(cap))


def memberships_of(user: Any) -> tuple[Membership, ...]:
    if not getattr(user, "is_authenticated", False):
        return ()
    return tuple(Membership.objects.filter(user=user).select_related("site").order_by("site__name"))


class SiteRequest(HttpRequest):
    """A request that went through :func:`site_view`: signed in, with a site context.

    ``site_view`` sets ``site_ctx`` before the view runs; django-htmx's middleware sets
    ``htmx`` on every request. Views annotate their request with this class (importable as
    ``sill.http.SiteRequest``) so both are checked instead of being ``Any``.
    """

    site_ctx: SiteContext
    htmx: HtmxDetails


def remember_site_context(request: HttpRequest | Request, ctx: SiteContext | None) -> None:
    """Cache ``ctx`` as the answer ``site_context(request)`` gives for this request."""
    setattr(request, _CACHE_ATTR, ctx)


def site_context(request: HttpRequest | Request) -> SiteContext | None:
    """Resolve (and cache on the request) the user's current site; None without one."""
    if hasattr(request, _CACHE_ATTR):
        cached: SiteContext | None = getattr(request, _CACHE_ATTR)
        return cached
    ctx = None
    memberships = memberships_of(request.user)
    if memberships:
        wanted = request.session.get(SESSION_SITE_KEY)
        # Without a choice in the session, the site the user joined first.
        first = min(memberships, key=lambda m: (m.created_at, m.pk))
        current = next((m for m in memberships if m.site_id == wanted), first)
        ctx = SiteContext(
            user=request.user, site=current.site, membership=current, memberships=memberships
        )
    remember_site_context(request, ctx)
    return ctx


def switch_site(request: HttpRequest, site_id: str) -> bool:
    """Make ``site_id`` current if the user is a member; False (and no change) otherwise."""
    if not any(m.site_id == site_id for m in memberships_of(request.user)):
        return False
    request.session[SESSION_SITE_KEY] = site_id
    if hasattr(request, _CACHE_ATTR):
        delattr(request, _CACHE_ATTR)
    return True


def site_view(
    cap: Cap,
) -> Callable[
    [Callable[Concatenate[SiteRequest, P], HttpResponseBase]],
    Callable[Concatenate[HttpRequest, P], HttpResponseBase],
]:
    """Guard a view: anonymous → login; no membership or missing capability → 403.

    A change (any method but GET/HEAD/OPTIONS) under one of :data:`TWO_FACTOR_CAPS`, by an
    owner or admin of a site that requires two factors, without a verified session → the 403
    page of :func:`two_factor.refusal_response`; so is a view raising
    :class:`two_factor.TwoFactorRequired` (a service's ``two_factor.check_widening``).
    The view receives the resolved :class:`SiteContext` as ``request.site_ctx``.
    """

    def decorator(
        view: Callable[Concatenate[SiteRequest, P], HttpResponseBase],
    ) -> Callable[Concatenate[HttpRequest, P], HttpResponseBase]:
        @wraps(view)
        def wrapped(request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            ctx = site_context(request)
            if ctx is None or not ctx.can(cap):
                raise PermissionDenied
            # The same object, now carrying site_ctx: the class only tells mypy it is there.
            site_request = cast(SiteRequest, request)
            site_request.site_ctx = ctx
            if cap in TWO_FACTOR_CAPS and request.method not in two_factor.SAFE_METHODS:
                refused = two_factor.refusal(request, ctx.membership)
                if refused is not None:
                    return two_factor.refusal_response(request, refused)
            try:
                return view(site_request, *args, **kwargs)
            except two_factor.TwoFactorRequired as refused:
                return two_factor.refusal_response(request, refused)

        return wrapped

    return decorator
