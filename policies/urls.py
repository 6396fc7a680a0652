from django.urls import URLPattern

app_name = "policies"
urlpatterns: list[URLPattern] = []
