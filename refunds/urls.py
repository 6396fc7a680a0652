from django.urls import path

from refunds.agent import api
from refunds.reconcile import views as views_attention
from refunds.review import views as views_held
from refunds.staff import views as views_staff

app_name = "refunds"
urlpatterns = [
    path("api/v1/mandates", api.MandateCreateApi.as_view(), name="mandates"),
    path("api/v1/agent", api.AgentMeApi.as_view(), name="agent-me"),
    path("api/v1/refunds/<str:mandate_id>", api.RefundDetailApi.as_view(), name="refund-detail"),
    *views_held.urlpatterns,
    *views_staff.urlpatterns,
    *views_attention.urlpatterns,
]
