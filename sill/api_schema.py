"""The OpenAPI schema's shared parts: the error shape, and the refusals any API view gives.

Some answers do not come from a view's own code: DRF's content negotiation (406), its parser
choice (415), the middleware's refusal of a chunked body (411), the authentication classes
(401), the rate limits (429), a cache that cannot be reached (503) and a failure in Sill (500).
Each operation documented its own statuses by hand, and only the agent API listed these:
the staff and rules APIs' schemas named no 401, 406, 429, 500 or 503, which they answer, so a
client generated from ``/api/schema/`` did not know them. :class:`ApiSchema` adds to every
operation those it may answer and does not document itself (an operation's own description
of one wins).

Its own module, not sill.api: DRF loads sill.api while ``rest_framework.views`` is still
loading, and drf-spectacular's schema class imports that module.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation

ERROR = inline_serializer(
    "Error",
    {
        "error": inline_serializer(
            "ErrorBody",
            {
                "code": serializers.CharField(),
                "message": serializers.CharField(),
                "field": serializers.CharField(allow_null=True),
            },
        )
    },
)
# Sill's cache (its rate limits) or database cannot be reached (sill/cache_down.py).
UNAVAILABLE = (
    "`unavailable`: Sill is briefly unavailable and did not act on the request; `Retry-After` "
    "says in how many seconds to send it again (a minute)."
)
# DRF's content negotiation, before the view runs (sill/negotiation.py).
NOT_ACCEPTABLE = OpenApiResponse(
    ERROR,
    description="`not_acceptable`: the `Accept` header leaves out JSON; nothing was read or done.",
)
# DRF's parser choice, before the body is read: every API POST.
NOT_JSON = OpenApiResponse(
    ERROR,
    description="`unsupported_media_type`: the body's `Content-Type` is not "
    "`application/json`; nothing was read or done.",
)
# sill.middleware, before any view: a body Django would read as empty.
NO_LENGTH = OpenApiResponse(
    ERROR,
    description="`length_required`: the body came without a `Content-Length` (chunked); "
    "nothing was read or done.",
)
_REFUSALS: dict[int, OpenApiResponse] = {
    401: OpenApiResponse(
        ERROR,
        description="`not_authenticated`: no credential, or an unknown or revoked token "
        "(`WWW-Authenticate` says which scheme).",
    ),
    406: NOT_ACCEPTABLE,
    411: NO_LENGTH,
    415: NOT_JSON,
    429: OpenApiResponse(
        ERROR,
        description="`rate_limited`: over a rate limit; `Retry-After` says in how many seconds "
        "to send it again.",
    ),
    500: OpenApiResponse(
        ERROR, description="`server_error`: Sill failed (its log says why). Try again later."
    ),
    503: OpenApiResponse(ERROR, description=UNAVAILABLE),
}
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class ApiSchema(AutoSchema):
    """drf-spectacular's schema, with the refusals of :data:`_REFUSALS` that apply to the
    operation added where it does not document them."""

    # The responses as drf-spectacular builds them (also for a view's @extend_schema, whose
    # class overrides get_response_serializers with the decorator's responses).
    def _get_response_bodies(self, direction: Any = "response") -> Any:
        bodies = dict(super()._get_response_bodies(direction))
        for status in self._refusals():
            if str(status) not in bodies:
                refusal = _REFUSALS[status]
                bodies[str(status)] = self._get_response_for_code(
                    refusal, str(status), direction=direction
                )
        return dict(sorted(bodies.items()))

    def _refusals(self) -> set[int]:
        view = self.view
        statuses = {429, 500, 503}
        if issubclass(view.content_negotiation_class, DefaultContentNegotiation):
            statuses.add(406)
        if self.method in _WITH_BODY:
            statuses |= {411, 415}
        authenticators = view.get_authenticators()
        # DRF answers 401 when the first authenticator names a scheme, else 403.
        if authenticators and authenticators[0].authenticate_header(view.request):
            statuses.add(401)
        return statuses
