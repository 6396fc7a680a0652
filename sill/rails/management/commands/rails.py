"""``manage.py rails reencrypt-secrets [--site S] [--dry-run]``.

Rail operations for operators. ``reencrypt-secrets`` rewrites every stored rail credential
that is in the legacy format or encrypted under a key of ``SILL_SECRET_KEY_FALLBACKS`` with the
current ``SILL_SECRET_KEY``, and names every credential that no key can read (those rails are
refused as ``rail_disabled`` until someone re-enters the key). Run it after rotating the secret
key; once it reports nothing left to re-encrypt on every deployment that shares the database,
the old key can leave the fallbacks. It exits 1 when a credential is unreadable.

``replay-webhooks --site S --rail stripe --since ISO`` reads the site's Stripe events since a
time back from Stripe and applies those Sill missed (sill.rails.replay); with ``--rail paypal``,
``shopify`` or ``woocommerce`` it attempts again the site's stored events of that rail since
then that were never applied (those rails cannot be asked for their events again). It exits 1
when the arguments are refused, the rail is disabled, Stripe refuses, or an event could not be
applied.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from sill.accounts.models import Site
from sill.rails.models import RailAccount
from sill.rails.secrets import WHAT_TO_DO, RailSecretUnreadable


class Command(BaseCommand):
    help = "Rails: `reencrypt-secrets` (rewrite stored credentials under the current key)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        reencrypt = sub.add_parser(
            "reencrypt-secrets",
            help="re-encrypt rail credentials stored under a fallback key or the legacy format",
        )
        reencrypt.add_argument("--site", help="only this site (default: every site)")
        reencrypt.add_argument(
            "--dry-run", action="store_true", help="report what would change; write nothing"
        )

        sync_shopify = sub.add_parser(
            "sync-shopify", help="bring a site's Shopify orders into Sill (idempotent)"
        )
        sync_shopify.add_argument("--site", required=True, help="the site whose store is synced")
        sync_shopify.add_argument(
            "--since", help="only orders updated at or after this ISO time (default: all)"
        )

        replay = sub.add_parser(
            "replay-webhooks",
            help="re-read a site's Stripe events since a time and apply the missed ones; for "
            "another rail, apply its stored events that were never applied",
        )
        replay.add_argument("--site", required=True, help="the site whose events are replayed")
        replay.add_argument(
            "--rail",
            required=True,
            help="stripe (fetched again from Stripe), or paypal, shopify, woocommerce (stored)",
        )
        replay.add_argument(
            "--since",
            required=True,
            help="ISO 8601 time or date, for Stripe at most 30 days ago (Stripe keeps events "
            "30 days); one without a zone, or a date, is read in the site's time zone (UTC unless "
            "the site sets one)",
        )

        sync_woocommerce = sub.add_parser(
            "sync-woocommerce", help="bring a site's WooCommerce orders into Sill (idempotent)"
        )
        sync_woocommerce.add_argument(
            "--site", required=True, help="the site whose store is synced"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        getattr(self, "_" + opts["action"].replace("-", "_"))(opts)

    def _reencrypt_secrets(self, opts: dict[str, Any]) -> None:
        accounts = RailAccount.objects.exclude(secret_encrypted=b"").order_by("site_id", "rail")
        if opts["site"]:
            if not Site.objects.filter(pk=opts["site"]).exists():
                raise CommandError(f"no site {opts['site']}")
            accounts = accounts.filter(site_id=opts["site"])
        dry_run = opts["dry_run"]
        rewritten = current = unreadable = 0
        for pk in accounts.values_list("pk", flat=True):
            # One short transaction per account, under its row lock, so a key saved on
            # Settings → Rails meanwhile is neither lost nor overwritten.
            with transaction.atomic():
                account = RailAccount.objects.select_for_update().get(pk=pk)
                where = f"site {account.site_id} {account.rail}"
                try:
                    because = account.reencrypt_secret(dry_run=dry_run)
                except RailSecretUnreadable:
                    unreadable += 1
                    self.stderr.write(f"{where}: UNREADABLE: {WHAT_TO_DO}")
                    continue
            if because:
                rewritten += 1
                verb = "would re-encrypt" if dry_run else "re-encrypted"
                self.stdout.write(f"{where}: {verb} (was stored under {because})")
            else:
                current += 1
                self.stdout.write(f"{where}: current")
        verb = "to re-encrypt" if dry_run else "re-encrypted"
        self.stdout.write(f"{rewritten} {verb}, {current} already current, {unreadable} unreadable")
        if unreadable:
            raise CommandError(
                f"{unreadable} rail credential(s) cannot be read with SECRET_KEY or any of "
                "SILL_SECRET_KEY_FALLBACKS; their rails are refused until the key is re-entered",
                returncode=1,
            )

    def _sync_shopify(self, opts: dict[str, Any]) -> None:
        from sill.rails.shopify.commands import sync_shopify

        self.stdout.write(sync_shopify(site_id=opts["site"], since=opts["since"]))

    def _replay_webhooks(self, opts: dict[str, Any]) -> None:
        from sill.errors import SillError
        from sill.rails.base import RailError
        from sill.rails.replay import (
            ReplayReport,
            StoredReport,
            parse_since,
            replay_stripe_events,
            replay_webhooks_site,
            retry_stored_events,
        )

        try:
            site = replay_webhooks_site(site_id=opts["site"], rail=opts["rail"])
            since = parse_since(opts["since"], site=site)
            report: ReplayReport | StoredReport = (
                replay_stripe_events(site=site, since=since)
                if opts["rail"] == "stripe"
                else retry_stored_events(site=site, rail=opts["rail"], since=since)
            )
        except (SillError, RailError) as exc:
            # Rail messages are scrubbed of credentials (sill.rails.stripe).
            raise CommandError(exc.message, returncode=1) from None
        for error in report.errors:
            self.stderr.write(error)
        self.stdout.write(report.summary())
        if report.failed or report.refused:
            raise CommandError(
                f"{report.failed + report.refused} event(s) could not be applied (above); "
                "they stay unprocessed: fix the cause and run this command again",
                returncode=1,
            )

    def _sync_woocommerce(self, opts: dict[str, Any]) -> None:
        from sill.rails.woocommerce.commands import sync_woocommerce

        self.stdout.write(sync_woocommerce(site_id=opts["site"]))
