"""The run folder: choosing it, creating it without ever taking a user's, and undoing a run that
failed before it produced anything worth keeping. Writing into it, and its lock, are
:mod:`gnnbridge.core.files`'s.

A run folder holds ``config.yaml``, ``checkpoints/`` (see
:mod:`~gnnbridge.core.inference.checkpoint`), ``results.json`` and ``curves.png``. A failed run
with a checkpoint is kept (it can be resumed, by hand or by a restart); one without is removed,
but only the folders this run created.

Claiming a folder: "is it empty?" and "create it" are two steps, so two runs started at the same
instant could both pass the first. The run that continues or creates a folder therefore holds an
exclusive ``flock`` on ``.gnnbridge.lock`` inside it for as long as it runs (the kernel drops it
when the process dies, however it dies), and checks emptiness again once it holds the lock. A
second run on the same folder, a ``--resume`` of a run that is still going included, is refused
in one line. Every temporary file gets a name of its own, so no two writers ever share one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

from gnnbridge.core import files
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import (
    DIVERGED,
    GnnBridgeError,
    OutputExistsError,
    OutputPathError,
    RunInterrupted,
    TrainingDivergedError,
    signal_name,
)
from gnnbridge.core.files import LOCK, lock_run_folder, output_error, release_run_folder
from gnnbridge.core.inference import checkpoint

RESULTS = "results.json"
CONFIG = "config.yaml"


def new_run_dir(config: ExperimentConfig, out: str | os.PathLike | None, root: str | os.PathLike = "runs") -> Path:
    """Choose the run folder: ``out`` if it is absent or empty, else a fresh
    ``runs/<name>-<backend>-<time>``. Nothing is created here (see :func:`make_run_dir`)."""
    if out is not None:
        path = Path(out)
        try:
            _check_unused(path)
        except GnnBridgeError:
            raise
        except OSError as exc:
            raise output_error(path, exc, "--out") from None
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{slug(config.name)[:64]}-{slug(config.backend)[:32]}-{stamp}"


def _check_unused(path: Path) -> None:
    if "\0" in str(path):
        raise OutputPathError(f"--out {str(path)!r} holds a NUL byte; give a folder name without one.")
    if path.is_symlink() and not path.exists():
        raise OutputPathError(
            f"--out {path} is a symbolic link to '{os.readlink(path)}', which does not exist; give a real folder."
        )
    if path.exists() and not path.is_dir():
        raise OutputExistsError(
            f"--out {path} is a file, not a folder; choose a new --out (gnnbridge never overwrites a file)."
        )
    entries = {p.name for p in path.iterdir()} - {LOCK} if path.exists() else set()
    if path.exists() and files.run_folder_in_use(path):
        raise OutputExistsError(f"Output folder '{path}' is in use by another gnnbridge run; choose a new --out.")
    if entries == {CONFIG}:
        raise OutputExistsError(
            f"Output folder '{path}' holds only the config.yaml of a run that was killed before its first "
            "checkpoint (nothing to resume); remove the folder or choose a new --out."
        )
    if entries:
        raise OutputExistsError(
            f"Output folder '{path}' already exists and is not empty; choose a new --out "
            "(gnnbridge never overwrites a run)."
        )


def make_run_dir(path: Path, exclusive: bool) -> tuple[Path, Path | None]:
    """Create the run folder; return it and the top-most folder this call created (to undo).

    With ``exclusive`` (a generated name), two jobs started in the same second never share a
    folder: creation is atomic and a taken name gets a ``-2``, ``-3`` ... suffix.
    """
    created = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
    try:
        if not exclusive:
            path.mkdir(parents=True, exist_ok=True)
            lock_run_folder(path)
            _check_unused(path)  # again, now that no other run can take it: it may have lost the race
            return path, created
        path.parent.mkdir(parents=True, exist_ok=True)
        candidate, n = path, 1
        while True:
            try:
                candidate.mkdir()
            except FileExistsError:
                n += 1
                candidate = path.with_name(f"{path.name}-{n}")
                continue
            lock_run_folder(candidate)
            return candidate, created if created != path else candidate
    except GnnBridgeError:
        release_run_folder(path)
        raise
    except OSError as exc:
        raise output_error(path, exc, "the run folder") from None


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def refuse_links_leaving(run_dir: Path) -> None:
    """A run folder about to be continued must hold no symbolic link out of it: its files are
    replaced, never written through, but a linked folder (``checkpoints/``, ``tensorboard/``)
    would still take new files elsewhere, and a linked file says someone meant it to be written."""
    leaving = files.links_leaving(run_dir)
    if leaving:
        link, target = leaving[0]
        more = f" (and {len(leaving) - 1} more)" if len(leaving) > 1 else ""
        raise OutputPathError(
            f"Run folder '{run_dir}' holds a symbolic link that leads out of it: {link} -> {target}{more}; gnnbridge "
            "writes only inside a run folder: replace the link with a copy of what it points to (or remove it), "
            "then continue the run."
        )


def discard(run_dir: Path, created: Path | None) -> None:
    """Undo a run that produced no results and no checkpoint (one with a checkpoint is kept:
    it can be resumed). Only folders this run created are removed, so nothing of the user's is
    touched."""
    if (run_dir / RESULTS).exists():
        return
    if checkpoint.has_checkpoint(run_dir):
        checkpoint.remove_partial(run_dir)  # a checkpoint write the failure cut short
        return
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
    else:  # the user's own (empty) folder: take back only what we wrote
        (run_dir / CONFIG).unlink(missing_ok=True)
        shutil.rmtree(run_dir / checkpoint.FOLDER, ignore_errors=True)  # empty: no checkpoint was written
        (run_dir / LOCK).unlink(missing_ok=True)


def explain_stop(exc: BaseException, run_dir: Path) -> BaseException:
    """The error to raise for a run that stopped: its one line says whether the run was kept and
    how to continue it. Ctrl-C and SIGTERM become :class:`RunInterrupted` (a KeyboardInterrupt)."""
    kept = checkpoint.has_checkpoint(run_dir)
    resume = f"gnnbridge train --resume {run_dir}"
    if isinstance(exc, KeyboardInterrupt):
        signum = getattr(exc, "signum", signal.SIGINT)
        state = (
            f"its checkpoint is kept in {run_dir}; continue it with: {resume}"
            if kept
            else "it had no checkpoint yet, so its run folder was removed"
        )
        return RunInterrupted(signum, f"Stopped by {signal_name(signum)}: {state}.")
    if isinstance(exc, GnnBridgeError) and exc.args and kept:
        # From another rank the divergence arrives as that rank's line (a RankFailedError).
        fix = " --set train.lr=SMALLER" if isinstance(exc, TrainingDivergedError) or DIVERGED in str(exc) else ""
        line = f"{str(exc.args[0]).rstrip('.')}. The run's checkpoint is kept; continue it with: "
        exc.args = (f"{line}{resume}{fix}",)
    return exc


def keep_earlier_results(run_dir: Path) -> None:
    """A resumed, finished run gets new results; the earlier ones stay, renamed
    ``results.epochs-N.json`` after the epochs they cover."""
    path = run_dir / RESULTS
    if not path.exists():
        return
    try:
        epochs = len(json.loads(path.read_text()).get("history", []))
    except (OSError, ValueError):
        epochs = 0
    target, n = run_dir / f"results.epochs-{epochs}.json", 1
    while target.exists():
        n += 1
        target = run_dir / f"results.epochs-{epochs}-{n}.json"
    os.replace(path, target)
