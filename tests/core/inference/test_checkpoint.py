"""Checkpoint files: atomic writes, and every way a file can be unusable refused in one line."""

import os

import pytest
import torch

from gnnbridge.core.errors import CheckpointError, DataFileNotFoundError
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.training.trainer import TrainState


def payload(**changes):
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    base = {
        "format": checkpoint.FORMAT,
        "version": checkpoint.VERSION,
        "epoch": 1,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "config": {"backend": "pyg", "model": {"arch": "sage", "hidden": 3}},
        "monitor": {"best": 0.5, "best_epoch": 1, "bad_epochs": 0},
        "history": [{"epoch": 0}, {"epoch": 1}],
        "versions": {"torch": "2"},
        "rng": checkpoint.rng_states(),
    }
    return {**base, **changes}


class Exploding:
    """Fails while being pickled, after the tensors before it were written."""

    def __reduce__(self):
        raise RuntimeError("disk full")


def test_a_crash_mid_write_leaves_the_previous_checkpoint_whole(tmp_path):
    path = tmp_path / "checkpoints" / "latest.pt"
    checkpoint.save(path, payload(epoch=1))
    with pytest.raises(RuntimeError, match="disk full"):
        checkpoint.save(path, payload(epoch=2, extra=Exploding()))
    assert checkpoint.load(path)["epoch"] == 1
    assert os.listdir(path.parent) == ["latest.pt"]  # no temporary file left behind


def test_round_trip_loads_with_weights_only_and_holds_rng_states(tmp_path):
    path = tmp_path / "c.pt"
    written = payload()
    checkpoint.save(path, written)
    state = checkpoint.load(path)
    assert torch.equal(state["rng"]["torch"], written["rng"]["torch"])
    assert torch.equal(state["model"]["weight"], written["model"]["weight"])
    assert set(state["rng"]) >= {"torch", "python", "numpy"}
    best = tmp_path / "best.pt"
    checkpoint.copy(path, best)
    assert checkpoint.load(best)["epoch"] == 1


class Payload:
    """Runs code when unpickled: what a malicious checkpoint does."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickled_code_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save(payload(model=Payload(marker)), path)
    with pytest.raises(CheckpointError) as err:
        checkpoint.load(path)
    assert "carries pickled code" in str(err.value) and "system" in str(err.value)
    assert not marker.exists()


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: p.write_bytes(b"not a checkpoint"), "is corrupt or not a PyTorch zip file"),
        (lambda p: torch.save({"weights": torch.ones(2)}, p), "not a gnnbridge checkpoint"),
        (lambda p: torch.save(payload(version=99), p), "format version 99"),
        (lambda p: torch.save({k: v for k, v in payload().items() if k != "optimizer"}, p), "lacks optimizer"),
    ],
)
def test_unusable_files_are_refused_in_one_line(tmp_path, make, needle):
    path = tmp_path / "c.pt"
    make(path)
    with pytest.raises(CheckpointError) as err:
        checkpoint.load(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_truncated_checkpoint_is_corrupt(tmp_path):
    path = tmp_path / "c.pt"
    checkpoint.save(path, payload())
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        checkpoint.load(path)


def test_a_different_model_is_named_by_parameter_and_shape(tmp_path):
    state = payload(model=torch.nn.Linear(4, 5).state_dict())
    with pytest.raises(CheckpointError) as err:
        checkpoint.load_model_state(torch.nn.Linear(4, 3), state, "c.pt")
    assert "different model" in str(err.value) and "weight is [5, 4] there but [3, 4] here" in str(err.value)
    with pytest.raises(CheckpointError, match="lacks weight"):
        checkpoint.load_model_state(torch.nn.Linear(4, 3), payload(model={"bias": torch.zeros(3)}), "c.pt")


def test_find_takes_a_run_folder_or_a_file(tmp_path):
    run = tmp_path / "run"
    checkpoint.save(checkpoint.path_in(run, "best"), payload())
    assert checkpoint.find(run) == run / "checkpoints" / "best.pt"
    assert checkpoint.find(run / "checkpoints" / "best.pt") == run / "checkpoints" / "best.pt"
    with pytest.raises(DataFileNotFoundError, match="no latest checkpoint"):
        checkpoint.find(run, "latest")
    with pytest.raises(DataFileNotFoundError, match="neither a run folder nor a checkpoint"):
        checkpoint.find(tmp_path / "nope")


def test_early_stopping_counts_epochs_without_a_strictly_better_value():
    state = TrainState()
    assert state.record({"epoch": 0, "val_acc": 0.5}, "val_acc")
    assert not state.record({"epoch": 1, "val_acc": 0.5}, "val_acc")  # a tie is no improvement
    assert not state.record({"epoch": 2, "val_acc": 0.4}, "val_acc")
    assert state.should_stop(2) and not state.should_stop(3) and not state.should_stop(0)
    assert state.record({"epoch": 3, "val_acc": 0.6}, "val_acc") and state.bad_epochs == 0
    restored = TrainState.from_checkpoint({"history": state.history, "monitor": state.monitor_state()})
    assert (restored.next_epoch, restored.best_epoch, restored.best_value) == (4, 3, 0.6)
