"""Sill's OpenAPI schema as an API client reads it: a real answer checked against the schema's
response for its status, with ``jsonschema`` (the schema is OpenAPI 3.0, whose ``nullable``
JSON Schema does not know, so it is translated first).

Stricter than OpenAPI's defaults in one way, on purpose: an object that lists its properties
takes no others, so an answer carrying a field the schema does not name fails too (a client
generated from the schema would drop it)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import jsonschema
from django.test import Client

# RFC 3339's date-time (jsonschema checks it only with an extra package installed).
_DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)\Z")
FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("date-time")
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True  # a format says nothing of other types (``null`` where it is nullable)
    if not _DATE_TIME.match(value):
        return False
    datetime.fromisoformat(value.replace("Z", "+00:00"))  # a real date: raises if not
    return True


def served_schema() -> dict[str, Any]:
    """``GET /api/schema/`` as JSON (public with ``DEBUG`` or ``SILL_PUBLIC_SCHEMA``)."""
    response = Client().get("/api/schema/", headers={"Accept": "application/json"})
    assert response.status_code == 200, response.content
    return dict(response.json())


def json_schema(node: Any) -> Any:
    """``node`` (an OpenAPI 3.0 schema object) as JSON Schema."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: json_schema(value) for key, value in node.items() if key != "nullable"}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if not node.get("nullable"):
        return out
    if "type" in out and "enum" not in out:
        out["type"] = [out["type"], "null"]
        return out
    return {"anyOf": [out, {"type": "null"}]}


def check_answer(schema: dict[str, Any], path: str, method: str, response: Any) -> None:
    """``response`` (a test client's) is one the schema documents for ``method path``: its
    status is among the operation's responses and its JSON body valid against that one."""
    operation = schema["paths"][path][method.lower()]
    status = str(response.status_code)
    assert status in operation["responses"], (
        f"{method} {path} answered {status}, which the schema does not document "
        f"({sorted(operation['responses'])}): {response.content[:300]!r}"
    )
    documented = operation["responses"][status]["content"]["application/json"]["schema"]
    document = {**json_schema(documented), "components": json_schema(schema["components"])}
    validator = jsonschema.Draft202012Validator(document, format_checker=FORMATS)
    errors = sorted(validator.iter_errors(json.loads(response.content)), key=lambda e: list(e.path))
    assert not errors, f"{method} {path} {status}: " + "; ".join(
        f"{'/'.join(map(str, e.path)) or '(body)'}: {e.message}" for e in errors
    )
