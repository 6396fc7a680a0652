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
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from sill.accounts.models import Membership, Role, Site

SESSION_SITE_KEY = "sill_site_id"


class Cap(StrEnum):
    VIEW_ORDERS = "view_orders"
    REFUND = "refund"
    VIEW_HELD = "view_held"
    DECIDE_HELD = "decide_held"
    VIEW_RULES = "view_rules"
    EDIT_RULES = "edit_rules"
    VIEW_ACTIVITY = "view_activity"
    MANAGE_SETTINGS = "manage_settings"


_ROLE_CAPS: dict[str, frozenset[Cap]] = {
    Role.OWNER: frozenset(Cap),
    Role.ADMIN: frozenset(Cap),
    Role.REVIEWER: frozenset({Cap.VIEW_ORDERS, Cap.VIEW_HELD, Cap.VIEW_RULES, Cap.VIEW_ACTIVITY}),
    # REFUND is added for staff with can_refund (see can()).
    Role.STAFF: frozenset({Cap.VIEW_ORDERS, Cap.VIEW_RULES}),
}


def can(membership: Membership | None, cap: Cap) -> bool:
    if membership is None:
        return False
    if membership.role == Role.STAFF and cap == Cap.REFUND:
        return membership.can_refund
    return cap in _ROLE_CAPS.get(membership.role, frozenset())


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


def site_context(request: HttpRequest) -> SiteContext | None:
    """Resolve (and cache on the request) the user's current site; None without one."""
    cached = getattr(request, "_sill_site_ctx", False)
    if cached is not False:
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
    request._sill_site_ctx = ctx  # type: ignore[attr-defined]
    return ctx


def switch_site(request: HttpRequest, site_id: str) -> bool:
    """Make ``site_id`` current if the user is a member; False (and no change) otherwise."""
    if not any(m.site_id == site_id for m in memberships_of(request.user)):
        return False
    request.session[SESSION_SITE_KEY] = site_id
    if hasattr(request, "_sill_site_ctx"):
        del request._sill_site_ctx  # type: ignore[attr-defined]
    return True


def site_view(
    cap: Cap,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Guard a view: anonymous → login; no membership or missing capability → 403.

    The view receives the resolved :class:`SiteContext` as ``request.site_ctx``.
    """

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            ctx = site_context(request)
            if ctx is None or not ctx.can(cap):
                raise PermissionDenied
            request.site_ctx = ctx  # type: ignore[attr-defined]
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
