"""Reads of a site's refund-reason tree: the settings page, the picker, one pickable reason.

Every read is scoped to one site and loads the site's whole tree in one query (a merchant has
tens of reasons, not thousands), then works on paths in Python: treebeard's materialised path
makes "ancestors of X" a prefix test and DFS order a sort on ``path``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count
from django.http import Http404

from refunds.models import RefundReason
from sill.accounts.models import Site
from sill.errors import SillError

PATH_SEPARATOR = " \u203a "  # a single right-pointing angle quotation mark

# The agent API's reason codes (DESIGN.md, the Sill seed), seeded on every site as reasons
# (refunds.reasons.ensure_default_reasons).
DEFAULT_REASONS: tuple[tuple[str, str], ...] = (
    ("requested_by_customer", "Requested by customer"),
    ("defective", "Defective"),
    ("not_received", "Not received"),
    ("wrong_item", "Wrong item"),
    ("other", "Other"),
)
DEFAULT_CODES = frozenset(code for code, _ in DEFAULT_REASONS)


@dataclass(frozen=True)
class ReasonRow:
    """One reason as the settings page and the picker show it."""

    reason: RefundReason
    depth: int  # 0 for a top-level reason
    path: str  # "Product problem > Defective" (with PATH_SEPARATOR)
    used: int  # refunds that name this reason
    is_leaf: bool
    # Inactive itself, or under an inactive ancestor: hidden from the picker either way.
    hidden_by_parent: bool
    # Ids of this reason and everything under it (it cannot be moved into these).
    subtree_ids: frozenset[int]
    # Why it can't be deleted ("" when it can): deleting takes everything under it along.
    delete_blocked: str = ""

    @property
    def pickable(self) -> bool:
        return self.is_leaf and self.reason.active and not self.hidden_by_parent

    @property
    def indent(self) -> str:
        """Non-breaking spaces for a ``<select>`` of the whole tree (settings page)."""
        return "\u00a0\u00a0\u00a0\u00a0" * self.depth


def _ancestor_paths(reason: RefundReason) -> list[str]:
    step = RefundReason.steplen
    return [reason.path[:i] for i in range(step, len(reason.path), step)]


def reason_tree_for(site: Site, *, with_usage: bool = True) -> list[ReasonRow]:
    """The site's reasons in tree order (one query), with path labels and usage counts."""
    qs = RefundReason.objects.filter(site=site).order_by("path")
    if with_usage:
        qs = qs.annotate(used=Count("refunds"))
    nodes = list(qs)
    by_path = {n.path: n for n in nodes}
    rows: list[ReasonRow] = []
    for node in nodes:
        ancestors = [by_path[p] for p in _ancestor_paths(node) if p in by_path]
        below = [n for n in nodes if n.path.startswith(node.path)]
        used = sum(getattr(n, "used", 0) for n in below)
        blocked = ""
        if used:
            blocked = f"Used by {used} refund{'s' if used != 1 else ''}: deactivate it instead"
        elif any(n.code in DEFAULT_CODES for n in below):
            blocked = "Agents send this reason's code: deactivate it instead"
        rows.append(
            ReasonRow(
                reason=node,
                depth=node.depth - 1,
                path=PATH_SEPARATOR.join([*(a.name for a in ancestors), node.name]),
                used=getattr(node, "used", 0),
                is_leaf=node.numchild == 0,
                hidden_by_parent=any(not a.active for a in ancestors),
                subtree_ids=frozenset(n.pk for n in below),
                delete_blocked=blocked if with_usage else "",
            )
        )
    return rows


@dataclass(frozen=True)
class PickerOption:
    value: str  # the reason's id
    label: str


@dataclass(frozen=True)
class PickerGroup:
    """A category heading (``<optgroup>``): not a choice itself; its leaves are."""

    label: str  # the category's path, e.g. "Shipping > Lost" (with PATH_SEPARATOR)
    options: tuple[PickerOption, ...]

    is_group = True


def reason_picker_for(site: Site) -> list[PickerOption | PickerGroup]:
    """The picker: only active leaves are choices, grouped under their category's path.

    Top-level leaves are plain options; a leaf under a category goes into that category's
    ``<optgroup>`` (browsers indent those and never let a heading be picked), so the closed
    select shows the leaf's own name. Categories come in tree order of their first leaf;
    inactive reasons, and everything under an inactive category, are left out.
    """
    entries: list[PickerOption | PickerGroup] = []
    groups: dict[str, list[PickerOption]] = {}
    for row in reason_tree_for(site, with_usage=False):
        if not row.pickable:
            continue
        option = PickerOption(str(row.reason.pk), row.reason.name)
        if row.depth == 0:
            entries.append(option)
            continue
        category = row.path.rsplit(PATH_SEPARATOR, 1)[0]
        if category not in groups:
            groups[category] = []
            entries.append(PickerGroup(category, ()))
        groups[category].append(option)
    return [
        PickerGroup(e.label, tuple(groups[e.label])) if isinstance(e, PickerGroup) else e
        for e in entries
    ]


@dataclass(frozen=True)
class PickedReason:
    reason: RefundReason
    path: str  # the labels from the top, as they are now
    code: str  # the reason's code, or its nearest coded ancestor's; "" when none


def pickable_reason(site: Site, reason_id: object, *, field: str = "reason") -> PickedReason:
    """The active leaf ``reason_id`` of ``site``; ``SillError`` (400) for anything else.

    An unknown id and another site's id get the same answer, so ids of other sites leak
    nothing. The code handed to the policies is the reason's own, or else the nearest coded
    ancestor's: a merchant's "Arrived broken" under "Defective" still reads as ``defective``.
    """
    text = str(reason_id).strip() if reason_id is not None else ""
    # isdigit() alone also takes "²" (int() then raises) and Arabic-Indic digits (int() reads).
    if not (text.isascii() and text.isdigit()):
        raise SillError("Choose a reason for this refund.", code="invalid_field", field=field)
    reason = RefundReason.objects.filter(site=site, pk=int(text)).first()
    if reason is None:
        raise SillError(
            "This site has no such refund reason (an admin may have deleted it): choose another.",
            code="invalid_field",
            field=field,
        )
    if reason.numchild:
        raise SillError(
            f"“{reason.name}” is a category: choose one of the reasons under it.",
            code="reason_not_leaf",
            field=field,
        )
    ancestors = list(
        RefundReason.objects.filter(site=site, path__in=_ancestor_paths(reason)).order_by("path")
    )
    if not reason.active or any(not a.active for a in ancestors):
        raise SillError(
            f"“{reason.name}” is deactivated and can't be used for new refunds.",
            code="reason_inactive",
            field=field,
        )
    chain = [*ancestors, reason]
    code = next((n.code for n in reversed(chain) if n.code), "")
    return PickedReason(reason=reason, path=PATH_SEPARATOR.join(n.name for n in chain), code=code)


def reason_for(site: Site, reason_id: int) -> RefundReason:
    """One reason of ``site`` for the settings actions; another site's id is a 404."""
    reason = RefundReason.objects.filter(site=site, pk=reason_id).first()
    if reason is None:
        raise Http404("No such reason on this site.")
    return reason
