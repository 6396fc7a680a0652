"""The transparency log's public API: checkpoints as text, proofs as JSON that verify against
them (with the standalone verifier's own code), and clear refusals of bad questions."""

from __future__ import annotations

import base64

import pytest
from django.db import transaction
from django.test import Client

from audit import checkpoints, merkle, verify_export
from audit.models import AuditKind, AuditRecord
from audit.services import append_record
from sill.accounts.models import Site

pytestmark = pytest.mark.django_db


def append(site: Site, n: int) -> None:
    for i in range(n):
        with transaction.atomic():
            append_record(site=site, kind=AuditKind.SETTLEMENT, body={"refund_id": f"rf_{i}"})


def b(text: str) -> bytes:
    return base64.b64decode(text)


@pytest.fixture
def logged(site: Site) -> Site:
    append(site, 7)
    checkpoints.write_checkpoint(site=site)
    return site


def test_it_serves_the_latest_checkpoint_as_text(logged: Site):
    answer = Client().get(f"/audit/{logged.pk}/checkpoint")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
    assert answer.content.decode().split("\n")[:2] == [f"sill.example/audit/{logged.pk}", "7"]
    assert Client().get(f"/audit/{logged.pk}/checkpoint/7").content == answer.content


def test_an_inclusion_proof_verifies_against_the_checkpoint(logged: Site):
    answer = Client().get(f"/audit/{logged.pk}/proof/inclusion?seq=3").json()
    size, root = int(answer["checkpoint"].split("\n")[1]), b(answer["checkpoint"].split("\n")[2])
    record = AuditRecord.objects.get(site=logged, seq=3)
    leaf = merkle.record_leaf_hash(record.payload)
    assert b(answer["leaf_hash"]) == leaf and answer["tree_size"] == size == 7
    verify_export.verify_inclusion(2, size, leaf, [b(h) for h in answer["proof"]], root)


def test_a_consistency_proof_links_two_checkpoints(logged: Site):
    first = checkpoints.latest_checkpoint(site_id=logged.pk)
    append(logged, 5)
    checkpoints.write_checkpoint(site=logged)
    answer = Client().get(f"/audit/{logged.pk}/proof/consistency?from=7").json()
    assert (answer["size1"], answer["size2"]) == (7, 12)
    second_root = b(answer["checkpoint"].split("\n")[2])
    verify_export.verify_consistency(
        7, 12, bytes.fromhex(first.root_hash), second_root, [b(h) for h in answer["proof"]]
    )


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("seq=0", "seq"),
        ("seq=abc", "seq"),
        ("seq=8", "seq"),  # beyond the checkpoint
        ("seq=1&size=99", "size"),  # beyond the log
        ("seq=%EF%BC%91", "seq"),  # a fullwidth digit
        ("", "seq"),
    ],
)
def test_a_bad_inclusion_question_is_a_clear_400(logged: Site, query: str, field: str):
    answer = Client().get(f"/audit/{logged.pk}/proof/inclusion?{query}")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_field"
    assert answer.json()["error"]["field"] == field


def test_a_consistency_from_after_to_is_refused(logged: Site):
    answer = Client().get(f"/audit/{logged.pk}/proof/consistency?from=5&to=3")
    assert answer.status_code == 400 and answer.json()["error"]["field"] == "from"


def test_an_unknown_log_is_not_found(site: Site):
    for url in ("/audit/NOPE/checkpoint", "/audit/NOPE/proof/inclusion?seq=1"):
        answer = Client().get(url)
        assert answer.status_code == 404
    assert Client().get(f"/audit/{site.pk}/checkpoint").status_code == 404  # none signed yet


def test_it_changes_nothing(logged: Site):
    before = AuditRecord.objects.count()
    assert Client().post(f"/audit/{logged.pk}/checkpoint").status_code == 405
    assert AuditRecord.objects.count() == before


def test_a_proof_of_a_signed_size_may_be_cached_and_one_of_the_latest_is_revalidated(
    logged: Site,
):
    """As the checkpoints are: one at a size never changes (a day in any cache), the latest
    does. Proofs had no Cache-Control at all, so a shared cache's default lifetime decided
    how long a monitor was shown a proof of an older tree than the latest checkpoint."""
    append(logged, 2)  # size 9 has no checkpoint (yet): its answer may still gain one
    fixed, following = "public, max-age=86400", "no-cache"
    for query, expected in [
        ("inclusion?seq=3&size=7", fixed),
        ("inclusion?seq=3", following),
        ("inclusion?seq=3&size=9", following),
        ("consistency?from=3&to=7", fixed),
        ("consistency?from=3", following),
        ("consistency?from=3&to=9", following),
    ]:
        answer = Client().get(f"/audit/{logged.pk}/proof/{query}")
        assert answer.status_code == 200, query
        assert answer["Cache-Control"] == expected, query
    refused = Client().get(f"/audit/{logged.pk}/proof/inclusion?seq=99&size=7")
    assert refused.status_code == 400 and "Cache-Control" not in refused


@pytest.mark.parametrize("accept", ["text/plain", "text/*", "text/html", "application/xml"])
def test_any_accept_header_gets_the_one_form_each_answer_has(logged: Site, accept: str):
    """A checkpoint is text/plain and everything else JSON; the Accept header chooses nothing.
    ``Accept: text/plain`` (a monitor fetching a checkpoint) was refused 406 before the view
    ran, since DRF matched it against the JSON renderer only."""
    headers = {"Accept": accept}
    latest = Client().get(f"/audit/{logged.pk}/checkpoint", headers=headers)
    assert latest.status_code == 200 and latest["Content-Type"].startswith("text/plain")
    assert Client().get(f"/audit/{logged.pk}/checkpoint/7", headers=headers).status_code == 200
    for url in (
        f"/audit/{logged.pk}/proof/inclusion?seq=3",
        f"/audit/{logged.pk}/proof/consistency?from=3",
        "/.well-known/sill-audit-keys.json",
    ):
        answer = Client().get(url, headers=headers)
        assert answer.status_code == 200 and answer["Content-Type"] == "application/json", url
    missing = Client().get(f"/audit/{logged.pk}/checkpoint/99", headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
