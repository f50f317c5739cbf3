"""The runner's promises around a run: nothing half-made is left, nothing of the user's is touched."""

import pytest
import torch

import gnnbridge
from gnnbridge import hookimpl
from gnnbridge.backends.pyg.plugin import build_gnn
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.plugins import PluginError
from gnnbridge.testing import registered_plugin


def broken_sage(in_dim, out_dim, spec):
    """The built-in sage, failing on its first batch."""
    model = build_gnn(in_dim, out_dim, spec.__class__(**{**vars(spec), "arch": "sage"}))

    def fail(*args, **kwargs):
        raise RuntimeError("boom in forward")

    model.forward = fail
    return model


def sage_failing_later(in_dim, out_dim, spec):
    """The built-in sage, failing on its second training batch."""
    model = build_gnn(in_dim, out_dim, spec.__class__(**{**vars(spec), "arch": "sage"}))
    forward, calls = model.forward, []

    def fail_later(*args, **kwargs):
        calls.append(model.training)
        if calls.count(True) == 2:
            raise RuntimeError("boom in epoch 2")
        return forward(*args, **kwargs)

    model.forward = fail_later
    return model


class BrokenPlugin:
    @hookimpl
    def register_models(self, register):
        register("broken", {"pyg": broken_sage})
        register("fails-later", {"pyg": sage_failing_later})


@pytest.fixture
def broken_backend():
    with registered_plugin(BrokenPlugin(), "broken-test") as plugin:
        yield plugin


def test_a_failed_run_leaves_no_folder_but_keeps_the_users(tmp_path, broken_backend):
    broken = ["model.arch=broken"]
    with pytest.raises(
        PluginError,
        match="^model 'broken' .plugin 'broken-test'. failed in its forward pass: RuntimeError: boom in forward$",
    ):
        gnnbridge.run(
            "karate-sage", backend="pyg", nproc=1, out=tmp_path / "a" / "b" / "out", progress=False, overrides=broken
        )
    assert not (tmp_path / "a").exists()  # the parents it made go too
    (tmp_path / "mine").mkdir()
    with pytest.raises(PluginError, match="boom in forward"):
        gnnbridge.run("karate-sage", backend="pyg", nproc=1, out=tmp_path / "mine", progress=False, overrides=broken)
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())  # as the user left it


def test_a_failed_run_with_a_checkpoint_is_kept_for_resuming(tmp_path, broken_backend):
    out = tmp_path / "out"
    with pytest.raises(PluginError, match="boom in epoch 2"):
        gnnbridge.run(
            "karate-sage",
            backend="pyg",
            nproc=1,
            out=out,
            progress=False,
            overrides=["train.batch_size=64", "model.arch=fails-later"],
        )
    assert (out / "config.yaml").exists() and not (out / "results.json").exists()
    assert checkpoint.load(checkpoint.path_in(out, "latest"))["epoch"] == 0


def test_default_run_folders_never_collide(tmp_path, monkeypatch):
    from gnnbridge.core.app.resolve import resolve_config
    from gnnbridge.core.app.rundir import make_run_dir, new_run_dir

    monkeypatch.chdir(tmp_path)
    config = resolve_config("karate-sage")
    first, _ = make_run_dir(new_run_dir(config, None), exclusive=True)
    second, _ = make_run_dir(new_run_dir(config, None), exclusive=True)  # same second, same name
    assert first.is_dir() and second.is_dir() and first != second


def test_graph_tasks_on_pyg_need_no_sampling_extension_for_the_native_loader():
    """PyG's graph DataLoader needs neither pyg-lib nor torch-sparse (its NeighborLoader does)."""
    from gnnbridge.core.app.preflight import preflight
    from gnnbridge.core.app.resolve import resolve_config

    config = preflight(resolve_config("gin-synthetic", backend="pyg", overrides=["sampler.kind=native"]))
    assert config.sampler.kind == "native"


def test_ranks_that_would_continue_a_restart_from_different_epochs_stop_with_one_line():
    """Without a shared file system a restarted rank may not see the checkpoint rank 0 continues
    from; it must say so instead of training out of step and hanging in DDP."""
    import torch.distributed as dist

    from gnnbridge.core.app.plan import Plan
    from gnnbridge.core.app.train import _agree
    from gnnbridge.core.errors import ConfigError
    from gnnbridge.core.runtime.context import DistContext

    store = dist.HashStore()
    rank0, rank1 = (DistContext(r, 2, r, torch.device("cpu"), store=store, attempt=1) for r in (0, 1))
    _agree(rank0, Plan(None, restart={"resumed_from_epoch": 3}))
    _agree(rank1, Plan(None, restart={"resumed_from_epoch": 3}))  # the same checkpoint: fine
    with pytest.raises(
        ConfigError,
        match=r"^After restart 1, rank 1 would continue from epoch None but rank 0 "
        r"from epoch 3: the run folder must be on a file system every node sees",
    ):
        _agree(rank1, Plan(None))


def test_max_batches_caps_each_ranks_epoch_and_leaves_the_rest_of_the_run_alone(tmp_path):
    """train.max_batches: a timed look at a graph too large for a whole epoch; the epoch runs that
    many batches of its shuffled share, and evaluation still scores every split."""
    run = ["dataset.options.num_nodes=300", "train.batch_size=16", "train.epochs=2"]
    whole = gnnbridge.run("sage-synthetic", backend="pyg", nproc=1, out=tmp_path / "a", progress=False, overrides=run)
    capped = gnnbridge.run(
        "sage-synthetic",
        backend="pyg",
        nproc=1,
        out=tmp_path / "b",
        progress=False,
        overrides=[*run, "train.max_batches=3"],
    )
    assert [h["batches"] for h in capped["history"]] == [3, 3]
    assert whole["history"][0]["batches"] > 3
    assert capped["metrics"].keys() == whole["metrics"].keys()


def test_a_resume_whose_epochs_end_before_the_epoch_it_stopped_inside_is_refused(tmp_path):
    """A checkpoint written inside epoch 3 already holds some of it: train.epochs=2 would report
    two epochs for weights that trained more, so the resume is refused in one line."""
    from gnnbridge.core.app.plan import _check_epochs_left
    from gnnbridge.core.config import from_dict
    from gnnbridge.core.errors import ConfigError

    monitor = {"best": 0.5, "best_epoch": 1, "bad_epochs": 0}
    history = [{"epoch": 0}, {"epoch": 1}]
    state = {"epoch": 1, "mid_epoch": {"epoch": 2, "batches": 5, "ranks": []}, "monitor": monitor, "history": history}
    with pytest.raises(ConfigError) as err:
        _check_epochs_left(state, from_dict({"train": {"epochs": 2}}), tmp_path)
    assert str(err.value) == (
        f"Run '{tmp_path}' stopped inside epoch 3 (after its batch 5) and train.epochs=2 would end before it; "
        "give train.epochs of at least 3."
    )
    _check_epochs_left(state, from_dict({"train": {"epochs": 3}}), tmp_path)  # finishes epoch 3: fine


@pytest.mark.parametrize(
    "experiment, overrides, line",
    [
        (
            "karate-sage",
            ["train.batch_size=64"],
            "an epoch is 1 optimizer step per rank (20 nodes per rank, train.batch_size=64), so the weights are "
            "updated once an epoch and may not settle; use --set train.batch_size=6 or smaller for 3 or more steps "
            "an epoch.",
        ),
        (
            "gin-synthetic",
            ["dataset.options.num_graphs=60"],
            "an epoch is 2 optimizer steps per rank (48 graphs per rank, train.batch_size=32), so the weights and "
            "BatchNorm's running statistics are updated 2 times an epoch and may not settle; use "
            "--set train.batch_size=16 or smaller for 3 or more steps an epoch.",
        ),
    ],
)
def test_an_epoch_of_too_few_steps_is_one_warning_line_before_training(tmp_path, capsys, experiment, overrides, line):
    """Such a run trains to chance without failing (the GIN tutorial's own collection did), so
    train names it: once, not per epoch, with the batch size that fixes it; that size is quiet."""
    run = ["train.epochs=2", *overrides]
    gnnbridge.run(experiment, backend="pyg", nproc=1, out=tmp_path / "few", progress=False, overrides=run)
    assert capsys.readouterr().err.splitlines() == [f"Warning: {line}"]
    fixed = line.split("--set ")[1].split(" ")[0]
    gnnbridge.run(experiment, backend="pyg", nproc=1, out=tmp_path / "fixed", progress=False, overrides=[*run, fixed])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "experiment", ["sage-synthetic", "gcn-synthetic", "gin-synthetic", "karate-sage", "mag-synthetic", "rec-synthetic"]
)
def test_the_built_in_experiments_that_need_no_download_are_not_warned_of_few_steps(experiment):
    """A warning on a built-in experiment, as shipped, would teach users to ignore it."""
    from gnnbridge.core.app.preflight import load_dataset, preflight
    from gnnbridge.core.app.resolve import resolve_config
    from gnnbridge.core.sampling.seeds import few_steps

    config = preflight(resolve_config(experiment, device="cpu"))
    data = load_dataset(config)
    train = config.train
    assert few_steps(data.split("train").numel(), train.batch_size, config.nproc, train.max_batches) is None
