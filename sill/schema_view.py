"""``/api/schema/``: drf-spectacular's schema view, whose refusals are JSON as every API's are.

The view negotiates the schema's own format (YAML first, JSON), and DRF renders an error with
the renderer it negotiated: a caller without a login asking ``Accept: */*`` (or
``application/*``, or nothing) got its ``401 not_authenticated`` as YAML, and an ``Accept``
it cannot answer its ``406 not_acceptable`` as YAML too, where the schema documents every
error as JSON (``{"error": {...}}``, sill/api_schema.py). The schema is served in the format
negotiated; an error is written as JSON whatever was negotiated.

Its own module, not sill.api: drf-spectacular's views load DRF's renderers, which DRF is
still loading when it imports sill.api.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.views import SpectacularAPIView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response


class SchemaView(SpectacularAPIView):
    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        # handle_exception marks every answer the exception handler gave.
        if isinstance(response, Response) and response.exception:
            response.accepted_renderer = JSONRenderer()
            response.accepted_media_type = JSONRenderer.media_type
        return response
