"""Templates carry no inline CSS or JavaScript: styles and scripts live in static/ (so a
Content-Security-Policy without 'unsafe-inline' can be set, and one htmx configuration holds)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = sorted((Path(__file__).resolve().parent.parent / "templates").rglob("*.html"))
INLINE = re.compile(
    r"<style\b|\sstyle\s*=|\son[a-z]+\s*=|<script(?![^>]*\bsrc=)[^>]*>|\shx-on[:-]", re.I
)


def test_there_are_templates():
    assert len(TEMPLATES) > 10


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_it_has_no_inline_style_script_or_handler(path):
    found = [
        f"{path.name}:{n}: {line.strip()[:80]}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if INLINE.search(line)
    ]
    assert found == []
