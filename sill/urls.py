from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

# DRF's views before sill.api: loading them reads DEFAULT_PARSER_CLASSES, which names
# sill.api's parser, and sill.api imported first found itself half-loaded (ImportError at
# start-up in every manage.py command; the tests load DRF first and did not see it).
from rest_framework import views as _drf_views  # noqa: F401
from rest_framework.authentication import SessionAuthentication

from sill.accounts.api_auth import MemberTokenAuthentication
from sill.api import SchemaAccess
from sill.api_view import TAKEN_METHODS
from sill.schema_view import SchemaView

urlpatterns = [
    path("", include("sill.accounts.urls")),
    # The order pages (orders:dashboard, orders:list, orders:detail) show refunds.
    path("", include("refunds.staff.urls")),
    path("", include("refunds.urls")),
    path("", include("policies.urls")),
    path("", include("audit.views")),
    # The transparency log's public checkpoints, keys and proofs (no login).
    path("", include("audit.api")),
    path("", include("sill.accounts.settings_urls")),
    path("", include("sill.rails.stripe_webhooks")),
    path("", include("sill.rails.woocommerce.webhooks")),
    path("", include("sill.rails.paypal.webhooks")),
    path("", include("sill.rails.shopify.webhooks")),
    path(
        "api/schema/",
        SchemaView.as_view(
            # A member's login (session or API token) unless DEBUG or SILL_PUBLIC_SCHEMA=1.
            authentication_classes=[MemberTokenAuthentication, SessionAuthentication],
            permission_classes=[SchemaAccess],
            # OPTIONS is 405 here as on every API view (sill/api_view.py).
            http_method_names=TAKEN_METHODS,
        ),
        name="api-schema",
    ),
    # Browsers ask for /favicon.ico whatever the page links; send them to the SVG one (its
    # unhashed name: WhiteNoise serves it too, and no manifest is read at import time). Read
    # only, as every page that changes nothing: another method is 405 (RedirectView took all).
    path(
        "favicon.ico",
        RedirectView.as_view(
            url=f"{settings.STATIC_URL}favicon.svg",
            permanent=True,
            http_method_names=["get", "head"],
        ),
        name="favicon",
    ),
]
# A JSON client gets its 400, 403, 404 and 500 as JSON (sill.error_pages); a browser, the pages.
handler400 = "sill.error_pages.bad_request"
handler403 = "sill.error_pages.permission_denied"
handler404 = "sill.error_pages.page_not_found"
handler500 = "sill.error_pages.server_error"

# The Django admin exists only where an operator asked for it (sill/admin.py): otherwise 404.
if settings.SILL_ADMIN:
    urlpatterns.append(path("django-admin/", admin.site.urls))
