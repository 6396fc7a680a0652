"""Keeping secrets that travel in a URL's path out of the log.

Django writes the path of every refused or failed request to the log (``django.request``:
``Unprocessable Entity: /invite/<token>/``; ``django.security.csrf`` likewise). An invitation's
link carries its token in the path (sill/accounts/invites.py), and while it is pending whoever
holds it may accept it: for an address without a password, choose that password and join with
the invitation's role, an owner's included. A refused accept (a weak password, someone signed
in as another address) left a usable link in the log for anyone who reads it. A password reset
link (``/password/reset/<uid>/<token>/``, sill/accounts/views_password.py) is the same kind of
secret until it is used or expires: whoever holds it sets the account's password.
"""

from __future__ import annotations

import logging
import re
from typing import Any

# ``/invite/<token>/`` and ``/password/reset/<uidb64>/<token>/`` as sill.accounts.urls routes
# them; a token runs to the next slash. ``set-password`` is what Django puts in the token's
# place once it has moved the token into the session: no secret, and kept readable.
_TOKENS = re.compile(r"(/invite/|/password/reset/[^/\s?#]+/)(?!set-password/)[^/\s?#]+")
REDACTED = r"\1<token>"


def redact(text: str) -> str:
    """``text`` with every invitation and password reset token replaced by ``<token>``."""
    return _TOKENS.sub(REDACTED, text)


def _redacted(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactPathTokens(logging.Filter):
    """Rewrites a record's message and its string arguments; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = _redacted(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: _redacted(arg) for key, arg in record.args.items()}
        return True
