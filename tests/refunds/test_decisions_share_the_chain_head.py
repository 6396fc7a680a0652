"""Two agent decisions on different orders of one site do not queue behind each other's
decision work: the site's audit chain head is locked only for the append itself (issue 18).

Decision A is stopped, with its transaction open, just before the statement that writes the
chain head (a Django execute wrapper on A's own connection: nothing of Sill is replaced).
Everything else A does is behind it: the mandate, the order and charge locks, the
reservation, the refund row, the record's signature. Decision B, on another order by another
agent (agents and customers have decision locks of their own), runs from start to COMMIT
meanwhile. A then goes on: another append won the head since A built its record, so A builds
it again on B's, and its refund and receipt take that hash.

Before, ``append_record`` locked the head with ``SELECT … FOR UPDATE`` and then built,
signed and inserted the record under it: stopped at the same place, A held the head, and B
could not commit until A did (B's wait here times out).
"""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from audit.models import AuditRecord
from audit.selectors import chain_verification
from policies.facts import agent_live_refunds_since, agent_live_totals
from refunds.models import Refund
from sill.accounts.models import Agent
from tests.refunds.conftest import post, refund_intent, register_key, signed_body

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _writes_head(sql: str) -> bool:
    # The append's one statement on PostgreSQL: the head UPDATE with the record's INSERTs.
    return sql.startswith(('UPDATE "audit_auditchainhead"', 'WITH "won" AS (UPDATE'))


def _full_refund(make_order, site, agent, suffix: str, *, total: str, buyer: str) -> bytes:
    """A signed full refund of a new paid order ``agent`` placed (its purchase mandate id
    ending in the three characters ``suffix``), bought by a customer of its own."""
    order = make_order(
        total=total,
        placed_by_agent=agent,
        source_mandate_id=f"mnd_01K6HXAVBQ8G8PYZKN9JXJE{suffix}",
        email=f"{buyer}@example.com",
    )
    intent = refund_intent(order.source_mandate_id, max_amount=Decimal(total))
    return signed_body(intent, site_id=site.id, agent_id=agent.agent_id)


def test_a_decision_commits_while_another_is_open_up_to_its_append(
    site, agent, make_order, mock_rail
):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks")
    other = Agent.objects.create(
        site=site, agent_id="agent_other_shopper", name="Other shopper", refund_enabled=True
    )
    bodies = {}
    for name, who in (("a", agent), ("b", other)):
        register_key(who)
        bodies[name] = _full_refund(
            make_order, site, who, f"P{name.upper()}{name.upper()}", total="20.00", buyer=name
        )
    # A decision record exists already: the site's chain head is there to be read unlocked.
    first = post(Client(), signed_body(
        refund_intent(make_order(total="5.00", placed_by_agent=agent,
                                 source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPZZ").source_mandate_id,
                      max_amount=Decimal("5.00")),
        site_id=site.id, agent_id=agent.agent_id,
    ))  # fmt: skip
    assert first.status_code == 201, first.content

    a_at_head, b_done = threading.Event(), threading.Event()
    answers: dict[str, Any] = {}

    def pause_before_the_head(execute, sql, params, many, context):
        if _writes_head(sql) and not a_at_head.is_set():
            a_at_head.set()
            # B must get all the way to COMMIT while A's transaction is open right here.
            answers["b_in_time"] = b_done.wait(timeout=15)
        return execute(sql, params, many, context)

    def run_a() -> None:
        try:
            with connection.execute_wrapper(pause_before_the_head):
                answers["a"] = post(Client(), bodies["a"])
        except Exception as exc:  # examined below
            answers["a"] = exc
        finally:
            connection.close()

    def run_b() -> None:
        try:
            assert a_at_head.wait(timeout=30), "A never reached the chain head"
            answers["b"] = post(Client(), bodies["b"])
        except Exception as exc:  # examined below
            answers["b"] = exc
        finally:
            b_done.set()
            connection.close()

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert answers.get("b_in_time") is True, "B waited for A's transaction"
    for name in ("a", "b"):
        response = answers[name]
        assert not isinstance(response, Exception), response
        assert response.status_code == 201, response.content
        assert response.json()["decision"] == "approved"
    a, b = (Refund.objects.get(pk=answers[n].json()["refund_id"]) for n in ("a", "b"))
    record_a = AuditRecord.objects.get(site=site, hash=a.decision_hash)
    record_b = AuditRecord.objects.get(site=site, hash=b.decision_hash)
    # B committed first (its settlement too, run on commit); A's record, built on the head
    # as it was before B, was built again after B's and still names A's refund.
    assert record_b.seq < record_a.seq
    assert record_a.prev_hash == AuditRecord.objects.get(site=site, seq=record_a.seq - 1).hash
    assert f'"refund_id":"{a.pk}"' in record_a.payload
    # The receipt A answered with names the record that was stored.
    assert f'"audit_record_hash":"{record_a.hash}"' in answers["a"].json()["receipt"]["statement"]
    seqs = list(AuditRecord.objects.filter(site=site).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert chain_verification(site).ok


def test_the_answer_and_its_receipt_are_built_after_the_decision_commits(
    site, agent, original, monkeypatch
):
    """The receipt's signature (and the rest of the answer) is not made while the decision's
    transaction, and so the site's chain head lock, is still open."""
    import nacl.signing

    register_key(agent)
    signed: list[tuple[bytes, bool]] = []
    sign = nacl.signing.SigningKey.sign

    def watched(self, message, encoder=None):  # PyNaCl's, called through
        signed.append((bytes(message)[:16], connection.in_atomic_block))
        return sign(self, message) if encoder is None else sign(self, message, encoder)

    body = signed_body(
        refund_intent(original.source_mandate_id), site_id=site.id, agent_id=agent.agent_id
    )
    monkeypatch.setattr(nacl.signing.SigningKey, "sign", watched)
    answer = post(Client(), body)
    assert answer.status_code == 201 and answer.json()["decision"] == "approved", answer.content
    receipts = [inside for prefix, inside in signed if prefix.startswith(b"sill-receipt-v1:")]
    records = [inside for prefix, inside in signed if not prefix.startswith(b"sill-receipt-v1:")]
    assert receipts == [False]  # after COMMIT
    assert records and all(records)  # the decision record: signed in its transaction


def test_concurrent_decisions_of_one_site_each_write_once(site, agent, make_order, mock_rail):
    """Four clients at once on one site, so appends lose the head to one another and build
    again: every decision is written once (one refund row, one reservation, one record naming
    it, carrying its hash), and the chain stays gap-free and valid."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks")
    register_key(agent)
    bodies = [
        _full_refund(make_order, site, agent, f"{n:03d}", total="7.00", buyer=f"buyer{n}")
        for n in range(16)
    ]
    answers: list[Any] = []
    lock = threading.Lock()

    def client(mine: list[bytes]) -> None:
        try:
            for body in mine:
                response = post(Client(), body)
                with lock:
                    answers.append(response)
        except Exception as exc:  # examined below
            with lock:
                answers.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(bodies[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert len(answers) == 16
    for response in answers:
        assert not isinstance(response, Exception), response
        assert response.status_code == 201 and response.json()["decision"] == "approved"
    refunds = list(Refund.objects.filter(site=site).select_related("charge"))
    assert len(refunds) == 16
    records = {r.hash: r for r in AuditRecord.objects.filter(site=site)}
    for refund in refunds:
        # Reserved once (the executions ran on commit here, so it moved to refunded).
        charge = refund.charge
        assert charge.amount_reserved_minor + charge.amount_refunded_minor == 700
        assert refund.amount_minor == 700
        record = records[refund.decision_hash]
        assert f'"refund_id":"{refund.pk}"' in record.payload
    assert sum('"kind":"approved"' in r.payload for r in records.values()) == 16
    seqs = sorted(r.seq for r in records.values())
    assert seqs == list(range(1, len(seqs) + 1))
    assert chain_verification(site).ok
    # The agent's kept daily totals (written by the concurrent appends' refund INSERTs).
    first = min(r.created_at for r in refunds).replace(second=0, microsecond=0)
    since = first.replace(minute=first.minute - first.minute % 15)
    assert agent_live_totals(agent.pk, since) == [("USD", 16 * 700)]
    assert agent_live_refunds_since(site.pk, agent.pk, since) == [("USD", 16 * 700)]
