"""Settings (owners and admins): the index page and Settings → Members.

Views parse input, check access, call one service and render. Member actions answer htmx
with the ``#members`` partial (200 on success, 422 with the refusal) and plain form posts
with a 303 back to the page (success) or the whole page with 422 (refusal).

Nobody is added directly from this page: the form sends an invitation by email
(:mod:`sill.accounts.invites`), listed as pending until it is accepted, with Resend and
Revoke. No page prints a shell command: an address is data, never part of a command line.

Each member's API tokens (``manage.py members token``) are listed under them by prefix, with
Revoke where the acting user may revoke them (:func:`services.revoke_member_token`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from sill.accounts import invites, services, two_factor
from sill.accounts.access import Cap, site_view
from sill.accounts.member_forms import ROLE_HELP, AddMemberForm, ChangeMemberForm
from sill.accounts.models import MemberInvite, Membership, MemberToken, Role, Site
from sill.errors import SillError
from sill.http import SiteRequest

# (title, url name, what it is for). Pages that are not built yet are left out.
SETTINGS_PAGES: tuple[tuple[str, str, str], ...] = (
    (
        "Refund reasons",
        "refunds:reasons",
        "The reasons staff and agents pick from when they refund.",
    ),
    (
        "Members",
        "settings:members",
        "Who can sign in to this site, and what each role may do.",
    ),
    (
        "Agents & keys",
        "settings:agents",
        "AI agents that sign refund mandates, their public keys and tokens.",
    ),
    ("Rails", "settings:rails", "The payment providers refunds go back through."),
    (
        "Slack",
        "refunds:slack-settings",
        "Held refunds in a Slack channel, approved or rejected from there.",
    ),
    (
        "Your account",
        "settings:account",
        "Your password, and the devices where you are signed in.",
    ),
)


def _settings_links() -> list[dict[str, str]]:
    links = []
    for title, name, blurb in SETTINGS_PAGES:
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        links.append({"title": title, "url": url, "blurb": blurb, "name": name})
    return links


@require_safe
@site_view(Cap.MANAGE_SETTINGS)
def settings_index(request: SiteRequest) -> HttpResponse:
    site: Site = request.site_ctx.site
    return render(
        request,
        "accounts/settings_index.html",
        {"site": site, "links": _settings_links()},
    )


# --- Settings → Members ----------------------------------------------------------------------


@dataclass(frozen=True)
class MemberRow:
    membership: Membership
    is_you: bool
    # Why the acting user may not change this member ("" when they may).
    locked_because: str
    roles: list[tuple[str, str]]
    # The account has no password yet (added by an operator without one): they set one with
    # "Forgot password?" on the login page.
    needs_password: bool
    # Their API tokens, newest first, revoked ones too; and whether the acting user may revoke
    # them (their own, or a member whose role they manage: no admin revokes an owner's).
    tokens: list[MemberToken]
    may_revoke_tokens: bool

    @property
    def email(self) -> str:
        return self.membership.user.get_username()


@dataclass(frozen=True)
class InviteRow:
    invite: MemberInvite
    expired: bool
    # Why the acting user may not resend or revoke it ("" when they may).
    locked_because: str


def _roles_for(actor: Membership) -> list[tuple[str, str]]:
    """The roles ``actor`` may give (the services refuse the rest anyway)."""
    return [
        (value, label)
        for value, label in Role.choices
        if value != Role.OWNER or actor.role == Role.OWNER
    ]


def _member_rows(site: Site, actor: Membership) -> list[MemberRow]:
    rank = {role: i for i, role in enumerate(Role.values)}
    memberships = sorted(
        Membership.objects.filter(site=site).select_related("user"),
        key=lambda m: (rank.get(m.role, len(rank)), m.user.get_username()),
    )
    owners = sum(1 for m in memberships if m.role == Role.OWNER)
    actor_roles = _roles_for(actor)
    tokens: dict[int, list[MemberToken]] = {}
    for token in MemberToken.objects.filter(membership__site=site).order_by("-created_at", "-pk"):
        tokens.setdefault(token.membership_id, []).append(token)
    rows = []
    for m in memberships:
        if m.pk == actor.pk:
            locked = "This is you: another owner or admin changes your role."
        elif m.role == Role.OWNER and actor.role != Role.OWNER:
            locked = "Only an owner can change or remove an owner."
        elif m.role == Role.OWNER and owners <= 1:
            locked = "The last owner can't be demoted or removed."
        else:
            locked = ""
        rows.append(
            MemberRow(
                membership=m,
                is_you=m.pk == actor.pk,
                locked_because=locked,
                roles=actor_roles,
                needs_password=not m.user.has_usable_password(),
                tokens=tokens.get(m.pk, []),
                may_revoke_tokens=m.pk == actor.pk or services.may_grant(actor.role, m.role),
            )
        )
    return rows


def _invite_rows(site: Site, actor: Membership) -> list[InviteRow]:
    now = timezone.now()
    return [
        InviteRow(
            invite=invite,
            expired=invite.expires_at <= now,
            locked_because=(
                "Only an owner can resend or revoke an owner's invite."
                if invite.role == Role.OWNER and actor.role != Role.OWNER
                else ""
            ),
        )
        for invite in invites.pending_invites(site)
    ]


def _members_page(
    request: SiteRequest,
    *,
    add_form: AddMemberForm | None = None,
    error: str = "",
    notice: str = "",
    status: int = 200,
) -> HttpResponse:
    ctx = request.site_ctx
    template = "accounts/members.html#members" if request.htmx else "accounts/members.html"
    return render(
        request,
        template,
        {
            "site": ctx.site,
            "rows": _member_rows(ctx.site, ctx.membership),
            "invites": _invite_rows(ctx.site, ctx.membership),
            "invite_hours": settings.SILL_INVITE_HOURS,
            "roles": _roles_for(ctx.membership),
            "add_form": add_form or AddMemberForm(initial={"role": Role.STAFF}),
            "role_help": [(Role(value).label, text) for value, text in ROLE_HELP.items()],
            "error": error,
            "notice": notice,
        },
        status=status,
    )


def _done(request: SiteRequest, message: str) -> HttpResponse:
    if request.htmx:
        return _members_page(request, notice=message)
    messages.success(request, message)
    return HttpResponseRedirect(reverse("settings:members"), status=303)


def _membership_for(request: SiteRequest, membership_id: int) -> Membership:
    # Scoped to the current site: another site's membership id is a 404, never a 403.
    site = request.site_ctx.site
    return get_object_or_404(
        Membership.objects.select_related("user", "site"), pk=membership_id, site=site
    )


def _form_error(form: ChangeMemberForm) -> str:
    return " ".join(str(message) for errors in form.errors.values() for message in errors)


@require_safe
@site_view(Cap.MANAGE_SETTINGS)
def members(request: SiteRequest) -> HttpResponse:
    return _members_page(request)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def member_add(request: SiteRequest) -> HttpResponse:
    """Invite a member: the form's address gets an emailed link (nobody is added yet)."""
    ctx = request.site_ctx
    form = AddMemberForm(request.POST)
    if not form.is_valid():
        return _members_page(request, add_form=form, status=422)
    try:
        invite = invites.create_invite(
            site=ctx.site,
            actor=ctx.membership,
            email=form.cleaned_data["email"],
            role=form.cleaned_data["role"],
            can_refund=form.cleaned_data["can_refund"],
            # Someone new who may refund or manage (an owner, an admin, staff who can refund)
            # needs a fresh code: the service says which (site_view answers its 403 page).
            second_factor=two_factor.freshness(request, ctx.membership),
        )
    except SillError as error:
        form.add_refusal(error)
        return _members_page(request, add_form=form, status=422)
    except OSError:
        # SMTP refused or unreachable: the transaction rolled back, so nothing was saved.
        form.add_error(None, _EMAIL_FAILED)
        return _members_page(request, add_form=form, status=422)
    role = Role(invite.role).label.lower()
    return _done(
        request,
        f"Invitation sent to {invite.email} as {role}. The link works for "
        f"{settings.SILL_INVITE_HOURS} hours.",
    )


_EMAIL_FAILED = "Sill could not send the email, so nothing was saved. Try again in a moment."


def _invite_for(request: SiteRequest, invite_id: int) -> MemberInvite:
    # Scoped to the current site: another site's invite id is a 404.
    return get_object_or_404(
        MemberInvite.objects.select_related("site"), pk=invite_id, site=request.site_ctx.site
    )


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def invite_resend(request: SiteRequest, invite_id: int) -> HttpResponse:
    invite = _invite_for(request, invite_id)
    try:
        # A new link to a role that refunds or manages: as sensitive as the first invitation.
        invites.resend_invite(
            invite=invite,
            actor=request.site_ctx.membership,
            second_factor=two_factor.freshness(request, request.site_ctx.membership),
        )
    except SillError as error:
        return _members_page(request, error=error.message, status=422)
    except OSError:
        return _members_page(request, error=_EMAIL_FAILED, status=422)
    return _done(
        request, f"A new link was sent to {invite.email}; the previous one no longer works."
    )


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def invite_revoke(request: SiteRequest, invite_id: int) -> HttpResponse:
    invite = _invite_for(request, invite_id)
    try:
        invites.revoke_invite(invite=invite, actor=request.site_ctx.membership)
    except SillError as error:
        return _members_page(request, error=error.message, status=422)
    return _done(
        request, f"The invitation for {invite.email} was revoked; its link no longer works."
    )


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def member_change(request: SiteRequest, membership_id: int) -> HttpResponse:
    ctx = request.site_ctx
    membership = _membership_for(request, membership_id)
    form = ChangeMemberForm(request.POST)
    if not form.is_valid():
        return _members_page(request, error=_form_error(form), status=422)
    try:
        services.change_member_role(
            membership=membership,
            actor=ctx.membership,
            role=form.cleaned_data["role"],
            can_refund=form.cleaned_data["can_refund"],
            # A promotion (to admin or owner, or staff given refunds) needs a fresh code.
            second_factor=two_factor.freshness(request, ctx.membership),
        )
    except SillError as error:
        return _members_page(request, error=error.message, status=422)
    what = membership.get_role_display().lower()
    if membership.role == Role.STAFF:
        what += " who can refund" if membership.can_refund else " who can't refund"
    return _done(request, f"{membership.user.get_username()} is now {what}.")


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def member_remove(request: SiteRequest, membership_id: int) -> HttpResponse:
    ctx = request.site_ctx
    membership = _membership_for(request, membership_id)
    email = membership.user.get_username()
    try:
        services.remove_member(membership=membership, actor=ctx.membership)
    except SillError as error:
        return _members_page(request, error=error.message, status=422)
    return _done(request, f"Removed {email} from {ctx.site.name}.")


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def member_token_revoke(request: SiteRequest, token_id: int) -> HttpResponse:
    # Scoped to the current site: another site's token id is a 404.
    token = get_object_or_404(
        MemberToken.objects.select_related("membership__user"),
        pk=token_id,
        membership__site=request.site_ctx.site,
    )
    already = token.revoked_at is not None
    try:
        services.revoke_member_token(token=token, actor=request.user)
    except SillError as error:
        return _members_page(request, error=error.message, status=422)
    whose = f"{token.membership.user.get_username()}'s API token {token.prefix}…"
    if already:
        return _done(request, f"{whose} was already revoked.")
    return _done(request, f"{whose} was revoked; it no longer works.")


urlpatterns: list[Any] = [
    path("settings/", settings_index, name="index"),
    path("settings/members/", members, name="members"),
    path("settings/members/add/", member_add, name="member-add"),
    path("settings/members/<int:membership_id>/change/", member_change, name="member-change"),
    path("settings/members/<int:membership_id>/remove/", member_remove, name="member-remove"),
    path(
        "settings/members/tokens/<int:token_id>/revoke/",
        member_token_revoke,
        name="member-token-revoke",
    ),
    path("settings/members/invites/<int:invite_id>/resend/", invite_resend, name="invite-resend"),
    path("settings/members/invites/<int:invite_id>/revoke/", invite_revoke, name="invite-revoke"),
]
