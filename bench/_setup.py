"""Shared set-up for the bench scripts: Django on a throwaway data dir."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def django_setup(name: str) -> Path:
    """Configure Django on a fresh SQLite file (or DATABASE_URL if set) and migrate."""
    sys.path.insert(0, str(ROOT))
    data_dir = Path(tempfile.mkdtemp(prefix=f"sill-bench-{name}-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sill.settings")
    os.environ["SILL_DATA_DIR"] = str(data_dir)
    os.environ["SILL_TESTING"] = "1"
    os.environ.setdefault("SILL_LOG_LEVEL", "WARNING")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return data_dir
