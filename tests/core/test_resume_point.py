"""What a stop costs and where a member resumes: the line printed by the launcher and the member after Ctrl-C.

Built from the files a member really leaves (``record.json`` published at its last frame, ``state.json`` naming
its last checkpoint); the end-to-end check with real members is in tests/integration/test_cpu_population.py.
"""

from __future__ import annotations

from async_pbt_isaaclab.core.state.member_state import MemberState
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import Workspace, checkpoint_frame, checkpoint_name
from async_pbt_isaaclab.core.workspace.resume import describe_resume, resume_point
from async_pbt_isaaclab.core.workspace.state_files import save_state


def _member(tmp_path, frame: int | None, checkpoint_at: int | None, make_record):
    ws = Workspace(tmp_path / "ws")
    ws.ensure(num_policies=2, objective="episode_return")
    folder = ws.member_dir(0)
    folder.mkdir(parents=True, exist_ok=True)
    if frame is not None:
        fsio.atomic_write_json(folder / "record.json", make_record(0, [1.0] * 8, frame=frame).to_dict())
    last = f"members/000/checkpoints/{checkpoint_name(1, checkpoint_at)}" if checkpoint_at is not None else ""
    save_state(folder / "state.json", MemberState(member=0, last_checkpoint=last))
    return ws


def test_frames_since_the_last_checkpoint_are_counted(tmp_path, make_record):
    ws = _member(tmp_path, frame=190_464, checkpoint_at=163_840, make_record=make_record)
    assert resume_point(ws.root, 0) == (190_464, 163_840, "members/000/checkpoints/g0001_f000000163840.pth")
    line = describe_resume(ws.root, 0)
    assert line == (
        "member 000 stopped at frame 190,464; 26,624 frames since its last checkpoint are lost: its next "
        "start resumes from frame 163,840 (members/000/checkpoints/g0001_f000000163840.pth)"
    )


def test_a_member_without_a_checkpoint_starts_again_from_zero(tmp_path, make_record):
    ws = _member(tmp_path, frame=12_288, checkpoint_at=None, make_record=make_record)
    assert describe_resume(ws.root, 0) == (
        "member 000 stopped at frame 12,288 with no checkpoint yet: its next start "
        "begins again from frame 0 (12,288 frames lost)"
    )
    ws = _member(tmp_path / "early", frame=None, checkpoint_at=None, make_record=make_record)
    assert describe_resume(ws.root, 0) == (
        "member 000 stopped before its first publish with no checkpoint yet: its next start begins again from frame 0"
    )


def test_an_unreadable_state_is_reported_not_raised(tmp_path, make_record):
    ws = _member(tmp_path, frame=100, checkpoint_at=None, make_record=make_record)
    (ws.member_dir(0) / "state.json").write_text("{not json")
    assert describe_resume(ws.root, 0).startswith("member 000: cannot tell where it resumes (")


def test_checkpoint_frame_reads_the_name():
    assert checkpoint_frame("members/001/checkpoints/g0002_f000000049152.pth") == 49_152
    assert checkpoint_frame("members/001/checkpoints/other.pth") is None
