"""An agent's own refund caps (Settings → Agents), checked after the quote and before the
policy: per refund, and per day since midnight in the site's time zone, in the site's currency.

Read under the agent's decision lock (refunds.locks.lock_decision_scope), so two refunds of
one agent cannot both fit under a daily cap that only one of them fits. A refund in another
currency than the site's, for an agent with a cap, is refused too: a cap Sill cannot compare
never lets money out.
"""

from __future__ import annotations

from datetime import datetime

from policies.facts import agent_day_start, agent_live_refunds_since, agent_live_totals
from sill.accounts.models import Agent, Site
from sill.money import Money

CODE = "agent_cap_exceeded"


def agent_cap_refusal(
    *,
    agent: Agent,
    site: Site,
    amount: Money,
    now: datetime,
    today: list[tuple[str, int]] | None = None,
) -> str | None:
    """``agent_cap_exceeded`` when ``amount`` is over one of the agent's caps; else None.

    ``today``: the agent's live refunds since its day began, summed by currency, when the
    caller read them already (agent intake, with the order's lock); else read here, from the
    kept quarter-hour totals as the policy's facts read them."""
    per_refund, per_day = agent.refund_cap_minor, agent.daily_refund_cap_minor
    if per_refund is None and per_day is None:
        return None
    if amount.currency != site.default_currency:
        return CODE
    if per_refund is not None and amount.amount_minor > per_refund:
        return CODE
    if per_day is not None:
        if today is None:
            midnight = agent_day_start(site, now)
            today = agent_live_totals(agent.pk, midnight)
            if today is None:  # a midnight off the quarter-hours
                today = agent_live_refunds_since(site.pk, agent.pk, midnight)
        spent = dict(today).get(site.default_currency, 0)
        if spent + amount.amount_minor > per_day:
            return CODE
    return None
