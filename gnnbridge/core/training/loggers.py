"""Each epoch's numbers to the logger plugins ``log.to`` names (CSV and TensorBoard are built in).

Why plugins: where numbers go is a lab's own choice (TensorBoard, a CSV for a spreadsheet,
Weights & Biases, MLflow); core flattens one epoch into ``{name: number}`` and hands it to each
logger on rank 0, the one process that holds every rank's reduced figures. A logger that raises
stops the run with one line naming it, like any plugin's code.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from gnnbridge.core.contracts.config import ExperimentConfig
from gnnbridge.core.contracts.plugins import PluginError, blame, loggers
from gnnbridge.core.errors import ConfigError

SKIPPED = ("epoch", "phases_slowest_rank")  # the step itself, and a per-rank record of the phases


def check_loggers(config: ExperimentConfig) -> None:
    """Every logger ``log.to`` names exists and has what it needs (before anything runs)."""
    for name in config.log.to:
        opener = loggers.get(name)
        needs = getattr(opener, "requires", None)
        if needs and importlib.util.find_spec(needs) is None:
            raise ConfigError(f"log.to={name} needs the '{needs}' package, which is not installed: "
                              f"pip install {needs} (or pip install 'gnnbridge[log]').")


class RunLoggers:
    """The loggers of one run on rank 0 (none elsewhere, or without ``log.to``).

    An epoch reaches the loggers once the checkpoint that holds it is written (:meth:`commit`):
    epochs after the last checkpoint are trained again on resume or restart, and would otherwise
    be logged twice. At the end of a run, a logger that fails to take the final metrics or to
    close is a warning: the run itself has finished and its results are written."""

    def __init__(self, config: ExperimentConfig, run_dir: Path | None):
        self._open: list[tuple[str, Any]] = []
        self._pending: list[dict] = []
        if run_dir is None:
            return
        for name in config.log.to:
            origin = loggers.origin(name)
            with blame(origin, "open(run_dir, config)"):
                self._open.append((origin, loggers.get(name)(Path(run_dir), config)))

    def epoch(self, stats: dict) -> None:
        if self._open:
            self._pending.append(flatten(stats) | {"_step": stats["epoch"] + 1})

    def commit(self) -> None:
        """Send the epochs the checkpoint just written holds."""
        pending, self._pending = self._pending, []
        for values in pending:
            self._send(values.pop("_step"), values)

    def finish(self, epochs: int, metrics: dict) -> None:
        self._send(epochs, {f"final/{k}": v for k, v in metrics.items() if _number(v)}, warn=True)

    def close(self, warn: bool = True) -> None:
        """Close every logger; with ``warn`` a failure is a warning line, else it is not said
        (the run is already stopping for another reason, whose line must stay the one shown)."""
        opened, self._open = self._open, []
        for origin, logger in opened:
            try:
                with blame(origin, "close()"):
                    logger.close()
            except PluginError as exc:
                if warn:
                    print(f"Warning: {exc}", file=sys.stderr)

    def _send(self, step: int, values: dict[str, float], warn: bool = False) -> None:
        for origin, logger in self._open:
            try:
                with blame(origin, "log(step, values)"):
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


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
