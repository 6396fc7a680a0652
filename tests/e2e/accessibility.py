"""Browser checks shared by the page sweep: axe-core, horizontal overflow, console errors.

axe-core 4.10.3 is vendored under tests/e2e/vendor/axe-core/ with its licences (no network at
test time). It is injected with ``page.add_script_tag(path=…)``, which the page's CSP would
refuse, so contexts that run it are made with ``bypass_csp=True``; the CSP itself is checked
by tests/e2e/test_csp_pages.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import ConsoleMessage, Page

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ("serious", "critical")

# How a check names an element in its failure: tag#id.class and a bit of its text.
NAME_JS = """(el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    if (el.classList.length) s += "." + Array.from(el.classList).join(".");
    const text = (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 40);
    return text ? `${s} "${text}"` : s;
  }"""

# Elements whose right edge passes the viewport, deepest first, named so a failure says what
# to fix (tag#id.class and a bit of text).
OVERFLOWING = """
() => {
  const limit = document.documentElement.clientWidth;
  const name = __NAME__;
  const hiddenByClip = (el) => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const st = getComputedStyle(p);
      if (st.overflowX !== "visible" && p.getBoundingClientRect().right <= limit + 1) return true;
    }
    return false;
  };
  const found = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= limit + 1) continue;
    if (getComputedStyle(el).position === "fixed") continue;
    if (hiddenByClip(el)) continue;
    // Only the innermost offenders: skip an element whose child is already listed.
    if (Array.from(el.children).some((c) => c.getBoundingClientRect().right > limit + 1)) continue;
    found.push(`${name(el)} (right edge ${Math.round(r.right)} px)`);
  }
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth, found: found.slice(0, 12)};
}
""".replace("__NAME__", NAME_JS)


# Content cut off inside a box that hides its overflow (a stacked table card on a phone, a
# rounded panel): the page itself fits, so OVERFLOWING cannot see it. Each box is named with the
# deepest element that passes its right edge. Visually hidden helpers (1 px wide) are skipped.
CLIPPED = """
() => {
  const name = __NAME__;
  const found = [];
  for (const box of document.querySelectorAll("main *")) {
    if (["INPUT", "SELECT", "TEXTAREA", "svg"].includes(box.tagName) || box.closest("svg")) continue;
    const st = getComputedStyle(box);
    if (!["hidden", "clip"].includes(st.overflowX) || box.clientWidth <= 2) continue;
    if (box.scrollWidth <= box.clientWidth + 1) continue;
    const edge = box.getBoundingClientRect().right;
    let culprit = null;
    for (const el of box.querySelectorAll("*")) {
      const r = el.getBoundingClientRect();
      if (r.width > 2 && r.right > edge + 1) culprit = el;
    }
    if (culprit) found.push(`${name(culprit)} is cut off by ${name(box).slice(0, 60)}`);
  }
  return found.slice(0, 12);
}
""".replace("__NAME__", NAME_JS)

# A table wider than its scrolling wrapper: on a laptop its last columns are out of sight.
SCROLLING_TABLES = """
() => Array.from(document.querySelectorAll("main .table-wrap"))
  .filter((w) => w.scrollWidth > w.clientWidth + 1)
  .map((w) => `table "${w.getAttribute("aria-label") || ""}" is ${w.scrollWidth} px wide in ${w.clientWidth} px`)
"""


def clipped_content(page: Page) -> list[str]:
    """Text or badges cut off by a box that hides its overflow, one line each."""
    found: list[str] = page.evaluate(CLIPPED)
    return [f"cut off: {line}" for line in found]


def scrolling_tables(page: Page) -> list[str]:
    """Tables that scroll sideways inside their wrapper (on a laptop: columns out of sight)."""
    found: list[str] = page.evaluate(SCROLLING_TABLES)
    return found


def run_axe(page: Page) -> list[str]:
    """axe-core's serious and critical violations on the page as it stands, one line each."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    result: dict[str, Any] = page.evaluate(
        "async () => await axe.run(document, {resultTypes: ['violations']})"
    )
    lines = []
    for violation in result["violations"]:
        if violation.get("impact") not in BLOCKING_IMPACTS:
            continue
        for node in violation["nodes"][:5]:
            summary = (node.get("failureSummary") or "").replace("\n", " ")
            lines.append(
                f"axe {violation['impact']} {violation['id']}: {node['target']} — {summary[:240]}"
            )
    return lines


def horizontal_overflow(page: Page) -> str | None:
    """None when the page fits the viewport's width; otherwise what sticks out."""
    answer: dict[str, Any] = page.evaluate(OVERFLOWING)
    if answer["scrollWidth"] <= answer["innerWidth"]:
        return None
    culprits = "; ".join(answer["found"]) or "(no single element found)"
    return f"page is {answer['scrollWidth']} px wide at {answer['innerWidth']} px: {culprits}"


@dataclass
class ConsoleErrors:
    """Console errors and uncaught exceptions seen by a page since the last ``take()``."""

    page: Page
    seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda error: self.seen.append(f"script error: {error}"))

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.seen.append(f"console error: {message.text}")

    def take(self, *, expected_status: int | None = None) -> list[str]:
        found, self.seen = self.seen, []
        if expected_status is not None:
            # The browser logs the 403/404 answer of a page that is meant to answer so.
            marker = f"status of {expected_status}"
            found = [line for line in found if marker not in line]
        return found
