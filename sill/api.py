"""The DRF exception handler (every API error is ``{"error": {"code", "message", "field"}}``)
and the strict JSON parser every API view reads bodies with."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions
from rest_framework.parsers import JSONParser
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from sill import jsonbody
from sill.errors import SillError

_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "not_authenticated",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.ParseError: "malformed",
    exceptions.Throttled: "throttled",
    exceptions.ValidationError: "invalid_field",
}


def error_response(error: SillError) -> Response:
    return Response(error.as_dict(), status=error.status)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, SillError):
        return error_response(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, Http404):
        code = "not_found"
    else:
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    field = None
    message = "Request refused."
    detail = getattr(exc, "detail", None)
    if isinstance(detail, dict) and detail:
        field, first = next(iter(detail.items()))
        message = str(first[0] if isinstance(first, list) and first else first)
        if field == "non_field_errors":
            field = None
    elif isinstance(detail, list) and detail:
        message = str(detail[0])
    elif detail is not None:
        message = str(detail)
    response.data = {"error": {"code": code, "message": message, "field": field}}
    return response


class StrictJSONParser(JSONParser):
    """DRF's JSON parser with the project's rules (:func:`sill.jsonbody.loads`).

    The default parser of every API view (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``):
    numbers with a fraction are ``Decimal``; nesting deeper than 32 levels, duplicate keys,
    ``NaN``/``Infinity``, out-of-range numbers, NUL and lone surrogates are a ``ParseError``,
    which :func:`exception_handler` answers as ``400`` with code ``malformed``.
    """

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding") or "utf-8"
        raw = stream.read() if stream is not None else b""
        try:
            return jsonbody.loads(raw, encoding=encoding)
        except jsonbody.MalformedJSON as exc:
            raise exceptions.ParseError(exc.message) from None
