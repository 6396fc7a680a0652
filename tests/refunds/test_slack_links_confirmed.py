"""A Slack user is linked to a member only when Slack confirms it is that member.

A click from a linked Slack user approves held refunds as the member, so Settings → Slack
(``save_slack_settings``) asks Slack (``users.info`` with the site's bot token, here the
loopback Slack of ``tests/refunds/slack_stub.py`` through slack_sdk's WebClient) and links
only a Slack user whose profile email is the member's, in any case. An admin linking
themselves to a colleague's Slack user, or to the owner's while the owner is unlinked, is
refused beside the box with nothing written; so is any link when the bot token is missing or
Slack cannot be reached. Unlinking asks nothing of Slack; links made before stay, unconfirmed
until Slack confirms them (tests/refunds/test_slack_unconfirmed_links.py).
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from audit.models import AuditRecord
from refunds.review.slack_setup import OWNERS_ONLY_TOKEN, SlackSettingsRefused, save_slack_settings
from refunds.review.slack_users import NO_EMAIL, NO_TOKEN, UNREACHABLE
from sill import errors
from sill.accounts.models import Membership, Site
from tests.refunds.slack_stub import TOKEN, SlackStub

pytestmark = pytest.mark.django_db


def _state() -> dict[str, Any]:
    """Everything the service writes: equal before and after a refusal."""
    return {
        "audit": list(AuditRecord.objects.order_by("pk").values_list("pk", flat=True)),
        "links": list(Membership.objects.order_by("pk").values_list("pk", "slack_user_id")),
        "tokens": [bytes(t) for t in Site.objects.order_by("pk").values_list(
            "slack_bot_token_sealed", flat=True)],
    }  # fmt: skip


def _refused_link(
    site: Site, actor: Any, member: Membership, slack_user_id: str
) -> SlackSettingsRefused:
    before = _state()
    with pytest.raises(SlackSettingsRefused) as refused:
        save_slack_settings(site=site, actor=actor, links={member.pk: slack_user_id})
    assert refused.value.status == 422 and refused.value.code == "invalid_field"
    assert list(refused.value.field_errors) == [f"slack_{member.pk}"]
    assert _state() == before
    return refused.value


@pytest.mark.parametrize("whose", ["a colleague who is not a member", "the unlinked owner"])
def test_an_admin_cannot_link_themselves_to_someone_elses_slack_user(
    site: Site, members: dict[str, Membership], slack_api: SlackStub, whose: str
) -> None:
    slack_api.add_user("U0COLLEAGUE", "colleague@roasters.example")
    theirs = "U0COLLEAGUE" if whose.startswith("a colleague") else "U0OWNER"
    admin = members["admin"]
    refused = _refused_link(site, admin.user, admin, theirs)
    assert "admin@roasters.example" in refused.message
    assert "their own Slack user" in refused.message
    assert ("users.info", theirs) in slack_api.calls


def test_an_owner_cannot_link_an_admin_to_another_persons_slack_user(
    site: Site, members: dict[str, Membership], slack_api: SlackStub
) -> None:
    _refused_link(site, members["owner"].user, members["admin"], "U0OWNER")


def test_a_slack_user_whose_email_is_the_members_is_linked(
    site: Site, members: dict[str, Membership], slack_api: SlackStub
) -> None:
    """Emails compare without case: Slack keeps what the person typed."""
    slack_api.add_user("U0ADMINCASE", "Admin@Roasters.EXAMPLE")
    admin = members["admin"]
    changed = save_slack_settings(site=site, actor=admin.user, links={admin.pk: "u0admincase"})
    assert changed == ["Slack user of admin@roasters.example set"]
    admin.refresh_from_db()
    assert admin.slack_user_id == "U0ADMINCASE"
    assert slack_api.calls == [("users.info", "U0ADMINCASE")]


def test_an_unknown_slack_user_is_refused(
    site: Site, members: dict[str, Membership], slack_api: SlackStub
) -> None:
    admin = members["admin"]
    refused = _refused_link(site, admin.user, admin, "U0NOBODY")
    assert refused.message == "Slack has no user U0NOBODY in this workspace."


def test_a_profile_without_an_email_is_refused(
    site: Site, members: dict[str, Membership], slack_api: SlackStub
) -> None:
    """An app without the users:read.email scope gets profiles without their email."""
    slack_api.add_user("U0NOEMAIL", None)
    admin = members["admin"]
    assert _refused_link(site, admin.user, admin, "U0NOEMAIL").message == NO_EMAIL


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"is_email_confirmed": False}, "Slack has not confirmed the email on U0TAKEN's profile"),
        ({"deleted": True}, "Slack says U0TAKEN is deactivated in this workspace."),
        ({"is_restricted": True}, "U0TAKEN is a guest in this Slack workspace"),
        ({"is_restricted": True, "is_ultra_restricted": True}, "U0TAKEN is a guest"),
    ],
    ids=["email not confirmed", "deactivated", "multi-channel guest", "single-channel guest"],
)
def test_a_profile_with_the_members_email_that_slack_does_not_vouch_for_is_refused(
    site: Site, members: dict[str, Membership], slack_api: SlackStub, flags: dict, why: str
) -> None:
    """The old code took the profile's email at its word. An email Slack has not confirmed is
    only what someone typed (the owner's address on an admin's second Slack user, say); a
    deactivated user, or a guest from outside the organisation, is not whom a decider's link
    should speak for. Each is refused beside the box, nothing written."""
    slack_api.add_user("U0TAKEN", "owner@roasters.example", **flags)
    owner = members["owner"]
    refused = _refused_link(site, owner.user, owner, "U0TAKEN")
    assert refused.message.startswith(why) and "Nothing was linked." in refused.message


def test_nothing_is_linked_when_slack_cannot_be_reached(
    site: Site, members: dict[str, Membership], slack_api: SlackStub, settings: Any
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.SILL_SLACK_API_URL = f"http://127.0.0.1:{port}/api/"
    admin = members["admin"]
    assert _refused_link(site, admin.user, admin, "U0ADMIN").message == UNREACHABLE


def test_nothing_is_linked_without_a_bot_token(
    site: Site, members: dict[str, Membership], slack_api: SlackStub
) -> None:
    Site.objects.filter(pk=site.pk).update(slack_bot_token_sealed=b"")
    site.refresh_from_db()
    admin = members["admin"]
    assert _refused_link(site, admin.user, admin, "U0ADMIN").message == NO_TOKEN
    assert slack_api.calls == []


def test_a_token_slack_refuses_links_nothing(
    site: Site, members: dict[str, Membership], slack_api: SlackStub
) -> None:
    slack_api.token = "xoxb-9999999999-another-workspace"
    admin = members["admin"]
    assert (
        "Slack refused the app's bot token"
        in _refused_link(site, admin.user, admin, "U0ADMIN").message
    )


def test_unlinking_asks_nothing_of_slack_and_an_old_link_slack_cannot_confirm_stays(
    site: Site, members: dict[str, Membership], slack_api: SlackStub, settings: Any
) -> None:
    """A link made before this check, sent back unchanged by the form while Slack is down,
    stays as it was (unconfirmed), and the save goes through."""
    owner, admin = members["owner"], members["admin"]
    Membership.objects.filter(pk=owner.pk).update(slack_user_id="U0EARLIER")
    Membership.objects.filter(pk=admin.pk).update(slack_user_id="U0ADMIN")
    settings.SILL_SLACK_API_URL = "http://127.0.0.1:9/api/"  # nothing answers there
    changed = save_slack_settings(
        site=site, actor=owner.user, links={owner.pk: "U0EARLIER", admin.pk: ""}
    )
    assert changed == ["Slack user of admin@roasters.example cleared"]
    links = dict(Membership.objects.filter(site=site).values_list("pk", "slack_user_id"))
    assert links[owner.pk] == "U0EARLIER" and links[admin.pk] == ""
    assert Membership.objects.get(pk=owner.pk).slack_checked_at is None
    assert slack_api.calls == []


def test_only_an_owner_sets_the_bot_token_and_it_stays_secret(
    site: Site, members: dict[str, Membership], slack_api: SlackStub
) -> None:
    """Slack's answers with the token decide who is who: an admin's token (say, of a
    workspace of their own) is refused with the rest of the save."""
    admin = members["admin"]
    before = _state()
    with pytest.raises(errors.PermissionDenied) as refused:
        save_slack_settings(
            site=site, actor=admin.user, bot_token="xoxb-1234567890-admins-own", links={}
        )
    assert isinstance(refused.value, SlackSettingsRefused)
    assert refused.value.field_errors == {"bot_token": OWNERS_ONLY_TOKEN}
    assert _state() == before
    # An owner pastes a new token and links with it in the same save.
    slack_api.token = "xoxb-5555555555-rotated-token-value"
    changed = save_slack_settings(
        site=site,
        actor=members["owner"].user,
        bot_token=slack_api.token,
        links={admin.pk: "U0ADMIN"},
    )
    assert changed == ["bot token set", "Slack user of admin@roasters.example set"]
    record = AuditRecord.objects.filter(site=site, kind="settings_change").latest("pk")
    assert json.loads(record.payload)["body"]["changed"] == ["bot token set"]
    assert slack_api.token not in record.payload
    site.refresh_from_db()
    assert slack_api.token.encode() not in bytes(site.slack_bot_token_sealed)


# -- the loopback Slack answers as Slack does ------------------------------------------------


def test_the_stub_answers_users_info_in_slacks_shape(slack_api: SlackStub) -> None:
    client = WebClient(token=TOKEN, base_url=slack_api.url)
    answer = client.users_info(user="U0OWNER")
    assert answer.status_code == 200 and answer["ok"] is True
    assert answer["user"]["id"] == "U0OWNER"
    assert answer["user"]["profile"]["email"] == "owner@roasters.example"
    assert answer["user"]["is_email_confirmed"] is True and answer["user"]["deleted"] is False
    assert answer["user"]["is_restricted"] is False
    assert answer["user"]["is_ultra_restricted"] is False
    with pytest.raises(SlackApiError) as unknown:
        client.users_info(user="U0NOBODY")
    assert unknown.value.response.status_code == 200
    assert unknown.value.response.data == {"ok": False, "error": "user_not_found"}
    with pytest.raises(SlackApiError) as bad_token:
        WebClient(token="xoxb-0-wrong", base_url=slack_api.url).users_info(user="U0OWNER")
    assert bad_token.value.response.data == {"ok": False, "error": "invalid_auth"}
