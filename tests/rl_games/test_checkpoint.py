"""Checkpoint primitives against real rl_games checkpoints: atomic save, safe load, refusals, metadata."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from rl_games_line import NUMPY_VERSION, restore_with_plain_rl_games

from async_pbt_isaaclab.core.workspace.fsio import is_temp_file, sha256_file
from async_pbt_isaaclab.rl_games.checkpoint import (
    PBT_KEY,
    CheckpointError,
    DisallowedGlobalError,
    is_raw_rl_games_checkpoint,
    load_checkpoint,
    read_pbt_metadata,
    rl_games_safe_globals,
    save_checkpoint,
    with_pbt_metadata,
)

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)


class Marker:
    """A class a checkpoint may reference; safe loading must refuse it."""

    def __init__(self, value=1):
        self.value = value


class RunsCommand:
    """Pickles as a call to os.system: unpickling it in full would run a shell command."""

    def __init__(self, sentinel: Path):
        self.sentinel = sentinel

    def __reduce__(self):
        return (os.system, (f"touch {self.sentinel}",))


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """A real a2c_continuous agent after two epochs: input + value normalisation, adaptive LR, Adam state."""
    from async_pbt_isaaclab.testing.tiny_agent import small_pendulum_agent_cfg, train_agent

    cfg = small_pendulum_agent_cfg(tmp_path_factory.mktemp("agent") / "runs", "ckpt", max_epochs=2, save_best_after=0)
    config = cfg["params"]["config"]
    assert config["normalize_input"] and config["normalize_value"] and config["lr_schedule"] == "adaptive"
    return train_agent(cfg)


def assert_states_equal(a, b):
    assert set(a) == set(b)
    for key in a:
        va, vb = a[key], b[key]
        if isinstance(va, torch.Tensor):
            assert torch.equal(va, vb), key
        elif isinstance(va, dict):
            assert_states_equal(va, vb)
        elif isinstance(va, (list, tuple)):
            assert len(va) == len(vb)
            for x, y in zip(va, vb, strict=True):
                if isinstance(x, dict):
                    assert_states_equal(x, y)
                else:
                    assert x == y
        else:
            assert va == vb, key


# ----------------------------------------------------------------------------- round trips
def test_real_checkpoint_round_trip_weights_only(agent, tmp_path):
    state = agent.get_full_state_weights()
    # What the allowlist is for: rl_games stores a numpy float32 here.
    assert isinstance(state["last_mean_rewards"], np.float32)
    assert "running_mean_std.running_mean" in state["model"] and "value_mean_std.count" in state["model"]
    assert "a2c_network.sigma" in state["model"] and state["optimizer"]["state"]
    meta = {
        "member": 3,
        "generation": 2,
        "hparams": {"learning_rate": 3e-4, "gamma": np.float32(0.99)},
        "lineage": [0, 3],
        "note": None,
        "objective": float("nan"),
    }
    path = tmp_path / "member_3.pth"
    digest = save_checkpoint(path, with_pbt_metadata(state, meta))
    assert digest == sha256_file(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert not [p for p in tmp_path.iterdir() if is_temp_file(p)]

    loaded = load_checkpoint(path)  # weights_only=True with the allowlist
    pbt = read_pbt_metadata(loaded)
    assert pbt["member"] == 3 and pbt["hparams"] == {"learning_rate": 3e-4, "gamma": pytest.approx(0.99)}
    assert type(pbt["hparams"]["gamma"]) is float  # numpy scalars normalised on save
    assert np.isnan(pbt["objective"])
    assert not is_raw_rl_games_checkpoint(loaded)
    del loaded[PBT_KEY]
    assert_states_equal(loaded, state)


def test_save_is_loadable_by_plain_rl_games_restore(agent, tmp_path):
    state = agent.get_full_state_weights()
    path = tmp_path / "pbt.pth"
    save_checkpoint(path, with_pbt_metadata(state, {"member": 0}))
    before = {k: v.clone() for k, v in agent.model.state_dict().items()}
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(1.0)
    restore_with_plain_rl_games(agent, path)  # rl_games' own loader; the extra "pbt" key is ignored
    after = agent.model.state_dict()
    for k, v in before.items():
        assert torch.equal(after[k], v), k


def test_rl_games_own_checkpoint_loads_safely(agent, tmp_path):
    agent.save(str(tmp_path / "own"))  # torch_ext.save_checkpoint appends .pth
    state = load_checkpoint(tmp_path / "own.pth")
    assert is_raw_rl_games_checkpoint(state)
    assert read_pbt_metadata(state) is None
    assert state["env_state"]["env_id"] == "Pendulum-v1"
    # and the runner's checkpoints on disk too
    for pth in Path(agent.nn_dir).glob("*.pth"):
        assert is_raw_rl_games_checkpoint(load_checkpoint(pth))


NUMPY_SCALAR_PATHS = (b"numpy.core.multiarray\nscalar", b"numpy._core.multiarray\nscalar")
"""How a pickle names numpy's scalar reconstructor under numpy 1 and under numpy 2."""


def test_checkpoint_of_the_other_numpy_major_loads(agent, tmp_path):
    """Isaac Lab 2.x ships numpy 1.26 (checkpoints name numpy.core.multiarray.scalar), 3.0 numpy 2 (numpy._core):
    a checkpoint written under one loads under the other. Written here, then renamed to the other major's path."""
    own, other = NUMPY_SCALAR_PATHS[::-1] if NUMPY_VERSION >= (2,) else NUMPY_SCALAR_PATHS
    src = tmp_path / "own.pth"
    save_checkpoint(src, agent.get_full_state_weights())
    dst = tmp_path / "other.pth"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("data.pkl"):
                assert own in data
                data = data.replace(own, other)
            zout.writestr(info.filename, data)
    state = load_checkpoint(dst)
    assert state["last_mean_rewards"] == agent.get_full_state_weights()["last_mean_rewards"]


def test_legacy_torch_format_loads(tmp_path):
    path = tmp_path / "legacy.pth"
    torch.save(
        {"model": {"w": torch.ones(2)}, "last_mean_rewards": np.float64(-3.5)},
        path,
        _use_new_zipfile_serialization=False,
    )
    state = load_checkpoint(path)
    assert state["last_mean_rewards"] == -3.5


def test_allowlist_is_exactly_the_numpy_scalar_machinery():
    entries = rl_games_safe_globals()
    objs = {e[0] if isinstance(e, tuple) else e for e in entries}
    scalar = np._core.multiarray.scalar if NUMPY_VERSION >= (2,) else np.core.multiarray.scalar
    assert objs == {scalar, np.dtype, np.dtypes.Float32DType, np.dtypes.Float64DType}
    names = {e[1] for e in entries if isinstance(e, tuple)}
    assert names == {"numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar"}


def test_a_load_that_ends_during_another_leaves_its_allowlist_in_place(tmp_path, monkeypatch):
    """Slice members load in threads. torch's ``safe_globals`` context keeps one allowlist for the process, and a
    load leaving it took the numpy entries away from a load in progress in another thread (a long slices run refused
    six verified donor copies so). Here a whole load runs inside another's ``torch.load``, as the other thread's
    would: the outer load must still allow numpy scalars."""
    first, second = tmp_path / "a.pth", tmp_path / "b.pth"
    for path, value in ((first, -1.5), (second, -2.5)):
        torch.save({"model": {"w": torch.ones(2)}, "last_mean_rewards": np.float32(value)}, path)
    real_load = torch.load
    nested: list[float] = []
    other_started = False

    def load_with_another_in_between(*args, **kwargs):
        nonlocal other_started
        if not other_started:  # once: the other thread's load starts and ends while this one is under way
            other_started = True
            nested.append(load_checkpoint(second)["last_mean_rewards"])
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", load_with_another_in_between)
    assert load_checkpoint(first)["last_mean_rewards"] == -1.5
    assert nested == [-2.5]


# ------------------------------------------------------------------------------ refusals
def test_disallowed_class_refused_untrusted_loaded_trusted(tmp_path):
    path = tmp_path / "marker.pth"
    torch.save({"model": {}, "extra": Marker(7)}, path)
    with pytest.raises(DisallowedGlobalError) as err:
        load_checkpoint(path)
    name = f"{__name__}.Marker"
    assert err.value.globals == [name]
    assert str(path) in str(err.value) and name in str(err.value) and "trusted" in str(err.value)
    state = load_checkpoint(path, trusted=True)
    assert isinstance(state["extra"], Marker) and state["extra"].value == 7


def test_code_execution_refused_and_never_run(tmp_path):
    sentinel = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    torch.save({"model": {}, "payload": RunsCommand(sentinel)}, path)
    with pytest.raises(DisallowedGlobalError) as err:
        load_checkpoint(path)
    assert any(g.endswith(".system") for g in err.value.globals)  # posix.system on Linux
    assert "system" in str(err.value) and str(path) in str(err.value)
    assert not sentinel.exists()


def test_disallowed_build_type_named(tmp_path):
    """np.int64 needs Int64DType, which rl_games never writes: refused, the type named."""
    path = tmp_path / "int64.pth"
    torch.save({"model": {}, "epoch": np.int64(3)}, path)
    with pytest.raises(DisallowedGlobalError) as err:
        load_checkpoint(path)
    assert "numpy.dtypes.Int64DType" in err.value.globals
    assert load_checkpoint(path, trusted=True)["epoch"] == 3


@pytest.mark.parametrize("trusted", [False, True])
def test_truncated_file(agent, tmp_path, trusted):
    full = tmp_path / "full.pth"
    save_checkpoint(full, agent.get_full_state_weights())
    data = full.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 100):
        path = tmp_path / f"cut{cut}.pth"
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match="truncated") as err:
            load_checkpoint(path, trusted=trusted)
        assert str(path) in str(err.value)


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"model: not a checkpoint\n", "not a torch checkpoint"),
        (pickle.dumps({"model": {}}), "not a torch checkpoint"),
        (b"", "empty"),
    ],
)
@pytest.mark.parametrize("trusted", [False, True])
def test_not_a_checkpoint(tmp_path, content, expected, trusted):
    path = tmp_path / "thing.pth"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=expected) as err:
        load_checkpoint(path, trusted=trusted)
    assert str(path) in str(err.value)


def test_zip_that_is_not_torch(tmp_path):
    path = tmp_path / "archive.pth"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("readme.txt", "hello")
    with pytest.raises(CheckpointError, match="not a torch checkpoint"):
        load_checkpoint(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pth")
    with pytest.raises(CheckpointError, match="directory"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("trusted", [False, True])
def test_state_without_rl_games_keys(tmp_path, trusted):
    path = tmp_path / "weights.pth"
    torch.save({"weights": {"w": torch.zeros(1)}}, path)
    with pytest.raises(CheckpointError, match="'model'") as err:
        load_checkpoint(path, trusted=trusted)
    assert str(path) in str(err.value) and "weights" in str(err.value)

    torch.save([torch.zeros(1)], path)
    with pytest.raises(CheckpointError, match="dict"):
        load_checkpoint(path, trusted=trusted)

    torch.save({"model": torch.zeros(1)}, path)
    with pytest.raises(CheckpointError, match="state dict"):
        load_checkpoint(path, trusted=trusted)


# --------------------------------------------------------------------------------- saving
def test_save_refuses_bad_state_and_metadata(tmp_path):
    path = tmp_path / "x.pth"
    with pytest.raises(CheckpointError, match="model"):
        save_checkpoint(path, {"epoch": 1})
    with pytest.raises(CheckpointError, match=r"pbt\.tensor"):
        save_checkpoint(path, {"model": {}, "pbt": {"tensor": torch.zeros(1)}})
    with pytest.raises(CheckpointError, match="keys must be strings"):
        with_pbt_metadata({"model": {}}, {1: "a"})
    assert not path.exists()


def test_failed_save_leaves_previous_file(tmp_path):
    path = tmp_path / "ckpt.pth"
    digest = save_checkpoint(path, {"model": {"w": torch.ones(3)}})
    # Pickling a local lambda raises AttributeError or PicklingError, depending on the Python version.
    with pytest.raises((AttributeError, pickle.PicklingError)):
        save_checkpoint(path, {"model": {"w": torch.ones(3)}, "bad": lambda: None})  # not picklable
    assert sha256_file(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pth"]


def test_overwrite_is_atomic_replace(tmp_path):
    path = tmp_path / "ckpt.pth"
    first = save_checkpoint(path, {"model": {"w": torch.zeros(2)}})
    second = save_checkpoint(path, {"model": {"w": torch.ones(2)}})
    assert first != second and sha256_file(path) == second
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.ones(2))


def test_metadata_helpers():
    raw = {"model": {}, "epoch": 1}
    assert is_raw_rl_games_checkpoint(raw) and read_pbt_metadata(raw) is None
    tagged = with_pbt_metadata(raw, {"generation": 1, "history": ({"a": 1},)})
    assert PBT_KEY not in raw  # copy, not mutation
    assert read_pbt_metadata(tagged) == {"generation": 1, "history": [{"a": 1}]}
    assert not is_raw_rl_games_checkpoint(tagged)
    assert not is_raw_rl_games_checkpoint({"epoch": 1})
    assert not is_raw_rl_games_checkpoint(None)
    with pytest.raises(CheckpointError, match="mapping"):
        read_pbt_metadata({"model": {}, "pbt": [1, 2]})


def test_metadata_survives_weights_only_in_memory():
    """The metadata types are all in torch's weights_only defaults (no allowlist needed for them)."""
    state = with_pbt_metadata({"model": {}}, {"a": [1, 2.5, "x", None, True], "b": {"c": -1}})
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=True)[PBT_KEY] == state[PBT_KEY]


def test_expected_checksum(agent, tmp_path):
    from async_pbt_isaaclab.core.workspace.fsio import ChecksumMismatch

    path = tmp_path / "c.pth"
    digest = save_checkpoint(path, agent.get_full_state_weights())
    assert "model" in load_checkpoint(path, expected_sha256=digest)
    # Damage inside tensor data: torch would load it silently; the published checksum catches it.
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 32] = bytes(32)
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatch, match=str(path)):
        load_checkpoint(path, expected_sha256=digest)
