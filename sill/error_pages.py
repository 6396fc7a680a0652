"""400, 403, 404 and 500 in the shape the client asked for.

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
JSON, and got Django's HTML "Bad Request" page. A browser's form gets a page in the site's
layout instead (templates/form_refused.html): 413 for a form too large, 400 for one with too
many fields (or files), saying that nothing was changed. Any other refusal keeps Django's page.

A request Sill cannot check because its cache is down, or that its database could not serve
(:mod:`sill.database_down`), is :func:`briefly_unavailable`: 503 ``unavailable`` with
``Retry-After``, or a page saying to try again in a minute.

A 404 under the machine paths (a URL that names nothing) is JSON too, and
:func:`machine_post_only` answers another method than POST to a webhook or Slack
``405 method_not_allowed`` (Django's ``require_POST`` answers an empty HTML page).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.defaultfilters import filesizeformat
from django.template.loader import render_to_string
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import defaults

from sill.database_down import log_unavailable, lost_at_commit, unavailable_because
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
    if too_large or isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
        # A page's form: say what was wrong, and that nothing was changed, not "Bad Request".
        return _form_refused(request, exception, status=refused.status)
    return defaults.bad_request(request, exception)


def _form_refused(request: HttpRequest, exception: Exception, *, status: int) -> HttpResponse:
    """The page for a form Django refused to read. Rendered without the request's context
    processors: the refusal comes from middleware before the member is looked up (there is no
    ``request.user`` yet), and a refused body should cost no query."""
    if isinstance(exception, RequestDataTooBig):
        size = filesizeformat(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        label, title = "Form too large", "That form was too large to send"
        limit = f"Sill accepts at most {size} from one form, and what you sent was larger."
        advice = (
            "Go back, shorten what you entered (a long note or a large paste, say), and send "
            "it again."
        )
    elif isinstance(exception, TooManyFilesSent):
        label, title = "Too many files", "That form had too many files"
        limit = (
            f"Sill accepts at most {settings.DATA_UPLOAD_MAX_NUMBER_FILES:,} files in one form, "
            "and what you sent had more."
        )
        advice = "Go back and send it again with fewer files."
    else:
        label, title = "Too many fields", "That form had too many fields"
        limit = (
            f"Sill accepts at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS:,} fields in one "
            "form, and what you sent had more."
        )
        advice = "Go back and send it again with fewer entries."
    return form_refused_page(
        request, status=status, label=label, title=title, limit=limit, advice=advice
    )


def form_refused_page(
    request: HttpRequest, *, status: int, label: str, title: str, limit: str, advice: str
) -> HttpResponse:
    """templates/form_refused.html: a page's form refused before any view read it, saying what
    was wrong (``limit``), what to do (``advice``) and that nothing was changed; in the form's
    place when htmx sent it."""
    context = {
        "htmx": request.headers.get("HX-Request") == "true",
        "status": status,
        "label": label,
        "title": title,
        "limit": limit,
        "advice": advice,
        "back": _same_site_referer(request),
    }
    return HttpResponse(render_to_string("form_refused.html", context), status=status)


def _same_site_referer(request: HttpRequest) -> str:
    """The page the form was on, when the browser said and it is one of Sill's; else ""."""
    referer = request.headers.get("Referer", "")
    safe = url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return referer if referer and safe else ""


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_json(request):
        refused = PermissionDenied("Your role on this site does not allow this.")
        return JsonResponse(refused.as_dict(), status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_json(request) or request.path.startswith(MACHINE_PATHS):
        missing = NotFound("Nothing here on this site.")
        return JsonResponse(missing.as_dict(), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """500: Django's page (templates/500.html) for people; for programs (the machine paths
    and JSON clients) the error shape with the stable code ``server_error``, which they can
    read and act on, where they got that HTML page. Nothing of the failure is said (it is
    logged by Django); what is said is what makes a retry safe.

    Except when PostgreSQL could not serve the request (:mod:`sill.database_down`: it
    refuses connections, lost this one, or a statement timed out waiting on a lock): that
    is :func:`briefly_unavailable`, logged once as a warning. Django calls this view while it
    handles the error, so the error is ``sys.exc_info()``'s."""
    error = sys.exc_info()[1]
    why = unavailable_because(error) if error is not None else None
    if why is not None:
        unknown = lost_at_commit(error)  # type: ignore[arg-type]
        if unknown:
            why += " while committing: the change may have been saved"
        log_unavailable(request, why)
        unavailable = briefly_unavailable(request, outcome_unknown=unknown)
        # Logged above, as a warning: not again by Django, as the error a 5xx is.
        unavailable._has_been_logged = True  # type: ignore[attr-defined]
        return unavailable
    if wants_json(request) or request.path.startswith(MACHINE_PATHS):
        failed = SillError(
            "Sill could not finish this request. Send it again later: a signed mandate, a "
            "webhook event or a request with the same Idempotency-Key is never acted on twice.",
            code="server_error",
            status=500,
        )
        return JsonResponse(failed.as_dict(), status=failed.status)
    return defaults.server_error(request)


# How long a caller is asked to wait when Sill cannot reach its cache (``Retry-After``).
UNAVAILABLE_RETRY_AFTER_SECONDS = 60


def briefly_unavailable(request: HttpRequest, *, outcome_unknown: bool = False) -> HttpResponse:
    """503 with ``Retry-After``: Sill cannot check this request now (its cache cannot be
    reached, :mod:`sill.cache_down`) and did not act on it. For programs (the machine paths
    and JSON clients) the error shape with the stable code ``unavailable``; for people the
    page templates/503.html (in the form's place when htmx sent it), rendered without the
    request's context, so that it costs nothing that could fail too.

    ``outcome_unknown``: the database was lost while it committed the request's change
    (:func:`sill.database_down.lost_at_commit`), so it may have been saved; the answer says so
    rather than "did not act", and sending it again is still safe."""
    if wants_json(request) or request.path.startswith(MACHINE_PATHS):
        refused = SillError(
            (
                "Sill is briefly unavailable: it lost its database while saving this request "
                "and cannot tell whether it was saved."
                if outcome_unknown
                else "Sill is briefly unavailable and did not act on this request."
            )
            + " Send it again in a minute: a signed mandate, a webhook event or a request with"
            " the same Idempotency-Key is never acted on twice, and the answer then says what"
            " was done.",
            code="unavailable",
            status=503,
        )
        response: HttpResponse = JsonResponse(refused.as_dict(), status=refused.status)
    else:
        context = {
            "htmx": request.headers.get("HX-Request") == "true",
            "back": _same_site_referer(request),
            "outcome_unknown": outcome_unknown,
        }
        response = HttpResponse(render_to_string("503.html", context), status=503)
    response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_SECONDS)
    return response


def machine_post_only(
    view: Callable[..., HttpResponse],
) -> Callable[..., HttpResponse]:
    """``require_POST`` for a machine endpoint (a rail's webhook, Slack's interactions): any
    other method is ``405 method_not_allowed`` in the error shape, with ``Allow: POST``, as the
    API answers it (Django's own 405 is an empty HTML page)."""

    @wraps(view)
    def post_only(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method != "POST":
            refused = SillError(
                f"Method {request.method} not allowed.", code="method_not_allowed", status=405
            )
            response = JsonResponse(refused.as_dict(), status=refused.status)
            response["Allow"] = "POST"
            return response
        return view(request, *args, **kwargs)

    return post_only
