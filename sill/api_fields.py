"""Input fields of the API's serializers that take a JSON type as it is, and no look-alike."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictBooleanField(serializers.BooleanField):
    """JSON ``true`` or ``false`` only.

    DRF's ``BooleanField`` also reads ``"true"``, ``"1"``, ``1``, ``"yes"`` and ``"on"`` as
    true and ``"false"``, ``"0"``, ``0``, ``""`` as false: the staff API's ``"full": "true"``
    refunded a whole order. A client that sends another type is told so (400
    ``invalid_field`` naming the field) rather than guessed at.
    """

    _SAY = "Send true or false (a JSON boolean, not text, a number or null)."
    default_error_messages = {"invalid": _SAY, "null": _SAY}

    def to_internal_value(self, data: Any) -> bool:
        if data is True or data is False:
            return data
        self.fail("invalid", input=data)
        return False  # pragma: no cover - fail() raises
