"""An owner removes or demotes an admin at the very moment that admin changes a rail on
Settings → Rails (PostgreSQL, threads): a rail's keys and its switch say where the site's
refunds go, so once the owner's change is confirmed, the admin's must not go through.

The owner's change is in flight (written, waiting for the site's audit chain behind another
append) when the admin's is taken up: the admin's check before its transaction (and before a
provider is asked about the new credentials) still sees an admin, and its transaction must
check again (``access.hold_member``) and refuse it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from django.db import transaction

from audit.models import AuditRecord
from audit.services import append_record
from sill.accounts import two_factor
from sill.accounts.models import Membership, Role, Site
from sill.accounts.services import change_member_role, remove_member
from sill.errors import PermissionDenied
from sill.rails.models import RailAccount
from sill.rails.paypal.connect import configure_paypal
from sill.rails.registry import ensure_mock_rail
from sill.rails.services import configure_stripe, set_rail_enabled
from sill.rails.shopify.connect import configure_shopify
from sill.rails.woocommerce.connect import configure_woocommerce
from tests.rails import paypal_stub, shopify_stub, woo_stub
from tests.threads import run_behind_a_member_change

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

Change = Callable[[Site, Any, ExitStack], Callable[[], object]]


def _switches_on(site: Site, actor: Any, stack: ExitStack) -> Callable[[], object]:
    RailAccount.objects.filter(pk=ensure_mock_rail(site).pk).update(enabled=False)
    return lambda: set_rail_enabled(
        site=site, actor=actor, rail="mock", enabled=True, second_factor=two_factor.OPERATOR
    )


def _keys_stripe(site: Site, actor: Any, stack: ExitStack) -> Callable[[], object]:
    return lambda: configure_stripe(
        site=site, actor=actor, secret_key="sk_test_" + "a" * 24, connected_account="",
        mode="test", second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _connects_shopify(site: Site, actor: Any, stack: ExitStack) -> Callable[[], object]:
    shop = stack.enter_context(shopify_stub.StubServer())
    return lambda: configure_shopify(
        site=site, actor=actor, shop_domain=shopify_stub.SHOP, access_token=shopify_stub.TOKEN,
        api_base=shop.url, second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _connects_paypal(site: Site, actor: Any, stack: ExitStack) -> Callable[[], object]:
    paypal = stack.enter_context(paypal_stub.StubServer())
    return lambda: configure_paypal(
        site=site, actor=actor, client_id=paypal_stub.CLIENT_ID,
        client_secret=paypal_stub.CLIENT_SECRET, mode="test", webhook_id=paypal_stub.WEBHOOK_ID,
        api_base=paypal.url, second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _connects_woocommerce(site: Site, actor: Any, stack: ExitStack) -> Callable[[], object]:
    store = stack.enter_context(woo_stub.StubServer())
    return lambda: configure_woocommerce(
        site=site, actor=actor, store_url=store.url, consumer_key=woo_stub.CONSUMER_KEY,
        consumer_secret=woo_stub.CONSUMER_SECRET, webhook_secret="",
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _rails(site: Site) -> list[tuple[object, ...]]:
    return list(
        RailAccount.objects.filter(site=site)
        .order_by("rail")
        .values_list("rail", "enabled", "secret_encrypted", "connected_account", "config")
    )


# Before: each of these checked the admin only before its transaction (and before asking the
# provider about the credentials), and went through after the owner's change was confirmed:
# the chain read member_change, then the rail_change of someone who could no longer manage
# rails, and the new key, store or switch took effect.
@pytest.mark.parametrize(
    ("action", "change"),
    [
        (_switches_on, "demoted"),
        (_keys_stripe, "removed"),
        (_connects_shopify, "demoted"),
        (_connects_paypal, "demoted"),
        (_connects_woocommerce, "removed"),
    ],
    ids=["switch_on", "stripe", "shopify", "paypal", "woocommerce"],
)
def test_an_admin_removed_or_demoted_as_they_change_a_rail_changes_nothing(
    site, members, stack, settings, action: Change, change
):
    settings.DEBUG = True  # the stubs' API addresses are accepted only then
    owner, admin = members["owner"], members["admin"]
    with transaction.atomic():  # the site's chain exists, as on any site in use
        append_record(site=site, kind="settings_change", body={"change": "test"})
    admin_does = action(site, admin.user, stack)
    before, records = _rails(site), AuditRecord.objects.count()

    def owner_does() -> None:
        membership = Membership.objects.select_related("site", "user").get(pk=admin.pk)
        if change == "removed":
            remove_member(membership=membership, actor=owner)
        else:
            change_member_role(
                membership=membership, actor=owner, role=Role.REVIEWER,
                second_factor=two_factor.OPERATOR,
            )  # fmt: skip

    changed, done = run_behind_a_member_change(site_id=site.pk, change=owner_does, run=admin_does)

    assert changed is None, changed
    assert isinstance(done, PermissionDenied), done
    assert _rails(site) == before
    added = AuditRecord.objects.order_by("seq")[records:]
    assert [r.kind for r in added] == ["member_change"]
