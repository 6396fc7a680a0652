"""Mount the Django admin for one test, as ``SILL_ADMIN=1`` does at start-up (sill/urls.py)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.test import override_settings
from django.urls import clear_url_caches

import sill.urls


def _reload_urls() -> None:
    importlib.reload(sill.urls)
    clear_url_caches()


@contextmanager
def admin_mounted() -> Iterator[None]:
    """The URL conf as it is built with ``SILL_ADMIN=1``; the default one again afterwards."""
    try:
        with override_settings(SILL_ADMIN=True):
            _reload_urls()
            yield
    finally:
        _reload_urls()  # settings restored first: the default URL conf, without the admin
