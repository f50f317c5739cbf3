"""Logger plugins (``log.to``): CSV and TensorBoard written by rank 0, appended to on resume; an
unknown or broken logger is one line."""

from __future__ import annotations

import csv
import json

import pytest
from helpers import gnnbridge as cli
from helpers import ok, one_line

import gnnbridge
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.plugins import PluginError
from gnnbridge.testing import registered_plugin

SMALL = ["--quiet", "--set", "dataset.options.num_nodes=600", "--set", "train.batch_size=64"]


def scalars(folder, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder)).Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


@pytest.mark.slow
def test_csv_and_tensorboard_get_every_epoch_once_from_rank_0_and_resume_appends(tmp_path):
    ok(
        cli(
            "train",
            *SMALL,
            "--nproc",
            "2",
            "--set",
            "train.epochs=2",
            "--set",
            "log.to=[csv,tensorboard]",
            "--out",
            "run",
            cwd=tmp_path,
        )
    )
    ok(cli("train", "--resume", "run", "--quiet", "--set", "train.epochs=3", cwd=tmp_path))
    history = json.loads((tmp_path / "run" / "results.json").read_text())["history"]
    with open(tmp_path / "run" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]  # one header, a row per epoch, no rank twice
    assert [float(r["loss"]) for r in rows] == pytest.approx([h["loss"] for h in history], rel=1e-6)
    assert {"val_acc", "phases/forward", "epoch_time_s"} <= set(rows[0])
    board = tmp_path / "run" / "tensorboard"
    assert len(list(board.iterdir())) == 2  # one event file per start (first run, resume), rank 0 only
    assert scalars(board, "loss") == [(i + 1, pytest.approx(h["loss"], rel=1e-6)) for i, h in enumerate(history)]
    metrics = json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]
    finals = scalars(board, "final/test_acc")  # each finished run's, at its last epoch
    assert [step for step, _ in finals] == [2, 3] and finals[-1][1] == pytest.approx(metrics["test_acc"], rel=1e-6)


def test_an_unknown_logger_is_one_line_and_writes_nothing(tmp_path):
    one_line(
        cli("train", *SMALL, "--set", "log.to=[comet]", "--out", "run", cwd=tmp_path),
        "Unknown logger 'comet'. Available: csv, mlflow, tensorboard, wandb",
    )
    one_line(
        cli("train", *SMALL, "--set", "log.to=[csv,csv]", "--out", "run", cwd=tmp_path), "repeats 'csv'; give each once"
    )
    assert list(tmp_path.iterdir()) == []


class Broken:
    class Logger:
        def __init__(self, run_dir, config):
            pass

        def log(self, step, values):
            raise OSError("the disk is full")

        def close(self):
            pass

    @gnnbridge.hookimpl
    def register_loggers(self, register):
        register("broken", self.Logger, "raises")


def test_a_logger_that_raises_stops_the_run_with_one_line_naming_it(tmp_path):
    with registered_plugin(Broken(), "lab"), pytest.raises(PluginError, match="logger 'broken'.*the disk is full"):
        gnnbridge.run(
            overrides=["dataset.options.num_nodes=600", "train.epochs=1", "log.to=[broken]"],
            out=tmp_path / "run",
            progress=False,
        )


def test_a_logger_whose_package_is_missing_is_refused_before_the_run(monkeypatch, tmp_path):
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else find(name, *a))
    with pytest.raises(ConfigError, match="needs the 'tensorboard' package"):
        gnnbridge.run(overrides=["log.to=[tensorboard]"], out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_the_progress_bar_shows_batches_loss_and_seeds_per_second(monkeypatch):
    import io
    import time

    import torch
    from tqdm import tqdm

    from gnnbridge.core.training.trainer import BarFigures

    monkeypatch.setattr(BarFigures, "EVERY_S", 0.0)
    out = io.StringIO()
    bar = tqdm(total=4, file=out, disable=False, mininterval=0, unit="batch")
    figures = BarFigures(time.perf_counter())
    for _ in range(2):
        figures.step(bar, torch.tensor(128.0), torch.tensor(64), 64)  # a summed loss of 128 over 64 seeds
        bar.update(1)
    bar.close()
    last = out.getvalue().split("\r")[-1]
    assert "2/4" in last and "loss=2.0000" in last and "seeds_per_s=" in last


class Recording:
    sent: list = []

    class Logger:
        def __init__(self, run_dir, config):
            pass

        def log(self, step, values):
            Recording.sent.append(step)

        def close(self):
            raise OSError("could not flush")

    @gnnbridge.hookimpl
    def register_loggers(self, register):
        register("recording", self.Logger, "records the steps")


def test_epochs_reach_the_loggers_only_with_the_checkpoint_that_holds_them(tmp_path, capsys):
    # Epochs after the last checkpoint are trained again on resume: logged then, never twice.
    from gnnbridge.core.training.loggers import RunLoggers

    config = gnnbridge.resolve_config(overrides=["log.to=[recording]"])
    with registered_plugin(Recording(), "lab"):
        loggers = RunLoggers(config, tmp_path)
        for epoch in range(3):
            loggers.epoch({"epoch": epoch, "loss": 1.0})
        loggers.commit()  # latest.pt written after epoch 3
        loggers.epoch({"epoch": 3, "loss": 1.0})  # the run stops before the next checkpoint
        loggers.close(warn=False)  # stopping for another reason: the close failure is not what is said
        assert Recording.sent == [1, 2, 3] and capsys.readouterr().err == ""
        finished = RunLoggers(config, tmp_path)
        finished.finish(4, {"test_acc": 0.5})
        finished.close()  # after a finished run, a failed close is a warning, not a failed run
        assert (
            "Warning: logger 'recording' (plugin 'lab') failed in its close(): OSError: could not flush"
            in capsys.readouterr().err
        )


EXITING_LOGGER = '''
import os
import gnnbridge


class ExitsOnce:
    """Exits the process (as a careless logger might) the first time it is given epoch 2."""

    def __init__(self, run_dir, config):
        self.marker = os.path.join(os.path.dirname(str(run_dir)), "exited-once")

    def log(self, step, values):
        if step == 2 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise SystemExit(0)

    def close(self):
        pass


@gnnbridge.hookimpl
def register_loggers(register):
    register("exits", ExitsOnce, "calls sys.exit(0) at epoch 2, once")
'''


@pytest.mark.slow
def test_a_logger_that_exits_the_process_fails_the_run_naming_it_and_keeps_it_resumable(tmp_path):
    """``sys.exit(0)`` in a logger must not end ``train`` as a success, nor lose the checkpoints."""
    # An installed plugin as Python finds one on its path: its module and its dist-info (entry
    # points) in the working folder, which is first on the path of `python -m gnnbridge`.
    (tmp_path / "lab_exiting_logger.py").write_text(EXITING_LOGGER)
    dist = tmp_path / "lab_exiting_logger-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-exiting-logger\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gnnbridge]\nlab-exiting = lab_exiting_logger\n")

    def train(*args):
        return cli("train", *args, cwd=tmp_path)

    stopped = train(
        "karate-sage",
        "--backend",
        "pyg",
        "--quiet",
        "--set",
        "train.epochs=3",
        "--set",
        "log.to=[exits]",
        "--out",
        "run",
    )
    one_line(stopped, "logger 'exits' (plugin 'lab-exiting') failed in its log(step, values): SystemExit(0)")
    assert stopped.stderr.rstrip().endswith("continue it with: gnnbridge train --resume run"), stopped.stderr
    assert (tmp_path / "run" / "checkpoints").is_dir() and not (tmp_path / "run" / "results.json").exists()
    ok(train("--resume", "run", "--quiet"))
    assert json.loads((tmp_path / "run" / "results.json").read_text())["epochs_trained"] == 3


class FailsOnce:
    """A logger whose first try at epoch 2 fails (a tracking server that was briefly away)."""

    failed: list = []
    took: list = []

    class Logger:
        def __init__(self, run_dir, config):
            pass

        def log(self, step, values):
            if step == 2 and not FailsOnce.failed:
                FailsOnce.failed.append(step)
                raise ConnectionError("the tracking server is unreachable")
            if not any(name.startswith("final/") for name in values):
                FailsOnce.took.append(step)

        def close(self):
            pass

    @gnnbridge.hookimpl
    def register_loggers(self, register):
        register("flaky", self.Logger, "fails once")


def csv_epochs(run):
    with open(run / "metrics.csv", newline="") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def test_a_logger_failing_in_the_last_epoch_leaves_a_run_its_resume_finishes_and_logs_whole(tmp_path):
    run = tmp_path / "run"
    overrides = ["dataset.options.num_nodes=600", "train.epochs=2", "log.to=[flaky,csv]"]
    with registered_plugin(FailsOnce(), "lab"):
        with pytest.raises(
            PluginError,
            match="logger 'flaky' \\(plugin 'lab'\\) failed.*unreachable.*"
            "continue it with: gnnbridge train "
            f"--resume {run}$",
        ):
            gnnbridge.run(overrides=overrides, out=run, progress=False)
        assert csv_epochs(run) == [1] and not (run / "results.json").exists()
        finished = gnnbridge.run(resume=run, progress=False)  # the resume the line suggests finishes the run
        assert finished["epochs_trained"] == 2 and finished["resumed_from"]["epoch"] == 1
        assert csv_epochs(run) == [1, 2] and FailsOnce.took == [1, 2]  # each logger got the epoch it missed, once
        gnnbridge.run(resume=run, overrides=["train.epochs=3"], progress=False)
        assert csv_epochs(run) == [1, 2, 3] and FailsOnce.took == [1, 2, 3]
        with pytest.raises(ConfigError, match="has already trained 3 epoch"):  # finished: nothing left to do
            gnnbridge.run(resume=run, progress=False)
