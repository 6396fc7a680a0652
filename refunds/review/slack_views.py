"""Slack's interactivity endpoint: Approve / Reject clicks on held-refund messages."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from refunds.review.slack import accept_click, verify_click
from sill.accounts.models import Site
from sill.error_pages import briefly_unavailable, machine_post_only
from sill.errors import SillError
from sill.queue import BrokerUnreachable

logger = logging.getLogger(__name__)


@csrf_exempt  # Slack signs the request (X-Slack-Signature): that is the credential, not a cookie
@machine_post_only
def slack_interaction(request: HttpRequest, site_id: str) -> HttpResponse:
    """Acknowledge within Slack's 3 s: the click is verified here and decided by a worker,
    which answers through the click's response_url."""
    site = Site.objects.filter(pk=site_id).first()
    if site is None:
        return JsonResponse(
            {"error": {"code": "not_found", "message": "No such site.", "field": None}}, status=404
        )
    try:
        click = verify_click(
            site=site,
            body=request.body,
            timestamp=request.headers.get("X-Slack-Request-Timestamp"),
            signature=request.headers.get("X-Slack-Signature"),
        )
        if click is not None:  # None: "Review in Sill", which only wants the 200
            accept_click(site=site, click=click)
    except BrokerUnreachable as exc:
        # The click lives only in this request and the queue: with the broker down nothing
        # stored it, so nothing was decided, and no sweep would decide it later. Slack shows
        # the clicker that the click failed, to click again in a minute.
        logger.warning(
            "Slack click on site %s not queued: the broker cannot be reached (%s); nothing "
            "was decided",
            site.pk,
            type(exc).__name__,  # the class only: a broker's error can carry its address
        )
        response = briefly_unavailable(request)
        response._has_been_logged = True  # type: ignore[attr-defined]  # above, as a warning
        return response
    except SillError as exc:
        return JsonResponse(exc.as_dict(), status=exc.status)
    return HttpResponse(status=200)


urlpatterns = [
    path("slack/interactions/<str:site_id>", slack_interaction, name="slack-interactions"),
]
