"""Chart geometry for the dashboard's inline SVG: pure arithmetic, no ORM, no JavaScript.

The template draws what these return (``templates/orders/dashboard.html``); each chart also
gets a table of the same numbers, so the figures do not depend on seeing the picture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

# The per-day chart's drawing box (SVG user units; the SVG scales to its container).
DAY_WIDTH = 400
DAY_HEIGHT = 150
DAY_GAP = 2
AXIS_LEFT = 28
AXIS_BOTTOM = 18


@dataclass(frozen=True)
class Segment:
    series: str  # "agent" | "staff": the CSS class colours it
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class DayBar:
    day: date
    counts: dict[str, int]
    total: int
    segments: list[Segment]
    label: str  # the day as the x axis shows it (every 7th day), else ""
    label_x: float  # the middle of the bar's slot
    label_anchor: str  # "middle", or "end" for the last day (its label would overflow)


@dataclass(frozen=True)
class DayChart:
    bars: list[DayBar]
    max_value: int
    ticks: list[tuple[float, int]]  # (y, value) of the y axis lines
    width: int = DAY_WIDTH
    height: int = DAY_HEIGHT
    left: int = AXIS_LEFT
    baseline: int = DAY_HEIGHT - AXIS_BOTTOM

    @property
    def total(self) -> int:
        return sum(bar.total for bar in self.bars)


def nice_max(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value``: a readable axis top."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power  # pragma: no cover - the loop always returns


def day_chart(days: list[date], counts: dict[date, dict[str, int]], series: list[str]) -> DayChart:
    """Stacked bars, one per day in ``days`` (oldest first), ``series`` from the bottom up."""
    top = nice_max(max((sum(counts.get(d, {}).values()) for d in days), default=0))
    plot_height = DAY_HEIGHT - AXIS_BOTTOM - 6
    slot = (DAY_WIDTH - AXIS_LEFT) / max(len(days), 1)
    bars = []
    for index, day in enumerate(days):
        day_counts = {name: counts.get(day, {}).get(name, 0) for name in series}
        x = AXIS_LEFT + index * slot + DAY_GAP / 2
        y = float(DAY_HEIGHT - AXIS_BOTTOM)
        segments = []
        for name in series:
            height = plot_height * day_counts[name] / top
            if height:
                y -= height
                width = round(slot - DAY_GAP, 2)
                segments.append(Segment(name, round(x, 2), round(y, 2), width, round(height, 2)))
        label = f"{day:%b} {day.day}" if (len(days) - 1 - index) % 7 == 0 else ""
        middle = round(AXIS_LEFT + (index + 0.5) * slot, 2)
        anchor = "end" if index == len(days) - 1 else "middle"
        if anchor == "end":
            middle = DAY_WIDTH
        bars.append(
            DayBar(day, day_counts, sum(day_counts.values()), segments, label, middle, anchor)
        )
    ticks = [
        (round(DAY_HEIGHT - AXIS_BOTTOM - plot_height * value / top, 2), value)
        for value in sorted({0, top // 2, top})
        if value == 0 or value == top or top % 2 == 0
    ]
    return DayChart(bars=bars, max_value=top, ticks=ticks)


BAR_WIDTH = 400  # the horizontal bar chart's drawing width (SVG user units)
BAR_TRACK = 330  # the longest bar; the rest of the row is its count
BAR_ROW = 36


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    share: int  # of the total, in %, rounded
    y: float  # top of the row: the label sits on it, the bar below
    length: float  # in SVG units, proportional to the largest value


def bars(items: list[tuple[str, int]]) -> list[Bar]:
    """Horizontal bars for ``(label, count)`` pairs, in the order given, one row each."""
    largest = max((count for _, count in items), default=0)
    total = sum(count for _, count in items)
    return [
        Bar(
            label=label,
            value=count,
            share=round(100 * count / total) if total else 0,
            y=index * BAR_ROW,
            length=round(BAR_TRACK * count / largest, 2) if largest else 0.0,
        )
        for index, (label, count) in enumerate(items)
    ]


def bars_height(items: list[Bar]) -> int:
    return max(len(items), 1) * BAR_ROW


def percentile(values: list[float], fraction: float) -> float | None:
    """The ``fraction`` percentile of ``values`` (linear interpolation); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def duration_text(seconds: float | None) -> str:
    """``42 s``, ``12 min``, ``3.5 h``, ``2.1 days``; a dash for none."""
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{round(seconds)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
