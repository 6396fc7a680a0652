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
from functools import wraps
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, cast

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from sill import errors
from sill.accounts import two_factor
from sill.accounts.models import Membership, Role, Site

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
    if membership is None or not can(membership, cap):
        raise errors.PermissionDenied("Your role on this site does not allow this.")
    if owner and membership.role != Role.OWNER:
        raise errors.PermissionDenied("Only an owner of this site can do this.")
    return membership


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
