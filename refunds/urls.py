from django.urls import path

from refunds import api, views_attention, views_held, views_staff

app_name = "refunds"
urlpatterns = [
    path("api/v1/mandates", api.MandateCreateApi.as_view(), name="mandates"),
    path("api/v1/agent", api.AgentMeApi.as_view(), name="agent-me"),
    path("api/v1/refunds/<str:mandate_id>", api.RefundDetailApi.as_view(), name="refund-detail"),
    *views_held.urlpatterns,
    *views_staff.urlpatterns,
    *views_attention.urlpatterns,
]
