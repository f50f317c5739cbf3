"""Built-in logger plugins: ``csv``, ``tensorboard``, and the trackers ``mlflow`` and
``wandb`` (:mod:`.tracking`) (``log.to=[...]``; see :mod:`gnnbridge.core.training.loggers` for
the contract)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from gnnbridge.core import files
from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.plugins.tracking import MlflowLogger, WandbLogger


class CsvLogger:
    """``metrics.csv`` in the run folder: one row per epoch, a column per figure (the final
    metrics are in ``results.json``). A resumed run appends to it; should the figures change,
    a new header starts a second table below. Each row replaces the file with one a row longer
    (:func:`gnnbridge.core.files.append_text`): never written through a link, never half a row."""

    def __init__(self, run_dir: Path, config):
        self.path = run_dir / "metrics.csv"

    def log(self, step: int, values: dict[str, float]) -> None:
        if any(name.startswith("final/") for name in values):
            return
        row = {"epoch": step, **values}
        header = self._header()
        if header is not None and set(row) - set(header):
            header = None  # new columns: a second table below, with its own header
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=header or list(row), restval="")
        if header is None:
            writer.writeheader()
        writer.writerow(row)
        files.append_text(self.path, text.getvalue())

    def _header(self) -> list[str] | None:
        """The header of the last table in the file (None: no file yet)."""
        if not self.path.exists():
            return None
        last = None
        with open(self.path, newline="") as f:
            for line in csv.reader(f):
                if line and line[0] == "epoch":
                    last = line
        return last

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """TensorBoard event files in ``RUN/tensorboard/`` (``tensorboard --logdir RUN/tensorboard``)."""

    def __init__(self, run_dir: Path, config):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self.writer.add_text(
            "config",
            f"backend {config.backend}, model {config.model.arch}, {config.nproc} rank(s) on {config.device.value}",
        )

    def log(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _tensorboard(run_dir: Path, config) -> TensorBoardLogger:
    return TensorBoardLogger(run_dir, config)


_tensorboard.requires = "tensorboard"


def _mlflow(run_dir: Path, config) -> MlflowLogger:
    return MlflowLogger(run_dir, config)


def _wandb(run_dir: Path, config) -> WandbLogger:
    return WandbLogger(run_dir, config)


_mlflow.requires, _mlflow.extra = "mlflow", "track"
_wandb.requires, _wandb.extra = "wandb", "track"


@hookimpl
def register_loggers(register):
    register("csv", CsvLogger, "metrics.csv in the run folder, a row per epoch")
    register("tensorboard", _tensorboard, "TensorBoard event files in RUN/tensorboard/ (needs tensorboard)")
    register("mlflow", _mlflow, "a run on an MLflow tracking server or store (needs mlflow; docs: tracking)")
    register("wandb", _wandb, "a Weights & Biases run, offline with WANDB_MODE=offline (needs wandb; docs: tracking)")
