"""An agent purchase's evidence bundle (`audit bundle --order O`, the order page's download):
the mandate's bytes, Sill's decision on it and the charge's records with their inclusion proofs
and a checkpoint. The standalone verifier shows from it alone that Sill decided the charge on
the signed mandate before taking the money, and refuses a bundle that no longer shows it."""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from audit import bundles, verify_export
from audit.checkpoints import origin_for
from audit.models import AuditRecord
from sill.accounts.models import Site
from sill.orders.charging import charge_order
from sill.orders.models import Order
from sill.rails.models import RailAccount
from tests.audit.test_bundle_verification import log_of
from tests.audit.test_tamper import run_standalone
from tests.refunds.conftest import post, purchase_intent

pytestmark = pytest.mark.django_db


def charged_purchase(sign: Callable[..., bytes], capture: Any) -> tuple[bytes, str]:
    """An agent's purchase on the mock rail, charged: (the mandate's bytes, its order id)."""
    body = sign(purchase_intent(payment={"rail": "mock", "payment_method": "pm_visa"}))
    with capture(execute=False):
        response = post(Client(), body)
    assert response.status_code == 201, response.json()
    order_id = response.json()["order_id"]
    assert charge_order(order_id=order_id) == "succeeded"
    return body, order_id


def kind_of(record: dict[str, Any]) -> str:
    return json.loads(record["payload"])["kind"]


def problems_of(bundle: dict[str, Any]) -> list[str]:
    return verify_export.verify_bundle(bundle, None, None)[1]


@pytest.fixture
def purchase(
    sign: Callable[..., bytes], mock_rail: RailAccount, django_capture_on_commit_callbacks: Any
) -> tuple[bytes, str]:
    return charged_purchase(sign, django_capture_on_commit_callbacks)


def test_the_bundle_of_a_charged_purchase_verifies(
    purchase: tuple[bytes, str], site: Site, tmp_path: Path
) -> None:
    mandate, order_id = purchase
    path = tmp_path / "bundle.json"
    call_command("audit", "bundle", "--order", order_id, "--output", str(path))
    bundle = json.loads(path.read_text())
    assert bundle["order_id"] == order_id and "refund_id" not in bundle
    assert [kind_of(r) for r in bundle["records"]] == ["approved", "charge"]
    assert base64.b64decode(bundle["mandate"]["bytes_b64"]) == mandate

    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        f"OK: bundle of 2 records about the purchase of order {order_id} of log "
        f"{origin_for(site.pk)},"
    )


@pytest.mark.parametrize("removed", ["the decision", "the decision and the mandate"])
def test_a_purchase_bundle_without_its_decision_is_refused(
    purchase: tuple[bytes, str], site: Site, removed: str
) -> None:
    """The charge alone shows money was taken, not that Sill decided it on a signed mandate."""
    bundle = bundles.purchase_bundle(site=site, order_id=purchase[1])
    assert problems_of(bundle) == []
    _, charge = bundle["records"]
    bundle["records"] = [charge]
    if removed == "the decision and the mandate":
        bundle["mandate"] = None
    problems = problems_of(bundle)
    assert f"FAILED at seq {charge['seq']}: the decision it follows from is not in the bundle" in (
        problems
    )
    assert (
        "FAILED at the bundle: it holds no decision of the purchase: nothing in it shows Sill "
        "decided the charge on a signed mandate"
    ) in problems


def test_a_purchase_bundle_without_its_mandate_is_refused(
    purchase: tuple[bytes, str], site: Site
) -> None:
    bundle = bundles.purchase_bundle(site=site, order_id=purchase[1])
    bundle["mandate"] = None
    assert problems_of(bundle) == [
        "FAILED at the mandate: a decision record names its SHA-256, but the bundle does not "
        "carry it"
    ]
    bundle["mandate"] = {"bytes_b64": base64.b64encode(purchase[0] + b" ").decode()}
    assert problems_of(bundle) == [
        "FAILED at the mandate: its bytes are not the ones the decision names"
    ]


def test_a_purchase_bundle_with_another_purchases_charge_swapped_in_is_refused(
    purchase: tuple[bytes, str],
    sign: Callable[..., bytes],
    site: Site,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Another order's genuine charge record, with its genuine proof against the same
    checkpoint: every record verifies on its own, yet this decision's charge is not it."""
    _, other_id = charged_purchase(sign, django_capture_on_commit_callbacks)
    bundle = bundles.purchase_bundle(site=site, order_id=purchase[1])
    other = bundles.purchase_bundle(site=site, order_id=other_id)
    assert bundle["checkpoint"] == other["checkpoint"]
    swapped = other["records"][1]
    assert kind_of(swapped) == "charge"
    bundle["records"][1] = swapped
    assert problems_of(bundle) == [
        f"FAILED at seq {swapped['seq']}: the record is not about the purchase of order "
        f"{purchase[1]}",
        f"FAILED at seq {swapped['seq']}: the decision it follows from is not in the bundle",
    ]


def test_a_charge_naming_no_decision_is_refused(purchase: tuple[bytes, str], site: Site) -> None:
    """As an order placed before purchases were signed has it (``decision_hash`` null), beside
    a decision: the bundle cannot show that decision is the charge's. Sill writes no such pair,
    so the purchase check is run on the charge's body edited (the edit alone fails its hash)."""
    bundle = bundles.purchase_bundle(site=site, order_id=purchase[1])
    charge = bundle["records"][1]
    payload = json.loads(charge["payload"])
    payload["body"]["decision_hash"] = None
    charge["payload"] = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    problems = verify_export.purchase_problems(
        [(r["seq"], r) for r in bundle["records"]], {r["hash"] for r in bundle["records"]}
    )
    assert problems == [f"FAILED at seq {charge['seq']}: the charge record names no decision"]


def test_a_purchase_bundle_leaving_out_a_charge_record_fails_against_the_export(
    purchase: tuple[bytes, str], site: Site, tmp_path: Path
) -> None:
    bundle = bundles.purchase_bundle(site=site, order_id=purchase[1])
    log = log_of(site, tmp_path)
    assert verify_export.verify_bundle(bundle, None, None, log=log) == (2, [])
    charge = bundle["records"].pop()
    _, problems = verify_export.verify_bundle(bundle, None, None, log=log)
    assert problems == [
        f"FAILED at seq {charge['seq']}: a record about the purchase of order {purchase[1]} "
        "(charge) the bundle leaves out"
    ]


def test_the_order_page_offers_it_to_who_may_read_the_log(
    purchase: tuple[bytes, str],
    client_for: Callable[[str], Client],
    make_order: Callable[..., Order],
) -> None:
    order_id = purchase[1]
    url = f"/orders/{order_id}/evidence.json"
    answer = client_for("reviewer").get(url)
    assert answer.status_code == 200
    assert answer["Content-Disposition"].startswith("attachment;")
    body = json.loads(answer.content)
    assert body["order_id"] == order_id
    decision = AuditRecord.objects.get(subject_order_id=order_id, kind="approved")
    assert (
        json.loads(decision.payload)["body"]["mandate_sha256"]
        == hashlib.sha256(base64.b64decode(body["mandate"]["bytes_b64"])).hexdigest()
    )
    assert client_for("staff").get(url).status_code == 403
    assert client_for("outsider").get(url).status_code == 404
    assert Client().get(url).status_code == 302
    # An order no agent placed has no purchase to show.
    merchant_order = make_order()
    assert client_for("owner").get(f"/orders/{merchant_order.pk}/evidence.json").status_code == 404

    assert url in client_for("owner").get(f"/orders/{order_id}/").content.decode()
    assert url not in client_for("staff").get(f"/orders/{order_id}/").content.decode()
    page = client_for("owner").get(f"/orders/{merchant_order.pk}/").content.decode()
    assert "evidence.json" not in page


def test_the_order_page_says_what_sill_decided_and_what_the_download_holds(
    purchase: tuple[bytes, str],
    sign: Callable[..., bytes],
    mock_rail: RailAccount,
    client_for: Callable[[str], Client],
) -> None:
    # Seen: a charged purchase's page said nothing of Sill's approval beside its download, and
    # the download named "the charge's records" on a refused purchase, which has none.
    owner = client_for("owner")
    decision = AuditRecord.objects.get(subject_order_id=purchase[1], kind="approved")
    evidence = evidence_of(owner.get(f"/orders/{purchase[1]}/").content.decode())
    assert "Sill approved the agent's purchase on its signed mandate" in evidence
    assert f"record #{decision.seq}" in evidence
    assert "the charge's records" in evidence

    mock_rail.enabled = False
    mock_rail.save()
    refused = post(Client(), sign(purchase_intent())).json()["order_id"]
    evidence = evidence_of(owner.get(f"/orders/{refused}/").content.decode())
    assert f"/orders/{refused}/evidence.json" in evidence
    assert "Sill's signed refusal" in evidence
    assert "charge" not in evidence and "approved" not in evidence


def evidence_of(page: str) -> str:
    """The order page's Evidence section, its entities unescaped."""
    return html.unescape(page.split('id="purchase-evidence"', 1)[1].split("</section>", 1)[0])
