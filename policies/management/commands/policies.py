"""``manage.py policies simulate --site S --rules FILE``: replay the last 30 days against a file.

The file is a JSON list of rules (or ``{"rules": [...]}``), the format of the seed's refund
audit. Nothing is written: the command prints, per rule, how many stored refund requests
it would have denied or held and the money involved, the outcome counts against the active
version, and a warning for requests stored without a fact snapshot; then, when a rule of the
file or of the active version can be judged for a credit, the same for the site's customer
credits, each of those lines marked ``credit:``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from policies.rules import RuleError, validate_rules
from policies.selectors import PREVIEW_DAYS, active_policy_for, preview_for
from policies.simulation import Preview
from sill.accounts.models import Site
from sill.money import Money


class Command(BaseCommand):
    help = "Policy tools: simulate a rules file against the site's recent refund requests."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        simulate = sub.add_parser("simulate", help="Replay the last 30 days against a rules file")
        simulate.add_argument("--site", required=True, help="site id")
        simulate.add_argument("--rules", required=True, help="path to a JSON rules file")
        simulate.add_argument("--days", type=int, default=PREVIEW_DAYS, help="window (days)")
        simulate.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "simulate":
            self._simulate(options)

    def _simulate(self, options: dict[str, Any]) -> None:
        site = Site.objects.filter(pk=options["site"]).first()
        if site is None:
            raise CommandError(f"No site {options['site']!r}.")
        if not 1 <= options["days"] <= 366:
            raise CommandError("--days must be between 1 and 366.")
        path = Path(options["rules"])
        try:
            # Decimals, not floats: 0.1 in the file is one tenth.
            raw = json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal)
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from None
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path} is not valid JSON: {exc}.") from None
        if isinstance(raw, dict) and set(raw) == {"rules"}:
            raw = raw["rules"]
        try:
            rules = validate_rules(raw)
        except RuleError as exc:
            raise CommandError(f"{path}: {exc.message} (at {exc.field})") from None
        preview = preview_for(site=site, rules=rules, days=options["days"])
        if options["json"]:
            self.stdout.write(json.dumps(preview.as_dict(), indent=2))
            return
        active = active_policy_for(site)
        self.stdout.write(
            f"Site {site.pk} ({site.name}), last {preview.days} days, against {active.label}"
        )
        self._write_replay(preview, active.label)
        if preview.credits is not None:
            # Rules that can be judged for a credit replayed on the site's customer credits;
            # each line is marked "credit:" so it never reads as the refunds' line.
            self.stdout.write("")
            self._write_replay(preview.credits, active.label, mark="credit:")

    def _write_replay(self, preview: Preview, active_label: str, mark: str = "") -> None:
        out = self.stdout
        out.write(
            f"{mark}{preview.total} {preview.noun} requests: {preview.evaluated} replayed, "
            f"{preview.without_snapshot} without a fact snapshot"
        )
        if preview.warning:
            out.write(self.style.WARNING(f"Warning: {preview.warning}"))
        out.write("")
        out.write(f"{'rule':<32} {'mode':<9} {'deny':>6} {'hold':>6}  money")
        for impact in preview.rules:
            money = ", ".join(str(Money(m, c)) for c, m in sorted(impact.amounts.items())) or "-"
            out.write(
                f"{mark + impact.id:<32} {impact.mode:<9} {impact.would_deny:>6} "
                f"{impact.would_hold:>6}  {money}"
            )
        out.write("")
        out.write(f"{'outcome':<18} {'this file':>10} {active_label:>10}")
        outcomes = [("allow", "allowed"), ("require_approval", "held"), ("deny", "denied")]
        if preview.noun == "refund":
            outcomes.insert(1, ("auto_refund", "auto-refunded"))
        for outcome, label in outcomes:
            out.write(
                f"{mark + label:<18} {preview.draft[outcome]:>10} {preview.active[outcome]:>10}"
            )
        out.write(f"{mark}decided differently: {preview.changed}")
