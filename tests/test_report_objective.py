"""The report's objective plot as drawn (matplotlib's own figure, before it becomes SVG): each curve ends at its
member's final record, a recipient's curve goes on after its exploit, no decision is drawn at a value the member no
longer had, and no two exploit labels overlap."""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.commands.report_objective import objective_figure, on_curve


def _member(index, points, events=(), final=None, decided=()):
    return {
        "member": index,
        "scalars": {"pbt/objective_mean": list(points)},
        "objective": [],
        "final": final,
        "events": list(events),
        "decisions": [{"frame": f, "outcome": "keep"} for f in decided],
    }


def _exploit(donor, applied, generation=1):
    return {
        "state": "applied",
        "outcome": "exploit",
        "donor": donor,
        "applied_frame": applied,
        "frame": applied,
        "donor_frame": applied - 2048,
        "generation": generation,
    }


def _curve_points(fig, member):
    """Every (frame, value) the member's curve is drawn through, in frame order."""
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith(f"objective-{member:03d}-run")]
    return sorted((float(x), float(y)) for ln in lines for x, y in zip(ln.get_xdata(), ln.get_ydata(), strict=True))


def _decision_dots(fig, member):
    (dots,) = [c for c in fig.axes[0].collections if c.get_gid() == f"decisions-{member:03d}"]
    return [tuple(map(float, p)) for p in dots.get_offsets()]


def test_a_curve_ends_at_the_members_final_record():
    # The scalars end one publish before the record (what members wrote before the last record was logged).
    member = _member(0, [(0, -1200.0), (8192, -900.0)], final={"frame": 16384, "mean": -450.0})
    fig = objective_figure({"members": [member], "summary": {}})
    assert _curve_points(fig, 0)[-1] == (16384.0, -450.0)


def test_a_recipients_curve_continues_after_its_exploit_and_no_decision_sits_at_a_stale_value():
    donor = _member(0, [(f, -1000.0 + f / 20) for f in range(0, 32768 + 1, 4096)])
    # Member 1: its new generation has evidence only in its final record; member 2: none after its exploit.
    continues = _member(
        1,
        [(0, -1300.0), (4096, -1250.0), (8192, -1200.0)],
        [_exploit(0, 10240)],
        final={"frame": 32768, "mean": -300.0},
        decided=(8192, 16384, 24576, 32768),
    )
    stops = _member(2, [(0, -1400.0), (8192, -1350.0)], [_exploit(0, 10240)], decided=(8192, 16384, 24576))
    fig = objective_figure({"members": [donor, continues, stops], "summary": {}})
    drawn = _curve_points(fig, 1)
    assert max(f for f, _ in drawn) > 10240 and drawn[-1] == (32768.0, -300.0)
    points = [{"frame": f, "mean": v} for f, v in drawn]
    assert [f for f, _ in _decision_dots(fig, 1)] == [8192, 16384, 24576, 32768]
    for frame, value in _decision_dots(fig, 1):  # on the curve: between the old generation's end and the new one
        assert value == pytest.approx(on_curve(points, frame))
    # Member 2 has no evidence after frame 8192: its later decisions are not drawn at its old value.
    assert _decision_dots(fig, 2) == [(8192.0, -1350.0)]


def test_no_two_exploit_labels_overlap():
    # Three recipients of one donor at one frame, on curves a hair apart: the labels would sit on top of each other.
    donor = _member(0, [(f, 100.0 + f / 1000) for f in range(0, 40000, 4096)])
    recipients = [
        _member(i, [(f, 50.0 + i * 0.5) for f in range(0, 40000, 4096)], [_exploit(0, 20480)]) for i in (1, 2, 3)
    ]
    fig = objective_figure({"members": [donor, *recipients], "summary": {}})
    renderer = fig.canvas.get_renderer()
    labels = [t for t in fig.axes[0].texts if (t.get_gid() or "").startswith("exploit-label")]
    assert sorted(t.get_text() for t in labels) == ["0\u21921", "0\u21922", "0\u21923"]
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
