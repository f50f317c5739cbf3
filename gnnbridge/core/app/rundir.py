"""The run folder: choosing it, creating it without ever taking a user's, writing into it
atomically, and undoing a run that failed before it produced anything worth keeping.

A run folder holds ``config.yaml``, ``checkpoints/`` (see
:mod:`~gnnbridge.core.training.checkpoint`), ``results.json`` and ``curves.png``. A failed run
with a checkpoint is kept (it can be resumed, by hand or by a restart); one without is removed,
but only the folders this run created.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from gnnbridge.core.contracts.config import ExperimentConfig
from gnnbridge.core.errors import GnnBridgeError, OutputExistsError
from gnnbridge.core.training import checkpoint

RESULTS = "results.json"
CONFIG = "config.yaml"


def new_run_dir(config: ExperimentConfig, out: str | os.PathLike | None, root: str | os.PathLike = "runs") -> Path:
    """Choose the run folder: ``out`` if it is absent or empty, else a fresh
    ``runs/<name>-<backend>-<time>``. Nothing is created here (see :func:`make_run_dir`)."""
    if out is not None:
        path = Path(out)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise OutputExistsError(
                f"Output folder '{path}' already exists and is not empty; choose a new --out "
                "(gnnbridge never overwrites a run)."
            )
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{_slug(config.name)}-{config.backend}-{stamp}"


def make_run_dir(path: Path, exclusive: bool) -> tuple[Path, Path | None]:
    """Create the run folder; return it and the top-most folder this call created (to undo).

    With ``exclusive`` (a generated name), two jobs started in the same second never share a
    folder: creation is atomic and a taken name gets a ``-2``, ``-3`` ... suffix.
    """
    created = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
    if not exclusive:
        path.mkdir(parents=True, exist_ok=True)
        return path, created
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate, n = path, 1
    while True:
        try:
            candidate.mkdir()
            return candidate, created if created != path else candidate
        except FileExistsError:
            n += 1
            candidate = path.with_name(f"{path.name}-{n}")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def write_json_atomic(path: Path, payload: Any) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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


def hint_resume(exc: BaseException, run_dir: Path) -> None:
    """A failed run that left a checkpoint says how to continue it, on its one error line."""
    if isinstance(exc, GnnBridgeError) and exc.args and checkpoint.has_checkpoint(run_dir):
        line = f"{str(exc.args[0]).rstrip('.')}. The run's checkpoint is kept; continue it with: "
        exc.args = (f"{line}gnnbridge train --resume {run_dir}",)


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
