from django.urls import path

from refunds.agent import api
from refunds.reasons import views as views_reasons
from refunds.reconcile import attention_views as views_attention_resolve
from refunds.reconcile import views as views_attention
from refunds.review import evidence as views_evidence
from refunds.review import refund_page as views_refund_page
from refunds.review import slack_settings as views_slack_settings
from refunds.review import slack_views as views_slack
from refunds.review import views as views_held
from refunds.staff import api as api_staff
from refunds.staff import list_views as views_lists
from refunds.staff import views as views_staff

app_name = "refunds"
urlpatterns = [
    path("api/v1/mandates", api.MandateCreateApi.as_view(), name="mandates"),
    path("api/v1/agent", api.AgentMeApi.as_view(), name="agent-me"),
    path("api/v1/refunds/<str:mandate_id>", api.RefundDetailApi.as_view(), name="refund-detail"),
    *views_held.urlpatterns,
    # Every refund of the site, filterable, with CSV export (?format=csv).
    path("refunds/", views_lists.refund_list, name="list"),
    # One refund's timeline and evidence, any status (refunds.review.refund_page).
    path("refunds/<str:refund_id>/", views_refund_page.refund_detail, name="detail"),
    # Its evidence bundle, checked offline by audit/verify_export.py.
    path("refunds/<str:refund_id>/evidence.json", views_evidence.refund_evidence, name="evidence"),
    *views_reasons.urlpatterns,
    # The staff refund form of the order page (the page itself: refunds.staff.urls).
    path("orders/<str:order_id>/refund/", views_staff.order_refund, name="order-refund"),
    path(
        "orders/<str:order_id>/refund/preview/",
        views_staff.order_refund_preview,
        name="order-refund-preview",
    ),
    path(
        "api/order/<str:order_id>/refund",
        api_staff.StaffRefundCreateApi.as_view(),
        name="staff-refund-api",
    ),
    # An owner records what the provider's dashboard shows for a refund needing attention.
    path(
        "refunds/<str:refund_id>/resolve/",
        views_attention_resolve.resolve,
        name="resolve-attention",
    ),
    # A failed refund an owner or admin marks handled: off the to-do lists.
    path("refunds/<str:refund_id>/handled/", views_staff.mark_handled, name="failure-handled"),
    *views_attention.urlpatterns,
    # Approve / Reject clicks from Slack (signed by Slack; refunds.review.slack).
    *views_slack.urlpatterns,
    *views_slack_settings.urlpatterns,
]
