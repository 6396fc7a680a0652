"""Typed readers for configuration from the environment.

Each helper fails loudly (``ImproperlyConfigured``) on a value it cannot read, so a typo in a
deployment surfaces at start-up rather than as a silent default.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None, *, required: bool = False) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        if required:
            raise ImproperlyConfigured(f"{name} must be set")
        return default
    return value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from exc


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from exc


def env_url(name: str, default: str) -> str:
    """An absolute ``http://`` or ``https://`` address (what links are built from): one
    without its scheme or host would make links that open nothing, and nothing would say so."""
    value = env_str(name, default) or default
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(
            f"{name} must be an absolute http(s) address such as https://refunds.example.com, "
            f"got {value!r}"
        )
    return value.strip()


def env_log_level(name: str, default: str) -> str:
    """A logging level's name, in any case (``debug`` is ``DEBUG``): logging itself knows only
    the upper-case names, and an unknown one stops the process in the logging setup, naming
    no variable."""
    value = (os.environ.get(name) or "").strip().upper()
    if not value:
        return default
    if value not in logging.getLevelNamesMapping():
        raise ImproperlyConfigured(
            f"{name} must be a log level (DEBUG, INFO, WARNING, ERROR or CRITICAL), "
            f"got {os.environ[name]!r}"
        )
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    path = Path(value) if value else default
    return path.expanduser().resolve()
