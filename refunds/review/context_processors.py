"""The count of held refunds beside the nav's Held entry (``templates/base.html``)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from refunds.review.selectors import HELD_COUNTED, held_count_for
from sill.accounts.access import Cap, site_context


def held_count(request: HttpRequest) -> dict[str, Any]:
    """``held_count`` for whoever sees the Held entry of the nav: one query, none otherwise."""
    ctx = site_context(request)
    if ctx is None:
        return {}
    count = held_count_for(ctx.site) if ctx.can(Cap.VIEW_HELD) else 0
    return {"held_count": min(count, HELD_COUNTED), "held_count_more": count > HELD_COUNTED}
