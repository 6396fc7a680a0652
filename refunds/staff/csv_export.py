"""CSV downloads of the order and refund lists: streamed, and safe to open in a spreadsheet.

A cell a spreadsheet would read as a formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab
or a carriage return) is prefixed with ``'`` (OWASP "CSV Injection"): a buyer's name such as
``=HYPERLINK(…)`` stays text. Money is written in major units next to its currency, times as
ISO 8601 in the site's time zone.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

from django.http import StreamingHttpResponse

from sill.money import Money

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> str:
    """``value`` as CSV text that no spreadsheet evaluates."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def money_cells(money: Money) -> list[str]:
    """``[amount in major units, currency]``: ``["89.00", "USD"]``."""
    return [money.major_str(), money.currency]


def iso_time(at: datetime | None, zone: ZoneInfo) -> str:
    return at.astimezone(zone).isoformat() if at else ""


class _Echo:
    """A file-like object whose ``write`` hands back the line (Django's streaming CSV recipe)."""

    def write(self, value: str) -> str:
        return value


def csv_response(
    *, filename: str, header: list[str], rows: Iterable[list[object]]
) -> StreamingHttpResponse:
    """Stream ``header`` then ``rows`` (every cell through :func:`safe_cell`) as a download."""
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([safe_cell(cell) for cell in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
