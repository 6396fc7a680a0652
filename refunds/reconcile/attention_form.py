"""The owner's form under a refund that needs attention: what the provider's dashboard shows.

It posts to ``refunds:resolve-attention`` (:mod:`refunds.reconcile.attention_views`). As the
staff refund form and a charge's attention form do, a valid submit without ``confirmed=1``
answers the page with a confirmation in place of the form (nothing written), whose button
posts the same fields with ``confirmed=1``; **Change** gives the form back with what was
typed. What Sill already knows is filled in: the rail's refund id, when the rail confirmed
one (then "The refund was made" is the only answer offered, and it is chosen).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.http import QueryDict

from refunds.labels import money_words, rail_label
from refunds.models import Refund
from refunds.reconcile.attention import AttentionAnswer
from sill.money import format_money

FIELDS = ("outcome", "provider_refund_id", "note")
# What the page shows again of what was typed: enough for any valid value.
KEPT_CHARACTERS = 2000


@dataclass(frozen=True)
class AttentionConfirmation:
    """What recording the owner's answer will do, shown before anything is written."""

    sentence: str
    button: str


@dataclass(frozen=True)
class AttentionForm:
    """The form of the refund ``refund_id`` as posted (the page's other refunds' forms are
    shown fresh); ``confirmation`` once the answer was checked and awaits the owner's yes."""

    refund_id: str = ""
    values: dict[str, str] = field(default_factory=dict)
    confirmation: AttentionConfirmation | None = None

    @classmethod
    def from_post(cls, refund_id: str, data: QueryDict) -> AttentionForm:
        return cls(refund_id=refund_id, values={name: data.get(name, "") for name in FIELDS})

    @property
    def kept(self) -> dict[str, str]:
        return {name: value[:KEPT_CHARACTERS] for name, value in self.values.items()}

    def confirming(self, confirmation: AttentionConfirmation) -> AttentionForm:
        return replace(self, confirmation=confirmation)


@dataclass(frozen=True)
class AttentionFormView:
    """One refund's form as the page draws it: what is filled in, whether it is open, and the
    confirmation in its place."""

    outcome: str
    provider_refund_id: str
    note: str
    open: bool
    confirmation: AttentionConfirmation | None
    hidden: dict[str, str]


def form_view(refund: Refund, form: AttentionForm | None) -> AttentionFormView:
    """What ``refund``'s form shows: the posted form's values if it is this refund's, else
    what Sill knows (the rail's refund id, and "made" as the only answer it leaves)."""
    if form is not None and form.refund_id == refund.pk:
        kept = form.kept
        return AttentionFormView(
            outcome=kept.get("outcome", ""),
            provider_refund_id=kept.get("provider_refund_id", ""),
            note=kept.get("note", ""),
            open=True,
            confirmation=form.confirmation,
            hidden={name: value for name, value in kept.items() if value},
        )
    known = refund.provider_refund_id
    return AttentionFormView(
        outcome="refunded" if known else "",
        provider_refund_id=known,
        note="",
        open=False,
        confirmation=None,
        hidden={},
    )


def confirmation_for(refund: Refund, answer: AttentionAnswer) -> AttentionConfirmation:
    """The sentence and button before an owner's answer is recorded."""
    noun, done = money_words(refund)
    amount = format_money(refund.amount)
    rail = rail_label(refund.rail)
    signed = "It is kept in the signed audit log and cannot be undone. The signed record names you."
    if answer.outcome == "refunded":
        return AttentionConfirmation(
            sentence=(
                f"Record that {rail} made the {noun} of {amount} "
                f"({answer.provider_refund_id})? Sill records it as {done}. {signed}"
            ),
            button=f"Record: {done}",
        )
    if refund.is_credit:
        then = "The credit ends: the customer is not credited."
    else:
        then = f"The reservation is released: {amount} is refundable again."
    return AttentionConfirmation(
        sentence=f"Record that {rail} made no {noun} of {amount}? {then} {signed}",
        button=f"Record: no {noun}",
    )
