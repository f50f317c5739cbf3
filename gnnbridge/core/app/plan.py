"""What one ``train`` call will do: a fresh run, the continuation of a run folder by hand
(``--resume``), or the continuation after the launcher restarted every rank (``--max-restarts``,
or ``torchrun --max-restarts``).

All three end in the same place: a :class:`Plan` whose ``latest`` checkpoint (if any) the
trainer continues from. Every random stream is reseeded per epoch from (seed, epoch, rank), so
continuing from a checkpoint gives the very run that was interrupted, on any number of ranks.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnnbridge.core import config as cfgmod
from gnnbridge.core import files
from gnnbridge.core.app.resolve import check_frozen, resolve_config
from gnnbridge.core.app.rundir import CONFIG, RESULTS, make_run_dir, new_run_dir, refuse_links_leaving
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import CheckpointError, ConfigError, DataFileNotFoundError, GnnBridgeError
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.plugins import get_target
from gnnbridge.core.training.state import TrainState

# Keys a resumed run keeps from its checkpoint: they decide the weights' shapes, the data the
# epochs replay on (``train.seed`` draws a split the dataset does not give, and every random
# stream), what is learnt and minimised (``target``, ``train.loss``), what "best" means, and the
# optimizer (whose state the checkpoint holds). Everything else (epochs, patience, nproc, device,
# eval, lr, the schedule ...) may change when a run continues.
RESUME_FROZEN = (
    "task", "target", "backend", "dataset", "model", "train.monitor", "train.optimizer", "train.loss", "train.seed",
)  # fmt: skip
# Where the data lies, not what it is: a dataset that moved is pointed at (as for evaluate,
# predict and port), and checked to be the one trained on (:meth:`Plan.check_same_data`).
DATA_LOCATION = ("dataset.path", "dataset.root")


@dataclass
class Plan:
    """A fresh run (into ``out`` or a new folder), or the continuation of ``resume_dir`` from its
    ``latest`` checkpoint (``None``: from the start, in that folder). ``restart`` describes the
    restart that led here: ``{"attempt", "after", "resumed_from_epoch"}``."""

    config: ExperimentConfig
    out: str | os.PathLike | None = None
    resume_dir: Path | None = None
    latest: dict | None = None  # the checkpoint resumed from, read once (ranks get it with the plan)
    restart: dict | None = None
    resumed_from: dict | None = None  # {"epoch", "world_size"} of a --resume (kept through restarts)
    created: Path | None = None  # what the first attempt created for ``resume_dir`` (removed if all fail)
    on_epoch: Any = None  # called on rank 0 after each epoch; a reason it returns stops every rank (tune)

    def make_run_dir(self) -> tuple[Path, Path | None]:
        """The run folder and what to remove if the run fails (when continuing: only what a first
        attempt of this job created, once no restart is left)."""
        if self.resume_dir is not None:
            try:
                files.lock_run_folder(self.resume_dir)  # a second --resume of a run still going is refused here
                checkpoint.remove_partial(self.resume_dir)  # left by a write the kill cut short
            except GnnBridgeError:
                raise
            except OSError as exc:
                raise files.output_error(self.resume_dir, exc, "the run folder") from None
            return self.resume_dir, self.created
        return make_run_dir(new_run_dir(self.config, self.out), exclusive=self.out is None)

    def folder(self) -> Path:
        """Where the run will write (its file system decides whether the checkpoints fit)."""
        return Path(self.resume_dir or self.out or "runs")

    def check_out(self) -> None:
        """Refuse a used ``--out`` (rank 0 of a job calls this before any work)."""
        if self.resume_dir is None:
            new_run_dir(self.config, self.out)

    def write_config(self, run_dir: Path) -> None:
        files.write_text(run_dir / CONFIG, cfgmod.dump_yaml(self.config))

    def check_same_data(self, data) -> None:
        """A continued run trains on the data its checkpoint was trained on: the loaded dataset's
        counts and shapes (its summary, the name aside: a moved file may be renamed) must be the
        checkpoint's, and a library's class must have given what the checkpoint's config pinned
        (``dataset.digest``: a restarted job's ranks open the data from the command's config, not
        the checkpoint's). Nothing to check for a fresh run, or a checkpoint that predates summaries."""
        trained = (self.latest or {}).get("data") or {}
        pinned = (((self.latest or {}).get("config") or {}).get("dataset") or {}).get("digest")
        found = self.config.dataset.digest  # None on a rank that attached to its machine's copy
        if pinned and found and found != pinned:
            raise CheckpointError(
                f"Dataset '{self.config.dataset.name}' gave other data (content {found}) than run "
                f"'{self.resume_dir}' was trained on ({pinned}): it is not the data the run continues on. Open it "
                "as the run did (its dataset.options, train.seed, files and library version), or start a new run "
                "(gnnbridge train ... --out NEW)."
            )
        now = data.summary()
        for key, value in trained.items():
            if key != "name" and key in now and now[key] != value:
                where = self.config.dataset.path or f"dataset.root={self.config.dataset.root or '(default)'}"
                raise CheckpointError(
                    f"The dataset at {where} has {key}={now[key]} but run '{self.resume_dir}' was trained on "
                    f"{key}={value}: it is not the data the run continues on. Point --set dataset.path= (or "
                    "dataset.root=) at that data, or start a new run (gnnbridge train ... --out NEW)."
                )

    def resume_state(self) -> dict | None:
        """The latest checkpoint, with the best epoch's weights when those are not the latest's
        (read from best.pt by each rank: the run folder must be visible to every node)."""
        if self.latest is None:
            return None
        state = dict(self.latest)
        best_path = checkpoint.path_in(self.resume_dir, checkpoint.BEST)
        best_epoch = state["monitor"]["best_epoch"]
        # latest.pt holds the best weights only if written at the end of the best epoch
        stale = best_epoch != state["epoch"] or "mid_epoch" in state
        if best_epoch is not None and stale and best_path.is_file():
            best = checkpoint.load(best_path)
            if best["epoch"] == best_epoch:
                state["best_model"] = best["model"]
        return state

    def after_restart(self, run_dir: Path, attempt: int, failure: str | None, created: Path | None = None) -> Plan:
        """The plan of restart ``attempt`` of this run: continue ``run_dir`` from its latest
        checkpoint, or train it again from the start when the failure came before the first.

        Unlike ``--resume``, nothing is refused: the restarted command is the one that already
        passed every check, and a run that failed after its last epoch only re-evaluates."""
        path = checkpoint.path_in(run_dir, checkpoint.LATEST)
        state = {**checkpoint.load(path), "path": str(path)} if path.is_file() else None
        epoch = state and state["epoch"]
        restart = {"attempt": attempt, "after": failure, "resumed_from_epoch": epoch, **inside(state)}
        return dataclasses.replace(
            self,
            out=None,
            resume_dir=run_dir,
            latest=state,
            restart=restart,
            created=created if self.resume_dir is None else self.created,
        )


def plan_resume(
    run_dir: str | os.PathLike, experiment, dataset, out, overrides, flags: dict, check_epochs: bool = True
) -> Plan:
    """Config and checks for continuing ``run_dir`` from its latest checkpoint (``--resume``)."""
    given = [
        name
        for name, value in (("EXPERIMENT", experiment), ("--dataset", dataset), ("--out", out))
        if value is not None
    ]
    if given:
        raise ConfigError(
            f"--resume {run_dir} continues that run's own experiment, data and folder; drop "
            f"{' and '.join(given)} (change training keys with --set)."
        )
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataFileNotFoundError(f"Run folder '{run_dir}' does not exist.")
    refuse_links_leaving(run_dir)
    path = checkpoint.path_in(run_dir, checkpoint.LATEST)
    if not path.is_file():
        raise DataFileNotFoundError(
            f"Run folder '{run_dir}' has no {path.relative_to(run_dir)} to resume from (stopped before its first "
            "checkpoint, or not a gnnbridge run); start it again."
        )
    state = {**checkpoint.load(path), "path": str(path)}
    config = resolve_config(state["config"], overrides=overrides, **flags)
    saved, now = (_loss_named(c) for c in (state["config"], config.to_dict()))
    check_frozen(saved, now, RESUME_FROZEN, "--resume", movable=DATA_LOCATION)
    if check_epochs:
        _check_epochs_left(state, config, run_dir)
    return Plan(
        config,
        resume_dir=run_dir,
        latest=state,
        resumed_from={"epoch": state["epoch"], "world_size": state.get("world_size"), **inside(state)},
    )


def _loss_named(config: dict) -> dict:
    """``config`` with ``train.loss`` named as the run trains with it: empty is the target's own
    (a resume that names that loss changes nothing)."""
    train = config.get("train") or {}
    if train.get("loss"):
        return config
    own = get_target(config.get("target") or ExperimentConfig().target).losses[0]
    return {**config, "train": {**train, "loss": own}}


def inside(state: dict | None) -> dict:
    """``{"inside": {"epoch", "batches"}}`` for a checkpoint written inside an epoch, else {}."""
    mid = (state or {}).get("mid_epoch")
    return {"inside": {"epoch": mid["epoch"], "batches": mid["batches"]}} if mid else {}


def _check_epochs_left(state: dict, config: ExperimentConfig, run_dir: Path) -> None:
    """Refuse a --resume that would train nothing, unless the run never finished (it stopped
    after its last checkpoint but before its results, e.g. a logger failed in the last epoch):
    then the resume finishes it (final evaluation, results, the epochs its loggers missed)."""
    done, train, mid = state["epoch"] + 1, config.train, state.get("mid_epoch")
    if mid is not None and train.epochs <= mid["epoch"]:
        raise ConfigError(
            f"Run '{run_dir}' stopped inside epoch {mid['epoch'] + 1} (after its batch {mid['batches']}) and "
            f"train.epochs={train.epochs} would end before it; give train.epochs of at least {mid['epoch'] + 1}."
        )
    finished = _finished(run_dir, done)
    if train.epochs < done or (train.epochs == done and finished):
        raise ConfigError(
            f"Run '{run_dir}' has already trained {done} epoch(s) and train.epochs={train.epochs}; extend it with "
            f"--set train.epochs=N for some N > {done}."
        )
    progress = TrainState.from_checkpoint(state)
    if progress.should_stop(train.patience) and finished:
        raise ConfigError(
            f"Run '{run_dir}' stopped early after {done} epoch(s): {train.monitor} did not improve for "
            f"{progress.bad_epochs} epoch(s) (train.patience={train.patience}); continue with a larger "
            "train.patience, or 0 to turn early stopping off."
        )


def _finished(run_dir: Path, epochs: int) -> bool:
    """Whether ``run_dir`` holds the results of its first ``epochs`` epochs (an unreadable file
    holds none: a resume writes them again, and keeps that file aside)."""
    try:
        results = json.loads((run_dir / RESULTS).read_text())
        return isinstance(results, dict) and len(results.get("history", [])) >= epochs
    except (OSError, ValueError, TypeError):
        return False
