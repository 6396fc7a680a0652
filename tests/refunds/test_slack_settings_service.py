"""Settings → Slack's service (``refunds.review.slack_setup.save_slack_settings``) checks the
acting member's role itself, called directly with no page in front of it.

Who may not manage settings (a reviewer, a staff member, an owner of another site, no user)
is refused 403 ``forbidden`` with nothing written. An admin may set the webhook and link
themselves and members who cannot decide; the signing secret and the links of owners and of
other admins are the owners' (an admin asking for them is refused 403 ``forbidden``, nothing
written, the rest of the same save included). An owner may change everything. The secret and
the webhook URL never reach the audit record or the log.

A link takes effect only when Slack says (``users.info``, the loopback Slack of
``tests/refunds/slack_stub.py``) that the Slack user's email is the member's: another person's
Slack user, no bot token or an unreachable Slack refuse it with nothing written.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from audit.models import AuditRecord
from refunds.review.slack import seal_signing_secret, webhook_url
from refunds.review.slack_setup import (
    OWNERS_ONLY_LINK,
    OWNERS_ONLY_SECRET,
    SlackSettingsRefused,
    save_slack_settings,
)
from sill import errors
from sill.accounts.models import Membership, Role, Site
from sill.accounts.services import add_member

# Slack knows the members' users (tests/refunds/conftest.py: slack_api, SLACK_USERS).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("slack_api")]

HOOK = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXX"
SECRET = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def second_admin(site: Site) -> Membership:
    return add_member(site=site, email="admin2@roasters.example", role=Role.ADMIN)


def _state() -> dict[str, Any]:
    """Everything the service writes, every site's: equal before and after a refusal."""
    return {
        "audit": list(AuditRecord.objects.order_by("pk").values_list("pk", flat=True)),
        "sites": [
            (pk, bytes(hook), bytes(secret), bytes(token))
            for pk, hook, secret, token in Site.objects.order_by("pk").values_list(
                "pk", "slack_webhook_sealed", "slack_signing_secret", "slack_bot_token_sealed"
            )
        ],
        "links": list(Membership.objects.order_by("pk").values_list("pk", "slack_user_id")),
    }


def _actor(persona: str, members: dict[str, Membership]) -> Any:
    return None if persona == "nobody" else members[persona].user


@pytest.mark.parametrize("persona", ["reviewer", "staff", "outsider", "nobody"])
def test_it_refuses_a_role_that_may_not_and_changes_nothing(
    site: Site, members: dict[str, Membership], persona: str
) -> None:
    before = _state()
    with pytest.raises(errors.PermissionDenied) as refused:
        save_slack_settings(
            site=site,
            actor=_actor(persona, members),
            webhook_url=HOOK,
            signing_secret=SECRET,
            links={members["reviewer"].pk: "U0REVIEW"},
        )
    assert refused.value.code == "forbidden" and refused.value.status == 403
    assert _state() == before


@pytest.mark.parametrize("change", ["set", "clear"])
def test_an_admin_may_not_set_or_clear_the_signing_secret(
    site: Site, members: dict[str, Membership], change: str
) -> None:
    """Whoever holds the secret can sign a click from any linked member: owners only. The
    webhook asked for in the same save is not written either."""
    if change == "clear":
        save_slack_settings(site=site, actor=members["owner"].user, signing_secret=SECRET)
    before = _state()
    with pytest.raises(errors.PermissionDenied) as refused:
        save_slack_settings(
            site=site,
            actor=members["admin"].user,
            webhook_url=HOOK,
            signing_secret=SECRET.replace("0123", "4567") if change == "set" else "",
            clear_secret=change == "clear",
        )
    assert refused.value.code == "forbidden" and refused.value.status == 403
    assert isinstance(refused.value, SlackSettingsRefused)
    assert refused.value.field_errors == {"signing_secret": OWNERS_ONLY_SECRET}
    assert _state() == before


@pytest.mark.parametrize("whom", ["owner", "second_admin"])
@pytest.mark.parametrize("change", ["link", "unlink"])
def test_an_admin_may_not_link_an_owner_or_another_admin(
    site: Site,
    members: dict[str, Membership],
    second_admin: Membership,
    whom: str,
    change: str,
) -> None:
    """An admin linking an owner (or another admin) to the admin's own Slack user would
    decide from Slack as them; unlinking them is theirs to decide too."""
    target = second_admin if whom == "second_admin" else members[whom]
    if change == "unlink":
        theirs = "U0OWNER" if whom == "owner" else "U0OTHER"
        save_slack_settings(site=site, actor=members["owner"].user, links={target.pk: theirs})
    before = _state()
    with pytest.raises(errors.PermissionDenied) as refused:
        save_slack_settings(
            site=site,
            actor=members["admin"].user,
            links={
                members["admin"].pk: "U0ADMIN",  # allowed alone, refused with the rest
                target.pk: "U0ADMINSELF" if change == "link" else "",
            },
        )
    assert refused.value.code == "forbidden" and refused.value.status == 403
    assert isinstance(refused.value, SlackSettingsRefused)
    assert refused.value.field_errors == {f"slack_{target.pk}": OWNERS_ONLY_LINK}
    assert _state() == before


def test_an_admin_links_themselves_and_a_staff_member(
    site: Site, members: dict[str, Membership], second_admin: Membership
) -> None:
    owner, other = members["owner"], second_admin
    save_slack_settings(
        site=site, actor=owner.user, links={owner.pk: "U0OWNER", other.pk: "U0OTHER"}
    )
    changed = save_slack_settings(
        site=site,
        actor=members["admin"].user,
        webhook_url=HOOK,
        # The owner's and the other admin's unchanged, as the page sends them.
        links={
            owner.pk: "U0OWNER",
            other.pk: "u0other",
            members["admin"].pk: " u0admin ",
            members["staff"].pk: "U0STAFF",
        },
    )
    links = dict(Membership.objects.filter(site=site).values_list("pk", "slack_user_id"))
    assert links[members["admin"].pk] == "U0ADMIN" and links[members["staff"].pk] == "U0STAFF"
    assert links[owner.pk] == "U0OWNER" and links[other.pk] == "U0OTHER"
    site.refresh_from_db()
    assert webhook_url(site) == HOOK
    assert changed == [
        "webhook set",
        f"Slack user of {members['admin'].user.get_username()} set",
        f"Slack user of {members['staff'].user.get_username()} set",
    ]
    record = AuditRecord.objects.filter(site=site, kind="settings_change").latest("pk")
    body = json.loads(record.payload)["body"]
    assert body["actor"] == members["admin"].user.get_username()
    assert body["changed"] == ["webhook set"]
    assert [link["slack_user_id"] for link in body["slack_users"]] == ["U0ADMIN", "U0STAFF"]
    assert HOOK not in record.payload


def test_an_owner_changes_everything_and_no_secret_is_recorded_or_logged(
    site: Site,
    members: dict[str, Membership],
    second_admin: Membership,
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner = members["owner"]
    caplog.set_level(logging.DEBUG)
    changed = save_slack_settings(
        site=site,
        actor=owner.user,
        webhook_url=HOOK,
        signing_secret=SECRET,
        links={
            owner.pk: "U0OWNER",
            members["admin"].pk: "U0ADMIN",
            second_admin.pk: "U0OTHER",
            members["reviewer"].pk: "U0REVIEW",
        },
    )
    assert changed[:2] == ["webhook set", "signing secret set"] and len(changed) == 6
    site.refresh_from_db()
    assert webhook_url(site) == HOOK and site.slack_signing_secret
    assert SECRET.encode() not in bytes(site.slack_signing_secret)
    assert dict(
        Membership.objects.filter(site=site)
        .exclude(slack_user_id="")
        .values_list("pk", "slack_user_id")
    ) == {
        owner.pk: "U0OWNER",
        members["admin"].pk: "U0ADMIN",
        second_admin.pk: "U0OTHER",
        members["reviewer"].pk: "U0REVIEW",
    }
    # An owner unlinks an admin, stops posting and switches the buttons off.
    changed = save_slack_settings(
        site=site,
        actor=owner.user,
        clear_webhook=True,
        clear_secret=True,
        links={second_admin.pk: ""},
    )
    assert changed == [
        "webhook cleared",
        "signing secret cleared",
        f"Slack user of {second_admin.user.get_username()} cleared",
    ]
    site.refresh_from_db()
    assert not site.slack_webhook_sealed and not site.slack_signing_secret
    records = AuditRecord.objects.filter(site=site, kind="settings_change").order_by("pk")
    assert [json.loads(r.payload)["body"]["changed"] for r in records] == [
        ["webhook set", "signing secret set"],
        ["webhook cleared", "signing secret cleared"],
    ]
    for record in records:
        assert HOOK not in record.payload and SECRET not in record.payload
    assert HOOK not in caplog.text and SECRET not in caplog.text
    # Nothing to change: no record.
    assert save_slack_settings(site=site, actor=owner.user, links={owner.pk: "U0OWNER"}) == []
    assert records.count() == 2


@pytest.mark.parametrize(
    ("ask", "fields"),
    [
        ({"webhook_url": "https://evil.example/services/T000/B000/XXXX"}, ["webhook_url"]),
        ({"signing_secret": "not-hex"}, ["signing_secret"]),
        ({"bot_token": "xoxp-not-a-bot-token"}, ["bot_token"]),
        ({"links": {"ADMIN": "not an id"}}, ["slack_ADMIN"]),
        # Slack's U0ADMIN is the admin, not the owner: that link is refused too.
        ({"links": {"ADMIN": "U0ADMIN", "OWNER": "u0admin"}}, ["slack_OWNER", "members"]),
        # Linked to a member the save leaves as they are (and Slack's U0REVIEW is theirs).
        ({"links": {"ADMIN": "U0REVIEW"}}, ["slack_ADMIN", "members"]),
    ],
)
def test_bad_settings_are_refused_beside_their_field_and_change_nothing(
    site: Site, members: dict[str, Membership], ask: dict[str, Any], fields: list[str]
) -> None:
    Membership.objects.filter(pk=members["reviewer"].pk).update(slack_user_id="U0REVIEW")
    pk = {"ADMIN": members["admin"].pk, "OWNER": members["owner"].pk}
    if "links" in ask:
        ask = {"links": {pk[k]: v for k, v in ask["links"].items()}}
    fields = [
        f.replace("ADMIN", str(pk["ADMIN"])).replace("OWNER", str(pk["OWNER"])) for f in fields
    ]
    before = _state()
    with pytest.raises(SlackSettingsRefused) as refused:
        save_slack_settings(site=site, actor=members["owner"].user, **ask)
    assert refused.value.status == 422 and refused.value.code == "invalid_field"
    assert list(refused.value.field_errors) == fields and refused.value.field == fields[0]
    assert _state() == before


def test_another_sites_member_is_not_found(site: Site, members: dict[str, Membership]) -> None:
    before = _state()
    with pytest.raises(errors.NotFound):
        save_slack_settings(
            site=site, actor=members["owner"].user, links={members["outsider"].pk: "U0OUT"}
        )
    assert _state() == before


def test_a_secret_set_before_stays_until_an_owner_changes_it(
    site: Site, members: dict[str, Membership]
) -> None:
    """An admin's save without the secret leaves it alone (the page never sends it back)."""
    Site.objects.filter(pk=site.pk).update(slack_signing_secret=seal_signing_secret(site, SECRET))
    site.refresh_from_db()
    sealed = bytes(site.slack_signing_secret)
    save_slack_settings(site=site, actor=members["admin"].user, webhook_url=HOOK)
    site.refresh_from_db()
    assert bytes(site.slack_signing_secret) == sealed and webhook_url(site) == HOOK
