"""A purchase's charge that needs attention on the staff pages: the order page's form (owners
only) and the dashboard's list (whoever may decide held refunds, as the refunds beside it).

Under a charge whose rail never answered (``sill.orders.charge_attention``), an owner records
what the rail's dashboard shows: *charged* with its charge or payment id, or *not charged*,
and a note. The form posts to ``orders:resolve-charge-attention``; like the staff refund form,
a valid submit without ``confirmed=1`` answers the page with a confirmation in place of the
form (nothing written), whose button posts the same fields with ``confirmed=1``, and
**Change** gives the form back. A refusal re-renders the page with the message beside the form
(422, or 409 while the sweep holds the charge) and keeps what was typed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from django.db.models import Count, Window
from django.http import QueryDict

from sill.accounts.access import Cap, SiteContext
from sill.accounts.models import Role
from sill.errors import SillError
from sill.money import format_money
from sill.orders.charge_attention import ChargeResolution
from sill.orders.models import Charge, ChargeStatus, Order
from sill.orders.selectors import attention_charges_for
from sill.rails.base import rail_label

FIELDS = ("outcome", "provider_charge_id", "provider_payment_id", "note")
# The dashboard lists the oldest this many, like the refunds that need attention.
DASHBOARD_LIMIT = 20
# What a refused form shows again of what was typed: enough for any valid value.
KEPT_CHARACTERS = 2000


@dataclass(frozen=True)
class ChargeConfirmation:
    """What recording the owner's answer will do, shown before anything is written."""

    sentence: str
    button: str


@dataclass(frozen=True)
class ChargeAttentionForm:
    values: dict[str, str] = field(default_factory=dict)
    error: str = ""
    error_field: str = ""
    confirmation: ChargeConfirmation | None = None

    @classmethod
    def from_post(cls, data: QueryDict) -> ChargeAttentionForm:
        return cls(values={name: data.get(name, "") for name in FIELDS})

    @property
    def kept(self) -> dict[str, str]:
        """The typed values, as the page shows them again."""
        return {name: value[:KEPT_CHARACTERS] for name, value in self.values.items()}

    @property
    def open(self) -> bool:
        """Whether the form was submitted (and is shown unfolded again)."""
        return any(self.values.values())

    def refused(self, error: SillError) -> ChargeAttentionForm:
        return replace(self, error=error.message, error_field=error.field or "", confirmation=None)

    def confirming(self, confirmation: ChargeConfirmation) -> ChargeAttentionForm:
        return replace(self, confirmation=confirmation)


def charge_attention_context(
    ctx: SiteContext, *, form: ChargeAttentionForm | None = None
) -> dict[str, Any]:
    """For the order page: whether the viewer may record what the dashboard shows (owners),
    and the form's state (empty, refused, or confirming)."""
    return {"can_resolve": ctx.role == Role.OWNER, "form": form or ChargeAttentionForm()}


def dashboard_charges(ctx: SiteContext) -> list[Charge]:
    """For the dashboard: the site's charges that need attention, oldest first, if the viewer
    may decide held refunds (owners and admins: the rule of the refunds listed beside them)."""
    if not ctx.can(Cap.DECIDE_HELD):
        return []
    # Each row also carries how many there are in all (a window over the whole list, counted
    # before the LIMIT): the to-do strip's count, in the list's one query.
    counted = attention_charges_for(ctx.site).annotate(in_all=Window(Count("id")))
    return list(counted[:DASHBOARD_LIMIT])


def dashboard_charge_count(listed: list[Charge]) -> int:
    """How many charges need attention, for the to-do strip, from what
    :func:`dashboard_charges` listed (no query)."""
    return int(getattr(listed[0], "in_all", len(listed))) if listed else 0


def confirmation_for(
    order: Order, charge: Charge, resolution: ChargeResolution
) -> ChargeConfirmation:
    rail = rail_label(charge.rail)
    if not resolution.charged:
        return ChargeConfirmation(
            sentence=(
                f"Record that {rail} did not charge the buyer for order #{order.number}? The "
                "charge is recorded as failed and the order is cancelled; Sill stops checking. "
                "The signed record names you."
            ),
            button="Record: not charged",
        )
    ids = ", ".join(
        f"{noun} {value}"
        for noun, value in (
            ("charge", resolution.provider_charge_id),
            ("payment", resolution.provider_payment_id),
        )
        if value
    )
    return ChargeConfirmation(
        sentence=(
            f"Record that {rail} charged the buyer {format_money(charge.amount)} for order "
            f"#{order.number} ({ids})? The charge is recorded as succeeded and the order as "
            "paid, so it can be refunded. The signed record names you."
        ),
        button="Record: charged",
    )


def outcome_message(order: Order, charge: Charge) -> str:
    """The flash after a recorded answer."""
    if charge.status == ChargeStatus.SUCCEEDED:
        shown = charge.provider_charge_id or charge.provider_payment_id
        return (
            f"Recorded: {rail_label(charge.rail)} charged {format_money(charge.amount)} "
            f"({shown}); order #{order.number} is paid."
        )
    return f"Recorded: nothing was charged; order #{order.number} is cancelled."
