"""Signed checkpoints: written when the log grows, each consistent with the one before, kept
outside Sill (a directory, an HTTPS endpoint), and what catches a log cut short."""

from __future__ import annotations

import importlib
import io
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.utils import timezone

from audit import checkpoints, keys, merkle, note, tree
from audit.models import AuditChainHead, AuditCheckpoint, AuditKind, AuditRecord, AuditTreeNode
from audit.selectors import chain_verification
from audit.services import append_record
from audit.tasks import write_checkpoints_task
from sill.accounts.models import Site
from tests.audit.test_tamper import export, run_standalone, sql
from tests.rails.loopback import start_serving

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = AuditRecord._meta.db_table


def append(site: Site, n: int) -> None:
    for i in range(n):
        with transaction.atomic():
            append_record(site=site, kind=AuditKind.SETTLEMENT, body={"refund_id": f"rf_{i}"})


def open_signed(site: Site, signed: AuditCheckpoint) -> note.Checkpoint:
    _, key = keys.signing_key()
    origin = checkpoints.origin_for(site.pk)
    text = note.open_note(signed.note, name=origin, public_key=bytes(key.verify_key))
    return note.parse_checkpoint(text)


def test_it_signs_the_tree_as_a_c2sp_checkpoint(site: Site):
    append(site, 5)
    signed = checkpoints.write_checkpoint(site=site)
    assert signed is not None
    payloads = (
        AuditRecord.objects.filter(site=site).order_by("seq").values_list("payload", flat=True)
    )
    root = merkle.root_of([merkle.record_leaf_hash(p) for p in payloads])
    assert open_signed(site, signed) == note.Checkpoint(f"sill.example/audit/{site.pk}", 5, root)
    assert signed.note.splitlines()[4].startswith(f"\u2014 sill.example/audit/{site.pk} ")
    # Nothing new: nothing signed.
    assert checkpoints.write_checkpoint(site=site) is None


def test_each_checkpoint_is_consistent_with_the_one_before(site: Site):
    append(site, 3)
    first = checkpoints.write_checkpoint(site=site)
    append(site, 6)
    second = checkpoints.write_checkpoint(site=site)
    assert first is not None and second is not None
    proof = tree.StoredTree(site.pk, 9).consistency_proof(3)
    merkle.verify_consistency(
        3, 9, bytes.fromhex(first.root_hash), bytes.fromhex(second.root_hash), proof
    )


def test_it_refuses_to_sign_a_rewritten_log(site: Site):
    append(site, 4)
    checkpoints.write_checkpoint(site=site)
    append(site, 2)
    # Someone rewrote an old record's leaf in the stored tree (and the head's edge with it).
    AuditTreeNode.objects.filter(site=site, level=0, index=1).update(hash="ab" * 32)
    AuditTreeNode.objects.filter(site=site, level__gte=1).delete()
    edge = tree.parse_frontier(AuditChainHead.objects.get(site=site).tree_frontier)
    AuditChainHead.objects.filter(site=site).update(
        tree_frontier=tree.format_frontier([bytes(32), *edge[1:]])
    )
    with pytest.raises(checkpoints.CheckpointInconsistent):
        checkpoints.write_checkpoint(site=site)
    assert AuditCheckpoint.objects.filter(site=site).count() == 1


def test_beat_writes_one_when_the_log_grew_and_the_last_is_old_enough(site: Site, settings):
    settings.SILL_AUDIT_CHECKPOINT_MINUTES = 5
    append(site, 2)
    assert write_checkpoints_task() == 1
    append(site, 1)
    assert write_checkpoints_task() == 0  # the last one is too recent
    AuditCheckpoint.objects.filter(site=site).update(
        created_at=timezone.now() - timedelta(minutes=6)
    )
    assert write_checkpoints_task() == 1
    assert list(
        AuditCheckpoint.objects.filter(site=site)
        .values_list("tree_size", flat=True)
        .order_by("tree_size")
    ) == [2, 3]


def test_the_command_writes_one_on_demand(site: Site):
    append(site, 2)
    out = io.StringIO()
    call_command("audit", "checkpoint", "--site", site.pk, stdout=out)
    assert "checkpoint at 2 records" in out.getvalue()


def test_it_publishes_each_checkpoint_to_a_directory(site: Site, settings, tmp_path: Path):
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    append(site, 2)
    first = checkpoints.write_checkpoint(site=site)
    append(site, 1)
    second = checkpoints.write_checkpoint(site=site)
    assert first is not None and second is not None
    folder = tmp_path / site.pk
    assert (folder / "checkpoint").read_text() == second.note
    assert (folder / "checkpoints" / "2").read_text() == first.note
    assert AuditCheckpoint.objects.filter(published_at__isnull=True).count() == 0


class Receiver(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []
    status = 200

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        Receiver.received.append((self.path, self.headers["Content-Type"], self.rfile.read(length)))
        self.send_response(Receiver.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver():
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    Receiver.received, Receiver.status = [], 200
    start_serving(server)
    yield server
    server.shutdown()


def test_it_posts_each_checkpoint_and_retries_until_taken(site: Site, settings, receiver):
    settings.SILL_AUDIT_CHECKPOINT_URL = f"http://127.0.0.1:{receiver.server_port}/logs/{{site_id}}"
    Receiver.status = 503
    append(site, 2)
    signed = checkpoints.write_checkpoint(site=site)
    assert signed is not None
    signed.refresh_from_db()
    assert signed.published_at is None and "503" in signed.last_publish_error

    Receiver.status = 200
    assert checkpoints.publish_pending() == 1
    signed.refresh_from_db()
    assert signed.published_at is not None
    path, content_type, body = Receiver.received[-1]
    assert path == f"/logs/{site.pk}" and content_type.startswith("text/plain")
    assert body.decode() == signed.note


# -- truncation: the head rewound and the last records removed ------------------------------


def truncate(site: Site, keep: int) -> None:
    """What an operator with database access does: remove the tail, rewind the head."""
    last = AuditRecord.objects.get(site=site, seq=keep)
    sql(f"DELETE FROM {TABLE} WHERE site_id = %s AND seq > %s", site.pk, keep)
    AuditChainHead.objects.filter(site=site).update(last_seq=keep, last_hash=last.hash)


def test_verify_catches_a_rewound_head_against_the_last_checkpoint(site: Site):
    append(site, 6)
    checkpoints.write_checkpoint(site=site)
    truncate(site, 4)

    result = chain_verification(site)
    assert not result.ok
    assert "a signed checkpoint counts 6 records" in result.problem
    with pytest.raises(CommandError):
        call_command(
            "audit", "verify", "--site", site.pk, stdout=io.StringIO(), stderr=io.StringIO()
        )


def test_verify_catches_it_against_a_checkpoint_kept_elsewhere(site: Site, tmp_path: Path):
    append(site, 6)
    kept = checkpoints.write_checkpoint(site=site)
    assert kept is not None
    (tmp_path / "checkpoint").write_text(kept.note)
    truncate(site, 4)
    # A thorough operator also rewinds the stored tree and removes Sill's own checkpoints.
    AuditTreeNode.objects.filter(site=site).delete()
    AuditChainHead.objects.filter(site=site).update(tree_frontier="")
    importlib.import_module("audit.migrations.0006_merkle_tree").build_trees(apps, None)
    AuditCheckpoint.objects.all().delete()

    assert chain_verification(site).ok  # nothing inside Sill shows it any more...
    err = io.StringIO()
    with pytest.raises(CommandError):  # ...the checkpoint kept elsewhere does
        call_command(
            "audit", "verify", "--site", site.pk, "--checkpoint", str(tmp_path / "checkpoint"),
            stdout=io.StringIO(), stderr=err,
        )  # fmt: skip
    assert "records were removed from its end" in err.getvalue()

    # The standalone verifier agrees, on an export of what is left.
    path = export(site, tmp_path / "export.jsonl")
    result = run_standalone(tmp_path, str(path), "--checkpoint", str(tmp_path / "checkpoint"))
    assert result.returncode == 1
    assert "the trusted checkpoint: it counts 6 records, the file holds 4" in result.stderr


def test_the_standalone_verifier_catches_an_export_cut_short(site: Site, tmp_path: Path):
    append(site, 5)
    path = export(site, tmp_path / "export.jsonl")
    lines = path.read_text().splitlines()
    assert run_standalone(tmp_path, str(path)).returncode == 0

    for cut in (
        lines[:-1],
        lines[:-2],
        lines[:1],
    ):  # no checkpoint line; a record less; header only
        path.write_text("\n".join(cut) + "\n")
        result = run_standalone(tmp_path, str(path))
        assert result.returncode == 1
        assert "cut short" in result.stderr, result.stderr

    # The checkpoint kept, a record dropped from the middle: found, and every problem listed.
    path.write_text("\n".join([*lines[:2], *lines[3:]]) + "\n")
    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1
    problems = result.stderr.strip().splitlines()
    assert problems[0].startswith("FAILED at seq 3: expected seq 2, found 3: seq 2 missing")
    assert any("the export's checkpoint" in p for p in problems[1:])


def test_it_reports_reordering_and_insertion(site: Site, tmp_path: Path):
    append(site, 4)
    path = export(site, tmp_path / "export.jsonl")
    lines = path.read_text().splitlines()
    swapped = [lines[0], lines[1], lines[3], lines[2], *lines[4:]]
    path.write_text("\n".join(swapped) + "\n")
    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1
    assert "out of order" in result.stderr
    assert "do not hash to its root" in result.stderr

    inserted = [*lines[:3], lines[2], *lines[3:]]
    path.write_text("\n".join(inserted) + "\n")
    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1 and "out of order" in result.stderr


@pytest.mark.parametrize("corrupt", ["checkpoint root", "chain head's tree edge"])
def test_verify_reports_a_corrupt_checkpoint_or_head_instead_of_crashing(site: Site, corrupt):
    """A stored checkpoint root or tree edge that is not hex made `audit verify` end in a
    traceback; it is a verification failure like any other edit of the log."""
    append(site, 3)
    checkpoints.write_checkpoint(site=site)
    if corrupt == "checkpoint root":
        AuditCheckpoint.objects.filter(site=site).update(root_hash="not hex")
    else:
        AuditChainHead.objects.filter(site=site).update(tree_frontier="zz")

    result = chain_verification(site)
    assert not result.ok and corrupt in result.problem
    err = io.StringIO()
    with pytest.raises(CommandError):
        call_command("audit", "verify", "--site", site.pk, stdout=io.StringIO(), stderr=err)
    assert f"site {site.pk}: FAILED: " in err.getvalue()  # not "at seq None"
