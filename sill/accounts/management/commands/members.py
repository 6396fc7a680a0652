from __future__ import annotations

import sys
from typing import Any

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sill.accounts import two_factor
from sill.accounts.management.tokens import revoke_tokens
from sill.accounts.models import Membership, MemberToken, Role, Site
from sill.accounts.services import (
    add_member_as_operator,
    issue_member_token,
    revoke_member_token,
)
from sill.errors import SillError


class Command(BaseCommand):
    help = (
        "Manage site members: `members add --site S --email E --role R [--can-refund]`, "
        "`members token --site S --email E`, "
        "`members revoke-token --site S --email E [--prefix P]`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="add a member (password from --password or stdin)")
        add.add_argument("--site", required=True)
        add.add_argument("--email", required=True)
        add.add_argument("--role", required=True, choices=Role.values)
        add.add_argument("--can-refund", action="store_true")
        add.add_argument("--password")
        token = sub.add_parser("token", help="issue an API bearer token for a member (shown once)")
        token.add_argument("--site", required=True)
        token.add_argument("--email", required=True)
        revoke = sub.add_parser(
            "revoke-token",
            help="revoke a member's API tokens: the one whose prefix is --prefix, else all of them",
        )
        revoke.add_argument("--site", required=True)
        revoke.add_argument("--email", required=True)
        revoke.add_argument(
            "--prefix", help="the token's first 12 characters (sill_mt_…), as the page shows it"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        site = Site.objects.filter(pk=opts["site"]).first()
        if site is None:
            raise CommandError(f"no site {opts['site']}")
        if opts["action"] in ("token", "revoke-token"):
            membership = Membership.objects.filter(
                site=site, user__username=opts["email"].strip().lower()
            ).first()
            if membership is None:
                raise CommandError(f"{opts['email']} is not a member of {site.id}")
            if opts["action"] == "revoke-token":
                self._revoke(membership, opts["prefix"])
                return
            # Signed member_change record, actor: the operator.
            self.stdout.write(
                issue_member_token(
                    membership=membership,
                    actor=None,
                    system=True,
                    second_factor=two_factor.OPERATOR,
                )
            )
            return
        password = opts["password"]
        if password is None and not sys.stdin.isatty():
            password = sys.stdin.readline().rstrip("\n") or None
        if password:
            # The invitation and reset forms (SetPasswordForm) apply AUTH_PASSWORD_VALIDATORS;
            # so does this, before anything is written (the password is never echoed).
            try:
                validate_password(password)
            except ValidationError as exc:
                raise CommandError("password refused: " + " ".join(exc.messages)) from None
        try:
            # Signed member_change record, actor: the operator (sill.accounts.admin_audit).
            membership = add_member_as_operator(
                site=site,
                email=opts["email"],
                role=opts["role"],
                can_refund=opts["can_refund"],
                password=password,
            )
        except SillError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"{membership.user.username} is {membership.role} on {site.id}")

    def _revoke(self, membership: Membership, prefix: str | None) -> None:
        """Revoke the member's token whose prefix is ``prefix`` (every one of theirs when
        None), each with its signed member_change record (actor: the operator)."""
        revoke_tokens(
            MemberToken.objects.filter(membership=membership),
            prefix=prefix,
            whose=f"{membership.user.get_username()} on {membership.site_id}",
            revoke=lambda token: revoke_member_token(token=token, actor=None, system=True),
            write=self.stdout.write,
        )
