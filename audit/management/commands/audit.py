"""``manage.py audit verify [--site S] [--checkpoint FILE]``, ``audit export --site S
[--output F]``, ``audit checkpoint [--site S]``, ``audit bundle --refund R | --order O
[--output F]`` and ``audit rotate-key``."""

from __future__ import annotations

import json
import os
from argparse import ArgumentParser
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from audit import bundles, keys, note
from audit.chain import b64url_encode
from audit.checkpoints import (
    CheckpointInconsistent,
    open_checkpoint,
    origin_for,
    write_checkpoint,
)
from audit.models import AuditKind
from audit.selectors import chain_verification, export_lines
from sill.accounts.admin_audit import record_admin_change
from sill.accounts.models import Site
from sill.errors import NotFound

# The exit code of a command given input that is not what it asks for (a file that is no
# checkpoint, an unknown site), as argparse exits on a usage error: nothing was verified.
# A log that fails verification exits 1.
WRONG_INPUT = 2


class Command(BaseCommand):
    help = "Verify or export the signed, hash-chained audit log."

    def add_arguments(self, parser: ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        verify = actions.add_parser(
            "verify", help="Check every chain and signature; exit non-zero on the first bad record."
        )
        verify.add_argument("--site", help="Only this site (default: every site).")
        verify.add_argument(
            "--checkpoint",
            help="A signed checkpoint of the site's log kept outside Sill (needs --site): the "
            "log must hold at least its records and hash to its root.",
        )
        export = actions.add_parser(
            "export", help="Write a site's records as JSON lines for audit/verify_export.py."
        )
        export.add_argument("--site", required=True)
        export.add_argument("--output", help="File to write (default: standard output).")
        checkpoint = actions.add_parser(
            "checkpoint", help="Sign a checkpoint of each log that grew since its last one."
        )
        checkpoint.add_argument("--site", help="Only this site (default: every site).")
        bundle = actions.add_parser(
            "bundle",
            help="Write one refund's or agent purchase's evidence bundle (JSON) for "
            "audit/verify_export.py.",
        )
        subject = bundle.add_mutually_exclusive_group(required=True)
        subject.add_argument("--refund", help="The refund's id.")
        subject.add_argument("--order", help="The id of the order an agent's purchase placed.")
        bundle.add_argument("--output", help="File to write (default: standard output).")
        actions.add_parser(
            "rotate-key",
            help="Make a new audit signing key; it signs from SILL_AUDIT_KEY_SWITCH_SECONDS on.",
        )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "verify":
            self.verify(options.get("site"), options.get("checkpoint"))
        elif action == "checkpoint":
            self.checkpoint(options.get("site"))
        elif action == "rotate-key":
            self.rotate_key()
        elif action == "bundle":
            subject = (
                bundles.refund(options["refund"])
                if options.get("refund")
                else bundles.purchase(options["order"])
            )
            self.bundle(subject, options.get("output"))
        else:
            self.export(options["site"], options.get("output"))

    def verify(self, site_id: str | None, checkpoint_file: str | None) -> None:
        if checkpoint_file and not site_id:
            raise CommandError(
                "--checkpoint needs --site: a checkpoint is of one site's log",
                returncode=WRONG_INPUT,
            )
        sites = [_site(site_id)] if site_id else list(Site.objects.order_by("pk"))
        kept = None if checkpoint_file is None else _kept_checkpoint(checkpoint_file, sites[0])
        failed = 0
        for site in sites:
            result = chain_verification(site, checkpoint_note=kept)
            if result.ok:
                self.stdout.write(f"site {site.pk}: {result.count} records OK")
                if kept is not None:
                    self.stdout.write(f"site {site.pk}: {_kept_time(kept, site)}")
            else:
                failed += 1
                at = "" if result.first_bad_seq is None else f" at seq {result.first_bad_seq}"
                self.stderr.write(f"site {site.pk}: FAILED{at}: {result.problem}")
        if failed:
            raise CommandError(f"{failed} audit chain(s) failed verification", returncode=1)

    def checkpoint(self, site_id: str | None) -> None:
        sites = [_site(site_id)] if site_id else list(Site.objects.order_by("pk"))
        refused = 0
        for site in sites:
            try:
                signed = write_checkpoint(site=site)
            except CheckpointInconsistent as exc:
                refused += 1
                self.stderr.write(f"site {site.pk}: NOT SIGNED: {exc}")
                continue
            if signed is None:
                self.stdout.write(f"site {site.pk}: unchanged since its last checkpoint")
            else:
                self.stdout.write(f"site {site.pk}: checkpoint at {signed.tree_size} records")
        if refused:
            raise CommandError(f"{refused} log(s) do not extend their checkpoint", returncode=1)

    def bundle(self, subject: bundles.Subject, output: str | None) -> None:
        try:
            site = bundles.site_of(subject)
            document = bundles.bundle(site=site, subject=subject)
        except NotFound as exc:
            raise CommandError(exc.message) from None
        text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
        if output is None:
            self.stdout.write(text, ending="")
        else:
            _write_whole(output, [text])

    def rotate_key(self) -> None:
        with transaction.atomic():
            try:
                window = keys.rotate_key()
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            body = _rotation_body(window)
            for site in Site.objects.order_by("pk"):
                record_admin_change(site=site, kind=AuditKind.KEY_CHANGE, actor=None, body=body)
        self.stdout.write(
            f"new audit key {window.key_id}, signing from {window.valid_from:%Y-%m-%d %H:%M:%S %Z}"
        )

    def export(self, site_id: str, output: str | None) -> None:
        site = _site(site_id)
        if output is None:
            for line in export_lines(site):
                self.stdout.write(line)
            return
        _write_whole(output, (line + "\n" for line in export_lines(site)))


def _rotation_body(window: keys.KeyWindow) -> dict[str, Any]:
    """What a site's log says of a rotation: the new key (public key and the configured key's
    endorsement) and the key it retires, with the instant that key stops signing, so an
    auditor holding only the log knows which key signed its records until when."""
    if window.valid_from is None:
        raise CommandError("a rotated key without a start")  # rotate_key always sets one
    start = keys.utc_ms(window.valid_from)
    listed = keys.key_windows()
    new = listed[window.key_id]
    # The key whose window the new one ends: the one in force until now.
    retired = next(w for w in listed.values() if w.valid_until == window.valid_from)
    return {
        "change": "audit_key_rotated",
        "key_id": window.key_id,
        "public_key": b64url_encode(window.public_key),
        "valid_from": start,
        "endorsement": new.endorsement,
        "endorsed_by": new.endorsed_by,
        "retired_key_id": retired.key_id,
        "retired_public_key": b64url_encode(retired.public_key),
        "retired_at": start,
    }


def _write_whole(output: str, chunks: Iterable[str]) -> None:
    """Write ``output`` whole or not at all: into a file beside it, renamed over it at the end.

    An export that stops half-way (the database gone, Ctrl-C) would otherwise leave a file
    cut short where a good one was; a path that cannot be written is a CommandError, not a
    traceback.
    """
    path = Path(output)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("w", encoding="utf-8", newline="\n") as fh:
            for chunk in chunks:
                fh.write(chunk)
        os.replace(partial, path)
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)


def _site(site_id: str) -> Site:
    try:
        return Site.objects.get(pk=site_id)
    except Site.DoesNotExist:
        raise CommandError(f"no site {site_id!r}", returncode=WRONG_INPUT) from None


def _kept_time(kept: str, site: Site) -> str:
    """How fresh the checkpoint the auditor kept (and the log just held) is: when it was
    signed, from its timed signature (older checkpoints have none)."""
    signed = open_checkpoint(kept, site_id=site.pk, earlier_origin=True)
    size = signed.checkpoint.size
    if signed.signed_at is None:
        return (
            f"the checkpoint you gave ({size} records) carries no signed time (Sill signed it "
            "before it timed its checkpoints)"
        )
    at = f"{signed.signed_at:%Y-%m-%d %H:%M:%S} UTC"
    return f"the checkpoint you gave ({size} records) was signed at {at}"


def _kept_checkpoint(path: str, site: Site) -> str:
    """The text of the checkpoint an auditor kept, once it is one of ``site``'s log.

    A file that is not a signed checkpoint at all, or is one of another log, is the auditor's
    mistake, not the log's: it is refused here (:data:`WRONG_INPUT`) before anything is
    verified, so "FAILED" keeps meaning the log did not hold. A checkpoint of this log whose
    signature does not verify is left to verification: that is a forgery, or another key.
    """
    nothing = "nothing was verified"
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise CommandError(
            f"{path}: cannot read it ({exc.strerror or exc}): {nothing}", returncode=WRONG_INPUT
        ) from None
    except UnicodeDecodeError:
        raise CommandError(
            f"{path}: not a signed checkpoint (not UTF-8 text): {nothing}", returncode=WRONG_INPUT
        ) from None
    try:
        shape = note.checkpoint_shape(text)
    except note.NoteError as exc:
        raise CommandError(
            f"{path}: not a signed checkpoint ({exc}; cut short, or another file?): pass one "
            f"as GET /audit/{site.pk}/checkpoint serves it: {nothing}",
            returncode=WRONG_INPUT,
        ) from None
    # Sill names a site's log <origin>/<site id> (an earlier origin too: open_checkpoint).
    if not shape.origin.endswith(f"/{site.pk}"):
        raise CommandError(
            f"{path}: a checkpoint of log {shape.origin}, not of site {site.pk}'s log "
            f"({origin_for(site.pk)}): {nothing}",
            returncode=WRONG_INPUT,
        )
    return text
