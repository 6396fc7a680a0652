"""``manage.py rails reencrypt-secrets [--site S] [--dry-run]``.

Rail operations for operators. ``reencrypt-secrets`` rewrites every secret Sill stores sealed
with ``SILL_SECRET_KEY`` (rail API keys and webhook signing secrets, Slack's webhook and signing
secret, the rotated audit signing keys: ``sill.rails.secrets.sealed_fields``) that is in the
legacy format or sealed under a key of ``SILL_SECRET_KEY_FALLBACKS`` with the current key, and
names every one no key can read, with what to do about it (a rail's key: re-enter it; those
rails are refused as ``rail_disabled`` meanwhile). Run it after rotating the secret key; once
it reports nothing left to re-encrypt and nothing unreadable on every deployment that shares
the database, the old key can leave the fallbacks. It exits 1 when a secret is unreadable.

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

from sill.accounts.models import Site
from sill.rails.secrets import RailSecretUnreadable, reencrypt_row, sealed_fields


class Command(BaseCommand):
    help = (
        "Rails: `reencrypt-secrets` (rewrite stored credentials under the current key), "
        "`sync-shopify` and `sync-woocommerce` (bring a store's orders in), `replay-webhooks` "
        "(apply the webhook events Sill missed since a time)."
    )

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
        sync_woocommerce.add_argument(
            "--full",
            action="store_true",
            help="read every order again, not only those changed since the last sync",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        getattr(self, "_" + opts["action"].replace("-", "_"))(opts)

    def _reencrypt_secrets(self, opts: dict[str, Any]) -> None:
        site = opts["site"]
        if site and not Site.objects.filter(pk=site).exists():
            raise CommandError(f"no site {site}")
        dry_run = opts["dry_run"]
        rewritten = current = unreadable = 0
        # Every column sealed with SECRET_KEY (sill.rails.secrets.register_sealed_field): rail
        # API keys first, then webhook secrets, Slack's, the audit signing keys.
        for sealed in sealed_fields():
            rows = sealed.model._default_manager.exclude(**{sealed.field: b""})
            if site:
                if sealed.site_field is None:
                    continue  # not a site's secret (the audit signing keys)
                rows = rows.filter(**{sealed.site_field: site})
            order = (sealed.site_field, "pk") if sealed.site_field else ("pk",)
            for pk in rows.order_by(*order).values_list("pk", flat=True):
                # One short transaction per row, under its lock (reencrypt_row).
                try:
                    row, because = reencrypt_row(sealed, pk, dry_run=dry_run)
                except RailSecretUnreadable:
                    unreadable += 1
                    row = sealed.model._default_manager.get(pk=pk)
                    self.stderr.write(f"{sealed.name(row)}: UNREADABLE: {sealed.what_to_do}")
                    continue
                if because:
                    rewritten += 1
                    verb = "would re-encrypt" if dry_run else "re-encrypted"
                    self.stdout.write(f"{sealed.name(row)}: {verb} (was stored under {because})")
                else:
                    current += 1
                    self.stdout.write(f"{sealed.name(row)}: current")
        verb = "to re-encrypt" if dry_run else "re-encrypted"
        self.stdout.write(f"{rewritten} {verb}, {current} already current, {unreadable} unreadable")
        if unreadable:
            raise CommandError(
                f"{unreadable} sealed secret(s) cannot be read with SECRET_KEY or any of "
                "SILL_SECRET_KEY_FALLBACKS (what to do is named above each); keep the old key "
                "in the fallbacks until they are dealt with",
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

        self.stdout.write(sync_woocommerce(site_id=opts["site"], full=opts["full"]))
