"""403 and 404 in the shape the client asked for.

A JSON client (``Accept: application/json``, not htmx) gets Sill's ``{"error": {"code", …}}``
with the stable codes ``forbidden`` and ``not_found``, as the API answers; everyone else gets
Django's pages (templates/403.html and 404.html). A JSON client of a page's POST (a held
refund's approve or reject, say) could not read the HTML page it used to get.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from sill.errors import NotFound, PermissionDenied


def wants_json(request: HttpRequest) -> bool:
    return not getattr(request, "htmx", False) and "application/json" in request.headers.get(
        "Accept", ""
    )


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
