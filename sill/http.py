"""The request Sill's views receive: Django's, with the site context and htmx details typed.

:class:`SiteRequest` is defined beside ``site_view`` in :mod:`sill.accounts.access` (the
decorator that sets ``site_ctx`` needs it, and that module must not import this one back);
it is re-exported here so views write ``from sill.http import SiteRequest``.
"""

from __future__ import annotations

from sill.accounts.access import SiteRequest

__all__ = ["SiteRequest"]
