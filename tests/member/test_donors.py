"""Which published states a slice donor still holds in memory, and why a recipient copies the donor's file otherwise.

A decision names the donor's checkpoint as the donor's record offered it; with the background writer that can be an
older publish than the ones the donor keeps (``member/donors.py:KEEP_PUBLISHED``), and the recipient then copies the
file, saying why in its audit log (the executor logs the reason returned here).
"""

from __future__ import annotations

from typing import Any

from async_pbt_isaaclab.core.decision.generation import DonorSource
from async_pbt_isaaclab.member.donors import KEEP_PUBLISHED, KeptState, KeptStates, in_memory


class Fingerprints:
    """The two calls :func:`in_memory` makes of a trainer: a state's model fingerprint, and whether it fits."""

    def fingerprint(self, state: dict[str, Any]) -> str:
        return state["model"]

    def check_fits(self, state: dict[str, Any]) -> None:
        if state["model"] == "another shape":
            raise ValueError("does not fit")


def _path(frame: int) -> str:
    return f"members/000/checkpoints/g0000_f{frame:012d}.pth"


def _kept(frame: int, model: str | None = None, now: str | None = None) -> KeptState:
    """The state published at ``frame`` with ``model`` (its fingerprint then), holding ``now`` when it changed since."""
    model = model or f"model at {frame}"
    return KeptState(_path(frame), f"sha of {frame}", model, {"model": now or model})


def _source(frame: int, sha256: str | None = None) -> DonorSource:
    return DonorSource(member=0, generation=0, checkpoint=_path(frame), sha256=sha256 or f"sha of {frame}", frame=frame)


def test_a_donor_keeps_its_newest_publishes_and_an_older_one_is_copied_from_its_file():
    donors, trainer = KeptStates([0, 1]), Fingerprints()
    frames = [1024 * (i + 1) for i in range(KEEP_PUBLISHED + 1)]
    for frame in frames:
        donors.keep(0, _kept(frame))
    assert in_memory(donors, trainer, _source(frames[0])) == (
        None,
        "not kept in memory (older than the last two it published)",
    )
    for frame in frames[1:]:
        state, why = in_memory(donors, trainer, _source(frame))
        assert state == {"model": f"model at {frame}"} and why == ""
        state["model"] = "changed by the recipient"  # a copy: what the donor keeps stays as published
    assert in_memory(donors, trainer, _source(frames[-1]))[0] == {"model": f"model at {frames[-1]}"}


def test_a_kept_state_that_is_not_the_one_named_is_refused_with_the_reason():
    donors, trainer = KeptStates([0, 1]), Fingerprints()
    donors.keep(0, _kept(1024))
    donors.keep(0, _kept(2048, now="changed after it was published"))
    state, why = in_memory(donors, trainer, _source(1024, sha256="another sha"))
    assert state is None and why == "kept checksum sha of 1024 is not the decision's another sha"
    state, why = in_memory(donors, trainer, _source(2048))
    assert state is None and why.startswith("model fingerprint ") and "changed since it was published" in why
    # A donor in another process, or a state that does not fit the recipient: the file, whose fetch says why.
    assert in_memory(KeptStates([1]), trainer, _source(1024)) == (None, "")
    donors.keep(0, _kept(4096, model="another shape"))
    assert in_memory(donors, trainer, _source(4096)) == (None, "")
