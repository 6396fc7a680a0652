"""Rotating SECRET_KEY with SILL_SECRET_KEY_FALLBACKS keeps rail keys readable."""

from __future__ import annotations

import importlib
import logging
from io import StringIO

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.test import override_settings

from sill.rails.models import RailAccount
from sill.rails.registry import rail_for
from sill.rails.secrets import VERSION_2, open_secret
from sill.rails.stripe import StripeRail
from tests.rails.legacy_secrets import legacy_blob, legacy_box

OLD = "old-secret-key-" + "o" * 40
NEW = "new-secret-key-" + "n" * 40
KEY = "sk_test_51RotatedButStillReadable0001"
OTHER_KEY = "sk_test_51SecondSiteKeyValue00000002"


def saved_under(secret_key: str, site, *, rail: str = "stripe", key: str = KEY) -> RailAccount:
    with override_settings(SECRET_KEY=secret_key, SECRET_KEY_FALLBACKS=[]):
        account = RailAccount(site=site, rail=rail)
        account.set_secret(key)
        account.save()
    return account


def stored(account: RailAccount) -> bytes:
    return bytes(RailAccount.objects.get(pk=account.pk).secret_encrypted)


def is_current(account: RailAccount) -> bool:
    return open_secret(stored(account), binding=account.secret_binding()).current


def test_it_reads_a_key_saved_under_a_fallback_and_re_encrypts_it_on_read(site, caplog):
    caplog.set_level(logging.DEBUG)
    account = saved_under(OLD, site)
    before = stored(account)

    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        assert RailAccount.objects.get(pk=account.pk).get_secret() == KEY
        assert stored(account) != before and is_current(account)

    # The rewritten blob no longer needs the old key at all.
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[]):
        assert RailAccount.objects.get(pk=account.pk).get_secret() == KEY
    assert "re-encrypted the stripe rail credential" in caplog.text
    assert KEY not in caplog.text


def test_it_builds_the_rail_after_a_rotation(site):
    saved_under(OLD, site)

    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=["older-" + "z" * 40, OLD]):
        assert isinstance(rail_for(site_id=site.pk, rail="stripe"), StripeRail)


def test_encryption_always_uses_the_current_key(site):
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        account = RailAccount(site=site, rail="stripe")
        account.set_secret(KEY)
        account.save()

    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[]):
        assert is_current(account)
        assert RailAccount.objects.get(pk=account.pk).get_secret() == KEY


def test_a_current_blob_is_not_rewritten_on_read(site):
    account = saved_under(NEW, site)
    before = stored(account)

    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        assert RailAccount.objects.get(pk=account.pk).get_secret() == KEY

    assert stored(account) == before


def test_a_read_does_not_overwrite_a_key_saved_meanwhile(site):
    account = saved_under(OLD, site)
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        stale = RailAccount.objects.get(pk=account.pk)
        fresh = RailAccount.objects.get(pk=account.pk)
        fresh.set_secret(OTHER_KEY)
        fresh.save()

        assert stale.get_secret() == KEY  # what it loaded, still readable…

        # …but the row keeps the key saved after it was loaded.
        assert RailAccount.objects.get(pk=account.pk).get_secret() == OTHER_KEY


def test_the_command_re_encrypts_every_stale_credential(site, other_site, settings):
    under_fallback = saved_under(OLD, site)
    legacy = RailAccount.objects.create(
        site=other_site, rail="stripe", secret_encrypted=legacy_blob(OTHER_KEY, OLD)
    )
    current = saved_under(NEW, site, rail="paypal", key="paypal-client-secret")
    out = StringIO()

    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        call_command("rails", "reencrypt-secrets", "--dry-run", stdout=out)
        assert not is_current(under_fallback) and not is_current(legacy)
        assert "2 to re-encrypt, 1 already current, 0 unreadable" in out.getvalue()

        out = StringIO()
        call_command("rails", "reencrypt-secrets", stdout=out)

    text = out.getvalue()
    assert f"site {site.pk} stripe: re-encrypted (was stored under a fallback key)" in text
    assert f"site {other_site.pk} stripe: re-encrypted (was stored under the legacy format)" in text
    assert f"site {site.pk} paypal: current" in text
    assert "2 re-encrypted, 1 already current, 0 unreadable" in text
    assert KEY not in text and OTHER_KEY not in text
    # The old key can now leave the fallbacks.
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[]):
        reloaded = RailAccount.objects.filter(pk__in=[under_fallback.pk, legacy.pk, current.pk])
        assert [a.get_secret() for a in reloaded.order_by("site_id", "rail")] == [
            "paypal-client-secret",
            KEY,
            OTHER_KEY,
        ]


def test_the_command_names_unreadable_credentials_and_exits_1(site, other_site):
    saved_under("lost-key-" + "l" * 40, site)
    saved_under(NEW, other_site)
    out, err = StringIO(), StringIO()

    with (
        override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]),
        pytest.raises(CommandError) as caught,
    ):
        call_command("rails", "reencrypt-secrets", stdout=out, stderr=err)

    assert caught.value.returncode == 1
    assert f"site {site.pk} stripe: UNREADABLE: re-enter the API key" in err.getvalue()
    assert "1 unreadable" in out.getvalue() and f"site {other_site.pk} stripe: current" in (
        out.getvalue()
    )


def test_the_command_can_be_limited_to_one_site(site, other_site):
    saved_under(OLD, site)
    elsewhere = saved_under(OLD, other_site)
    out = StringIO()

    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        call_command("rails", "reencrypt-secrets", "--site", site.pk, stdout=out)
        assert not is_current(elsewhere)
        with pytest.raises(CommandError, match="no site"):
            call_command("rails", "reencrypt-secrets", "--site", "nope")

    assert "1 re-encrypted, 0 already current" in out.getvalue()


def test_the_migration_rewrites_legacy_blobs_and_reverses(site, settings):
    migration = importlib.import_module("sill.rails.migrations.0002_reencrypt_bound_secrets")
    account = RailAccount.objects.create(
        site=site, rail="stripe", secret_encrypted=legacy_blob(KEY, settings.SECRET_KEY)
    )
    unreadable = RailAccount.objects.create(
        site=site, rail="paypal", secret_encrypted=legacy_blob(KEY, "lost-" + "l" * 40)
    )
    lost_blob = stored(unreadable)

    migration.forwards(apps, None)

    assert stored(account)[0] == VERSION_2 and is_current(account)
    assert stored(unreadable) == lost_blob  # left for an owner to re-enter, not dropped

    migration.backwards(apps, None)

    # What 0001's code can read again.
    assert legacy_box(settings.SECRET_KEY).decrypt(stored(account)).decode() == KEY


def test_the_command_re_encrypts_every_sealed_secret_not_only_api_keys(site, settings):
    """Webhook signing secrets, Slack's webhook, signing secret and bot token and the rotated audit
    signing keys are sealed with SECRET_KEY too. The command rewrote API keys only, so after
    a run reporting "0 unreadable" the README's next step (drop the old key from the
    fallbacks) left them sealed under a key nobody had: webhooks refused, Slack silent, and
    with a rotated audit key every audit append (so every decision) failing."""
    from audit import keys
    from audit.models import AuditKey
    from refunds.review.slack import (
        bot_token,
        seal_bot_token,
        seal_signing_secret,
        seal_webhook_url,
        webhook_url,
    )
    from sill.accounts.models import Site

    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 0
    with override_settings(SECRET_KEY=OLD, SECRET_KEY_FALLBACKS=[]):
        account = saved_under(OLD, site)
        account.set_webhook_secrets(["whsec_rotate_me"])
        account.save()
        site.slack_webhook_sealed = seal_webhook_url(site, "https://hooks.slack.com/services/T/B/X")
        site.slack_signing_secret = seal_signing_secret(site, "slack-signing-secret")
        site.slack_bot_token_sealed = seal_bot_token(site, "xoxb-rotate-me-0000000000")
        site.save()
        rotated = keys.rotate_key()
    out = StringIO()
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        call_command("rails", "reencrypt-secrets", stdout=out)
    text = out.getvalue()
    assert f"site {site.pk} stripe webhook signing secrets: re-encrypted" in text
    assert f"site {site.pk} Slack webhook: re-encrypted" in text
    assert f"site {site.pk} Slack signing secret: re-encrypted" in text
    assert f"site {site.pk} Slack bot token: re-encrypted" in text
    assert f"audit signing key {rotated.key_id}: re-encrypted" in text
    assert "6 re-encrypted, 0 already current, 0 unreadable" in text

    keys.forget_rotated_keys()
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[]):  # the old key is gone
        reloaded = RailAccount.objects.get(pk=account.pk)
        assert reloaded.get_secret() == KEY
        assert reloaded.get_webhook_secrets() == ["whsec_rotate_me"]
        assert webhook_url(Site.objects.get(pk=site.pk)).startswith("https://hooks.slack.com/")
        assert bot_token(Site.objects.get(pk=site.pk)) == "xoxb-rotate-me-0000000000"
        key_id, signer = keys.signing_key()  # the rotated key still signs
        assert key_id == rotated.key_id and bytes(signer.verify_key) == rotated.public_key
    assert AuditKey.objects.count() == 1


def test_the_command_limited_to_a_site_leaves_the_audit_keys(site, other_site, settings):
    from audit import keys

    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 0
    with override_settings(SECRET_KEY=OLD, SECRET_KEY_FALLBACKS=[]):
        keys.rotate_key()
    out = StringIO()
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        call_command("rails", "reencrypt-secrets", "--site", site.pk, stdout=out)
    assert "audit signing key" not in out.getvalue()
