from django.urls import path

from refunds.agent import api
from refunds.reasons import views as views_reasons
from refunds.reconcile import views as views_attention
from refunds.review import views as views_held
from refunds.staff import api as api_staff
from refunds.staff import views as views_staff

app_name = "refunds"
urlpatterns = [
    path("api/v1/mandates", api.MandateCreateApi.as_view(), name="mandates"),
    path("api/v1/agent", api.AgentMeApi.as_view(), name="agent-me"),
    path("api/v1/refunds/<str:mandate_id>", api.RefundDetailApi.as_view(), name="refund-detail"),
    *views_held.urlpatterns,
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
    *views_attention.urlpatterns,
]
