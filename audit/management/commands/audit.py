"""``manage.py audit verify [--site S]`` and ``manage.py audit export --site S [--output F]``."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.selectors import chain_verification, export_lines
from sill.accounts.models import Site


class Command(BaseCommand):
    help = "Verify or export the signed, hash-chained audit log."

    def add_arguments(self, parser: ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        verify = actions.add_parser(
            "verify", help="Check every chain and signature; exit non-zero on the first bad record."
        )
        verify.add_argument("--site", help="Only this site (default: every site).")
        export = actions.add_parser(
            "export", help="Write a site's records as JSON lines for audit/verify_export.py."
        )
        export.add_argument("--site", required=True)
        export.add_argument("--output", help="File to write (default: standard output).")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "verify":
            self.verify(options.get("site"))
        else:
            self.export(options["site"], options.get("output"))

    def verify(self, site_id: str | None) -> None:
        sites = [_site(site_id)] if site_id else list(Site.objects.order_by("pk"))
        failed = 0
        for site in sites:
            result = chain_verification(site)
            if result.ok:
                self.stdout.write(f"site {site.pk}: {result.count} records OK")
            else:
                failed += 1
                self.stderr.write(
                    f"site {site.pk}: FAILED at seq {result.first_bad_seq}: {result.problem}"
                )
        if failed:
            raise CommandError(f"{failed} audit chain(s) failed verification", returncode=1)

    def export(self, site_id: str, output: str | None) -> None:
        site = _site(site_id)
        if output is None:
            for line in export_lines(site):
                self.stdout.write(line)
            return
        with Path(output).open("w", encoding="utf-8", newline="\n") as fh:
            for line in export_lines(site):
                fh.write(line + "\n")


def _site(site_id: str) -> Site:
    try:
        return Site.objects.get(pk=site_id)
    except Site.DoesNotExist:
        raise CommandError(f"no site {site_id!r}") from None
