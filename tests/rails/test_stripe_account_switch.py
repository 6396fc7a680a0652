"""Charges of a Stripe account whose key the site replaced with another account's.

A Stripe key is one account's, in one mode. A merchant who saved a key of account A, took
payments, then saved a key of account B found every refund of A's payments accepted ("approved,
processing" to the agent) and then failed ``resource_missing`` at execution, and every
reconciliation counted them unreadable: B holds none of them. Sill now asks Stripe which
account a saved key acts on (sill.rails.payment_account), each charge records the account it
was taken on, and a charge of an earlier account is refused at decision time in the words an
earlier Shopify shop's or WooCommerce store's is, and left out of reconciliation.

localstripe keeps one store for every key and cannot name an account, so it runs behind a
loopback proxy that answers ``GET /v1/account`` per key, as Stripe does
(tests/rails/stripe_account_proxy.py); everything else is localstripe's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django.utils import timezone

from audit.activity import body_of, summary_of
from audit.models import AuditRecord
from refunds.execution import execute_refund
from refunds.models import Refund
from refunds.reconcile.attention import check_refund_at_rail
from refunds.reconcile.runs import run_reconciliation
from sill.accounts import two_factor
from sill.errors import SillError
from sill.orders.charge_attention import resolve_charge_attention
from sill.orders.charging import ChargeRetry, charge_order
from sill.orders.models import Charge, ChargeStatus, Order, OrderStatus
from sill.rails.left_behind import payment_left_behind
from sill.rails.models import RailAccount
from sill.rails.payment_account import learn_payment_accounts_task
from sill.rails.services import configure_stripe
from tests.admin_mount import admin_mounted
from tests.broker_down import broker_unreachable
from tests.rails.stripe_account_proxy import AccountProxy, StubServer
from tests.rails.stripe_events import stripe_account
from tests.rails.test_rail_change_audit import rail_changes
from tests.rails.test_shopify_shop_switch import _staff_refund
from tests.refunds.conftest import ORIGINAL, post, refund_intent

pytestmark = pytest.mark.django_db

KEY_A = "sk_test_SillAccountA0001"
KEY_B = "sk_test_SillAccountB0001"
LATER = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTP"  # the purchase mandate of an order taken on B


@pytest.fixture
def proxy(localstripe_url: str) -> Iterator[AccountProxy]:
    stub = AccountProxy(localstripe=localstripe_url, accounts={KEY_A: "acct_A1", KEY_B: "acct_B2"})
    with StubServer(stub) as served:
        yield served


@pytest.fixture
def save_key(site, members, proxy, django_capture_on_commit_callbacks) -> Callable[[str], None]:
    """``save_key(KEY_B)``: the owner saves a Stripe key on Settings → Rails' service, and
    what it enqueues runs (asking Stripe which account the key is)."""
    stripe_account(site, enabled=True, api_base=proxy.url)

    def save(key: str) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            configure_stripe(
                site=site,
                actor=members["owner"].user,
                secret_key=key,
                connected_account="",
                mode="test",
                second_factor=two_factor.OPERATOR,
            )

    return save


@pytest.fixture
def buy(site, make_order, agent) -> Callable[[str], Charge]:
    """``buy(mandate_id)``: an $89.00 order the agent placed, charged by Sill on the site's
    Stripe key (sill.orders.charging, as an agent's purchase is)."""

    def make(mandate_id: str) -> Charge:
        order = make_order(
            rail="stripe",
            charged=False,
            status=OrderStatus.PENDING,
            placed_by_agent=agent,
            source_mandate_id=mandate_id,
        )
        Charge.objects.create(
            order=order,
            rail="stripe",
            amount_minor=order.total_minor,
            currency=order.currency,
            status=ChargeStatus.PENDING,
            payment_method="pm_card_visa",
        )
        assert charge_order(order_id=order.pk, payment_method="pm_card_visa") == "succeeded"
        return Charge.objects.get(order=order)

    return make


def _agent_refund(sign, django_capture_on_commit_callbacks, mandate_id: str) -> dict:
    body = sign(refund_intent(mandate_id, max_amount=Decimal("89.00")))
    with django_capture_on_commit_callbacks(execute=True):
        return post(Client(), body).json()


def test_a_saved_key_is_named_by_its_account_and_charges_record_it(site, save_key, buy):
    save_key(KEY_A)
    account = RailAccount.objects.get(site=site, rail="stripe")
    assert account.payment_account == "acct_A1 (test mode)"

    charge = buy(ORIGINAL)
    assert charge.payment_account == "acct_A1 (test mode)"

    save_key(KEY_B)
    account.refresh_from_db()
    assert account.payment_account == "acct_B2 (test mode)"
    assert buy(LATER).payment_account == "acct_B2 (test mode)"
    # Each account Stripe named is signed in the site's log (the actor: Sill).
    named = [body for body in rail_changes(site) if body["action"] == "account_named"]
    assert [(body["payment_account"], body["actor"]) for body in named] == [
        ("acct_A1 (test mode)", None),
        ("acct_B2 (test mode)", None),
    ]


def test_an_agent_refund_of_an_earlier_accounts_charge_is_refused_at_decision(
    site, members, save_key, buy, proxy, sign, agent_key, django_capture_on_commit_callbacks
):
    save_key(KEY_A)
    old = buy(ORIGINAL)
    save_key(KEY_B)

    answer = _agent_refund(sign, django_capture_on_commit_callbacks, ORIGINAL)

    assert answer["decision"] == "rejected", answer
    assert answer["reason"] == "rail_disabled"
    assert answer["status"] == "rejected"
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert (refund.status, refund.outcome_code) == ("rejected", "rail_disabled")
    # A member is told why, in the words of an earlier Shopify shop or WooCommerce store.
    with pytest.raises(SillError) as refused:
        _staff_refund(site, members, old.order, django_capture_on_commit_callbacks)
    assert (refused.value.code, refused.value.status) == ("rail_disabled", 409)
    assert refused.value.message == (
        "This order came from the Stripe account acct_A1 (test mode), which this site is no "
        "longer connected to (it is now connected to acct_B2 (test mode)), so it cannot be "
        "refunded through Sill until acct_A1 (test mode) is connected again."
    )
    assert proxy.refund_posts == []  # nothing was sent to Stripe
    old.refresh_from_db()
    assert old.amount_reserved_minor == 0 and old.amount_refunded_minor == 0
    assert Order.objects.get(pk=old.order_id).status == OrderStatus.PAID


def test_a_charge_of_the_account_connected_now_refunds_as_before(
    site, save_key, buy, proxy, sign, agent_key, django_capture_on_commit_callbacks
):
    save_key(KEY_A)
    buy(ORIGINAL)
    save_key(KEY_B)
    new = buy(LATER)

    answer = _agent_refund(sign, django_capture_on_commit_callbacks, LATER)

    assert answer["decision"] == "approved", answer
    assert Refund.objects.get(pk=answer["refund_id"]).status == "succeeded"
    assert len(proxy.refund_posts) == 1
    new.refresh_from_db()
    assert new.amount_refunded_minor == 8900


def test_charges_from_before_sill_kept_the_account_refund_as_before(
    site, save_key, buy, proxy, sign, agent_key, django_capture_on_commit_callbacks
):
    save_key(KEY_A)
    old = buy(ORIGINAL)
    Charge.objects.filter(pk=old.pk).update(payment_account="")  # as before this change
    save_key(KEY_B)

    answer = _agent_refund(sign, django_capture_on_commit_callbacks, ORIGINAL)

    assert answer["decision"] == "approved", answer
    assert len(proxy.refund_posts) == 1


def test_reconciliation_leaves_an_earlier_accounts_charges_behind_not_unreadable(
    site, save_key, buy
):
    save_key(KEY_A)
    buy(ORIGINAL)
    save_key(KEY_B)
    buy(LATER)
    account = RailAccount.objects.get(site=site, rail="stripe")

    run = run_reconciliation(account_id=account.pk, force=True)

    assert run is not None and run.error == ""
    assert (run.charges_checked, run.charges_unreadable) == (1, 0)
    [left] = payment_left_behind(site_id=site.pk, rail="stripe", connected=account.payment_account)
    assert left.account == "acct_A1 (test mode)"
    assert left.orders == 1
    assert "acct_A1 (test mode) is connected again" in left.sentence


# --- a key replaced in the Django admin ------------------------------------------------------
# Before: the admin's rail form saved another key (or mode, Connect account, address) and kept
# the earlier key's payment_account. Charges then taken on the new account recorded the old
# one, and the old account's charges were let through, to fail at Stripe as before.


def test_a_key_replaced_in_the_django_admin_is_named_again(
    site, save_key, buy, sign, agent_key, django_capture_on_commit_callbacks
):
    save_key(KEY_A)
    old = buy(ORIGINAL)
    account = RailAccount.objects.get(site=site, rail="stripe")
    superuser = get_user_model().objects.create_superuser(
        "root@sill.example", email="root@sill.example", password="unused-here"
    )
    client = Client()
    client.force_login(superuser)
    form = {
        "site": site.pk,
        "rail": "stripe",
        "enabled": "on",
        "mode": "test",
        "connected_account": "",
        "api_base": account.api_base,  # unchanged: the admin keeps a stored address
        "config": json.dumps(account.config),
        "new_secret": KEY_B,
    }
    with admin_mounted(), django_capture_on_commit_callbacks(execute=True):
        saved = client.post(f"/django-admin/rails/railaccount/{account.pk}/change/", form)
    assert saved.status_code == 302

    account.refresh_from_db()
    assert account.get_secret() == KEY_B
    assert account.payment_account == "acct_B2 (test mode)"
    assert buy(LATER).payment_account == "acct_B2 (test mode)"
    answer = _agent_refund(sign, django_capture_on_commit_callbacks, ORIGINAL)
    assert (answer["decision"], answer["reason"]) == ("rejected", "rail_disabled"), answer
    old.refresh_from_db()
    assert old.amount_reserved_minor == 0 and old.amount_refunded_minor == 0


# --- a charge whose attempt's outcome is unknown when the key is replaced ----------------------
# Before: a charge records its account only when it succeeded. An attempt on account A whose
# answer was lost, then a key of account B: the next attempt asked B (which holds nothing of
# A's), heard "no charge" and charged the buyer again on B; and an owner who settled the charge
# from A's dashboard left it naming no account, so its refunds went to B's key.


@pytest.fixture
def in_doubt(site, make_order, agent, proxy) -> Callable[..., Charge]:
    """``in_doubt()``: an agent's $89.00 order whose one charge attempt reached Stripe on the
    site's key and got no answer (Stripe's 500): the buyer may have been charged. With
    ``last=True`` it was the last attempt allowed, so the charge needs attention."""

    def make(*, last: bool = False) -> Charge:
        order = make_order(
            rail="stripe",
            charged=False,
            status=OrderStatus.PENDING,
            placed_by_agent=agent,
            source_mandate_id=ORIGINAL,
        )
        charge = Charge.objects.create(
            order=order,
            rail="stripe",
            amount_minor=order.total_minor,
            currency=order.currency,
            status=ChargeStatus.PENDING,
            payment_method="pm_card_visa",
        )
        proxy.charges_fail = True
        if last:
            with override_settings(SILL_CHARGE_MAX_ATTEMPTS=1):
                assert charge_order(order_id=order.pk) == "needs_attention"
        else:
            with pytest.raises(ChargeRetry):
                charge_order(order_id=order.pk)
        proxy.charges_fail = False
        return Charge.objects.get(pk=charge.pk)

    return make


def test_each_charge_record_names_the_account_it_was_taken_on(site, save_key, buy, in_doubt):
    # Before: the signed charge and needs-attention records named no account, though the
    # charge row kept it: once the key was replaced, an auditor holding only the log could not
    # tell on which Stripe account the buyer was charged (or may have been).
    save_key(KEY_A)
    paid = buy(LATER)
    doubtful = in_doubt(last=True)
    records = AuditRecord.objects.filter(site=site, kind__in=["charge", "needs_attention"])
    named = {
        (record.kind, body["charge_id"]): body.get("payment_account")
        for record in records
        for body in [json.loads(record.payload)["body"]]
    }
    assert named == {
        ("charge", paid.pk): "acct_A1 (test mode)",
        ("needs_attention", doubtful.pk): "acct_A1 (test mode)",
    }
    charged = next(body_of(r) for r in records if r.kind == "charge")
    assert summary_of("charge", charged) == "Paid to the Stripe account acct_A1 (test mode)"
    # A charge that failed was paid to no one, whichever account its attempt went to.
    assert summary_of("charge", {**charged, "outcome": "failed"}) == ""


def test_an_attempt_in_doubt_on_an_earlier_account_is_not_charged_again_on_the_new_one(
    save_key, in_doubt, proxy
):
    save_key(KEY_A)
    charge = in_doubt()
    assert proxy.charge_keys == [KEY_A]
    save_key(KEY_B)

    with pytest.raises(ChargeRetry):
        charge_order(order_id=charge.order_id)

    assert proxy.charge_keys == [KEY_A]  # nothing posted with B's key
    charge.refresh_from_db()
    assert charge.status == ChargeStatus.PENDING
    assert charge.payment_account == "acct_A1 (test mode)"


def test_an_attempt_in_doubt_waits_while_the_new_keys_account_is_not_named_yet(
    save_key, in_doubt, proxy
):
    """The key replaced and Stripe not (yet) saying whose it is: the new key cannot vouch that
    it sees the first attempt's account, so its "no such charge" would charge the buyer a
    second time. The charge waits until the key's account is named (then the rule above)."""
    save_key(KEY_A)
    charge = in_doubt()
    proxy.accounts.pop(KEY_B)  # Stripe does not name B's account (a restricted key, say)
    save_key(KEY_B)

    with pytest.raises(ChargeRetry):
        charge_order(order_id=charge.order_id)

    assert proxy.charge_keys == [KEY_A]  # nothing posted with B's key
    charge.refresh_from_db()
    assert charge.status == ChargeStatus.PENDING
    assert charge.payment_account == "acct_A1 (test mode)"


def test_a_refund_in_doubt_is_not_asked_of_a_replaced_key_stripe_has_not_named(
    site, members, save_key, buy, proxy, django_capture_on_commit_callbacks
):
    """A refund of an account-A charge reached Stripe and its answer was lost; then the key
    was replaced, and Stripe has not said whose the new one is. Another account's key would
    answer "no such refund" for A's, and the execution would send the refund again under it
    and fail it, or the attention check would fail it "nothing moved", while A refunded the
    buyer. Neither asks the new key: the refund needs attention, and stays so.

    (localstripe keeps one store for every key, so what B would see cannot be shown here: the
    test checks that B's key is never asked about the refund.)"""
    save_key(KEY_A)
    charge = buy(ORIGINAL)
    refund = _staff_refund(site, members, charge.order, django_capture_on_commit_callbacks)
    Refund.objects.filter(pk=refund.pk).update(
        status="processing", rail_attempted_at=timezone.now(), lease_until=None
    )
    proxy.accounts.pop(KEY_B)  # Stripe does not name B's account (a restricted key, say)
    save_key(KEY_B)
    proxy.asked.clear()

    assert execute_refund(refund.pk) == "needs_attention"
    assert check_refund_at_rail(refund.pk) == "unknown"

    refund.refresh_from_db()
    assert refund.status == "needs_attention"
    assert not [a for a in proxy.asked if a[0] == KEY_B and "refund" in a[2]], proxy.asked


def test_a_charge_in_doubt_settled_by_an_owner_names_the_account_it_was_tried_on(
    site, members, save_key, in_doubt, proxy, sign, agent_key, django_capture_on_commit_callbacks
):
    save_key(KEY_A)
    charge = in_doubt(last=True)
    charge = resolve_charge_attention(
        charge=charge,
        actor=members["owner"].user,
        outcome="charged",
        provider_charge_id="ch_fromAsDashboard01",
    )
    assert charge.status == ChargeStatus.SUCCEEDED
    assert charge.payment_account == "acct_A1 (test mode)"
    save_key(KEY_B)

    answer = _agent_refund(sign, django_capture_on_commit_callbacks, ORIGINAL)

    assert (answer["decision"], answer["reason"]) == ("rejected", "rail_disabled"), answer
    assert proxy.refund_posts == []


def test_a_key_saved_while_the_broker_is_down_is_named_by_the_sweep(
    site, members, proxy, caplog, django_capture_on_commit_callbacks
):
    """Saving the key commits it, and its lookup cannot be sent: the save is not a 500, and
    the beat task names the account later (until then nothing is refused for it)."""
    stripe_account(site, enabled=True, api_base=proxy.url)
    with (
        broker_unreachable(),
        caplog.at_level(logging.WARNING, logger="sill.queue"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        configure_stripe(
            site=site, actor=members["owner"].user, secret_key=KEY_B, connected_account="",
            mode="test", second_factor=two_factor.OPERATOR,
        )  # fmt: skip
    account = RailAccount.objects.get(site=site, rail="stripe")
    assert account.payment_account == "" and account.has_secret
    assert "rails.learn_payment_accounts sends it" in caplog.text

    assert learn_payment_accounts_task() == 1
    account.refresh_from_db()
    assert account.payment_account == "acct_B2 (test mode)"
    assert learn_payment_accounts_task() == 0  # named: not asked again


def test_the_sweep_asks_again_until_stripe_names_the_account(site, members, proxy, save_key):
    proxy.accounts.pop(KEY_B)  # Stripe refuses the lookup (as for a restricted key)
    save_key(KEY_B)
    account = RailAccount.objects.get(site=site, rail="stripe")
    assert account.payment_account == ""
    assert learn_payment_accounts_task() == 0
    RailAccount.objects.filter(pk=account.pk).update(enabled=False)
    proxy.accounts[KEY_B] = "acct_B2"
    assert learn_payment_accounts_task() == 0  # a switched-off rail is not asked
    RailAccount.objects.filter(pk=account.pk).update(enabled=True)
    assert learn_payment_accounts_task() == 1
    account.refresh_from_db()
    assert account.payment_account == "acct_B2 (test mode)"


@pytest.mark.parametrize("answer", ["acct_" + "x" * 300, "acct_A1<script>", "cus_A1", "acct_"])
def test_an_account_id_stripe_would_not_write_is_not_recorded(
    site, members, proxy, save_key, answer
):
    proxy.accounts[KEY_B] = answer
    save_key(KEY_B)
    assert RailAccount.objects.get(site=site, rail="stripe").payment_account == ""


def test_the_sweep_is_on_the_beat():
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.get(task="rails.learn_payment_accounts")
    assert task.enabled and (task.interval.every, task.interval.period) == (15, "minutes")
