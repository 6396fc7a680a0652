"""Production settings: loud failures, and a clean `check --deploy`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    skip = ("SILL_", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE")
    base = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    base.update({"SILL_DATA_DIR": str(tmp_path), **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_check_deploy_with_the_documented_variables(tmp_path):
    result = _run(
        tmp_path,
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        SILL_SECRET_KEY="k" * 20 + "-a-long-random-production-secret-0123456789",
        SILL_ALLOWED_HOSTS="refunds.example.com",
        SILL_AUDIT_SIGNING_KEY="AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off(tmp_path):
    result = _run(tmp_path, "check")
    assert result.returncode != 0
    assert "SILL_SECRET_KEY must be set" in result.stderr


def test_it_refuses_a_malformed_boolean(tmp_path):
    result = _run(tmp_path, "check", DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG must be a boolean" in result.stderr
