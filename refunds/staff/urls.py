"""The order pages, under the ``orders:`` URL names the templates use.

The dashboard, the order list and the order page show refunds, so they live here, and
``sill/urls.py`` includes this module by name (``sill`` never imports ``refunds``). One
module for the namespace: two includes under one namespace would not reverse.
"""

from django.urls import path

from refunds.review import evidence
from refunds.staff import views
from refunds.staff.list_views import order_list

app_name = "orders"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("orders/", order_list, name="list"),
    path("orders/<str:order_id>/", views.order_detail, name="detail"),
    # An agent purchase's evidence bundle, checked offline by audit/verify_export.py.
    path("orders/<str:order_id>/evidence.json", evidence.purchase_evidence, name="evidence"),
    path(
        "orders/<str:order_id>/charge-attention/",
        views.resolve_charge,
        name="resolve-charge-attention",
    ),
]
