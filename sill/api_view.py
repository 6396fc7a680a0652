"""The base of every view of Sill's API: DRF's ``APIView`` without DRF's ``OPTIONS`` answer.

Its own module, not sill.api: DRF loads sill.api while ``rest_framework.views`` is still
loading (its settings name the exception handler and throttles there), so that module cannot
subclass ``APIView``.
"""

from __future__ import annotations

from rest_framework.views import APIView

# Every method Django's views know but OPTIONS, in Django's order (the Allow header's).
TAKEN_METHODS = [method for method in APIView.http_method_names if method != "options"]


class ApiView(APIView):
    """An API view that does not take ``OPTIONS``.

    DRF answers OPTIONS on every view with 200 and its metadata (the view's class name, its
    docstring, the media types it parses), to anyone the view lets in: the mandate API to the
    world. Neither the README nor the schema names that answer, and Sill serves no
    cross-origin callers whose browsers would send a preflight. So OPTIONS is a method the API
    does not take: ``405 method_not_allowed`` in the error shape, and no ``Allow`` lists it."""

    http_method_names = TAKEN_METHODS
