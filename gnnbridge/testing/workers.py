"""Rank workers for multi-process tests (importable by spawned children, unlike test modules)."""
from __future__ import annotations

from pathlib import Path

import torch

from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.data import GraphData
from gnnbridge.core.distributed import DistContext
from gnnbridge.core.trainer import Trainer, parameters_digest


def train_and_dump(ctx: DistContext, config: ExperimentConfig, data: GraphData, out: str) -> None:
    """Train, then save this rank's parameters, metrics and history to ``out/rank<r>.pt``."""
    trainer = Trainer(config, data, ctx, show_progress=False)
    outcome = trainer.fit()
    torch.save(
        {
            "params": parameters_digest(trainer.model),
            "metrics": outcome["metrics"],
            "history": outcome["history"],
        },
        Path(out) / f"rank{ctx.rank}.pt",
    )
