"""Stripe customer-balance credits (issue 17, point 4): a ``credit_customer`` mandate is
verified, quoted from Sill's records and the rail's customer, decided by the rules that apply
to credits, held like a refund when a rule says so, and executed once as a customer balance
transaction with Sill's idempotency key — recovered by lookup, never by a new key.

The rail is a loopback Stripe speaking the wire format (localstripe has no balance
transactions: tests/rails/stripe_balance_stub.py) driven through the real stripe SDK.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from audit.models import AuditRecord
from policies.catalog import item_by_id
from policies.services import apply_catalog_item
from refunds.execution import RetryLater, execute_refund
from refunds.models import (
    ReconciliationItem,
    ReconciliationRun,
    Refund,
    RefundKind,
    RefundStatus,
)
from refunds.reconcile.runs import run_reconciliation
from refunds.review.decisions import DecisionRefused, approve_refund
from refunds.review.slack import held_message, outcome_text
from refunds.tasks import recover_stuck_refunds_task
from sill.accounts.models import Agent, Site
from sill.orders.models import Customer
from sill.rails.models import RailAccount
from tests.rails.stripe_balance_stub import KEY, BalanceStub, serving_balance_stub
from tests.refunds.conftest import post
from tests.refunds.test_unreadable_rail_key import REFUSAL as UNREADABLE
from tests.refunds.test_unreadable_rail_key import seal_under_lost_key
from tests.threads import run_concurrently

# Each owner and admin gets their own copy of an email about a credit; the tests read the owner's.
OWNER = "owner@roasters.example"

pytestmark = pytest.mark.django_db

CUSTOMER = "cus_CreditCora0001"


def credit_intent(**overrides: Any) -> dict[str, Any]:
    intent: dict[str, Any] = {
        "action": "credit_customer",
        "merchant": "roasters.example",
        "customer": CUSTOMER,
        "amount": Decimal("12.50"),
        "currency": "USD",
        "reason_code": "not_received",
    }
    intent.update(overrides)
    return intent


@pytest.fixture
def stub() -> Iterator[BalanceStub]:
    with serving_balance_stub() as running:
        running.add_customer(CUSTOMER)
        yield running


@pytest.fixture
def stripe_rail(site: Site, stub: BalanceStub) -> RailAccount:
    account = RailAccount(site=site, rail="stripe", api_base=stub.url)
    account.set_secret(KEY)
    account.save()
    return account


@pytest.fixture
def cora(site: Site) -> Customer:
    return Customer.objects.create(
        site=site, rail_customer_id=CUSTOMER, email="cora@example.com", name="Cora"
    )


@pytest.fixture
def send(
    client: Any, sign: Callable[..., bytes], django_capture_on_commit_callbacks: Any
) -> Callable[..., Any]:
    """POST a signed credit mandate and run what it enqueued (the execution, emails)."""

    def run(**overrides: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return post(client, sign(credit_intent(**overrides)))

    return run


def _apply(site: Site, owner: Any, item_id: str) -> None:
    item = item_by_id(item_id)
    assert item is not None
    apply_catalog_item(site=site, actor=owner, item=item)


@pytest.fixture
def owner(members: dict[str, Any]) -> Any:
    return members["owner"].user


def test_an_approved_credit_is_one_balance_transaction_with_sills_key(
    send, stub, stripe_rail, cora, site
):
    answer = send()
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["decision"], body["amount"], body["currency"], body["rail"]) == (
        "approved", "12.50", "USD", "stripe",
    )  # fmt: skip
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.kind == RefundKind.CUSTOMER_CREDIT
    assert refund.status == RefundStatus.SUCCEEDED
    assert (refund.order_id, refund.charge_id, refund.customer_id) == (None, None, cora.pk)
    [posted] = stub.posts()
    assert posted.path == f"/v1/customers/{CUSTOMER}/balance_transactions"
    assert posted.headers["Idempotency-Key"] == f"sill-credit-{refund.id}"
    assert (posted.params["amount"], posted.params["currency"]) == ("-1250", "usd")
    assert posted.params["metadata[sill_credit_id]"] == refund.id
    assert refund.provider_refund_id == stub.transactions[CUSTOMER][0]["id"]
    assert stub.customers[CUSTOMER]["balance"] == -1250  # Stripe's sign: credit held
    # The same audit records and receipt as a refund.
    kinds = list(
        AuditRecord.objects.filter(site=site, subject_refund_id=refund.id)
        .order_by("seq")
        .values_list("kind", flat=True)
    )
    assert kinds == ["approved", "settlement"]
    assert body["receipt"]["statement"]
    decision = AuditRecord.objects.get(site=site, kind="approved", subject_refund_id=refund.id)
    assert decision.hash == refund.decision_hash
    assert '"creditCustomerAgeDays":400' in decision.payload
    assert f'"customer":"{CUSTOMER}"' in decision.payload
    assert '"kind":"customer_credit"' in decision.payload
    # The customer hears of it.
    [email] = mail.outbox
    assert email.to == ["cora@example.com"]
    assert "12.50" in email.body and "account balance" in email.body


def test_a_customer_without_a_balance_currency_takes_the_sites(send, stub, stripe_rail, cora):
    answer = send(currency="EUR", amount=Decimal("5.00"))
    body = answer.json()
    assert (body["decision"], body["reason"]) == ("rejected", "currency_mismatch")
    assert stub.posts() == []


def test_another_currency_than_the_customers_balance_is_currency_mismatch(
    send, stub, stripe_rail, cora
):
    stub.customers[CUSTOMER]["currency"] = "eur"
    assert send().json()["reason"] == "currency_mismatch"
    answer = send(currency="EUR", amount=Decimal("5.00"))
    assert answer.json()["decision"] == "approved"
    assert [p.params["currency"] for p in stub.posts()] == ["eur"]


def test_a_customer_sill_does_not_know_is_refused_before_the_rail(send, stub, stripe_rail, cora):
    stub.add_customer("cus_Stranger0001")
    body = send(customer="cus_Stranger0001").json()
    assert (body["decision"], body["reason"]) == ("rejected", "unknown_customer")
    assert stub.posts() == []


def test_a_customer_deleted_at_stripe_is_unknown(send, stub, stripe_rail, cora):
    stub.delete_customer(CUSTOMER)
    assert send().json()["reason"] == "unknown_customer"
    assert stub.posts() == []


def test_without_a_stripe_rail_the_credit_is_refused(send, cora):
    body = send().json()
    assert (body["decision"], body["reason"]) == ("rejected", "rail_disabled")


def test_an_agent_whose_refund_method_is_off_cannot_credit(send, stub, stripe_rail, cora, agent):
    Agent.objects.filter(pk=agent.pk).update(refund_enabled=False)
    assert send().json()["reason"] == "method_not_allowed"
    assert stub.posts() == []


def test_the_agents_cap_counts_credits(send, stub, stripe_rail, cora, agent):
    Agent.objects.filter(pk=agent.pk).update(refund_cap_minor=1000)
    assert send().json()["reason"] == "agent_cap_exceeded"
    assert send(amount=Decimal("9.00")).json()["decision"] == "approved"


@pytest.mark.parametrize(
    ("intent", "code", "field"),
    [
        ({"customer": "cora"}, "invalid_field", "signed.intent.customer"),
        ({"customer": 7}, "invalid_field", "signed.intent.customer"),
        ({"amount": "12.50"}, "invalid_field", "signed.intent.amount"),
        ({"amount": Decimal("-1.00")}, "invalid_field", "signed.intent.amount"),
        ({"amount": Decimal("1.001")}, "invalid_field", "signed.intent.amount"),
        # Over 2**53 - 1 cents: more than the credit's signed decision record holds exactly.
        ({"amount": Decimal("90071992547410")}, "invalid_field", "signed.intent.amount"),
        ({"currency": "usd"}, "invalid_field", "signed.intent.currency"),
        ({"reason_code": "because"}, "invalid_field", "signed.intent.reason_code"),
        ({"order": "x"}, "unknown_field", "signed.intent.order"),
    ],
)
def test_a_malformed_credit_intent_is_refused_and_changes_nothing(
    send, stub, stripe_rail, cora, intent, code, field
):
    answer = send(**intent)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == code
    assert answer.json()["error"]["field"] == field
    assert not Refund.objects.exists()
    assert stub.seen == []


def test_the_new_customer_template_holds_a_credit_until_an_owner_approves(
    send, stub, stripe_rail, cora, site, owner
):
    _apply(site, owner, "credit-new-customer")
    assert send().json()["decision"] == "approved"
    stub.add_customer("cus_NewComer00001", days_old=3)
    Customer.objects.create(site=site, rail_customer_id="cus_NewComer00001", email="n@example.com")
    body = send(customer="cus_NewComer00001").json()
    assert (body["decision"], body["status"]) == ("escalated", "held")
    assert body["rules"] == [
        {"id": "tpl-credit-new-customer", "action": "require_approval", "mode": "enforced"}
    ]
    held = Refund.objects.get(pk=body["refund_id"])
    assert len(stub.posts()) == 1  # only the first credit moved
    approve_refund(refund=held, actor=owner)
    assert execute_refund(held.pk) == "succeeded"
    held.refresh_from_db()
    assert held.status == RefundStatus.SUCCEEDED
    assert len(stub.posts()) == 2
    assert AuditRecord.objects.filter(subject_refund_id=held.pk, kind="escalated_approved").exists()


def test_charge_rules_do_not_judge_credits_and_credit_rules_do_not_judge_refunds(
    send, stub, stripe_rail, cora, site, owner, sign, client, original,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    # "No refund on a disputed charge" reads a charge fact a credit does not have: unknown
    # would deny every credit. The credit template reads a fact a refund does not have.
    _apply(site, owner, "disputed-deny")
    _apply(site, owner, "credit-new-customer")
    assert send().json()["decision"] == "approved"
    from tests.refunds.conftest import ORIGINAL, refund_intent

    with django_capture_on_commit_callbacks(execute=True):
        refund = post(client, sign(refund_intent(ORIGINAL))).json()
    assert (refund["decision"], refund["rules"]) == ("approved", [])


def test_a_lost_answer_is_recovered_with_the_same_key_and_credits_once(
    client, sign, stub, stripe_rail, cora, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        body = post(client, sign(credit_intent())).json()
    assert body["decision"] == "approved" and callbacks
    stub.drop_next_post = True
    with pytest.raises(RetryLater) as lost:
        execute_refund(body["refund_id"])
    assert lost.value.ambiguous
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == RefundStatus.PROCESSING  # never failed on a lost answer
    assert len(stub.transactions[CUSTOMER]) == 1  # Stripe did it
    assert execute_refund(refund.pk) == "succeeded"
    refund.refresh_from_db()
    assert refund.provider_refund_id == stub.transactions[CUSTOMER][0]["id"]
    assert len(stub.transactions[CUSTOMER]) == 1
    # The retry looked the credit up by its metadata before calling again: one POST only.
    assert len(stub.posts()) == 1


@pytest.mark.django_db(transaction=True)
def test_executions_at_once_make_one_balance_transaction(
    client, sign, stub, stripe_rail, cora, settings, django_capture_on_commit_callbacks
):
    # A redelivered task and the sweep beside the task: one claim wins, the others do nothing.
    settings.SILL_RECOVER_AFTER_SECONDS = 0
    with django_capture_on_commit_callbacks(execute=False):
        body = post(client, sign(credit_intent())).json()
    assert body["decision"] == "approved"
    Refund.objects.filter(pk=body["refund_id"]).update(updated_at=timezone.now() - timedelta(1))

    def work(i: int) -> object:
        if i == 0:
            return recover_stuck_refunds_task()
        try:
            return execute_refund(body["refund_id"])
        except RetryLater as exc:
            return exc

    outcomes = run_concurrently(6, work)
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == RefundStatus.SUCCEEDED, outcomes
    assert len(stub.posts()) == 1 and len(stub.transactions[CUSTOMER]) == 1
    assert refund.provider_refund_id == stub.transactions[CUSTOMER][0]["id"]
    settlement = AuditRecord.objects.get(subject_refund_id=refund.id, kind="settlement")
    assert '"amount_minor":1250' in settlement.payload
    assert '"currency":"USD"' in settlement.payload


def test_a_permanent_refusal_at_the_rail_fails_the_credit_without_moving_money(
    client, sign, stub, stripe_rail, cora, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        body = post(client, sign(credit_intent())).json()
    stub.customers[CUSTOMER]["currency"] = "eur"  # changed at Stripe after the decision
    assert execute_refund(body["refund_id"]) == "failed"
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == RefundStatus.FAILED
    assert "currency" in refund.failure_message
    assert stub.transactions.get(CUSTOMER, []) == []


def test_owners_are_told_of_a_credit_in_doubt_or_refused_in_a_credits_words(
    client, sign, stub, stripe_rail, cora, site, owner, settings, client_for,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    # Seen: the needs-attention email of a credit linked /orders/None/ (a credit has no
    # order) to resolve it; the failure email said nothing was refunded and to refund again
    # from the order page.
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1
    with django_capture_on_commit_callbacks(execute=False):
        doubtful = post(client, sign(credit_intent())).json()["refund_id"]
        refused = post(client, sign(credit_intent())).json()["refund_id"]
    mail.outbox.clear()
    stub.drop_next_post = True  # Stripe makes it; the answer is lost, and no retry is left
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(doubtful) == "needs_attention"
    assert len(mail.outbox) == 2  # the owner's and the admin's
    for attention in mail.outbox:
        assert "Needs attention: Customer credit" in attention.subject
        assert f"A customer credit on {site.name} needs attention" in attention.body
        assert "Sill will not send it again while it is in doubt." in attention.body
        assert f"/refunds/{doubtful}/" in attention.body and "/orders/" not in attention.body
        assert "record it on its page:" in attention.body
        # Seen: a blank line after the headline (the order line, empty for a credit).
        assert "Customer credit · Not received · $12.50\nWhat happened: " in attention.body
    # Its page carries the attention and the owner's form; the dashboard and the inbox link it.
    browser = client_for("owner")
    page = browser.get(f"/refunds/{doubtful}/").content.decode()
    assert "This credit needs attention" in page and "The credit was made" in page
    assert "Its balance transaction id" in page and "reservation" not in page
    assert "Stripe has not confirmed this credit" in page and "stays reserved" not in page
    for listing in ("/", "/reconcile/"):
        shown = browser.get(listing).content.decode()
        assert f'href="/refunds/{doubtful}/#attention-{doubtful}"' in shown, listing
        assert "/orders/None/" not in shown, listing
    made = stub.transactions[CUSTOMER][0]["id"]
    resolved = browser.post(
        f"/refunds/{doubtful}/resolve/",
        {"outcome": "refunded", "provider_refund_id": made, "confirmed": "1"},
    )
    assert (resolved.status_code, resolved["Location"]) == (302, f"/refunds/{doubtful}/")
    assert Refund.objects.get(pk=doubtful).status == RefundStatus.SUCCEEDED
    settled = browser.get(f"/refunds/{doubtful}/").content.decode()
    assert f"Recorded: $12.50 was credited ({made})." in settled
    assert "Resolved by" in settled and ": credited" in settled
    mail.outbox.clear()
    stub.customers[CUSTOMER]["currency"] = "eur"  # changed at Stripe after the decision
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refused) == "failed"
    [failed] = [m for m in mail.outbox if "failed" in m.subject and m.to == [OWNER]]
    assert failed.subject.startswith("[Sill] Credit failed: Customer credit")
    assert "nothing was credited" in failed.body and "refunded" not in failed.body
    assert "Customer credit · Not received · $12.50\nWhy: " in failed.body
    assert f"/refunds/{refused}/" in failed.body and "/orders/" not in failed.body


def test_an_owner_cannot_record_another_credit_of_the_customer_for_one_in_doubt(
    client, sign, send, stub, stripe_rail, cora, settings, client_for,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    # Both balance transactions are on the customer's page at Stripe: the one already
    # recorded for another credit would count one credit twice.
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1
    earlier = Refund.objects.get(pk=send().json()["refund_id"])
    assert earlier.status == RefundStatus.SUCCEEDED
    with django_capture_on_commit_callbacks(execute=False):
        doubtful = post(client, sign(credit_intent())).json()["refund_id"]
    stub.drop_next_post = True
    with django_capture_on_commit_callbacks(execute=False):
        assert execute_refund(doubtful) == "needs_attention"
    browser = client_for("owner")
    refused = browser.post(
        f"/refunds/{doubtful}/resolve/",
        {
            "outcome": "refunded",
            "provider_refund_id": earlier.provider_refund_id,
            "confirmed": "1",
        },
        follow=True,
    )
    assert f"is Sill&#x27;s credit {earlier.id} of this customer" in refused.content.decode()
    assert Refund.objects.get(pk=doubtful).status == RefundStatus.NEEDS_ATTENTION
    [made] = [t["id"] for t in stub.transactions[CUSTOMER] if t["id"] != earlier.provider_refund_id]
    browser.post(
        f"/refunds/{doubtful}/resolve/",
        {"outcome": "refunded", "provider_refund_id": made, "confirmed": "1"},
    )
    assert Refund.objects.get(pk=doubtful).status == RefundStatus.SUCCEEDED


def test_an_identical_resend_answers_the_stored_credit(client, sign, stub, stripe_rail, cora):
    body = sign(credit_intent())
    first = post(client, body)
    again = post(client, body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["refund_id"] == first.json()["refund_id"]
    assert Refund.objects.count() == 1


@pytest.mark.parametrize("persona", ["owner", "reviewer"])
def test_a_held_credit_reads_as_a_credit_on_every_page(
    send, stub, stripe_rail, cora, site, owner, client_for, persona
):
    _apply(site, owner, "r07")  # every agent request waits for a human
    body = send().json()
    assert body["status"] == "held"
    browser = client_for(persona)
    refund_id = body["refund_id"]
    for url in ("/held/", f"/held/{refund_id}/", f"/refunds/{refund_id}/", "/refunds/"):
        page = browser.get(url)
        assert page.status_code == 200, url
        text = page.content.decode()
        assert "Customer credit" in text, url
    detail = browser.get(f"/held/{body['refund_id']}/").content.decode()
    assert "cora@example.com" in detail and "$12.50" in detail
    assert "balance" in detail
    assert browser.get("/").status_code == 200  # the dashboard counts it among the held
    if persona == "owner":
        # Seen: rejecting a held credit was confirmed with "Nothing will be refunded.", and
        # approving it without JavaScript asked "Approve and refund $12.50?" with a "Buyer".
        listed = browser.get("/held/").content.decode()
        assert "? Nothing will be credited." in listed and "Nothing will be refunded" not in listed
        assert (
            "Reject this credit of $12.50 to Cora (cora@example.com)? Nothing will be credited."
            in detail
        )
        asked = browser.post(f"/held/{refund_id}/approve/").content.decode()
        assert "<title>Confirm the credit" in asked and "Approve and credit $12.50?</h2>" in asked
        assert ">Approve and credit $12.50</button>" in asked and "<dt>Customer</dt>" in asked
        assert "Approve and refund" not in asked and "<dt>Buyer</dt>" not in asked
        assert "· credit " in detail and "Credit id" in detail and "Refund id" not in detail
        assert Refund.objects.get(pk=refund_id).status == RefundStatus.HELD
        evidence = browser.get(f"/refunds/{refund_id}/evidence.json")
        assert evidence.status_code == 200
        [email] = [m for m in mail.outbox if "Held for review" in m.subject and m.to == [OWNER]]
        assert "Customer credit" in email.subject
        # Seen: a blank line between the headline and the credit (the empty order line).
        assert (
            f"Customer credit · Not received · $12.50\nCredit to: Cora's Stripe balance "
            f"(customer {CUSTOMER})\nRequested by: "
        ) in email.body
        assert email.subject == "[Sill] Held for review: Customer credit · Not received · $12.50"


def test_a_credits_own_page_and_email_speak_of_a_credit_from_hold_to_settlement(
    send, stub, stripe_rail, cora, site, owner, client_for, django_capture_on_commit_callbacks
):
    # Seen: a credit's page said "Refund $12.50" beside its title, "nothing is refunded" while
    # it waited, and "$12.50 refunded on Stripe" with a "Rail refund id" once credited.
    _apply(site, owner, "r07")
    refund_id = send().json()["refund_id"]
    browser = client_for("owner")
    held = browser.get(f"/refunds/{refund_id}/").content.decode()
    assert '<span class="label">Credit</span>' in held
    assert "<title>Customer credit $12.50" in held
    assert "it expires and nothing is credited" in held
    assert "nothing is refunded" not in held
    # The facts the rules read, in a credit's words (seen: "Refund amount" on a credit).
    assert "<dt>Credit amount</dt>" in held and "Refund amount" not in held
    assert "Agent&#x27;s refunds and credits today in USD" in held
    assert "This credit in Activity →" in held and "This refund in Activity" not in held
    [email] = [m for m in mail.outbox if "Held for review" in m.subject and m.to == [OWNER]]
    assert f"A customer credit on {site.name} is waiting for an owner or admin." in email.body
    assert "it expires and nothing is credited" in email.body
    assert "nothing is refunded" not in email.body
    assert "$12.50 refunded or credited by this agent today" in email.body
    assert "credited through Stripe" in email.body and "paid on" not in email.body
    slack = json.dumps(held_message(Refund.objects.get(pk=refund_id), review_url="https://x/"))
    assert '"Credit the customer?"' in slack and '"Approve and credit"' in slack
    assert "Refund the customer" not in slack and "paid on" not in slack
    with django_capture_on_commit_callbacks(execute=True):
        browser.post(f"/held/{refund_id}/approve/", {"confirmed": "1"})
    credited = Refund.objects.get(pk=refund_id)
    assert credited.status == RefundStatus.SUCCEEDED
    assert outcome_text(credited).endswith("approved and credited.")
    again = browser.post(f"/held/{refund_id}/approve/", {"confirmed": "1"}, follow=True)
    assert (
        "Nothing changed: you had already approved this credit in Sill (" in again.content.decode()
    )
    settled = browser.get(f"/refunds/{refund_id}/").content.decode()
    transaction = stub.transactions[CUSTOMER][0]["id"]
    assert "$12.50 credited to the customer&#x27;s Stripe balance" in settled
    assert "Balance transaction" in settled
    assert "<dt>Credited</dt>" in settled and "<dt>Refunded</dt>" not in settled
    held_page = browser.get(f"/held/{refund_id}/").content.decode()
    assert "<dt>Credited</dt><dd>$12.50 to the customer's Stripe balance" in held_page
    assert "<dt>Refunded</dt>" not in held_page
    assert transaction in settled
    assert "refunded on Stripe" not in settled and "Rail refund id" not in settled


def test_the_refund_list_finds_a_credit_by_its_customer_and_exports_it_as_a_credit(
    send, stub, stripe_rail, cora, client_for
):
    # Seen: searching the refunds for the credited customer's email found nothing, and the
    # CSV row of a credit was a refund with an empty order.
    refund_id = send().json()["refund_id"]
    browser = client_for("reviewer")
    for q in ("cora@example.com", CUSTOMER):
        assert refund_id in browser.get("/refunds/", {"q": q}).content.decode(), q
    assert refund_id not in browser.get("/refunds/", {"q": "nobody@example.com"}).content.decode()
    export = browser.get("/refunds/", {"format": "csv", "q": "cora@example.com"})
    header, *rows = list(csv.reader(io.StringIO(export.getvalue().decode())))
    [row] = [dict(zip(header, r, strict=True)) for r in rows]
    assert (row["Refund id"], row["Kind"], row["Credited customer"]) == (
        refund_id, "Customer credit", CUSTOMER,
    )  # fmt: skip
    assert (row["Order"], row["Amount"], row["Status"]) == ("", "12.50", "Succeeded")
    # The columns before the two new ones keep their places.
    assert ",".join(header[:16]) == (
        "Requested,Order,Origin,Status,Outcome,What happened,Amount,Currency,Rail,Reason,"
        "Requested by,Decided by,Decided,Settled,Provider refund id,Refund id"
    )


def test_an_owner_approves_a_held_credit_in_the_browser_and_a_reviewer_cannot(
    send, stub, stripe_rail, cora, site, owner, client_for, django_capture_on_commit_callbacks
):
    _apply(site, owner, "r07")
    refund_id = send().json()["refund_id"]
    url = f"/held/{refund_id}/approve/"
    assert client_for("reviewer").post(url, {"confirmed": "1"}).status_code == 403
    browser = client_for("owner")
    unconfirmed = browser.post(url)  # no money moves without the confirmation
    assert unconfirmed.status_code == 200
    assert "Stripe balance" in unconfirmed.content.decode()
    assert Refund.objects.get(pk=refund_id).status == RefundStatus.HELD
    with django_capture_on_commit_callbacks(execute=True):
        browser.post(url, {"confirmed": "1"})
    refund = Refund.objects.get(pk=refund_id)
    assert refund.status == RefundStatus.SUCCEEDED
    assert len(stub.posts()) == 1


@pytest.fixture
def held_credit(send, stub, stripe_rail, cora, site, owner) -> Refund:
    """A credit held for review while the Stripe rail was on and its key readable."""
    _apply(site, owner, "r07")  # every agent request waits for a human
    body = send().json()
    assert body["status"] == "held"
    return Refund.objects.get(pk=body["refund_id"])


def _approval_closed_it(held: Refund, refused: Any, stub: BalanceStub) -> None:
    """Closed rail_disabled as a held refund's approval closes it, and nothing credited."""
    assert refused.value.code == "rail_disabled"
    held.refresh_from_db()
    assert (held.status, held.outcome_code) == ("rejected", "rail_disabled")
    closing = AuditRecord.objects.get(kind="escalated_rejected", subject_refund_id=held.pk)
    assert json.loads(closing.payload)["body"]["reason"] == "rail_disabled"
    assert not AuditRecord.objects.filter(subject_refund_id=held.pk, kind="settlement").exists()
    assert stub.posts() == []


def test_approving_a_held_credit_whose_key_became_unreadable_closes_it(
    held_credit, stub, stripe_rail, owner, django_capture_on_commit_callbacks
):
    """The approval went through and the credit failed rail_disabled a moment later."""
    seal_under_lost_key(RailAccount.objects.get(pk=stripe_rail.pk))

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(DecisionRefused) as refused,
    ):
        approve_refund(refund=held_credit, actor=owner)

    assert refused.value.message == UNREADABLE
    _approval_closed_it(held_credit, refused, stub)


def test_approving_a_held_credit_on_a_rail_switched_off_closes_it(
    held_credit, stub, stripe_rail, owner, django_capture_on_commit_callbacks
):
    RailAccount.objects.filter(pk=stripe_rail.pk).update(enabled=False)

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(DecisionRefused) as refused,
    ):
        approve_refund(refund=held_credit, actor=owner)

    assert refused.value.message == "The Stripe rail is not enabled for this site."
    _approval_closed_it(held_credit, refused, stub)


def test_an_approval_of_a_credit_in_the_browser_answers_the_refusal(
    held_credit, stub, stripe_rail, client_for, django_capture_on_commit_callbacks
):
    seal_under_lost_key(RailAccount.objects.get(pk=stripe_rail.pk))

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for("owner").post(
            f"/held/{held_credit.id}/approve/", headers={"Accept": "application/json"}
        )

    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "rail_disabled", "message": UNREADABLE, "field": None
    }  # fmt: skip
    assert Refund.objects.get(pk=held_credit.pk).outcome_code == "rail_disabled"
    assert stub.posts() == []


def test_every_attempt_asks_the_rail_the_same_even_after_the_site_changes(
    client, sign, stub, stripe_rail, cora, site, django_capture_on_commit_callbacks
):
    # Stripe refuses a reused idempotency key with other parameters: what a credit sends must
    # not follow anything the merchant can edit between two attempts.
    from refunds.credit_rail import credit_request

    with django_capture_on_commit_callbacks(execute=False):
        body = post(client, sign(credit_intent())).json()
    refund = Refund.objects.select_related("site", "customer").get(pk=body["refund_id"])
    first = credit_request(refund)
    Site.objects.filter(pk=site.pk).update(merchant_domain="renamed.example", name="Renamed")
    again = credit_request(Refund.objects.select_related("site", "customer").get(pk=refund.pk))
    assert again == first


# --- reconciliation: Sill's credits against the customer's balance transactions ------------


@pytest.fixture
def settled(send, stub, stripe_rail, cora) -> Refund:
    """One credit of $12.50, made at the stub and settled in Sill."""
    body = send().json()
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == RefundStatus.SUCCEEDED
    return refund


def _reconcile(account: RailAccount) -> ReconciliationRun:
    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and run.error == ""
    return run


def _open_items(cora: Customer) -> list[ReconciliationItem]:
    return list(ReconciliationItem.objects.filter(customer=cora, resolved_at__isnull=True))


def test_a_credit_the_balance_agrees_with_leaves_nothing_to_reconcile(
    settled, stub, stripe_rail, cora
):
    # Not Sill's: an invoice paid from the balance, the merchant's own dashboard adjustment.
    stub.add_transaction(CUSTOMER, amount=800, type="applied_to_invoice")
    stub.add_transaction(CUSTOMER, amount=-300, description="Goodwill, from the dashboard")
    run = _reconcile(stripe_rail)
    assert (run.customers_checked, run.customers_unreadable) == (1, 0)
    assert (run.items_opened, run.customer_cursor) == (0, cora.pk)
    assert _open_items(cora) == []
    reads = [s for s in stub.seen if s.method == "GET" and s.path.endswith("/balance_transactions")]
    assert len(reads) == 1 and not stub.posts()[1:]  # one read; nothing moved


def test_a_settled_credit_stripe_does_not_list_is_in_the_inbox_until_it_is_there_again(
    settled, stub, stripe_rail, cora, site, client_for
):
    made = stub.transactions[CUSTOMER].pop()
    run = _reconcile(stripe_rail)
    assert run.items_opened == 1
    [item] = _open_items(cora)
    assert (item.kind, item.key, item.refund_id) == (
        "missing_at_rail", f"missing_at_rail:{settled.id}", settled.id,
    )  # fmt: skip
    assert (item.order_id, item.charge_id, item.rail) == (None, None, "stripe")
    assert (item.sill_amount_minor, item.rail_amount_minor) == (1250, None)
    assert "balance may not have been credited" in item.detail
    record = AuditRecord.objects.get(site=site, kind="reconciliation_found")
    assert f'"customer_id":{cora.pk}' in record.payload and '"order_id":null' in record.payload
    # The inbox names the credit and links its page, in a credit's words.
    page = client_for("owner").get("/reconcile/").content.decode()
    assert f'<a href="/refunds/{settled.id}/">Credit to cora@example.com</a>' in page
    assert "Sill credit" in page and "/orders/None/" not in page
    assert "credits of 1 customer" in page
    # A second run refreshes the same item; once Stripe lists it again, Sill clears it.
    assert _reconcile(stripe_rail).items_opened == 0
    stub.transactions[CUSTOMER].append(made)
    assert _reconcile(stripe_rail).items_cleared == 1
    assert _open_items(cora) == []
    item.refresh_from_db()
    assert item.resolution == "cleared"


def test_another_amount_at_stripe_is_an_amount_difference(settled, stub, stripe_rail, cora):
    stub.transactions[CUSTOMER][0]["amount"] = -1000
    _reconcile(stripe_rail)
    [item] = _open_items(cora)
    assert (item.kind, item.rail_amount_minor, item.rail_status) == (
        "amount_differs",
        1000,
        "succeeded",
    )
    assert item.provider_refund_id == settled.provider_refund_id
    assert item.detail == "Sill credited $12.50; Stripe's balance transaction credits $10.00."


def test_a_failed_credit_stripe_made_after_all_may_be_credited_twice(
    client, sign, stub, stripe_rail, cora, client_for, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        body = post(client, sign(credit_intent())).json()
    stub.customers[CUSTOMER]["currency"] = "eur"
    assert execute_refund(body["refund_id"]) == "failed"
    # Made at Stripe after all (another integration replayed Sill's request, say).
    stub.add_transaction(CUSTOMER, amount=-1250, metadata={"sill_credit_id": body["refund_id"]})
    _reconcile(stripe_rail)
    [item] = _open_items(cora)
    assert (item.kind, item.refund_id, item.sill_status) == (
        "status_differs", body["refund_id"], "failed",
    )  # fmt: skip
    assert "may be credited twice" in item.detail
    page = client_for("owner").get("/reconcile/").content.decode()
    assert "Credited" in page and "Balance transaction" in page


def test_a_transaction_naming_a_credit_sill_does_not_have_is_missing_in_sill(
    settled, stub, stripe_rail, cora, client_for, members
):
    stub.add_transaction(CUSTOMER, amount=-700, metadata={"sill_credit_id": "rfd_NOT_IN_SILL"})
    assert _reconcile(stripe_rail).items_opened == 1
    [item] = _open_items(cora)
    assert (item.kind, item.refund_id, item.rail_amount_minor) == ("missing_in_sill", None, 700)
    assert "names Sill credit rfd_NOT_IN_SILL" in item.detail
    owner = client_for("owner")
    page = owner.get("/reconcile/").content.decode()
    assert 'href="/refunds/?q=cora%40example.com">Credit to cora@example.com</a>' in page
    # An owner resolves it: the message names the credit's customer, not an order.
    answer = owner.post(
        f"/reconcile/{item.pk}/resolve/",
        {"resolution": "acknowledged", "note": "A test credit from the old integration."},
        follow=True,
    )
    assert "on the credit to cora@example.com: acknowledged" in answer.content.decode()
    item.refresh_from_db()
    assert (item.resolution, item.resolved_by) == ("acknowledged", members["owner"].user)
    resolved = owner.get("/reconcile/").content.decode()
    assert "Order or credit" in resolved and "Credit to cora@example.com" in resolved


def test_every_page_of_a_long_balance_history_is_read_back_to_the_window(
    settled, stub, stripe_rail, cora
):
    for _ in range(150):  # newer than the credit: two pages of 100 before it is reached
        stub.add_transaction(CUSTOMER, amount=100, type="applied_to_invoice")
    run = _reconcile(stripe_rail)
    assert run.items_opened == 0 and _open_items(cora) == []
    pages = [s for s in stub.seen if s.method == "GET" and s.path.endswith("/balance_transactions")]
    assert len(pages) == 2 and pages[1].params["starting_after"]


def test_transactions_older_than_the_window_are_not_read(settled, stub, stripe_rail, cora):
    credit = stub.transactions[CUSTOMER].pop()
    a_month_ago = int(time.time()) - 30 * 86400
    for _ in range(150):  # older than the window, listed after the credit: never paged to
        stub.add_transaction(CUSTOMER, amount=100, created=a_month_ago)
    stub.transactions[CUSTOMER].append(credit)
    _reconcile(stripe_rail)
    assert _open_items(cora) == []
    pages = [s for s in stub.seen if s.method == "GET" and s.path.endswith("/balance_transactions")]
    assert len(pages) == 1


def test_a_customer_stripe_cannot_list_is_counted_unreadable_and_nothing_changes(
    settled, stub, stripe_rail, cora, site
):
    stub.delete_customer(CUSTOMER)
    before = AuditRecord.objects.filter(site=site).count()
    run = _reconcile(stripe_rail)
    assert (run.customers_checked, run.customers_unreadable, run.items_opened) == (1, 1, 0)
    assert AuditRecord.objects.filter(site=site).count() == before


def test_only_customers_with_recent_credits_or_open_items_are_read(
    settled, stub, stripe_rail, cora, site
):
    Customer.objects.create(site=site, rail_customer_id="cus_NoCredits", email="n@example.com")
    Refund.objects.filter(pk=settled.pk).update(updated_at=timezone.now() - timedelta(days=30))
    assert _reconcile(stripe_rail).customers_checked == 0
    assert not [
        s for s in stub.seen if s.path.endswith("/balance_transactions") and s.method == "GET"
    ]


def test_an_open_difference_is_not_cleared_because_its_transaction_grew_old(
    settled, stub, stripe_rail, cora
):
    unknown = stub.add_transaction(
        CUSTOMER, amount=-700, metadata={"sill_credit_id": "rfd_NOT_IN_SILL"}
    )
    assert _reconcile(stripe_rail).items_opened == 1
    unknown["created"] -= 30 * 86400  # as if a month went by: out of the window now
    for transaction in stub.transactions[CUSTOMER]:
        transaction["created"] = min(transaction["created"], unknown["created"])
    run = _reconcile(stripe_rail)
    assert (run.items_opened, run.items_cleared) == (0, 0)
    [item] = _open_items(cora)
    assert item.provider_refund_id == unknown["id"]


def test_a_second_transaction_naming_a_settled_credit_is_missing_in_sill(
    settled, stub, stripe_rail, cora
):
    # Stripe credited the customer twice for one Sill credit (a replay under a new key, say).
    # Seen before: the transactions naming a credit were kept one per credit, the oldest
    # (listed last) winning, which was the one Sill settled, so the second credit went unseen.
    again = stub.add_transaction(CUSTOMER, amount=-1250, metadata={"sill_credit_id": settled.id})
    assert _reconcile(stripe_rail).items_opened == 1
    [item] = _open_items(cora)
    assert (item.kind, item.key, item.rail_amount_minor) == (
        "missing_in_sill", f"missing_in_sill:{again['id']}", 1250,
    )  # fmt: skip
    assert settled.id in item.detail and settled.provider_refund_id in item.detail
