"""The HTML report as a user's browser shows it: opened in headless Chromium through Playwright, read back, and
photographed. Shared by the page test (tests/integration/test_report_page.py) and the script that regenerates the
README's screenshot (scripts/report_screenshot.py), so the picture in the docs is the page the test checked."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 1150, 900
"""The browser window (the README screenshot's width)."""


def find_chromium() -> str | None:
    """The Chromium binary on the PATH (Debian's ``chromium``, or ``chromium-browser``), else ``None``."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class ReportPage:
    """What the browser saw of the report."""

    problems: list[str] = field(default_factory=list)
    """Console errors and warnings, page errors, failed requests."""
    requests: list[str] = field(default_factory=list)
    """Every URL the page loaded (only ``file://`` for a self-contained page)."""
    images: list[dict[str, Any]] = field(default_factory=list)
    """Per ``<img>`` and per plot ``<svg>``: its section, rendered size, and whether it is drawn."""
    text: dict[str, str] = field(default_factory=dict)
    """Visible text per section id."""
    member_rows: list[str] = field(default_factory=list)
    """Row ids of the members table."""
    exploit_labels: list[dict[str, Any]] = field(default_factory=list)
    """Per exploit label of the objective plot (``donor→recipient``): its text and the box the browser drew it in."""


_IMAGES_JS = """() => {
  const out = [];
  for (const img of document.querySelectorAll('img')) {
    const r = img.getBoundingClientRect();
    out.push({kind: 'img', section: img.closest('section')?.id || '', width: r.width, height: r.height,
              drawn: img.complete && img.naturalWidth > 0});
  }
  for (const svg of document.querySelectorAll('.plot svg')) {
    const r = svg.getBoundingClientRect();
    out.push({kind: 'svg', section: svg.closest('section')?.id || '', width: r.width, height: r.height,
              drawn: svg.querySelectorAll('path, use').length > 20});
  }
  return out;
}"""


_LABELS_JS = """() => Array.from(document.querySelectorAll('[id^="exploit-label"]')).map(e => {
  const r = e.getBoundingClientRect();
  return {id: e.id, text: e.textContent.trim(), left: r.left, top: r.top, right: r.right, bottom: r.bottom};
})"""


def overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Pairs of boxes (``left``, ``top``, ``right``, ``bottom``) that share any area, by their ``text``."""
    return [
        (a["text"], b["text"])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if min(a["right"], b["right"]) > max(a["left"], b["left"])
        and min(a["bottom"], b["bottom"]) > max(a["top"], b["top"])
    ]


def _console(seen: ReportPage, message: Any) -> None:
    if message.type in ("error", "warning"):
        seen.problems.append(f"console {message.type}: {message.text}")


def open_report(
    html: Path, chromium: str, screenshot: Path | None = None, clip_to_section: str | None = None
) -> ReportPage:
    """Load ``html`` in headless ``chromium``; write a full-page ``screenshot`` (cut at the bottom of the section
    ``clip_to_section`` when given). Needs the ``playwright`` package (the ``test`` extra)."""
    from playwright.sync_api import sync_playwright

    seen = ReportPage()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.on("console", lambda m: _console(seen, m))
            page.on("pageerror", lambda e: seen.problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: seen.problems.append(f"request failed: {r.url}"))
            page.on("request", lambda r: seen.requests.append(r.url))
            page.goto(html.resolve().as_uri(), wait_until="load")
            seen.images = page.evaluate(_IMAGES_JS)
            seen.exploit_labels = page.evaluate(_LABELS_JS)
            for section in page.locator("section").all():
                seen.text[section.get_attribute("id") or ""] = section.inner_text()
            seen.member_rows = [r.get_attribute("id") or "" for r in page.locator("table.members tbody tr").all()]
            if screenshot is not None:
                box = page.locator(f"#{clip_to_section}").bounding_box() if clip_to_section else None
                if box:
                    bottom = box["y"] + box["height"] + 16
                    page.screenshot(
                        path=str(screenshot), full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": bottom}
                    )
                else:
                    page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return seen


def evaluated_report(workspace: Path, folder: Path, per_member: int = 2, episodes: int = 2) -> Path:
    """A copy of ``workspace`` in ``folder/ws`` with ``per_member`` checkpoints of each member evaluated by
    ``async-pbt evaluate`` (recorded into the copy's ``evaluations.jsonl``, as a user would), and its report
    ``folder/report.html``; returns the report. Raises when a command fails."""
    import subprocess
    import sys

    ws = folder / "ws"
    shutil.copytree(workspace, ws)
    checkpoints = []
    for member in sorted((ws / "members").iterdir()):
        found = sorted((member / "checkpoints").glob("*.pth"))
        step = max(1, len(found) // per_member)
        checkpoints += found[step - 1 :: step][:per_member]
    cli = [sys.executable, "-m", "async_pbt_isaaclab.cli"]
    for args in (
        ["evaluate", *map(str, checkpoints), "--episodes", str(episodes)],
        ["report", str(ws), "--out", str(folder / "report.html")],
    ):
        proc = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"async-pbt {args[0]} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return folder / "report.html"
