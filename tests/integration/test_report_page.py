"""The report of a real four-member CPU population (an in-process exploit, an exploit by restart, explores, a
resume; held-out results recorded by `async-pbt evaluate`) as headless Chromium shows it: it loads with no console
error or failed request, every plot is drawn at a readable size, and each section says what it should. The
README's screenshot is this page (scripts/report_screenshot.py)."""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.testing.report_page import evaluated_report, find_chromium, open_report

pytestmark = pytest.mark.slow

CHROMIUM = find_chromium()


@pytest.fixture(scope="module")
def report(mixed_population, tmp_path_factory):
    _, ws = mixed_population
    folder = tmp_path_factory.mktemp("report_page")  # the shared population is only read: evaluated in a copy
    return evaluated_report(ws, folder)


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it)",
)
def test_the_report_of_four_members_loads_in_chromium_with_every_plot_drawn(report, tmp_path):
    shot = tmp_path / "report.png"
    page = open_report(report, CHROMIUM, shot)
    assert page.problems == []
    assert all(u.startswith("file://") for u in page.requests), page.requests
    assert page.member_rows == [f"member-{m:03d}" for m in range(4)]
    plots = {i["section"]: i for i in page.images if i["kind"] == "svg"}
    assert sorted(plots) == ["hyperparameters", "lineage", "objective-over-frames"]
    for image in page.images:  # every image, inline SVG or <img>, is drawn at a readable size
        assert image["drawn"] and image["width"] > 400 and image["height"] > 150, image
    text = page.text
    assert "exploits applied\t2" in text["summary"] and "explores applied" in text["summary"]
    assert "held-out" in text["summary"] and "no held-out evaluations" not in text["summary"]
    assert "1 exploit, 0 explores; 1 in-process, 0 by restart" in text["members"]
    assert "1 exploit, 0 explores; 0 in-process, 1 by restart" in text["members"]
    assert "applied at frame" in text["lineage"] and "decided at frame" in text["decisions"]
    assert "Unchanged in every member: entropy_coef = 0." in text["hyperparameters"]
    assert "evaluate seeds" in text["held-out-evaluations"]
    from PIL import Image

    with Image.open(shot) as image:
        assert image.width >= 1100 and image.height > 2000
