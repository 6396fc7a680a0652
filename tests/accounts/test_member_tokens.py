"""Revoking a member's API token (``manage.py members token``): the service, the command and
Settings → Members. Before these there was no way to revoke one but editing the database."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from audit.activity import summary_of
from audit.models import AuditRecord
from sill import errors
from sill.accounts import two_factor
from sill.accounts.models import Membership, MemberToken
from sill.accounts.services import issue_member_token, remove_member, revoke_member_token

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def _token(membership: Membership) -> tuple[str, MemberToken]:
    text = issue_member_token(
        membership=membership, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    return text, MemberToken.objects.get(prefix=text[:12])


def _api_status(token: str) -> int:
    """The staff API's answer to ``token``: 401 refused, 404 (no such order) let through."""
    return (
        Client()
        .post(
            "/api/order/ord_nope/refund",
            data="{}",
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}"},
        )
        .status_code
    )


def _bodies(site, action: str) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="member_change").order_by("seq")
    return [b for b in (json.loads(r.payload)["body"] for r in records) if b["action"] == action]


# --- issuing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "target"), [("owner", "owner"), ("owner", "admin"), ("admin", "staff")]
)
def test_an_owner_or_admin_issues_a_token_that_acts_as_its_member(site, members, persona, target):
    text = issue_member_token(
        membership=members[target], actor=members[persona].user, second_factor=two_factor.OPERATOR
    )
    assert text.startswith("sill_mt_") and _api_status(text) != 401
    [body] = _bodies(site, "issue_token")
    assert body["member"] == f"{target}@roasters.example"
    assert body["actor"] == f"{persona}@roasters.example" and body["token_prefix"] == text[:12]


@pytest.mark.parametrize(
    ("persona", "target"),
    [
        # A token acts as its member: an admin's for an owner would be an owner's powers.
        ("admin", "owner"),
        ("staff", "staff"),  # their own: Settings is the owners' and admins'
        ("reviewer", "reviewer"),
        ("outsider", "staff"),
    ],
)
def test_issuing_is_refused_to_who_may_not_and_writes_nothing(site, members, persona, target):
    records = AuditRecord.objects.count()
    with pytest.raises(errors.PermissionDenied):
        issue_member_token(
            membership=members[target],
            actor=members[persona].user,
            second_factor=two_factor.OPERATOR,
        )
    assert not MemberToken.objects.exists()
    assert AuditRecord.objects.count() == records


# --- the service -------------------------------------------------------------------------------


def test_it_revokes_a_token_records_it_and_the_api_refuses_it(site, members):
    text, token = _token(members["staff"])
    other_text, _ = _token(members["staff"])
    assert _api_status(text) == 404
    revoked = revoke_member_token(token=token, actor=members["owner"].user)
    assert revoked.revoked_at is not None
    assert _api_status(text) == 401
    assert _api_status(other_text) == 404  # only that token
    [body] = _bodies(site, "revoke_token")
    assert body == {
        "action": "revoke_token",
        "member": "staff@roasters.example",
        "token_prefix": text[:12],
        "actor": "owner@roasters.example",
        "actor_name": "owner@roasters.example",
    }
    assert text not in "".join(AuditRecord.objects.values_list("payload", flat=True))
    assert summary_of("member_change", body) == (
        f"staff@roasters.example: API token {text[:12]}… revoked"
    )


def test_revoking_again_answers_the_same_and_writes_nothing(site, members):
    _, token = _token(members["staff"])
    first = revoke_member_token(token=token, actor=members["admin"].user)
    records = AuditRecord.objects.count()
    again = revoke_member_token(token=token, actor=members["owner"].user)
    assert again.revoked_at == first.revoked_at
    assert AuditRecord.objects.count() == records


@pytest.mark.parametrize("persona", ["staff", "reviewer"])
def test_a_member_revokes_their_own_token(site, members, persona):
    text, token = _token(members[persona])
    revoke_member_token(token=token, actor=members[persona].user)
    assert _api_status(text) == 401
    [body] = _bodies(site, "revoke_token")
    assert body["actor"] == f"{persona}@roasters.example"


@pytest.mark.parametrize(
    ("persona", "target"),
    [
        ("staff", "reviewer"),
        ("reviewer", "staff"),
        ("outsider", "staff"),
        ("admin", "owner"),  # as an admin changes or removes no owner
    ],
)
def test_it_refuses_who_may_not_and_writes_nothing(site, members, persona, target):
    text, token = _token(members[target])
    records = AuditRecord.objects.count()
    with pytest.raises(errors.PermissionDenied):
        revoke_member_token(token=token, actor=members[persona].user)
    token.refresh_from_db()
    assert token.revoked_at is None and _api_status(text) != 401
    assert AuditRecord.objects.count() == records


def test_an_owner_revokes_an_owners_and_an_admins_token(site, members):
    from sill.accounts.services import add_member

    second = add_member(site=site, email="second@roasters.example", role="owner")
    for membership in (second, members["admin"]):
        _, token = _token(membership)
        assert revoke_member_token(token=token, actor=members["owner"].user).revoked_at


def test_the_operator_revokes_with_system_and_no_actor(site, members):
    _, token = _token(members["staff"])
    with pytest.raises(errors.PermissionDenied):
        revoke_member_token(token=token, actor=None)
    with pytest.raises(ValueError):
        revoke_member_token(token=token, actor=members["owner"].user, system=True)
    assert revoke_member_token(token=token, actor=None, system=True).revoked_at
    [body] = _bodies(site, "revoke_token")
    assert body["actor"] is None


def test_a_removed_members_tokens_are_gone_with_them(site, members):
    text, token = _token(members["staff"])
    remove_member(membership=members["staff"], actor=members["owner"])
    assert _api_status(text) == 401
    with pytest.raises(errors.SillError) as gone:
        revoke_member_token(token=token, actor=members["owner"].user)
    assert gone.value.code == "not_found"


# --- manage.py members revoke-token ------------------------------------------------------------


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("members", "revoke-token", *args, stdout=out)
    return out.getvalue()


def test_the_command_revokes_every_token_of_the_member(site, members):
    first, _ = _token(members["staff"])
    second, _ = _token(members["staff"])
    theirs, _ = _token(members["reviewer"])
    out = _run("--site", site.id, "--email", "Staff@Roasters.example")
    assert f"{first[:12]}… revoked" in out and f"{second[:12]}… revoked" in out
    assert (_api_status(first), _api_status(second)) == (401, 401)
    assert _api_status(theirs) == 403  # the reviewer's still authenticates (and may not refund)
    assert [b["actor"] for b in _bodies(site, "revoke_token")] == [None, None]
    again = _run("--site", site.id, "--email", "staff@roasters.example")
    assert "revoked already" in again
    assert len(_bodies(site, "revoke_token")) == 2


def test_the_command_revokes_one_token_by_its_prefix(site, members):
    leaked, _ = _token(members["staff"])
    kept, _ = _token(members["staff"])
    out = _run("--site", site.id, "--email", "staff@roasters.example", "--prefix", leaked[:12])
    assert f"{leaked[:12]}… revoked" in out and kept[:12] not in out
    assert (_api_status(leaked), _api_status(kept)) == (401, 404)
    # The prefix as the page and the log show it, with its ellipsis, names the same token.
    out = _run("--site", site.id, "--email", "staff@roasters.example", "--prefix", kept[:12] + "…")
    assert _api_status(kept) == 401


def test_the_command_refuses_what_it_cannot_find(site, members):
    _token(members["staff"])
    _, theirs = _token(members["outsider"])
    for args in (
        ("--site", "nope", "--email", "staff@roasters.example"),
        ("--site", site.id, "--email", "nobody@roasters.example"),
        # Another member's token (here another site's) is not this member's.
        ("--site", site.id, "--email", "staff@roasters.example", "--prefix", theirs.prefix),
        ("--site", site.id, "--email", "admin@roasters.example"),  # no token at all
    ):
        with pytest.raises(CommandError):
            _run(*args)
    assert not MemberToken.objects.filter(revoked_at__isnull=False).exists()
    assert _bodies(site, "revoke_token") == []


# --- Settings → Members ------------------------------------------------------------------------


def _revoke_url(token: MemberToken) -> str:
    return f"/settings/members/tokens/{token.pk}/revoke/"


def test_the_members_page_lists_each_members_tokens_and_revokes_one(client_for, site, members):
    leaked, token = _token(members["staff"])
    old, old_token = _token(members["staff"])
    revoke_member_token(token=old_token, actor=None, system=True)
    owner = client_for("owner")
    page = owner.get("/settings/members/").content.decode()
    row = page[page.index('id="member-{}"'.format(members["staff"].pk)) :]
    row = row[: row.index("</tr>")]
    assert f"<code>{leaked[:12]}…</code>" in row and f"<code>{old[:12]}…</code>" in row
    assert row.count(">Revoke</button>") == 1 and row.count(">Revoked</span>") == 1
    assert f'action="{_revoke_url(token)}"' in row and _revoke_url(old_token) not in row
    assert "hx-post" in row and "data-confirm=" in row and leaked not in page

    response = owner.post(_revoke_url(token))
    assert response.status_code == 303 and response["Location"] == "/settings/members/"
    assert _api_status(leaked) == 401
    htmx = owner.post(_revoke_url(token), **HTMX)
    assert htmx.status_code == 200
    assert "was already revoked" in htmx.content.decode()
    assert len(_bodies(site, "revoke_token")) == 2  # the operator's, then the owner's


def test_an_admin_sees_no_revoke_for_an_owners_token_and_is_refused(client_for, site, members):
    owners, owner_token = _token(members["owner"])
    _, staff_token = _token(members["staff"])
    admin = client_for("admin")
    page = admin.get("/settings/members/").content.decode()
    assert _revoke_url(staff_token) in page and _revoke_url(owner_token) not in page
    refused = admin.post(_revoke_url(owner_token), **HTMX)
    assert refused.status_code == 422
    assert "Only an owner can revoke an owner" in refused.content.decode()
    assert _api_status(owners) != 401 and _bodies(site, "revoke_token") == []


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("reviewer", 403), ("staff", 403), ("anonymous", 302), ("outsider", 404)],
)
def test_revoking_on_the_page_is_for_this_sites_owners_and_admins(
    client_for, members, persona, expected
):
    # The staff member's own token too: the page is the owners' and admins' (Settings).
    text, token = _token(members["staff"])
    response = client_for(persona).post(_revoke_url(token))
    assert response.status_code == expected
    token.refresh_from_db()
    assert token.revoked_at is None and _api_status(text) != 401


def test_revoking_on_the_page_needs_a_post_with_csrf(client_for, members):
    _, token = _token(members["staff"])
    assert client_for("owner").get(_revoke_url(token)).status_code == 405
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    assert client.post(_revoke_url(token)).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None
