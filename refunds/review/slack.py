"""Held refunds in Slack: the message with the facts in words and Approve / Reject buttons,
and the clicks Slack sends back (Slack's interactivity, verified with the app's signing
secret through slack_sdk).

A click is a POST to ``/slack/interactions/<site_id>`` (``payload=<JSON>``, signed with
``X-Slack-Signature`` / ``X-Slack-Request-Timestamp``, five minutes' tolerance). The Slack user
is mapped to a member of that site (``Membership.slack_user_id``) who may decide held refunds,
through a link Slack confirmed (``slack_checked_at``: a link made before Sill asked Slack
decides nothing until it is confirmed), from the workspace Slack said that user is of
(``slack_team_id``, matched against the click's workspace or Enterprise Grid organisation:
:func:`click_teams`); the decision then runs through the same services as
the browser — the re-checks at approval, maker-checker, expiry — and is audited the same way
(the review record names the member; its note says it came from Slack). A site that requires
two factors refuses decisions from Slack (Sill cannot see Slack's second factor) and links the
refund page instead.

Slack waits three seconds for the answer to a click, and an approval first reads the charge at
the rail (up to ``SILL_RAIL_FACT_TIMEOUT_SECONDS``): so the request only verifies the click and
queues it (:func:`accept_click`), and a worker decides it (:func:`decide_click`, the task
``refunds.slack_decide``). Everything the clicker is told then goes through the click's
``response_url``: the outcome replaces the message, a refusal is shown to the clicker alone.
That URL must be a Slack host (``SILL_SLACK_RESPONSE_HOSTS``): the click's body is signed, but
Sill posts nowhere else.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.core.cache import cache
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient

from refunds.labels import (
    action_label,
    deadline_text,
    money_words,
    refund_headline,
    refused_approval,
    requester_words,
    rule_title,
)
from refunds.models import DecidedVia, Refund, RefundStatus
from refunds.review.decisions import (
    AlreadyDecided,
    already_decided_message,
    approve_refund,
    deadline,
    reject_refund,
)
from refunds.review.facts_words import fact_phrases
from sill import jsonbody
from sill.accounts.access import Cap, can
from sill.accounts.models import Membership, Site
from sill.errors import SillError
from sill.queue import enqueue_on_commit
from sill.rails.secrets import RailSecretUnreadable, SecretBinding, decrypt_secret, encrypt_secret

logger = logging.getLogger(__name__)

APPROVE = "sill_approve"
REJECT = "sill_reject"
# "Review in Sill", a link button: Slack opens its URL and still sends the click here.
OPEN = "sill_open"
MAX_BODY_BYTES = 64 * 1024
TIMEOUT_SECONDS = 5
# How long a click's signature is remembered: past the verifier's five minutes either way.
REPLAY_SECONDS = 11 * 60


UNCONFIRMED_LINK = (
    "Your Slack user's link to Sill is not confirmed yet, so this click decided nothing: it "
    "must be confirmed in Sill first (Settings → Slack). Until then, decide it in Sill."
)
# Said to a click on a link Slack confirmed before Sill recorded its workspace: nothing is
# wrong with the click (most come from the link's own workspace), and the check records it
# within 15 minutes, so the clicker is asked to click again soon, not sent away.
UNRECORDED_WORKSPACE = (
    "Sill is still confirming your link with Slack, so this click decided nothing yet: try "
    "again in a few minutes (the buttons stay), or decide it in Sill."
)
# A click queued before Sill read the workspace from it (in the queue across that deploy):
# where it came from is unknown, not another workspace. A new click names it.
NO_WORKSPACE_NAMED = (
    "Sill could not tell which Slack workspace this click came from, so it decided nothing: "
    "click again, or decide it in Sill."
)
# Said to every click while Slack refuses the site's bot token (the link check recorded it):
# no link can be confirmed again, so none speaks for a member.
TOKEN_REFUSED = (
    "Slack refuses this site's Slack app (its bot token), so Sill cannot confirm who you are "
    "and this click decided nothing: an owner reinstalls the app and sets its new bot token "
    "in Sill (Settings → Slack). Until then, decide it in Sill."
)
# Said when a click's every attempt met a database error (refunds.slack_decide gave up): the
# decision was not written, and nothing will write it later.
NOT_RECORDED = (
    "Your {action} was not recorded: Sill's database did not answer, so this click decided "
    "nothing. Click again in a few minutes (the buttons stay), or decide it in Sill."
)
# The review note of a decision made from Slack: how a retried click tells its own decision
# (committed before the attempt failed) from one made in Sill meanwhile.
SLACK_NOTE = "Decided in Slack"
OTHER_WORKSPACE = (
    "This click came from another Slack workspace than the one this Slack user is linked in, "
    "so it decided nothing. Decide it in Sill."
)


class SlackRefused(SillError):
    """A click Sill does not act on; ``message`` is what the clicker is told (ephemeral)."""

    code = "slack_refused"
    status = 200  # Slack shows nothing for other statuses; the words go back in the body


def seal_signing_secret(site: Site, secret: str) -> bytes:
    return encrypt_secret(secret, binding=signing_secret_binding(site))


def signing_secret_binding(site: Site) -> SecretBinding:
    return SecretBinding(site_id=site.pk, rail="slack", field="signing_secret")


WEBHOOK_FIELD = "webhook_url"


def webhook_binding(site: Site) -> SecretBinding:
    return SecretBinding(site_id=site.pk, rail="slack", field=WEBHOOK_FIELD)


def seal_webhook_url(site: Site, url: str) -> bytes:
    return encrypt_secret(url, binding=webhook_binding(site))


def webhook_url(site: Site) -> str:
    """The site's Slack incoming webhook, or "" when none is set or it cannot be opened (a
    SECRET_KEY rotated without the old key kept): then Slack is skipped, with a warning."""
    try:
        return decrypt_secret(
            bytes(site.slack_webhook_sealed or b""), binding=webhook_binding(site)
        )
    except RailSecretUnreadable:
        logger.warning("site %s: the Slack webhook cannot be decrypted; set it again", site.pk)
        return ""


def bot_token_binding(site: Site) -> SecretBinding:
    return SecretBinding(site_id=site.pk, rail="slack", field="bot_token")


def seal_bot_token(site: Site, token: str) -> bytes:
    return encrypt_secret(token, binding=bot_token_binding(site))


def bot_token(site: Site) -> str:
    """The site's Slack bot token (it asks Slack who a Slack user is), or "" when none is set
    or it cannot be opened: then no Slack user can be linked until an owner sets it again."""
    try:
        return decrypt_secret(
            bytes(site.slack_bot_token_sealed or b""), binding=bot_token_binding(site)
        )
    except RailSecretUnreadable:
        logger.warning("site %s: the Slack bot token cannot be decrypted; set it again", site.pk)
        return ""


def _signing_secret(site: Site) -> str:
    try:
        return decrypt_secret(
            bytes(site.slack_signing_secret or b""), binding=signing_secret_binding(site)
        )
    except RailSecretUnreadable:
        return ""


# -- the message ---------------------------------------------------------------------------


def held_message(refund: Refund, *, review_url: str) -> dict[str, Any]:
    """``{"text", "blocks"}``: what the held refund is, the facts in words, the rules that held
    it, and the buttons (an owner's or admin's click decides it; a reviewer's is refused)."""
    order = refund.order
    headline = refund_headline(refund)
    noun = money_words(refund)[0]
    facts = " · ".join(fact_phrases(refund.facts or {}, credit=refund.is_credit))
    facts = facts or "no facts recorded"
    rules = [
        f"{rule_title(r['id'])} — {action_label(str(r.get('action', '')))}"
        for r in refund.rules or []
        if isinstance(r, dict) and "id" in r
    ]
    text = f"Refund held for review on {refund.site.name}: {headline}"
    due = deadline_text(deadline(refund), refund.site.zone)
    lines = [
        f"*{headline}*" + (f" for order #{order.number}" if order else ""),
        f"Asked by {requester_words(refund)}. Decide before {due}.",
        f"Facts: {facts}",
        "Held by: " + ("; ".join(rules) if rules else "policy"),
    ]
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}},
            {
                "type": "actions",
                "block_id": f"sill_decide:{refund.id}",
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE,
                        "style": "primary",
                        "value": refund.id,
                        "text": {"type": "plain_text", "text": f"Approve {headline}"[:75]},
                        "confirm": {
                            "title": {
                                "type": "plain_text",
                                "text": f"{noun.capitalize()} the customer?",
                            },
                            "text": {
                                "type": "mrkdwn",
                                "text": f"{headline}. The customer will be emailed.",
                            },
                            "confirm": {"type": "plain_text", "text": f"Approve and {noun}"},
                            "deny": {"type": "plain_text", "text": "Cancel"},
                        },
                    },
                    {
                        "type": "button",
                        "action_id": REJECT,
                        "style": "danger",
                        "value": refund.id,
                        "text": {"type": "plain_text", "text": "Reject"},
                    },
                    {
                        "type": "button",
                        "action_id": OPEN,
                        "url": review_url,
                        "text": {"type": "plain_text", "text": "Review in Sill"},
                    },
                ],
            },
        ],
    }


def post_held_message(*, url: str, refund: Refund, review_url: str) -> bool:
    """Post the held message to the site's incoming webhook; False (logged) on any failure."""
    message = held_message(refund, review_url=review_url)
    try:
        response = WebhookClient(url, timeout=TIMEOUT_SECONDS).send(
            text=message["text"], blocks=message["blocks"]
        )
    except Exception as exc:  # best effort: a Slack outage never blocks the email
        logger.warning("Slack webhook post failed: %s", type(exc).__name__)
        return False
    if response.status_code != 200:
        logger.warning("Slack webhook post failed: HTTP %s", response.status_code)
        return False
    return True


# -- the clicks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Click:
    action: str  # APPROVE | REJECT
    refund_id: str
    slack_user_id: str
    response_url: str
    teams: tuple[str, ...] = ()  # the workspace and organisation ids the click came from


def verify_click(
    *, site: Site, body: bytes, timestamp: str | None, signature: str | None
) -> Click | None:
    """The click in ``body`` if Slack signed it for ``site``'s app; SillError otherwise
    (``bad_signature`` 400 for a forged or stale request, ``malformed`` for the rest).

    None for a click on the message's "Review in Sill" link: Slack has opened the page, and
    still sends the click and wants it acknowledged (200), else it marks the button with a
    warning; there is nothing to decide."""
    secret = _signing_secret(site)
    if not secret:
        raise SillError(
            "Slack approvals are not set up for this site.", code="not_found", status=404
        )
    if len(body) > MAX_BODY_BYTES:
        raise jsonbody.BodyTooLarge("The request is too large.")
    # slack_sdk reads the timestamp with int(), compares the signature as text and decodes
    # the body as UTF-8: a timestamp that is not whole seconds (or too many digits for a
    # float), a non-ASCII signature or a body that is not UTF-8 (Slack signs only UTF-8)
    # would raise there, so requests not in Slack's shape are refused first.
    seconds = timestamp is not None and re.fullmatch(r"[0-9]{1,15}", timestamp) is not None
    shaped = signature is not None and re.fullmatch(r"v0=[0-9a-f]{64}", signature) is not None
    if not (seconds and shaped and _is_utf8(body)) or not SignatureVerifier(secret).is_valid(
        body, timestamp, signature
    ):
        raise SillError("The Slack signature does not verify.", code="bad_signature", status=400)
    # A signature verifies for five minutes either side of its timestamp: the same signed
    # request seen again in that time is a replay (Slack signs each click afresh).
    if not cache.add(f"sill:slack-click:{site.pk}:{signature}", 1, REPLAY_SECONDS):
        raise SillError("This Slack request was sent before.", code="bad_signature", status=400)
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=4)
        # Read as every JSON body is: nesting past the parser's recursion limit or a key named
        # twice (json.loads keeps the last one) is MalformedJSON (400), not a 500 or a guess.
        payload = jsonbody.loads(form["payload"][0])
        action = payload["actions"][0]
        action_id = str(action["action_id"])
        if payload["type"] == "block_actions" and action_id == OPEN:
            return None  # a link button's click carries no value
        click = Click(
            action=action_id,
            refund_id=str(action["value"]),
            slack_user_id=str(payload["user"]["id"]),
            response_url=str(payload["response_url"]),
            teams=click_teams(payload),
        )
    except (ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError):
        raise SillError("Not a Slack block action.", code="malformed", status=400) from None
    if payload.get("type") != "block_actions" or click.action not in (APPROVE, REJECT):
        raise SillError("Not an Approve or Reject click.", code="malformed", status=400)
    return click


def click_teams(payload: dict[str, Any]) -> tuple[str, ...]:
    """The Slack workspace and organisation ids a signed click names, as Slack documents the
    block_actions payload: ``team.id`` (the workspace it was clicked in), ``user.team_id``
    (the clicker's; an organisation's E… on Enterprise Grid), and on Enterprise Grid
    ``team.enterprise_id`` and ``enterprise.id`` (``team`` may be null for an app installed
    across the organisation). A link's recorded workspace (users.info's ``team_id``: the
    workspace, or the organisation for such an app) must be one of them."""
    team, user, enterprise = (payload.get(key) for key in ("team", "user", "enterprise"))
    named = [
        team.get("id") if isinstance(team, dict) else None,
        team.get("enterprise_id") if isinstance(team, dict) else None,
        user.get("team_id") if isinstance(user, dict) else None,
        enterprise.get("id") if isinstance(enterprise, dict) else None,
    ]
    return tuple(dict.fromkeys(t for t in named if isinstance(t, str) and t))


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def accept_click(*, site: Site, click: Click) -> None:
    """Queue a verified click for a worker to decide (on commit): the request answers Slack at
    once. A redelivered message is not decided twice (the task acknowledges early, and a
    decided refund refuses another decision); a click lost with a worker leaves the buttons in
    place, to be clicked again."""
    enqueue_on_commit(
        "refunds.slack_decide", site.pk, click.action, click.refund_id, click.slack_user_id,
        click.response_url, list(click.teams), shown=shown_click(site.pk, click),
    )  # fmt: skip


def shown_click(site_id: str, click: Click) -> tuple[object, ...]:
    """What a queued click's message shows of its arguments (its headers: monitoring, the
    worker's failure log): all but the response_url, a capability, named in its place."""
    return (
        site_id, click.action, click.refund_id, click.slack_user_id, "<response_url>",
        list(click.teams),
    )  # fmt: skip


def decide_click(*, site_id: str, click: Click, retried: bool = False) -> Refund | None:
    """Decide the queued click (the task behind ``refunds.slack_decide``); the clicker is told
    through the response_url why not when Sill refuses it.

    ``retried``: an earlier attempt at this click failed on a database error, perhaps after
    its decision committed. The refund then refuses a second decision, and a decision it
    finds made by the clicker as they asked is answered as this click's (the outcome, no
    refusal): a retried click never decides twice, nor tells its clicker someone came first.
    """
    site = Site.objects.filter(pk=site_id).first()
    if site is None:  # removed since the click
        return None
    try:
        return _decide(site=site, click=click, retried=retried)
    except SlackRefused as refused:
        _respond_on_commit(click, refused.message, privately=True)
        return None


def _decide(*, site: Site, click: Click, retried: bool = False) -> Refund:
    """Decide the held refund as the member behind the Slack user; SlackRefused says why not.

    The message is replaced with the outcome once the decision commits.
    """
    membership = (
        Membership.objects.select_related("user", "site")
        .filter(site=site, slack_user_id=click.slack_user_id)
        .first()
    )
    _check_click(site, membership, click)
    assert membership is not None  # _check_link refuses a click no member is linked to
    refund = (
        Refund.objects.select_related("site", "order", "agent", "requested_by")
        .filter(site=site, pk=click.refund_id)
        .first()
    )
    if refund is None:
        raise SlackRefused("That refund is not on this site.")

    # The link and the site's Slack settings are checked again as the decision is made:
    # unlinked (or the member removed or demoted), a second factor required or the bot token
    # refused since the checks above (while an approval read the charge at the rail, or while
    # an owner's unlink waited for the audit chain), it decides nothing.
    def recheck(held: Membership | None) -> None:
        _check_click(_site_now(site), held, click)

    try:
        if click.action == APPROVE:
            decided = approve_refund(
                refund=refund, actor=membership.user, note=SLACK_NOTE, via=DecidedVia.SLACK,
                check_member=recheck,
            )  # fmt: skip
        else:
            decided = reject_refund(
                refund=refund, actor=membership.user, note=SLACK_NOTE, via=DecidedVia.SLACK,
                check_member=recheck,
            )  # fmt: skip
    except SillError as exc:
        # The clicker is told why. When the hold is over (it expired, or someone decided it
        # first, in Sill or in another click) the message shows where the refund stands now,
        # without buttons: they have nothing left to decide. A refusal that leaves the refund
        # held (the requester's own approval, a dispute to settle first) keeps them for
        # another owner or admin.
        refund.refresh_from_db(
            fields=["status", "decision", "decided_by", "decided_at", "decided_via", "outcome_code"]
        )
        if refund.status != RefundStatus.HELD:
            decider = refund.decided_by.get_username() if refund.decided_by else ""
            _respond_on_commit(click, outcome_text(refund, by=decider))
            approved = refund.status not in (RefundStatus.REJECTED, RefundStatus.EXPIRED)
            if (
                retried
                and refund.decided_by_id == membership.user.pk
                and refund.decided_via == DecidedVia.SLACK
                and approved == (click.action == APPROVE)
            ):
                return refund  # this click's own decision, committed before its attempt failed
            if isinstance(exc, AlreadyDecided):
                # Someone came first (the clicker too, in Sill, while this click waited for a
                # retry): said as it happened, never as this click's doing.
                told = already_decided_message(
                    refund, viewer=membership.user, lead="Your click decided nothing"
                )
                raise SlackRefused(told) from exc
        raise SlackRefused(exc.message) from exc
    who = membership.user.get_username()
    _respond_on_commit(click, outcome_text(decided, by=who))
    return decided


def _check_click(site: Site, membership: Membership | None, click: Click) -> None:
    """SlackRefused unless ``site``'s Slack settings let a click decide and ``click``'s Slack
    user is linked to ``membership`` (:func:`_check_link`)."""
    if site.slack_token_refused:
        # The app was uninstalled or its token revoked: the daily re-check cannot vouch for
        # any link, so none decides until an owner sets a token Slack takes.
        raise SlackRefused(TOKEN_REFUSED)
    _check_link(membership, click)
    if site.require_two_factor:
        raise SlackRefused(
            "This site asks for a second factor before a decision: decide it in Sill."
        )


def _site_now(site: Site) -> Site:
    """``site``'s Slack settings as committed now, in a decision's transaction. A plain read:
    locking the site row after the member's (``hold_member``) would invert the order member
    changes take (site, then member), so an owner's switch that commits before this read is
    refused here, and one after it is after the decision."""
    return Site.objects.only("slack_token_refused", "require_two_factor").get(pk=site.pk)


def _check_link(membership: Membership | None, click: Click) -> None:
    """SlackRefused unless ``click``'s Slack user is linked to ``membership`` (None: to no
    member of the site), a link that speaks for an active member whose role decides held
    refunds. Checked when the click is taken up, and again in the decision's transaction as it
    reads the membership then (``approve_refund``'s and ``reject_refund``'s ``check_member``):
    an owner who unlinked the Slack user (or removed or demoted the member) while an approval
    read the charge at the rail, or whose unlink was on its way as the click was taken up, was
    told so, and the click decides nothing."""
    if (
        membership is None
        or not membership.user.is_active
        or membership.slack_user_id != click.slack_user_id
    ):
        raise SlackRefused("Your Slack user is not linked to a member of this site in Sill.")
    if membership.slack_checked_at is None:
        # A link made before Sill asked Slack who a Slack user is: whoever typed it may have
        # linked someone else's Slack user, so it speaks for no one until Slack confirms it
        # (refunds/review/slack_link_checks.py). Said before the role: it is not yet known
        # whose click this is.
        raise SlackRefused(UNCONFIRMED_LINK)
    if not membership.slack_team_id:
        # Confirmed before Sill recorded the workspace: whether this click comes from it is
        # not known until the check asks Slack again (its next run, within 15 minutes).
        raise SlackRefused(UNRECORDED_WORKSPACE)
    if not click.teams:
        raise SlackRefused(NO_WORKSPACE_NAMED)
    if membership.slack_team_id not in click.teams:
        # The signing secret is the app's, not the workspace's: an app installed in more than
        # one workspace signs clicks from each, and a user id is Slack's name for someone in
        # one workspace (or organisation) only. Only a click from the link's decides as the
        # member.
        raise SlackRefused(OTHER_WORKSPACE)
    if not can(membership, Cap.DECIDE_HELD):
        raise SlackRefused("Only owners and admins decide held refunds; you can review it in Sill.")


def give_up_click(*, site_id: str, click: Click, attempts: int, error: Exception) -> None:
    """A click whose every attempt met a database error (``refunds.slack_decide`` retries no
    more): nothing was decided and nothing will decide it later, so the clicker is told
    (privately) to click again or decide in Sill, and it is logged at ERROR (the response_url,
    a capability, is not). Posted from here, not queued on commit: the database that failed
    every attempt is not asked to commit anything first."""
    logger.error(
        "Slack click not decided: %s of refund %s on site %s by Slack user %s met a database "
        "error on each of %d attempts (%s); the clicker is told to click again",
        click.action, click.refund_id, site_id, click.slack_user_id, attempts,
        type(error).__name__,  # the class only: a driver's error can name the database host
    )  # fmt: skip
    action = "approval" if click.action == APPROVE else "rejection"
    respond(
        response_url=click.response_url, text=NOT_RECORDED.format(action=action), privately=True
    )


def _respond_on_commit(click: Click, text: str, *, privately: bool = False) -> None:
    """Replace the clicked message with ``text`` once the decision commits, or show ``text``
    to the clicker alone (``privately``). The response_url is a capability (anyone holding it
    may post into the channel for half an hour): the task's headers, which monitoring and the
    worker's failure logs show, never carry it."""
    enqueue_on_commit(
        "refunds.slack_respond", click.response_url, text, privately,
        shown=("<response_url>", text, privately),
    )  # fmt: skip


def outcome_text(refund: Refund, error: str = "", *, by: str = "") -> str:
    headline = refund_headline(refund)
    if error:
        return f"{headline}: {error}"
    done = money_words(refund)[1]
    doing = "crediting" if refund.is_credit else "refunding"
    outcomes: dict[str, str] = {
        RefundStatus.PROCESSING: f"approved: {doing} on the rail now",
        RefundStatus.SUCCEEDED: f"approved and {done}",
        RefundStatus.REJECTED: f"rejected: nothing was {done}",
        RefundStatus.EXPIRED: f"expired: nothing was {done}",
    }
    why = refused_approval(refund.outcome_code) if refund.status == RefundStatus.REJECTED else ""
    if by and why:
        # They clicked Approve; Sill refused it (a dispute, less left, the rail off).
        return f"{headline} approved by {by}, and Sill refused it: nothing was {done} ({why})."
    words = outcomes.get(str(refund.status), str(refund.status))
    return f"{headline} {words}" + (f" by {by}" if by else "") + "."


def respond(*, response_url: str, text: str, privately: bool = False) -> bool:
    """Replace the clicked message with ``text``, or show it to the clicker alone
    (``privately``: an ephemeral message, the original left as it is); the task behind
    ``refunds.slack_respond``."""
    host = urlsplit(response_url).hostname or ""
    if (
        urlsplit(response_url).scheme not in ("https", "http")
        or host not in settings.SILL_SLACK_RESPONSE_HOSTS
    ):
        logger.warning("Slack response_url host %r is not a Slack host; not posting", host)
        return False
    try:
        client = WebhookClient(response_url, timeout=TIMEOUT_SECONDS)
        if privately:
            response = client.send(text=text, response_type="ephemeral", replace_original=False)
        else:
            response = client.send(text=text, replace_original=True)
    except Exception as exc:  # the decision stands; the message stays as it was
        logger.warning("Slack response failed: %s", type(exc).__name__)
        return False
    return response.status_code == 200
