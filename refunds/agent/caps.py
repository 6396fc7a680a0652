"""An agent's own refund caps (Settings → Agents), checked after the quote and before the
policy: per refund, and per day since midnight in the site's time zone, in the site's currency.

Read under the agent's decision lock (refunds.locks.lock_decision_scope), so two refunds of
one agent cannot both fit under a daily cap that only one of them fits. A refund in another
currency than the site's, for an agent with a cap, is refused too: a cap Sill cannot compare
never lets money out.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Sum

from refunds.models import LIVE_STATUSES, Refund
from sill.accounts.models import Agent, Site
from sill.money import Money

CODE = "agent_cap_exceeded"


def agent_cap_refusal(*, agent: Agent, site: Site, amount: Money, now: datetime) -> str | None:
    """``agent_cap_exceeded`` when ``amount`` is over one of the agent's caps; else None."""
    per_refund, per_day = agent.refund_cap_minor, agent.daily_refund_cap_minor
    if per_refund is None and per_day is None:
        return None
    if amount.currency != site.default_currency:
        return CODE
    if per_refund is not None and amount.amount_minor > per_refund:
        return CODE
    if per_day is not None:
        midnight = now.astimezone(site.zone).replace(hour=0, minute=0, second=0, microsecond=0)
        today = Refund.objects.filter(
            agent=agent,
            status__in=LIVE_STATUSES,
            currency=site.default_currency,
            created_at__gte=midnight,
        ).aggregate(total=Sum("amount_minor"))["total"]
        if (today or 0) + amount.amount_minor > per_day:
            return CODE
    return None
