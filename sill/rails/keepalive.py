"""Kept-alive HTTP sessions for the rails: one per rail and credentials, in each process.

A rail object is built for every call (a refund attempt, a fact read), so a session made by
the rail object itself would open a new TCP (and TLS) connection every time. Rails ask this
module instead, naming the rail and what identifies the credentials (site, API address,
client id, secret): the same names give the same ``requests.Session`` and its connection
pool, for as long as the process lives (at most ``MAX_SESSIONS``, least recently used first
out). The names are kept only as a SHA-256 digest, so no secret sits in the table.

One session is shared by every thread of the process (the concurrent fact reads, gunicorn's
threads): its connection pool is thread-safe, and it holds no per-request state, because
cookies are refused (``requests``' one shared mutable part; no rail API Sill uses needs them)
and nothing sets session-wide headers or auth: every call passes its own.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from http.cookiejar import DefaultCookiePolicy

import requests
from requests.adapters import HTTPAdapter

MAX_SESSIONS = 256
# Connections kept per host: enough for the concurrent fact reads of a few requests at once.
POOL_SIZE = 10

_lock = threading.Lock()
_sessions: OrderedDict[str, requests.Session] = OrderedDict()
_pid = os.getpid()


def session_for(rail: str, *identity: str) -> requests.Session:
    """The process's kept-alive session for ``rail`` with these credentials."""
    global _pid
    digest = hashlib.sha256("\x00".join((rail, *identity)).encode("utf-8")).hexdigest()
    with _lock:
        if _pid != os.getpid():
            # A forked child (Celery prefork, gunicorn): its parent's pooled sockets are the
            # parent's; sharing one TCP stream between two processes would mix their answers.
            _sessions.clear()
            _pid = os.getpid()
        found = _sessions.get(digest)
        if found is not None:
            _sessions.move_to_end(digest)
            return found
        session = _new_session()
        _sessions[digest] = session
        if len(_sessions) > MAX_SESSIONS:
            # Not closed: another thread may still be using it; it goes when unreferenced.
            _sessions.popitem(last=False)
        return session


def forget_all() -> None:
    """Drop every session (tests: a new stub server per test, so no pooled connection to a
    closed port is tried first)."""
    with _lock:
        for session in _sessions.values():
            session.close()
        _sessions.clear()


def _new_session() -> requests.Session:
    session = requests.Session()
    session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
    # No retries here: each rail decides itself when a call may be sent again.
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE, max_retries=0)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session
