"""The rank-group protocol of member/group.py over an in-process group of two threads (the collectives' order, the
gathered evidence, the divergence check); the torchrun processes are tests/integration/test_rank_groups.py."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest

from async_pbt_isaaclab.core.state.evidence import EpisodeBatch
from async_pbt_isaaclab.member.group import GatheredSummarySource, GroupDiverged, GroupFollower, GroupLeader


class ThreadGroup:
    """Two ranks as threads: each collective waits for both (a barrier), as torch.distributed's do."""

    def __init__(self, rank: int, shared: dict[str, Any]):
        self.rank, self.world_size, self.shared = rank, 2, shared

    def _exchange(self, value: Any) -> list[Any]:
        slots, barrier = self.shared["slots"], self.shared["barrier"]
        slots[self.rank] = value
        barrier.wait()
        out = list(slots)
        barrier.wait()
        return out

    def broadcast(self, value: Any) -> Any:
        return self._exchange(value)[0]

    def gather(self, value: Any) -> list[Any]:
        return self._exchange(value)


class Source:
    def __init__(self, episodes: list[float], settled: bool = True):
        self.episodes, self.settled, self.generation = episodes, settled, 0

    def drain(self) -> EpisodeBatch:
        batch = EpisodeBatch(
            returns=list(self.episodes), lengths=[1] * len(self.episodes), truncated=[False] * len(self.episodes),
            generation=self.generation, settled=self.settled,
        )  # fmt: skip
        self.episodes = []
        return batch

    def start_generation(self, generation: int) -> None:
        self.generation = generation


class Trainer:
    def __init__(self, weights: str):
        self.weights, self.values = weights, {}

    def load(self, state, values) -> None:
        self.weights, self.values = state["model"], dict(values)

    def fingerprint(self, state=None) -> str:
        return self.weights

    def optimizer_learning_rates(self) -> list[float]:
        return [self.values.get("learning_rate", 0.0)]


def _pair(follower_trainer: Trainer, sources: tuple[Source, Source], rank_0: Trainer | None = None, values=None):
    shared = {"slots": [None, None], "barrier": threading.Barrier(2, timeout=30)}
    log: list[tuple[str, dict]] = []
    groups = ThreadGroup(0, shared), ThreadGroup(1, shared)
    gathered = GatheredSummarySource(sources[0], groups[0]), GatheredSummarySource(sources[1], groups[1])
    leader = GroupLeader(
        groups[0], gathered[0], rank_0 or Trainer("donor"), lambda kind, body: log.append((kind, body)), values
    )
    follower = GroupFollower(groups[1], follower_trainer, gathered[1])
    return leader, follower, gathered, log


def _load(leader: GroupLeader, state: dict, values: dict, plan: dict | None) -> None:
    """What the executor does on rank 0: the trainer loads, then the leader is told."""
    leader.trainer.load(state, values)
    leader.loaded(state, values, plan)


def _both(rank0, rank1) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(call) -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, args=(rank1,))
    thread.start()
    run(rank0)
    thread.join(60)
    return errors


def test_a_load_reaches_the_follower_at_the_next_epoch_start_and_both_ranks_are_logged():
    follower_trainer = Trainer("stale")
    leader, follower, gathered, log = _pair(follower_trainer, (Source([1.0]), Source([2.0, 3.0])))
    gathered[0].start_generation(4)  # rank 0's exploit started generation 4 after its load
    _load(leader, {"model": "donor"}, {"learning_rate": 0.5}, {"generation": 4})
    assert not _both(leader.epoch_start, follower.epoch_start)
    assert follower_trainer.weights == "donor" and follower_trainer.values == {"learning_rate": 0.5}
    assert gathered[1].generation == 4 and gathered[1].local.generation == 4
    ((kind, body),) = log
    assert kind == "group_synced" and body["reason"] == "exploit" and body["generation"] == 4
    assert body["model_sha256"] == ["donor", "donor"] and body["optimizer_lr"] == [[0.5], [0.5]]
    # The next epoch start sends nothing to load and logs nothing.
    assert not _both(leader.epoch_start, follower.epoch_start) and len(log) == 1


def test_ranks_that_differ_after_a_load_stop_the_group():
    class Stuck(Trainer):
        def load(self, state, values) -> None:  # a rank whose load did not take
            self.values = dict(values)

    leader, follower, _, log = _pair(Stuck("stale"), (Source([]), Source([])))
    _load(leader, {"model": "donor"}, {"learning_rate": 0.5}, None)
    errors = _both(leader.epoch_start, follower.epoch_start)
    assert [type(e) for e in errors] == [GroupDiverged] and "restore" in str(errors[0])
    assert log[0][1]["model_sha256"] == ["donor", "stale"]


def test_every_ranks_episodes_are_rank_0s_evidence_settled_when_every_rank_is():
    _, _, gathered, _ = _pair(Trainer("w"), (Source([1.0]), Source([2.0, 3.0], settled=False)))
    assert not _both(gathered[0].pull, gathered[1].pull)
    batch = gathered[0].drain()
    assert batch.returns == [1.0, 2.0, 3.0] and not batch.settled
    assert gathered[0].drain().returns == []  # drained
    gathered[1].local.episodes, gathered[1].local.settled = [4.0], True
    assert not _both(gathered[0].pull, gathered[1].pull)
    gathered[0].start_generation(1)  # gathered under the old weights: dropped
    assert gathered[0].drain().returns == []


@pytest.mark.parametrize("generation", [0, 3])
def test_a_follower_follows_rank_0s_generation_without_a_load(generation):
    leader, follower, gathered, log = _pair(Trainer("w"), (Source([]), Source([])))
    gathered[0].start_generation(generation)
    assert not _both(leader.epoch_start, follower.epoch_start)
    assert gathered[1].generation == generation and not log


def test_a_fresh_start_sends_rank_0s_own_state_and_the_members_live_values_once():
    from async_pbt_isaaclab.core.decision.plan_inputs import TrainerAbilities

    class Fresh(Trainer):
        def abilities(self) -> TrainerAbilities:
            return TrainerAbilities(frozenset({"learning_rate", "entropy_coef"}))

        def learning_rate(self) -> float:
            return 0.25

        def full_state(self) -> dict:
            return {"model": self.weights}

    rank_0 = Fresh("drawn")
    rank_0.values = {"learning_rate": 0.25}  # rank 0 was built with the member's values
    # The member's values: a key set only by a restart is not sent (no setter on the running trainer).
    values = {"learning_rate": 0.25, "entropy_coef": 0.01, "horizon_length": 64}
    leader, follower, _, log = _pair(Trainer("config's"), (Source([]), Source([])), rank_0, values)
    assert not _both(leader.epoch_start, follower.epoch_start)
    assert follower.trainer.weights == "drawn"
    assert follower.trainer.values == {"learning_rate": 0.25, "entropy_coef": 0.01}
    ((kind, body),) = log
    assert kind == "group_synced" and body["reason"] == "start" and body["model_sha256"] == ["drawn", "drawn"]
    assert not _both(leader.epoch_start, follower.epoch_start) and len(log) == 1  # once


LEAVES_AT_EXIT = """
import atexit, sys
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
atexit.register(lambda: print("in the group at the end:", dist.is_initialized()))  # atexit runs last-in first-out
from async_pbt_isaaclab.torch_group import TorchRankGroup
TorchRankGroup(), TorchRankGroup()
"""


def test_a_rank_leaves_the_process_group_before_the_interpreter_ends(tmp_path):
    """Neither trainer leaves the process group, and a gloo rank that exits in it can abort (SIGABRT) as gloo's
    threads outlive the interpreter: torchrun reports a finished member as failed. A group leaves it at exit."""
    done = subprocess.run([sys.executable, "-c", LEAVES_AT_EXIT, str(tmp_path / "store")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "in the group at the end: False", done.stdout + done.stderr
