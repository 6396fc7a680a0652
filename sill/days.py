"""Whole days in a site's time zone as bounds on a timestamp (the lists' ``from`` / ``to``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, tzinfo


def midnight(day: date, zone: tzinfo) -> datetime | None:
    """The midnight that starts ``day`` in ``zone``, or None when it has no UTC time
    (0001-01-01 east of UTC is still year 0 in UTC: the database's conversion overflowed, a
    500). No bound is needed there: nothing was made before it."""
    at = datetime.combine(day, time.min, tzinfo=zone)
    try:
        at.astimezone(UTC)
    except OverflowError:
        return None
    return at


def day_bounds(
    date_from: date | None, date_to: date | None, zone: tzinfo
) -> tuple[datetime | None, datetime | None]:
    """``(start, end)`` of the days ``date_from`` to ``date_to`` (both included) in ``zone``:
    ``start <= t < end``; None where a side has no bound (no day given, or none needed)."""
    start = midnight(date_from, zone) if date_from else None
    # The calendar's last day has no next midnight (date.max + 1 day overflows): no end.
    end = None
    if date_to and date_to < date.max:
        end = midnight(date_to + timedelta(days=1), zone)
    return start, end
