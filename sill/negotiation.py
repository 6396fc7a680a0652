"""DRF's content negotiation, with a ``?format=`` Sill cannot answer refused as 406.

DRF answers ``?format=xml`` (any format no renderer has) with ``Http404``: on the API that was
``404 not_found`` "Request refused." for ``POST /api/v1/mandates?format=xml``, a path that
exists. Asking for a form Sill does not write is what ``406 not_acceptable`` says for an
``Accept`` header that leaves out JSON; the format parameter is answered the same way.

Its own module, not sill.api: DRF resolves this class while ``rest_framework.views`` is
still loading, and sill.api imports that module.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation


class StrictContentNegotiation(DefaultContentNegotiation):
    def filter_renderers(self, renderers: Any, format: Any) -> Any:
        matching = [renderer for renderer in renderers if renderer.format == format]
        if not matching:
            raise NotAcceptable(f"Sill answers JSON only, not format {format!r}.")
        return matching
