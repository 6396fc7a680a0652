from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("", include("sill.accounts.urls")),
    # The order pages (orders:dashboard, orders:list, orders:detail) show refunds.
    path("", include("refunds.staff.urls")),
    path("", include("refunds.urls")),
    path("", include("policies.urls")),
    path("", include("audit.views")),
    path("", include("sill.accounts.settings_urls")),
    path("", include("sill.rails.stripe_webhooks")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("django-admin/", admin.site.urls),
]
