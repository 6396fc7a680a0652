"""``|when`` writes times as Django's date formats would, without their cost per call."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone
from django.utils.dateformat import format as date_format

from sill.templatetags.sill import when

ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham"]
NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
MOMENTS = [
    NOW - timedelta(days=3, minutes=7),
    datetime(2026, 3, 8, 7, 30, tzinfo=UTC),  # around a DST change in New York
    datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC),  # last year
    datetime(2027, 1, 1, 0, 0, 1, tzinfo=UTC),  # next year
]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("moment", MOMENTS)
def test_it_writes_what_djangos_date_formats_write(zone, moment):
    with time_machine.travel(NOW, tick=False), timezone.override(zoneinfo.ZoneInfo(zone)):
        local = timezone.localtime(moment)
        year = "" if local.year == timezone.localtime().year else ", Y"
        full = date_format(local, "D, M j, Y, H:i:s T")
        assert when(moment) == (
            f'<time datetime="{moment.isoformat()}" title="{full}">'
            f"{date_format(local, f'M j{year}, H:i T')}</time>"
        )
        assert when(moment, "date").endswith(f">{date_format(local, 'M j, Y')}</time>")


def test_within_a_day_ago_reads_relative_and_no_time_is_a_dash():
    with time_machine.travel(NOW, tick=False), timezone.override(zoneinfo.ZoneInfo("UTC")):
        assert ">4 min ago</time>" in when(NOW - timedelta(minutes=4), "ago")
        assert ">in 3 h</time>" in when(NOW + timedelta(hours=3), "ago")
    assert when(None) == "—"


@pytest.mark.parametrize(
    ("now", "at", "reads"),
    [
        # New York springs forward at 02:00 EST: 01:30 EST to 03:30 EDT is one hour.
        ((2026, 3, 8, 7, 30), (2026, 3, 8, 6, 30), "1 h ago"),
        # And falls back at 02:00 EDT: 01:30 EDT to 01:30 EST is one hour too.
        ((2026, 11, 1, 5, 30), (2026, 11, 1, 6, 30), "in 1 h"),
        ((2026, 11, 1, 6, 30), (2026, 11, 1, 5, 30), "1 h ago"),
        # A refund held 23 h ago across the spring change is 23 h old, not a day.
        ((2026, 3, 8, 16, 0), (2026, 3, 7, 17, 0), "23 h ago"),
    ],
)
def test_ago_counts_the_time_that_passed_across_a_dst_change(now, at, reads):
    """On a DST change day in the site's zone, "held 2 h ago" was written for a refund held an
    hour before (the wall clocks' difference, not the time that passed), and an hour ahead
    read "in a moment"."""
    with (
        time_machine.travel(datetime(*now, tzinfo=UTC), tick=False),
        timezone.override(zoneinfo.ZoneInfo("America/New_York")),
    ):
        assert f">{reads}</time>" in when(datetime(*at, tzinfo=UTC), "ago")
