"""Mail backends whose server fails, Django's own backend interface raising what smtplib raises.

:class:`RefusingBackend` is an outage: the server refuses every message (an ``OSError``
subclass). Point ``EMAIL_BACKEND`` at ``PATH`` to make every ``send_mail`` fail;
``RefusingBackend.offered`` counts the messages it was given (a test resets it).

:class:`RefusingSomeBackend` is a server that is up but refuses some messages, delivering the
rest to ``django.core.mail.outbox`` as the test backend does. Point ``EMAIL_BACKEND`` at
``REFUSING_SOME`` and list what it refuses in settings:

- ``MAIL_REFUSED_ADDRESSES``: mailboxes it refuses. A message to none but those is refused
  at RCPT (``SMTPRecipientsRefused``, as smtplib raises when every recipient is refused); one
  that also has other recipients is refused whole at the end of DATA (``SMTPDataError`` 550),
  as a server does whose content filter applies one recipient's policy to the transaction.
- ``MAIL_REFUSED_SUBJECTS``: a message whose subject contains one of these is refused for
  its content (``SMTPDataError`` 554).
- ``MAIL_GREYLISTED_ADDRESSES``: mailboxes it refuses for now (``SMTPRecipientsRefused``
  with 450, greylisting: a server that wants the message sent again later).

Each refusal's text carries the addresses and the server's reply (``REPLY``), as a real
server's does, so a test can check that none of it reaches the log.

:class:`DownPartWayBackend` is a server that goes down part-way through a notice: it takes
the first ``MAIL_TAKEN_BEFORE_OUTAGE`` messages (to ``django.core.mail.outbox``), counted from
``DownPartWayBackend.taken`` (a test resets it), and drops the connection on every later one.
Point ``EMAIL_BACKEND`` at ``DOWN_PART_WAY``.
"""

from __future__ import annotations

import logging
import smtplib
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta

import time_machine
from django.conf import settings
from django.core import mail
from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend
from django.utils import timezone

from sill.accounts.models import Site
from sill.accounts.services import add_member

PATH = "tests.failing_mail.RefusingBackend"
REFUSING_SOME = "tests.failing_mail.RefusingSomeBackend"
DOWN_PART_WAY = "tests.failing_mail.DownPartWayBackend"
REPLY = "relay.roasters.example policy"


class RefusingBackend(BaseEmailBackend):
    offered = 0

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        if not email_messages:
            return 0
        RefusingBackend.offered += len(email_messages)
        raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")


class RefusingSomeBackend(LocmemBackend):
    def send_messages(self, messages: Sequence[EmailMessage]) -> int:
        refused_to = {a.lower() for a in getattr(settings, "MAIL_REFUSED_ADDRESSES", ())}
        refused_subjects = getattr(settings, "MAIL_REFUSED_SUBJECTS", ())
        greylisted = {a.lower() for a in getattr(settings, "MAIL_GREYLISTED_ADDRESSES", ())}
        sent = 0
        for message in messages:
            recipients = [r.lower() for r in message.recipients()]
            if later := [r for r in recipients if r in greylisted]:
                raise smtplib.SMTPRecipientsRefused(
                    {r: (450, f"4.2.0 <{r}>: Greylisted, try again later ({REPLY})".encode())
                     for r in later}
                )  # fmt: skip
            bad = [r for r in recipients if r in refused_to]
            if bad and len(bad) == len(recipients):
                raise smtplib.SMTPRecipientsRefused(
                    {r: (550, f"5.1.1 <{r}>: Recipient address rejected ({REPLY})".encode())
                     for r in bad}
                )  # fmt: skip
            if bad:
                raise smtplib.SMTPDataError(
                    550, f"5.7.1 Message refused for <{bad[0]}> ({REPLY})".encode()
                )
            if any(marker in message.subject for marker in refused_subjects):
                raise smtplib.SMTPDataError(
                    554,
                    f"5.7.1 Message to {', '.join(recipients)} rejected as spam ({REPLY})".encode(),
                )
            sent += super().send_messages([message])
        return sent


class DownPartWayBackend(LocmemBackend):
    taken = 0

    def send_messages(self, messages: Sequence[EmailMessage]) -> int:
        sent = 0
        for message in messages:
            if DownPartWayBackend.taken >= settings.MAIL_TAKEN_BEFORE_OUTAGE:
                raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")
            DownPartWayBackend.taken += 1
            sent += super().send_messages([message])
        return sent


# Both of the test site's deciders, each told in a message of their own.
DECIDERS_TOLD = [["admin@roasters.example"], ["owner@roasters.example"]]
# The test site's deciders with ADMIN2 (:func:`add_second_admin`), in the order they are sent
# to: a server down after two messages has told the admins and not the owner.
ADMIN2 = "admin2@roasters.example"
THREE_DECIDERS = [ADMIN2, "admin@roasters.example", "owner@roasters.example"]


def add_second_admin(site: Site) -> None:
    """A third decider on ``site`` (the ``members`` fixture has an owner and an admin)."""
    add_member(site=site, email=ADMIN2, role="admin")


def messages_to() -> Counter[str]:
    """How many messages each address was sent (``mail.outbox``)."""
    return Counter(address for message in mail.outbox for address in message.to)


def warnings_of(caplog, *loggers: str) -> list[str]:
    """What ``loggers`` logged, in order."""
    return [r.getMessage() for r in caplog.records if r.name in loggers]


def sweeps_at(sweep: Callable[[], object], *, caplog, logger: str) -> Callable[[float], list[str]]:
    """``sweep_at(minutes)``: run ``sweep`` that many minutes after now (the clock stopped
    there) and return the warnings ``logger`` logged during that run."""
    start = timezone.now()

    def sweep_at(minutes: float) -> list[str]:
        caplog.clear()
        with (
            time_machine.travel(start + timedelta(minutes=minutes), tick=False),
            caplog.at_level(logging.WARNING, logger=logger),
        ):
            sweep()
        return warnings_of(caplog, logger)

    return sweep_at


def assert_nothing_secret_logged(caplog) -> None:
    """No address and nothing of the server's reply reached the log."""
    assert "@" not in caplog.text and REPLY not in caplog.text
