"""Each epoch's numbers to the logger plugins ``log.to`` names (CSV, TensorBoard, MLflow and
W&B are built in).

Why plugins: where numbers go is a lab's own choice (TensorBoard, a CSV for a spreadsheet,
Weights & Biases, MLflow); core flattens one epoch into ``{name: number}`` and hands it to each
logger on rank 0, the one process that holds every rank's reduced figures. A logger that raises
stops the run with one line naming it, like any plugin's code. Two hooks are optional, for the
loggers that keep files with a tracked run: ``checkpoint_saved(path, step)`` after each
checkpoint written at the end of an epoch, and ``run_finished(run_dir)`` once the results and
curves are written (the caller then closes the loggers). Core imports no tracking library.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from gnnbridge.core import files
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import ConfigError, OutputPathError
from gnnbridge.core.inference.checkpoint import FOLDER
from gnnbridge.core.plugins import PluginError, blame, loggers

SKIPPED = ("epoch", "phases_slowest_rank")  # the step itself, and a per-rank record of the phases
PROGRESS = "loggers.json"  # in the run's checkpoints/: {logger: the last step it took}


def check_loggers(config: ExperimentConfig) -> None:
    """Every logger ``log.to`` names exists and has what it needs (before anything runs)."""
    for name in config.log.to:
        opener = loggers.get(name)
        needs = getattr(opener, "requires", None)
        if needs and importlib.util.find_spec(needs) is None:
            extra = getattr(opener, "extra", "log")  # the package's extra that brings it
            raise ConfigError(
                f"log.to={name} needs the '{needs}' package, which is not installed: "
                f"pip install {needs} (or pip install 'gnnbridge[{extra}]')."
            )


class RunLoggers:
    """The loggers of one run on rank 0 (none elsewhere, or without ``log.to``).

    An epoch reaches the loggers once the checkpoint that holds it is written (:meth:`commit`):
    epochs after the last checkpoint are trained again on resume or restart, and would otherwise
    be logged twice. At the end of a run, a logger that fails to take the final metrics or to
    close is a warning: the run itself has finished and its results are written.

    Every epoch a checkpoint holds reaches every logger, even when the run stopped before its
    loggers took it (a logger failed, a Ctrl-C came right after the checkpoint): the last epoch
    each logger took is kept in ``checkpoints/loggers.json`` (:data:`PROGRESS`), and a resumed
    or restarted run first sends each logger the epochs of the checkpoint's history it lacks
    (a logger new to the run gets all of them). The checkpoint itself records the progress as
    of its writing (``logged``), for the run stopped before the file was first written."""

    def __init__(self, config: ExperimentConfig, run_dir: Path | None, resume: dict | None = None):
        self._open: list[tuple[str, Any]] = []
        self._pending: list[dict] = []
        self.logged: dict[str, int] = {}  # logger -> the last step (epoch + 1) it took
        if run_dir is None:
            return
        self._progress_file = Path(run_dir) / FOLDER / PROGRESS
        for name in config.log.to:
            with blame(loggers.origin(name), "open(run_dir, config)"):
                self._open.append((name, loggers.get(name)(Path(run_dir), config)))
        if resume is not None and self._open:
            self.logged = self._progress(resume)
            try:
                self._replay(resume["history"])
            except BaseException:
                self.close(warn=False)
                raise

    def epoch(self, stats: dict) -> None:
        if self._open:
            self._pending.append(flatten(stats) | {"_step": stats["epoch"] + 1})

    def commit(self) -> None:
        """Send the epochs the checkpoint just written holds."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            for values in pending:
                step = values.pop("_step")
                for name, logger in self._open:
                    self._log(name, logger, step, values)
        finally:
            self._keep_progress()

    def finish(self, epochs: int, metrics: dict) -> None:
        self._send(epochs, {f"final/{k}": v for k, v in metrics.items() if _number(v)}, warn=True)

    def checkpoint_saved(self, path: Path, step: int) -> None:
        """Tell the loggers that keep checkpoints (``log.model=all``) that ``path`` was written
        after epoch ``step`` (counted from 1); one that raises stops the run, as in ``log``."""
        for name, logger in self._open:
            hook = getattr(logger, "checkpoint_saved", None)  # optional: most loggers keep no files
            if hook is not None:
                with blame(loggers.origin(name), "checkpoint_saved(path, step)"):
                    hook(Path(path), step)

    def run_finished(self, run_dir: Path) -> None:
        """The run's results and curves are in ``run_dir``: the loggers that keep files take
        them (and ``log.model=end``'s checkpoints). The run has finished, so a failure is a
        warning line."""
        for name, logger in self._open:
            hook = getattr(logger, "run_finished", None)
            if hook is None:
                continue
            try:
                with blame(loggers.origin(name), "run_finished(run_dir)"):
                    hook(Path(run_dir))
            except PluginError as exc:
                print(f"Warning: {exc}", file=sys.stderr)

    def close(self, warn: bool = True) -> None:
        """Close every logger; with ``warn`` a failure is a warning line, else it is not said
        (the run is already stopping for another reason, whose line must stay the one shown)."""
        opened, self._open = self._open, []
        for name, logger in opened:
            try:
                with blame(loggers.origin(name), "close()"):
                    logger.close()
            except PluginError as exc:
                if warn:
                    print(f"Warning: {exc}", file=sys.stderr)

    def _progress(self, resume: dict) -> dict[str, int]:
        """How far each logger got: the progress file, else what the checkpoint recorded, else
        (a checkpoint from before either existed) everything it holds."""
        try:
            kept = _steps(json.loads(self._progress_file.read_text()))
        except (OSError, ValueError):
            kept = {}
        recorded = resume.get("logged")
        default = _steps(recorded) if isinstance(recorded, dict) else None
        everything = resume["epoch"] + 1
        return {name: kept.get(name, everything if default is None else default.get(name, 0)) for name, _ in self._open}

    def _replay(self, history: list[dict]) -> None:
        try:
            for name, logger in self._open:
                for stats in history:
                    if stats["epoch"] + 1 > self.logged[name]:
                        self._log(name, logger, stats["epoch"] + 1, flatten(stats))
        finally:
            self._keep_progress()

    def _log(self, name: str, logger: Any, step: int, values: dict[str, float]) -> None:
        """Send one epoch; a logger that answers False did not take it (its tracking server
        was away), so its progress stays where it was and a resume sends the epoch again."""
        with blame(loggers.origin(name), "log(step, values)"):
            took = logger.log(step, dict(values))
        if took is not False:
            self.logged[name] = max(step, self.logged.get(name, 0))

    def _keep_progress(self) -> None:
        try:
            self._progress_file.parent.mkdir(exist_ok=True)
            files.replace(self._progress_file, json.dumps(self.logged) + "\n")
        except OSError as exc:
            raise OutputPathError(
                f"Cannot write '{self._progress_file}': {exc.strerror or exc}; free some space or "
                "fix the folder, then continue the run."
            ) from None

    def _send(self, step: int, values: dict[str, float], warn: bool = False) -> None:
        for name, logger in self._open:
            try:
                with blame(loggers.origin(name), "log(step, values)"):
                    logger.log(step, values)
            except PluginError as exc:
                if not warn:
                    raise
                print(f"Warning: {exc}", file=sys.stderr)


def flatten(stats: dict) -> dict[str, float]:
    """One epoch's figures as ``{name: number}``: phases as ``phases/<phase>``, the rest as is."""
    out = {}
    for key, value in stats.items():
        if key in SKIPPED:
            continue
        if isinstance(value, dict):
            out.update({f"{key}/{k}": float(v) for k, v in value.items() if _number(v)})
        elif _number(value):
            out[key] = float(value)
    return out


def _steps(value: Any) -> dict[str, int]:
    """``{logger: step}`` from a file or checkpoint; anything else in it is ignored."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
