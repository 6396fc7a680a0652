"""Sill's session engine (``SESSION_ENGINE``): django-qsessions' database store, quieter.

django-qsessions keeps each session in a row with its user, user agent, address and creation
time, so "every session of this user" is one indexed query and ending them is one DELETE
(``sill.accounts.sessions``). Its store saves the session whenever the address or user agent
of a request differs from the stored ones; this one does not: the last-seen stamp of
:class:`sill.accounts.sessions.SessionTimeoutMiddleware` saves the session at most once a
minute, and every save stores the current address and user agent. So a page costs no session
write beyond that stamp, and a phone hopping between networks is not a write per request.
"""

from __future__ import annotations

from typing import Any

from django.contrib.sessions.backends.db import SessionStore as DjangoDBStore
from qsessions.backends.db import SessionStore as QSessionStore


class SessionStore(QSessionStore):
    def load(self) -> dict[str, Any]:
        # Django's load, without qsessions' "address or agent changed: mark modified".
        data: dict[str, Any] = DjangoDBStore.load(self)
        return data
