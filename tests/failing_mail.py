"""A mail backend whose server refuses every message, as an SMTP outage does: Django's own
backend interface, raising the ``OSError`` subclass smtplib raises. Point ``EMAIL_BACKEND`` at
:class:`RefusingBackend` to make every ``send_mail`` fail."""

from __future__ import annotations

import smtplib
from collections.abc import Sequence

from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend

PATH = "tests.failing_mail.RefusingBackend"


class RefusingBackend(BaseEmailBackend):
    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        if not email_messages:
            return 0
        raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")
