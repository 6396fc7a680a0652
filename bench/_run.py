"""``make bench``: every benchmark on SQLite, then on PostgreSQL + Redis, in one table.

Runs each ``bench/[!_]*.py`` as its own process, first on SQLite (``DATABASE_URL`` and
``REDIS_URL`` removed: a throwaway file in a temporary data dir and the embedded broker), then,
when ``DATABASE_URL`` names PostgreSQL, again on a throwaway database of that server (created
for the run from a migrated template, one copy per script, all dropped at the end) with
``REDIS_URL`` as cache and broker. A script whose source says ``DATABASE_INDEPENDENT = True``
(pure computation: signatures, canonicalisation) runs once, labelled ``any``.

Every figure goes to one file, ``var/bench/<UTC time>.json`` (``SILL_BENCH_OUT``); the table at
the end is :func:`_harness.report` of it, with the previous run's ratios. Exit status 1 when a
figure missed its goal or a script failed.

Usage: ``make bench [BENCH_ARGS="--quick --only http"]`` or
``.venv/bin/python bench/_run.py [--quick] [--only NAME ...] [--sqlite-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from _harness import ROOT, RUNS, failures, previous_run, report

BENCH = ROOT / "bench"
# A script still running after this long is stopped and reported as failed.
SCRIPT_TIMEOUT = 600


def scripts(only: list[str]) -> list[Path]:
    found = sorted(p for p in BENCH.glob("[!_]*.py"))
    if only:
        found = [p for p in found if p.stem in only]
    return found


def database_independent(script: Path) -> bool:
    return any(
        line.strip().startswith("DATABASE_INDEPENDENT = True")
        for line in script.read_text().splitlines()
    )


def _admin_connection(url: str):
    import psycopg

    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    return psycopg.connect(admin, autocommit=True)


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@contextmanager
def postgres_template(url: str, stamp: str):
    """A migrated template database for this run; yields a factory of throwaway copies."""
    base = (urlsplit(url).path.strip("/") or "sill") + "_bench_" + stamp.lower()
    template = base + "_t"
    made: list[str] = []
    with _admin_connection(url) as admin:
        admin.execute(f'CREATE DATABASE "{template}"')
        made.append(template)
        try:
            env = {**os.environ, "DATABASE_URL": _with_database(url, template),
                   "SILL_TESTING": "1", "SILL_DATA_DIR": tempfile.mkdtemp(prefix="sill-bench-")}  # fmt: skip
            env.pop("REDIS_URL", None)
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                cwd=ROOT, env=env, check=True,
            )  # fmt: skip

            def copy(script: str) -> str:
                name = f"{base}_{script}"[:63]
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                made.append(name)
                return _with_database(url, name)

            yield copy
        finally:
            for name in reversed(made):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _figure_count(out: Path) -> int:
    return len(json.loads(out.read_text()).get("figures", []))


def run_one(script: Path, env: dict[str, str], out: Path, label: str) -> None:
    print(f"== {script.relative_to(ROOT)} ({label})", flush=True)
    before = _figure_count(out)
    started = time.monotonic()
    try:
        returncode = subprocess.run(
            [sys.executable, str(script)], cwd=ROOT, env=env, check=False, timeout=SCRIPT_TIMEOUT
        ).returncode
    except subprocess.TimeoutExpired:
        print(f"   (stopped after {SCRIPT_TIMEOUT} s)", flush=True)
        returncode = -1
    took = time.monotonic() - started
    print(f"   ({took:.0f} s)", flush=True)
    run = json.loads(out.read_text())
    run.setdefault("seconds", {})[f"{label}:{script.stem}"] = round(took, 1)
    if returncode != 0 and len(run.get("figures", [])) == before:
        # A script that printed figures and then exited 1 for a missed goal is not an error:
        # its FAIL rows say so. One that wrote nothing crashed.
        run.setdefault("errors", []).append(
            {"script": script.stem, "database": label, "returncode": returncode}
        )
    out.write_text(json.dumps(run, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="short runs, for development")
    parser.add_argument("--only", nargs="*", default=[], help="script names without .py")
    parser.add_argument("--sqlite-only", action="store_true")
    args = parser.parse_args()

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RUNS.mkdir(parents=True, exist_ok=True)
    out = RUNS / f"{stamp}.json"
    out.write_text(
        json.dumps({"started": stamp, "quick": args.quick, "figures": [], "errors": []}) + "\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    base["SILL_BENCH_OUT"] = str(out)
    base["PYTHONUNBUFFERED"] = "1"
    if args.quick:
        base["SILL_BENCH_QUICK"] = "1"
    todo = scripts(args.only)
    started = time.monotonic()

    for script in todo:
        independent = database_independent(script)
        env = {**base, "SILL_BENCH_DATABASE": "any"} if independent else base
        run_one(script, env, out, "any" if independent else "sqlite")

    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")) and not args.sqlite_only:
        pg_scripts = [s for s in todo if not database_independent(s)]
        with postgres_template(url, stamp) as copy:
            for script in pg_scripts:
                env = {**base, "DATABASE_URL": copy(script.stem)}
                if os.environ.get("REDIS_URL"):
                    env["REDIS_URL"] = os.environ["REDIS_URL"]
                run_one(script, env, out, "postgresql")
        _empty_bench_queue(os.environ.get("REDIS_URL", ""))

    previous = previous_run(out)
    print()
    print(report(out, previous))
    print(f"(written to {out.relative_to(ROOT)}; {time.monotonic() - started:.0f} s in all)")
    return 1 if failures(out) else 0


def _empty_bench_queue(redis_url: str) -> None:
    """Drop the Celery messages the PostgreSQL pass left in REDIS_URL's broker: they name
    refunds of a database that no longer exists (REDIS_URL should be a bench-only database)."""
    if not redis_url:
        return
    import redis

    client = redis.Redis.from_url(redis_url)
    client.delete("celery")


if __name__ == "__main__":
    sys.exit(main())
