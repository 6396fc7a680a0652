"""Sill's own middleware: ``Permissions-Policy`` on every answer, and NUL refused early.

``PermissionsPolicyMiddleware`` sends ``settings.PERMISSIONS_POLICY`` (feature → allowed
origins; an empty list switches the feature off everywhere, e.g. ``camera=()``), which Django
has no setting for.

``RefuseNulMiddleware`` refuses NUL characters in the path, query strings and form fields
before any view reads them. No input of Sill's has a use for NUL, and PostgreSQL cannot store
or even compare it (``text fields cannot contain NUL``): left alone, a ``?q=%00`` would be a 500 on
PostgreSQL and a silent difference on SQLite. JSON bodies are checked where they are parsed
(the mandate parser; DRF's CharField refuses NUL). It also refuses, first, a
``Content-Length`` that Django cannot read (not a number, or more than 4300 digits): Django
reads ``request.body`` only after ``int()`` of it, which raised a ValueError (a 500) wherever
the body was read. Such a length is answered as one over the limit (``RequestDataTooBig``:
413 ``too_large`` in the error shape, sill.error_pages.bad_request), nothing read. And a body
sent without any ``Content-Length`` (``Transfer-Encoding: chunked``) to the API, a webhook or
Slack is ``411 length_required`` in the error shape: Django reads a body only as far as its
Content-Length, so every view saw an empty one (a valid signed mandate was "not valid JSON").
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from sill.error_pages import MACHINE_PATHS, form_refused_page, wants_json


class PermissionsPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        policy: dict[str, list[str]] = settings.PERMISSIONS_POLICY
        self.header = ", ".join(
            f"{feature}=({' '.join(_origin(o) for o in allowed)})"
            for feature, allowed in policy.items()
        )

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.header:
            response.headers.setdefault("Permissions-Policy", self.header)
        return response


def _origin(origin: str) -> str:
    # The header's structured-field syntax: keywords bare, origins quoted.
    return origin if origin in ("self", "*") else f'"{origin}"'


class RefuseNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        _check_content_length(request)
        if _for_programs(request) and _body_without_length(request):
            return _error(
                411,
                "length_required",
                "Send the body with a Content-Length: Sill does not read a chunked body "
                "(Transfer-Encoding). Nothing was done.",
            )
        if "\x00" in request.path:
            # A path argument (a site, order or refund id) reaches a query as text too.
            return _refusal(request)
        fields = [request.GET]
        if request.method == "POST" and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            # Read (and cache) the raw body first, so a view that wants the exact bytes (the
            # mandate API) can still have them after the form is parsed here.
            _ = request.body
            fields.append(request.POST)
        for query in fields:
            for key, values in query.lists():
                if "\x00" in key or any("\x00" in v for v in values):
                    return _refusal(request)
        return self.get_response(request)


def _check_content_length(request: HttpRequest) -> None:
    """Raise ``RequestDataTooBig`` for a ``Content-Length`` Django's own ``int()`` refuses."""
    length = request.META.get("CONTENT_LENGTH")
    if not length:
        return
    try:
        int(length)
    except ValueError:
        raise RequestDataTooBig("The Content-Length is not a length Sill can read.") from None


def _body_without_length(request: HttpRequest) -> bool:
    """Whether the request's body is framed by ``Transfer-Encoding`` (chunked) with no
    ``Content-Length``: the WSGI server decodes it, but Django reads none of it."""
    meta = request.META
    return bool(meta.get("HTTP_TRANSFER_ENCODING")) and not meta.get("CONTENT_LENGTH")


def _for_programs(request: HttpRequest) -> bool:
    """The API, the webhooks, Slack, or a caller asking for JSON: answered in the error shape."""
    return wants_json(request) or request.path.startswith(MACHINE_PATHS)


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "field": None}}, status=status)


def _refusal(request: HttpRequest) -> HttpResponse:
    """400 ``malformed``: in the error shape for programs (the API, the webhooks, Slack, a
    caller asking for JSON), else the page of a refused form (in the form's place for htmx)."""
    message = "The request holds a NUL character, which no field accepts."
    if _for_programs(request):
        return _error(400, "malformed", message)
    return form_refused_page(
        request,
        status=400,
        label="Unreadable characters",
        title="That form held a character Sill cannot store",
        limit=(
            "What you sent holds a NUL character (often from a paste out of another program), "
            "which no field in Sill accepts."
        ),
        advice="Go back, type the text again instead of pasting it, and send it again.",
    )


class SiteTimeZoneMiddleware:
    """Times on every page in the current site's time zone (``Site.timezone``).

    Django renders aware datetimes in the active zone; this activates the site's for a
    signed-in member's request (the API's token callers are authenticated later, by DRF, and
    get UTC). An unknown zone name falls back to UTC rather than failing the page.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        from sill.accounts.access import site_context

        zone = None
        if getattr(request, "user", None) is not None and request.user.is_authenticated:
            ctx = site_context(request)
            if ctx is not None:
                zone = ctx.site.zone
        if zone is None:
            return self.get_response(request)
        with timezone.override(zone):
            return self.get_response(request)
