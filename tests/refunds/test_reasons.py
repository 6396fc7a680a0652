"""The refund-reason tree: seeding, add / rename / move / (de)activate / delete, the picker."""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError

from audit.models import AuditRecord
from refunds.models import Refund, RefundReason
from refunds.reasons.selectors import (
    DEFAULT_CODES,
    PATH_SEPARATOR,
    PickerGroup,
    pickable_reason,
    reason_picker_for,
    reason_tree_for,
)
from refunds.reasons.services import (
    add_reason,
    delete_reason,
    ensure_default_reasons,
    move_reason,
    rename_reason,
    set_reason_active,
)
from refunds.staff.services import create_staff_refund
from sill.errors import SillError
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db


def _names(site) -> list[tuple[int, str]]:
    return [(row.depth, row.reason.name) for row in reason_tree_for(site)]


def _reason_changes(site) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="reason_change").order_by("seq")
    return [json.loads(r.payload)["body"] for r in records]


@pytest.fixture
def owner(members):
    return members["owner"].user


@pytest.fixture
def tree(site, owner):
    """Product problem > {Arrived broken, Wrong colour}; Shipping > Lost > Courier."""
    product = add_reason(site=site, actor=owner, name="Product problem")
    broken = add_reason(site=site, actor=owner, name="Arrived broken", parent=product)
    colour = add_reason(site=site, actor=owner, name="Wrong colour", parent=product)
    shipping = add_reason(site=site, actor=owner, name="Shipping")
    lost = add_reason(site=site, actor=owner, name="Lost", parent=shipping)
    courier = add_reason(site=site, actor=owner, name="Courier", parent=lost)
    return {
        "product": product,
        "broken": broken,
        "colour": colour,
        "shipping": shipping,
        "lost": lost,
        "courier": courier,
    }


def _fresh(reason: RefundReason) -> RefundReason:
    return RefundReason.objects.get(pk=reason.pk)


# --- seeding ---------------------------------------------------------------------------------


def test_it_seeds_the_agent_reason_codes_once(site):
    added = ensure_default_reasons(site)
    assert {r.code for r in added} == DEFAULT_CODES
    assert ensure_default_reasons(site) == []
    assert RefundReason.objects.filter(site=site).count() == 5
    assert _names(site) == [
        (0, "Defective"),
        (0, "Not received"),
        (0, "Other"),
        (0, "Requested by customer"),
        (0, "Wrong item"),
    ]
    seeds = _reason_changes(site)
    assert [s["action"] for s in seeds] == ["seed"]
    assert {r["code"] for r in seeds[0]["reasons"]} == DEFAULT_CODES


def test_it_seeds_only_what_is_missing_and_codes_a_same_named_reason(site, owner):
    mine = add_reason(site=site, actor=owner, name="defective")  # no code yet
    ensure_default_reasons(site)
    assert _fresh(mine).code == "defective"
    assert RefundReason.objects.filter(site=site, name__iexact="defective").count() == 1
    RefundReason.objects.filter(site=site, code="other").update(active=False)
    assert ensure_default_reasons(site) == []  # deactivated is not missing


def test_it_keeps_each_sites_tree_to_itself(site, other_site, owner):
    ensure_default_reasons(site)
    ensure_default_reasons(other_site)
    add_reason(site=other_site, actor=site_owner(other_site), name="Theirs")
    assert "Theirs" not in [name for _, name in _names(site)]
    assert len(reason_tree_for(site)) == 5 and len(reason_tree_for(other_site)) == 6
    theirs = RefundReason.objects.get(site=other_site, name="Theirs")
    with pytest.raises(SillError) as exc:
        pickable_reason(site, theirs.pk)
    assert exc.value.code == "invalid_field"


# --- add, rename, move -----------------------------------------------------------------------


def test_it_adds_roots_and_children_in_name_order(site, tree):
    assert _names(site) == [
        (0, "Product problem"),
        (1, "Arrived broken"),
        (1, "Wrong colour"),
        (0, "Shipping"),
        (1, "Lost"),
        (2, "Courier"),
    ]
    rows = {r.reason.name: r for r in reason_tree_for(site)}
    assert rows["Courier"].path == PATH_SEPARATOR.join(["Shipping", "Lost", "Courier"])
    assert not rows["Shipping"].is_leaf and rows["Courier"].is_leaf


def test_it_refuses_bad_names_codes_and_duplicate_siblings(site, tree, owner):
    for name in ("", "   ", "x" * 121):
        with pytest.raises(SillError):
            add_reason(site=site, actor=owner, name=name)
    with pytest.raises(SillError, match="already a reason named"):
        add_reason(site=site, actor=owner, name="arrived BROKEN", parent=tree["product"])
    with pytest.raises(SillError, match="lower-case"):
        add_reason(site=site, actor=owner, name="Damaged", code="Bad Code")
    add_reason(site=site, actor=owner, name="Damaged", code="damaged")
    with pytest.raises(SillError, match="already has the code"):
        add_reason(site=site, actor=owner, name="Damaged again", code="damaged")
    # The same name under another parent is fine.
    add_reason(site=site, actor=owner, name="Arrived broken", parent=tree["shipping"])


def test_it_renames_and_keeps_name_order(site, tree, owner):
    rename_reason(reason=tree["product"], actor=owner, name="Zebra problems")
    rename_reason(reason=tree["colour"], actor=owner, name="A wrong colour")
    assert _names(site) == [
        (0, "Shipping"),
        (1, "Lost"),
        (2, "Courier"),
        (0, "Zebra problems"),
        (1, "A wrong colour"),
        (1, "Arrived broken"),
    ]
    with pytest.raises(SillError, match="already a reason named"):
        rename_reason(reason=tree["broken"], actor=owner, name="a wrong colour")


def test_it_moves_a_reason_with_everything_under_it(site, tree, owner):
    move_reason(reason=tree["lost"], actor=owner, parent=tree["product"])
    assert _names(site) == [
        (0, "Product problem"),
        (1, "Arrived broken"),
        (1, "Lost"),
        (2, "Courier"),
        (1, "Wrong colour"),
        (0, "Shipping"),
    ]
    assert _fresh(tree["shipping"]).numchild == 0  # Shipping is a leaf now
    move_reason(reason=tree["lost"], actor=owner, parent=None)
    assert (0, "Lost") in _names(site)
    assert [n for d, n in _names(site) if d == 0] == ["Lost", "Product problem", "Shipping"]


def test_it_refuses_to_move_a_reason_under_itself(site, tree, owner):
    for target in ("shipping", "lost", "courier"):
        with pytest.raises(SillError) as exc:
            move_reason(reason=tree["shipping"], actor=owner, parent=_fresh(tree[target]))
        assert exc.value.code == "invalid_move"


def test_it_refuses_another_sites_parent(site, other_site, tree, owner):
    theirs = add_reason(site=other_site, actor=site_owner(other_site), name="Theirs")
    with pytest.raises(SillError):
        add_reason(site=site, actor=owner, name="Sneaky", parent=theirs)
    with pytest.raises(SillError):
        move_reason(reason=tree["broken"], actor=owner, parent=theirs)


# --- active, picker --------------------------------------------------------------------------


def test_the_picker_offers_only_active_leaves_grouped_under_their_categories(site, tree, owner):
    ensure_default_reasons(site)
    set_reason_active(reason=tree["colour"], actor=owner, active=False)
    entries = reason_picker_for(site)

    def show(entry):
        if isinstance(entry, PickerGroup):
            return (entry.label, [o.label for o in entry.options])
        return entry.label

    assert [show(e) for e in entries] == [
        "Defective",
        "Not received",
        "Other",
        ("Product problem", ["Arrived broken"]),
        "Requested by customer",
        (f"Shipping{PATH_SEPARATOR}Lost", ["Courier"]),
        "Wrong item",
    ]
    group = entries[3]
    assert isinstance(group, PickerGroup)
    assert group.options[0].value == str(tree["broken"].pk)


def test_a_category_with_leaves_at_several_depths_appears_once(site, tree, owner):
    add_reason(site=site, actor=owner, name="Zzz late leaf", parent=tree["shipping"])
    entries = reason_picker_for(site)
    labels = [e.label for e in entries]
    assert labels == [
        "Product problem",
        f"Shipping{PATH_SEPARATOR}Lost",
        "Shipping",
    ]
    assert [o.label for o in entries[2].options] == ["Zzz late leaf"]


def test_deactivating_a_category_hides_everything_under_it_until_reactivated(site, tree, owner):
    set_reason_active(reason=tree["shipping"], actor=owner, active=False)
    labels = [e.label for e in reason_picker_for(site)]
    assert not any("Shipping" in label for label in labels)
    rows = {r.reason.name: r for r in reason_tree_for(site)}
    assert rows["Courier"].hidden_by_parent and not rows["Courier"].pickable
    with pytest.raises(SillError) as exc:
        pickable_reason(site, tree["courier"].pk)
    assert exc.value.code == "reason_inactive"
    set_reason_active(reason=tree["shipping"], actor=owner, active=True)
    assert pickable_reason(site, tree["courier"].pk).reason == tree["courier"]


def test_a_pickable_reason_is_an_active_leaf_of_the_site(site, tree, owner):
    with pytest.raises(SillError) as exc:
        pickable_reason(site, tree["product"].pk)
    assert exc.value.code == "reason_not_leaf"
    set_reason_active(reason=tree["broken"], actor=owner, active=False)
    with pytest.raises(SillError) as exc:
        pickable_reason(site, tree["broken"].pk)
    assert exc.value.code == "reason_inactive"
    for bad in ("", None, "abc", "999999"):
        with pytest.raises(SillError) as exc:
            pickable_reason(site, bad)
        assert exc.value.code == "invalid_field"


def test_a_leaf_reads_as_its_nearest_coded_ancestors_code(site, owner):
    ensure_default_reasons(site)
    defective = RefundReason.objects.get(site=site, code="defective")
    child = add_reason(site=site, actor=owner, name="Stopped working", parent=defective)
    picked = pickable_reason(site, child.pk)
    assert picked.code == "defective"
    assert picked.path == f"Defective{PATH_SEPARATOR}Stopped working"


# --- delete ----------------------------------------------------------------------------------


@pytest.fixture
def used_leaf(site, tree, make_order, members, mock_rail):
    create_staff_refund(
        site=site,
        order=make_order(),
        actor=members["staff"].user,
        kind="full",
        reason=tree["courier"],
        note="",
    )
    return tree["courier"]


def test_it_deletes_an_unused_reason_with_everything_under_it(site, tree, owner):
    delete_reason(reason=tree["product"], actor=owner)
    assert [n for _, n in _names(site)] == ["Shipping", "Lost", "Courier"]
    assert _reason_changes(site)[-1]["action"] == "delete"


def test_it_refuses_to_delete_a_used_reason_or_its_category(site, tree, owner, used_leaf):
    for name in ("courier", "lost", "shipping"):
        with pytest.raises(SillError) as exc:
            delete_reason(reason=tree[name], actor=owner)
        assert exc.value.code == "reason_in_use"
        assert "deactivate it instead" in exc.value.message
    assert RefundReason.objects.filter(site=site).count() == 6
    assert "delete" not in [c["action"] for c in _reason_changes(site)]
    assert reason_tree_for(site)[-1].delete_blocked.startswith("Used by 1 refund")


def test_the_database_itself_protects_a_used_reason(site, used_leaf):
    with pytest.raises(ProtectedError):
        RefundReason.objects.filter(pk=used_leaf.pk).delete()
    # Below the ORM too: the foreign key refuses a raw DELETE (Django's foreign keys are
    # deferred to commit, so ask for the check now).
    table = RefundReason._meta.db_table
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"DELETE FROM {table} WHERE id = %s", [used_leaf.pk])
        connection.check_constraints(table_names=[Refund._meta.db_table])
    assert RefundReason.objects.filter(pk=used_leaf.pk).exists()


def test_it_refuses_to_delete_the_agent_coded_reasons(site, owner):
    ensure_default_reasons(site)
    with pytest.raises(SillError) as exc:
        delete_reason(reason=RefundReason.objects.get(site=site, code="other"), actor=owner)
    assert exc.value.code == "reason_protected"


def test_a_used_reason_renamed_or_deactivated_stays_as_it_was_on_past_refunds(
    site, tree, owner, used_leaf
):
    refund = used_leaf.refunds.get()
    rename_reason(reason=used_leaf, actor=owner, name="Courier lost it")
    set_reason_active(reason=used_leaf, actor=owner, active=False)
    refund.refresh_from_db()
    assert refund.refund_reason_id == used_leaf.pk
    assert refund.reason_path == PATH_SEPARATOR.join(["Shipping", "Lost", "Courier"])
    assert refund.reason_label == "Courier"


def test_every_change_is_a_signed_reason_change_record(site, tree, owner):
    rename_reason(reason=tree["broken"], actor=owner, name="Broken")
    move_reason(reason=tree["broken"], actor=owner, parent=tree["shipping"])
    set_reason_active(reason=tree["broken"], actor=owner, active=False)
    set_reason_active(reason=tree["broken"], actor=owner, active=True)
    delete_reason(reason=tree["broken"], actor=owner)
    changes = _reason_changes(site)
    assert [c["action"] for c in changes] == [
        *["add"] * 6,
        "rename",
        "move",
        "deactivate",
        "reactivate",
        "delete",
    ]
    rename = changes[6]
    assert rename["from_name"] == "Arrived broken" and rename["name"] == "Broken"
    assert rename["actor"] == owner.get_username()
    assert changes[7]["path"] == f"Shipping{PATH_SEPARATOR}Broken"
    assert changes[7]["from_path"] == f"Product problem{PATH_SEPARATOR}Broken"
    from audit.selectors import chain_verification

    assert chain_verification(site).ok
