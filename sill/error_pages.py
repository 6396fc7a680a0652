"""400, 403 and 404 in the shape the client asked for.

A JSON client (``Accept: application/json``, not htmx) gets Sill's ``{"error": {"code", …}}``
with the stable codes ``forbidden`` and ``not_found``, as the API answers; everyone else gets
Django's pages (templates/403.html and 404.html). A JSON client of a page's POST (a held
refund's approve or reject, say) could not read the HTML page it used to get.

Django answers 400 itself for a request it refuses before any view (a ``SuspiciousOperation``):
above all a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (``RequestDataTooBig``, raised where
``request.body`` or a form is first read: ``RefuseNulMiddleware`` reads every form POST) and a
form of more than 1000 fields. :func:`bad_request` answers the first ``413 too_large``, the
rest ``400 malformed``, as JSON to JSON clients and to every machine endpoint (the API, the
rails' webhooks, Slack's interactions), whatever they sent as ``Accept``: those callers read
JSON, and got Django's HTML "Bad Request" page.
"""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from sill.errors import NotFound, PermissionDenied, SillError
from sill.jsonbody import BodyTooLarge

# Paths whose callers are programs: the API, the rails' webhooks, Slack's interactions.
MACHINE_PATHS = ("/api/", "/webhooks/", "/slack/")


def wants_json(request: HttpRequest) -> bool:
    return not getattr(request, "htmx", False) and "application/json" in request.headers.get(
        "Accept", ""
    )


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    too_large = isinstance(exception, RequestDataTooBig)
    refused = (
        BodyTooLarge("The request is too large.")
        if too_large
        else SillError("The request is malformed.", code="malformed")
    )
    if wants_json(request) or request.path.startswith(MACHINE_PATHS):
        return JsonResponse(refused.as_dict(), status=refused.status)
    if too_large:  # a page's form: say what was wrong, not "Bad Request"
        return HttpResponse(
            refused.message, status=refused.status, content_type="text/plain; charset=utf-8"
        )
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_json(request):
        refused = PermissionDenied("Your role on this site does not allow this.")
        return JsonResponse(refused.as_dict(), status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_json(request):
        missing = NotFound("Nothing here on this site.")
        return JsonResponse(missing.as_dict(), status=404)
    return defaults.page_not_found(request, exception)
