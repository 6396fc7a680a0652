from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from sill.accounts.access import Cap, site_context

# (label, url name, capability). Entries whose URL does not exist yet are left out.
NAV: tuple[tuple[str, str, Cap], ...] = (
    ("Dashboard", "orders:dashboard", Cap.VIEW_ORDERS),
    ("Orders", "orders:list", Cap.VIEW_ORDERS),
    ("Refunds", "refunds:list", Cap.VIEW_ORDERS),
    ("Held", "refunds:held", Cap.VIEW_HELD),
    ("Reconciliation", "refunds:reconcile", Cap.DECIDE_HELD),
    ("Rules", "policies:rules", Cap.VIEW_RULES),
    ("Activity", "audit:activity", Cap.VIEW_ACTIVITY),
    ("Settings", "settings:index", Cap.MANAGE_SETTINGS),
)


def site_context_processor(request: HttpRequest) -> dict[str, Any]:
    ctx = site_context(request)
    if ctx is None:
        return {"site_ctx": None, "nav": []}
    nav = []
    for label, name, cap in NAV:
        if not ctx.can(cap):
            continue
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        # "/" is only the dashboard; every other entry owns the paths under it, so Settings
        # stays highlighted on /settings/reasons/, /settings/members/ and the rest.
        active = request.path == url if url == "/" else request.path.startswith(url)
        nav.append({"label": label, "url": url, "key": name, "active": active})
    # The Held entry's count comes from refunds.review.context_processors.
    return {"site_ctx": ctx, "nav": nav}
