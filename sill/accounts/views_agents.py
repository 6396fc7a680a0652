"""URL patterns are filled in by the feature that owns this module."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
