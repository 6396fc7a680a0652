"""Every table sits in a scrolling wrapper: between 641 and 900 px (a tablet, a small laptop)
tables keep their columns, and one wider than the page scrolls inside its wrapper instead of
widening the page (static/css/sill.css: ``.table-wrap``; phones stack them as cards).

The wrapper is the one the pages share: ``<div class="table-wrap" tabindex="0" role="region"
aria-label="…">`` (or ``aria-labelledby``) directly around the ``<table>``, so a keyboard can
reach a region that scrolls and a screen reader names it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = sorted((Path(__file__).resolve().parent.parent / "templates").rglob("*.html"))
WITH_TABLES = [path for path in TEMPLATES if "<table" in path.read_text(encoding="utf-8")]
WRAP_OPENS = re.compile(
    r'<div class="table-wrap" tabindex="0" role="region" aria-label(?:ledby)?="[^"]+">\s*\Z'
)
WRAP_CLOSES = re.compile(r"\A\s*</div>")


def test_there_are_tables():
    assert len(WITH_TABLES) > 10


@pytest.mark.parametrize("path", WITH_TABLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_table_sits_in_a_table_wrap(path):
    text = path.read_text(encoding="utf-8")
    unwrapped = []
    for opened in re.finditer(r"<table\b", text):
        closed = text.index("</table>", opened.start()) + len("</table>")
        if not (WRAP_OPENS.search(text[: opened.start()]) and WRAP_CLOSES.match(text[closed:])):
            line = text.count("\n", 0, opened.start()) + 1
            unwrapped.append(f"{path.name}:{line}")
    assert unwrapped == []
