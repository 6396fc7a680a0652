"""One table for every benchmark: each figure is a ratio to a baseline measured in the same run.

A bench script calls :func:`figure` for each result and :func:`finish` at the end. ``finish``
prints the script's rows and appends them to the run's JSON file (``SILL_BENCH_OUT``, set by
``make bench``; otherwise ``var/bench/<script>-<database>-<UTC time>.json``), so a later run
can be compared with this one.

``make bench`` runs ``bench/_run.py``: every ``bench/[!_]*.py`` on SQLite, then again on
PostgreSQL + Redis when ``DATABASE_URL`` / ``REDIS_URL`` are set, all into one file
``var/bench/<UTC time>.json``, and prints :func:`report` of it: one table, with the ratio the
previous run's file gave each figure. ``SILL_BENCH_QUICK=1`` (``make bench BENCH_ARGS=--quick``)
asks scripts for a short run (:func:`quick`): fewer requests, for development only.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "var" / "bench"


@dataclass(frozen=True)
class Figure:
    name: str  # what was measured, e.g. "verify_mandate"
    value: float  # the measurement
    baseline_name: str  # what it is compared with, measured in the same run
    baseline: float
    unit: str  # "/s", "ms", "queries", ...
    ratio: float  # value / baseline
    goal: str  # e.g. ">= 0.5" or "<= 1.3"; "" when the figure is informative only
    passed: bool | None  # None when there is no goal
    database: str


_FIGURES: list[Figure] = []


def database() -> str:
    """``sqlite`` or ``postgresql``; ``any`` for a database-independent script (the runner says)."""
    if os.environ.get("SILL_BENCH_DATABASE"):
        return os.environ["SILL_BENCH_DATABASE"]
    url = os.environ.get("DATABASE_URL", "")
    return "postgresql" if url.startswith(("postgres://", "postgresql://")) else "sqlite"


def quick() -> bool:
    """Whether this is a short development run (``SILL_BENCH_QUICK=1``): scale work down."""
    return os.environ.get("SILL_BENCH_QUICK", "") not in ("", "0")


def check(goal: str, ratio: float) -> bool | None:
    """Whether ``ratio`` meets ``goal`` (``">= x"`` or ``"<= x"``); None without a goal."""
    if not goal:
        return None
    op, _, bound = goal.partition(" ")
    if op not in (">=", "<="):
        raise ValueError(f"a goal is '>= x' or '<= x', not {goal!r}")
    return ratio >= float(bound) if op == ">=" else ratio <= float(bound)


def figure(
    name: str,
    *,
    value: float,
    baseline_name: str,
    baseline: float,
    unit: str,
    goal: str = "",
) -> Figure:
    """Record one figure. ``goal`` is ``">= x"`` or ``"<= x"`` on the ratio (value / baseline)."""
    ratio = value / baseline if baseline else float("inf")
    result = Figure(
        name, value, baseline_name, baseline, unit, ratio, goal, check(goal, ratio), database()
    )
    _FIGURES.append(result)
    return result


def _fmt(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 1:
        return f"{x:,.2f}"
    return f"{x:.4g}"


def _result(passed: bool | None) -> str:
    return "-" if passed is None else ("pass" if passed else "FAIL")


def _columns(head: tuple[str, ...], lines: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head))]
    out = [
        " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *lines]
    ]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def table(rows: list[Figure]) -> str:
    head = ("figure", "value", "baseline (same run)", "ratio", "goal", "result")
    lines = [
        (
            f.name,
            f"{_fmt(f.value)} {f.unit}",
            f"{f.baseline_name}: {_fmt(f.baseline)} {f.unit}",
            f"{f.ratio:.2f}x",
            f.goal or "-",
            _result(f.passed),
        )
        for f in rows
    ]
    return _columns(head, lines)


def finish(script: str) -> list[Figure]:
    """Print this script's figures and append them to the run's JSON file."""
    print(table(_FIGURES))
    out = os.environ.get("SILL_BENCH_OUT")
    if out:
        path = Path(out)
    else:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = RUNS / f"{Path(script).stem}-{database()}-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = json.loads(path.read_text()) if path.exists() else {"figures": []}
    existing.setdefault("figures", [])
    existing["figures"].extend(asdict(f) | {"script": Path(script).stem} for f in _FIGURES)
    path.write_text(json.dumps(existing, indent=2) + "\n")
    sys.stdout.flush()
    return list(_FIGURES)


# --- the combined table of one run (make bench) ----------------------------------------------


def previous_run(before: Path) -> Path | None:
    """The newest run file of ``make bench`` older than ``before`` (same directory), of the
    same kind (quick or full) when there is one.

    Run files are named ``<UTC time>.json``; per-script files (``<script>-…``) are not runs.
    """
    older = sorted(
        p
        for p in before.parent.glob("2*.json")
        if p.name < before.name and p.stem[:8].isdigit() and "-" not in p.stem
    )
    quick_now = json.loads(before.read_text()).get("quick", False)
    alike = [p for p in older if json.loads(p.read_text()).get("quick", False) == quick_now]
    found = alike or older
    return found[-1] if found else None


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return (str(row.get("database")), str(row.get("script")), str(row.get("name")))


def report(path: Path, previous: Path | None = None) -> str:
    """The table of every figure in run file ``path``, with the previous run's ratio."""
    run = json.loads(path.read_text())
    before: dict[tuple[str, str, str], float] = {}
    if previous is not None:
        for row in json.loads(previous.read_text()).get("figures", []):
            before[_key(row)] = float(row["ratio"])
    head = (
        "database",
        "figure",
        "value",
        "baseline (same run)",
        "ratio",
        "goal",
        "result",
        "previous ratio",
    )
    lines = []
    for row in run.get("figures", []):
        unit = row["unit"]
        was = before.get(_key(row))
        lines.append(
            (
                row["database"],
                f"{row['script']}: {row['name']}",
                f"{_fmt(row['value'])} {unit}",
                f"{row['baseline_name']}: {_fmt(row['baseline'])} {unit}",
                f"{row['ratio']:.2f}x",
                row["goal"] or "-",
                _result(row["passed"]),
                "-" if was is None else f"{was:.2f}x",
            )
        )
    for error in run.get("errors", []):
        lines.append(
            (error["database"], f"{error['script']}: exited {error['returncode']}", "", "", "",
             "", "ERROR", "")
        )  # fmt: skip
    text = _columns(head, lines)
    if previous is not None:
        text += f"\n(previous run: {previous.relative_to(ROOT)})"
    return text


def failures(path: Path) -> int:
    """How many figures of run file ``path`` missed their goal, plus scripts that failed."""
    run = json.loads(path.read_text())
    missed = sum(1 for row in run.get("figures", []) if row["passed"] is False)
    return missed + len(run.get("errors", []))
