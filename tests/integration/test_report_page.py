"""The report of a real four-member CPU population (an in-process exploit, an exploit by restart, explores, a
resume; held-out results recorded by `async-pbt evaluate`) as headless Chromium shows it: it loads with no console
error or failed request, every plot is drawn at a readable size, and each section says what it should. The
README's screenshot is this page (scripts/report_screenshot.py)."""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.testing.report_page import evaluated_report, find_chromium, open_report, overlapping

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
    # Why curves begin at different frames (each at its member's first settled window) is said under the plot.
    assert "first settled window" in text["objective-over-frames"]
    # The exploit labels as the browser draws them (its font, not matplotlib's measure of it): none overlaps another.
    labels = page.exploit_labels
    assert sorted(label["text"] for label in labels) == ["0\u21921", "0\u21922"], labels
    assert all(label["right"] > label["left"] and label["bottom"] > label["top"] for label in labels), labels
    assert overlapping(labels) == []
    from PIL import Image

    with Image.open(shot) as image:
        assert image.width >= 1100 and image.height > 2000


def test_each_curve_ends_at_its_final_record_and_a_recipients_goes_on_after_its_exploit(report):
    """What the objective plot draws, read from the figure the page's SVG is made of."""
    from async_pbt_isaaclab.commands.population_history import population_history
    from async_pbt_isaaclab.commands.report_objective import objective_figure
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    data = population_history(Workspace(report.parent / "ws"), 0.0)
    ax = objective_figure(data).axes[0]
    for m in data["members"]:
        lines = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith(f"objective-{m['member']:03d}-run")]
        drawn = sorted((float(x), float(y)) for ln in lines for x, y in zip(*ln.get_data(), strict=True))
        record = m["record"]
        assert record.status == "finished"
        if m["final"] is None:  # member 3 explores at every decision: its last window may be empty
            assert m["member"] == 3 and drawn[-1][0] < record.frame
            continue
        assert drawn[-1] == (record.frame, pytest.approx(record.evidence.mean, rel=1e-6)), m["member"]
        for e in m["events"]:
            if e.get("state") == "applied" and e["outcome"] == "exploit":
                assert drawn[-1][0] > e["applied_frame"], (m["member"], e["applied_frame"], drawn[-1])
