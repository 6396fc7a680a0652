"""DRF's content negotiation, with what DRF leaves out of the ``Accept`` header.

A ``?format=`` Sill cannot answer is refused as 406: DRF answers ``?format=xml`` (any format
no renderer has) with ``Http404``, which on the API was ``404 not_found`` "Request refused."
for ``POST /api/v1/mandates?format=xml``, a path that exists. Asking for a form Sill does not
write is what ``406 not_acceptable`` says for an ``Accept`` header that leaves out JSON; the
format parameter is answered the same way.

A media range weighted ``q=0`` is refused too (RFC 9110 section 12.4.2: "not acceptable"):
DRF orders the ranges by how specific they are and ignores their weights, so
``Accept: application/json;q=0`` was answered with JSON. A renderer's weight is that of the
most specific range that matches it (section 12.5.1): ``application/json;q=0, */*`` refuses
JSON, ``*/*;q=0, application/json`` takes it.

Its own module, not sill.api: DRF resolves this class while ``rest_framework.views`` is
still loading, and sill.api imports that module.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.utils.mediatypes import _MediaType

# RFC 9110 section 12.4.2's qvalue; a weight that is not one is no weight (1), as Django reads it.
_QVALUE = re.compile(r"(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)\Z")


def _weight(media_range: _MediaType) -> float:
    q = str(media_range.params.get("q", "1")).strip()
    return float(q) if _QVALUE.match(q) else 1.0


def _accepted(renderer_type: _MediaType, ranges: list[_MediaType]) -> bool:
    """Whether ``ranges`` (the ``Accept`` header's) give ``renderer_type`` a weight above 0:
    the most specific matching ranges decide (a type's own parameters count as no more
    specific than the type); none matching is not accepted."""
    matching = [r for r in ranges if renderer_type.match(r)]
    if not matching:
        return False
    most = max(min(r.precedence, 2) for r in matching)
    return max(_weight(r) for r in matching if min(r.precedence, 2) == most) > 0


class StrictContentNegotiation(DefaultContentNegotiation):
    def filter_renderers(self, renderers: Any, format: Any) -> Any:
        matching = [renderer for renderer in renderers if renderer.format == format]
        if not matching:
            raise NotAcceptable(f"Sill answers JSON only, not format {format!r}.")
        return matching

    def select_renderer(
        self, request: Any, renderers: Any, format_suffix: Any = None
    ) -> tuple[Any, str]:
        ranges = [_MediaType(token) for token in self.get_accept_list(request)]
        acceptable = [r for r in renderers if _accepted(_MediaType(r.media_type), ranges)]
        if not acceptable:
            raise NotAcceptable(available_renderers=renderers)
        renderer, media_type = super().select_renderer(request, acceptable, format_suffix)
        return renderer, media_type
