"""``manage.py two_factor``: the operator's side of two-factor authentication.

- ``two_factor require --site S on|off``: whether the site's owners and admins need a second
  factor (``Site.require_two_factor``; new sites get ``SILL_REQUIRE_TWO_FACTOR``; a switch is
  a signed ``settings_change`` record, actor the operator);
- ``two_factor reset --email E``: remove a user's authenticator and recovery codes when they
  lost both (a signed ``member_change`` record, ``two_factor_removed``, actor the operator, on
  every site of the user, every site for a superuser; nothing when they had none).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sill.accounts import two_factor


class Command(BaseCommand):
    help = "Two-factor authentication: `require --site S on|off`, `reset --email E`."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        require = sub.add_parser("require", help="require two factors of owners and admins")
        require.add_argument("--site", required=True)
        require.add_argument("state", choices=["on", "off"])
        reset = sub.add_parser("reset", help="remove a user's authenticator and recovery codes")
        reset.add_argument("--email", required=True)

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["action"] == "require":
            changed = two_factor.set_required(site_id=opts["site"], required=opts["state"] == "on")
            if changed is None:
                raise CommandError(f"no site {opts['site']}")
            self.stdout.write(f"Two-factor authentication is {opts['state']} for {opts['site']}.")
            return
        email = opts["email"].strip().lower()
        user = get_user_model().objects.filter(username=email).first()
        if user is None:
            raise CommandError(f"no user {email}")
        if not two_factor.remove(user, actor=None):
            self.stdout.write(f"{email} had no authenticator or recovery codes: nothing removed.")
            return
        self.stdout.write(f"{email} has no authenticator now: they log in with the password.")
