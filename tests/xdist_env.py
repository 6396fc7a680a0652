"""Each pytest-xdist worker (``make test`` runs the suite in two) gets a Redis database of its own.

Loaded by pyproject's ``addopts`` (``-p tests.xdist_env``) before pytest-django reads the
settings, so ``REDIS_URL`` is changed before anything reads it. The tests empty the cache
before every test (tests/conftest.py) and purge the broker before starting a real worker
(tests/worker.py): on one shared database, one worker's test would empty the other's cache and
queues in the middle of a test. Worker ``gwN`` uses database ``base + N`` of the same server.
PostgreSQL needs nothing: pytest-django gives each worker a test database of its own.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # Redis' default `databases`


def own_database(url: str, worker: str) -> str:
    """``url`` (``redis://host:port/<base>``) with database ``base + N`` for worker ``gwN``."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    number = (base + int(worker.removeprefix("gw"))) % REDIS_DATABASES
    return urlunsplit(parts._replace(path=f"/{number}"))


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = own_database(os.environ["REDIS_URL"], _worker)
