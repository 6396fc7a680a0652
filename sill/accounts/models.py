"""Sites (merchants), who may act on them, and the agents that sign mandates for them."""

from __future__ import annotations

import zoneinfo

from django.conf import settings
from django.db import models
from django.db.models import Q

from sill.ids import new_ulid


def _timezone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(zoneinfo.available_timezones())]


def require_two_factor_default() -> bool:
    """A new site's ``require_two_factor``: ``SILL_REQUIRE_TWO_FACTOR`` (on unless DEBUG)."""
    return bool(settings.SILL_REQUIRE_TWO_FACTOR)


class Site(models.Model):
    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    name = models.CharField(max_length=200)
    merchant_domain = models.CharField(max_length=253, unique=True)
    default_currency = models.CharField(max_length=3, default="USD")
    timezone = models.CharField(max_length=64, default="UTC")
    # Optional Slack incoming webhook for held-refund notifications. Its URL is a credential
    # (anyone holding it may post to the channel): sealed like the signing secret, bound to
    # the site (refunds/review/slack.py: webhook_url, seal_webhook_url).
    slack_webhook_sealed = models.BinaryField(blank=True, default=b"", db_default=b"")
    # The Slack app's signing secret, sealed with SECRET_KEY (sill.rails.secrets, bound to the
    # site): it verifies the Approve / Reject clicks Slack sends (refunds/review/slack.py).
    slack_signing_secret = models.BinaryField(blank=True, default=b"", db_default=b"")
    # The Slack app's bot token (xoxb-…), sealed the same way: Sill asks Slack with it who a
    # Slack user is (users.info) before linking them to a member (refunds/review/slack_users.py).
    slack_bot_token_sealed = models.BinaryField(blank=True, default=b"", db_default=b"")
    # Slack's error when it last refused that token (invalid_auth, token_revoked,
    # account_inactive...: the app uninstalled, the token rotated or revoked), and when; empty
    # while Slack takes it. Recorded by the link check (refunds/review/slack_link_checks.py),
    # cleared when an owner sets or removes the token or Slack takes it again. While set,
    # Settings → Slack says the app must be reinstalled, and Slack clicks decide nothing (no
    # link can be confirmed again).
    slack_token_refused = models.CharField(max_length=32, blank=True, default="", db_default="")
    slack_token_refused_at = models.DateTimeField(null=True, blank=True)
    # Owners and admins need a confirmed second factor, and a session verified with it, to
    # change anything an approver changes (sill/accounts/two_factor.py).
    # A row inserted without the column (a process older than it, during an upgrade) gets the
    # production value: a database default cannot read the setting.
    require_two_factor = models.BooleanField(default=require_two_factor_default, db_default=True)
    # The merchant's own refund window in days from payment (null: only the rails' windows);
    # past it a refund is refused refund_window_passed before anything moves.
    refund_window_days = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(default_currency__regex=r"^[A-Z]{3}$"), name="site_currency_iso"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        """The site's time zone; UTC when ``timezone`` names none (pages never fail on it)."""
        try:
            return zoneinfo.ZoneInfo(self.timezone or "UTC")
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return zoneinfo.ZoneInfo("UTC")


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    REVIEWER = "reviewer", "Reviewer"
    STAFF = "staff", "Staff"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    # Only meaningful for staff: owners and admins may always refund, reviewers never.
    can_refund = models.BooleanField(default=False)
    # The member's Slack user id (U…), so a click on Approve in Slack acts as this member.
    slack_user_id = models.CharField(max_length=32, blank=True, default="", db_default="")
    # When Slack confirmed that Slack user is this member (users.info: their profile email is
    # the member's; refunds/review/slack_users.py). Null while it is not confirmed: links made
    # before Sill asked Slack, until the check (refunds/review/slack_link_checks.py) confirms
    # or clears them. A click from an unconfirmed link decides nothing.
    slack_checked_at = models.DateTimeField(null=True, blank=True)
    # The Slack workspace that user belongs to, as users.info said when Slack last confirmed
    # the link (its ``team_id``: T…, or E… for a user of an Enterprise Grid organisation). A
    # click is Slack's word for its own workspace only: one from another workspace (the app
    # installed elsewhere, a user id that is someone else's there) decides nothing. Empty for
    # links confirmed before Sill recorded it, until the check fills it in (their clicks are
    # refused meanwhile), and for every unconfirmed link.
    slack_team_id = models.CharField(max_length=32, blank=True, default="", db_default="")
    # Why the link check last took the member's Slack link away (cleared: another email;
    # unconfirmed: Slack no longer vouches for the user), in words, for Settings → Slack;
    # empty once a link is confirmed or changed by a save.
    slack_link_why = models.CharField(max_length=200, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["site__name"]
        constraints = [
            models.UniqueConstraint(fields=["user", "site"], name="membership_one_per_site"),
            models.UniqueConstraint(
                fields=["site", "slack_user_id"],
                condition=~Q(slack_user_id=""),
                name="membership_one_slack_user_per_site",
            ),
            models.CheckConstraint(
                condition=~Q(slack_user_id="", slack_checked_at__isnull=False),
                name="membership_slack_checked_only_linked",
            ),
            models.CheckConstraint(
                condition=~Q(slack_checked_at__isnull=True) | Q(slack_team_id=""),
                name="membership_slack_team_only_confirmed",
            ),
            models.CheckConstraint(
                condition=Q(role__in=[r.value for r in Role]), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.site_id} ({self.role})"


class Agent(models.Model):
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="agents")
    agent_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    active = models.BooleanField(default=True)
    # The seed's refund method: off for a new agent until an owner or admin switches it on
    # (Settings → Agents); an agent without it is refused method_not_allowed.
    refund_enabled = models.BooleanField(default=False, db_default=False)
    # Caps checked before the policy, in the site's currency; null is no cap.
    refund_cap_minor = models.BigIntegerField(null=True, blank=True)
    daily_refund_cap_minor = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent_id"]
        constraints = [
            models.UniqueConstraint(fields=["site", "agent_id"], name="agent_unique_per_site"),
            models.CheckConstraint(
                condition=(Q(refund_cap_minor__isnull=True) | Q(refund_cap_minor__gte=0))
                & (Q(daily_refund_cap_minor__isnull=True) | Q(daily_refund_cap_minor__gte=0)),
                name="agent_caps_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.agent_id


class AgentKey(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    key_id = models.CharField(max_length=100)
    # Raw 32-byte ed25519 public key.
    public_key = models.BinaryField(max_length=32)
    valid_from = models.DateTimeField()
    valid_until = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "key_id"], name="agentkey_unique_per_agent"),
            models.CheckConstraint(
                condition=Q(valid_until__isnull=True) | Q(valid_until__gt=models.F("valid_from")),
                name="agentkey_valid_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.key_id}"


class AgentToken(models.Model):
    """A bearer token an agent uses to read its refunds. Only the SHA-256 is stored."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens")
    token_sha256 = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)


class WorkerHeartbeat(models.Model):
    """Last time a Celery worker ran the heartbeat task (beat schedules it every minute).

    The dashboard shows it so an on-call engineer sees at once whether refunds can execute.
    """

    hostname = models.CharField(max_length=255, unique=True)
    seen_at = models.DateTimeField()


class MemberToken(models.Model):
    """A bearer token for a member's API calls on one site (e.g. the staff refund API).

    Only the SHA-256 is stored; the token acts with the membership's role at the time of use.
    """

    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="tokens")
    token_sha256 = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)


class MemberInvite(models.Model):
    """An emailed invitation to join ``site`` as ``role`` (sill/accounts/invites.py).

    Only the SHA-256 of the link's token is stored: a leaked database row opens nothing.
    Resending replaces the hash (the old link stops working), revoking or accepting stamps
    the row; a link works only while the row is pending and before ``expires_at``.
    """

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="invites")
    email = models.CharField(max_length=150)
    role = models.CharField(max_length=16, choices=Role.choices)
    can_refund = models.BooleanField(default=False)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    token_sha256 = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-sent_at"]
        constraints = [
            # One open invitation per address and site: inviting again replaces it.
            models.UniqueConstraint(
                fields=["site", "email"],
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="memberinvite_one_pending",
            ),
            models.CheckConstraint(
                condition=Q(role__in=[r.value for r in Role]), name="memberinvite_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"invite {self.email} @ {self.site_id} ({self.role})"

    @property
    def pending(self) -> bool:
        return self.accepted_at is None and self.revoked_at is None


class NoticeDelivery(models.Model):
    """One member of ``site`` given their message of one emailed notice (``notice``, such as
    ``refund-attention:<refund id>``), so that a retry of the notice skips them
    (:func:`sill.accounts.notices.email_members`).

    Taken by INSERT before the message goes to the mail server (the unique constraint is the
    lock: two senders of one notice cannot both take a member) and deleted again when the
    server does not take the message. A row whose sender died in between stays: that member
    counts as told, perhaps wrongly, never twice. No address is stored: the row names the
    user, whose address may change. Rows older than ``notices.DELIVERIES_KEPT`` are deleted.
    """

    # Led by the unique constraint below: no index of its own.
    site = models.ForeignKey(Site, on_delete=models.CASCADE, db_index=False, related_name="+")
    notice = models.CharField(max_length=100)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["site", "notice", "user"], name="noticedelivery_once_per_member"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.notice} → user {self.user_id} @ {self.site_id}"
