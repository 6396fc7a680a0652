"""``manage.py changepassword``: Django's, with the new password signed.

Django's command sets the password and saves the account, recording nothing: yet a password
set by an operator decides who signs in as that member, as one set in the Django admin or by
``members add`` does. Once Django's command has saved it (in autocommit, after asking for the
password twice: no transaction is held open while the operator types), a ``member_change``
``password_set`` record, actor the operator and ``via: "changepassword"``, goes into the log of
every site of the account (every site, for a superuser). The other ways of setting a password
record their own change and never run this command, so nothing is recorded twice.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.management.commands import changepassword
from django.db import transaction

from sill.accounts.admin_audit import record_account_change

VIA = "changepassword"


class Command(changepassword.Command):
    def handle(self, *args: Any, **options: Any) -> str | None:
        done = super().handle(*args, **options)  # raises when nothing was changed
        user_model = get_user_model()
        username = options["username"] or getpass.getuser()  # as Django's command finds it
        user = user_model._default_manager.using(options["database"]).get(
            **{user_model.USERNAME_FIELD: username}
        )
        with transaction.atomic(using=options["database"]):
            record_account_change(user, "password_set", actor=None, via=VIA)
        return done
