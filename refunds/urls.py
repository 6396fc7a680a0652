from django.urls import path

from refunds import api

app_name = "refunds"
urlpatterns = [
    path("api/v1/mandates", api.MandateCreateApi.as_view(), name="mandates"),
    path("api/v1/refunds/<str:mandate_id>", api.RefundDetailApi.as_view(), name="refund-detail"),
]
