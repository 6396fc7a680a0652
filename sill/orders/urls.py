from django.urls import path

from sill.orders import views

app_name = "orders"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("orders/", views.order_list, name="list"),
    path("orders/<str:order_id>/", views.order_detail, name="detail"),
]
