"""Playwright in Debian's Chromium against Django's live server."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_PASSWORD

# live_server runs in a thread beside Playwright's event loop.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def pytest_collection_modifyitems(config, items):
    if CHROMIUM:
        return
    skip = pytest.mark.skip(reason="Debian's chromium is not installed (apt-get install chromium)")
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
        ],
    }


@pytest.fixture
def screenshot_dir() -> Path:
    path = Path(settings.SILL_DATA_DIR) / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_in(page: Page, base: str, email: str) -> None:
    """Log in to the demo site at ``base`` as ``email`` and wait for its dashboard."""
    page.goto(f"{base}/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Northwind Coffee")).to_be_visible()
