"""A trained model ready to score: the backend, store, sampler and model of its run (with the
checkpoint's weights, see :class:`~gnnbridge.core.inference.assembly.RunParts`) and the final
evaluator ``eval.mode`` picks, as training's final evaluation uses it. Nothing that only
training needs is built: no optimizer, no DDP wrapper (one process scores), no loggers.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch

from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.inference.assembly import RunParts
from gnnbridge.core.inference.evaluation import LinkEvaluator
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.runtime.context import DistContext

SPLITS = ("train", "val", "test")


class Scorer:
    """``state``: a loaded checkpoint (its ``model`` weights are used, nothing else of it)."""

    def __init__(self, config: ExperimentConfig, data: GraphData | GraphCollection, ctx: DistContext, state: dict):
        self.parts = RunParts(config, data, ctx, weights=state)

    @property
    def model(self) -> torch.nn.Module:
        return self.parts.model

    def evaluate(self) -> dict:
        """``{"metrics", "eval"}``: every split's scores and how they were computed (as in ``results.json``)."""
        return {"metrics": self.parts.evaluate(), "eval": self.parts.eval_summary()}

    def predict(self) -> torch.Tensor:
        """Logits of every node (or graph), by the final evaluator."""
        return self.parts.predict()

    def embeddings(self, stack: ExitStack) -> dict[str, torch.Tensor]:
        """Every node type's final states (see :meth:`RunParts.embeddings`)."""
        return self.parts.embeddings(stack)

    def link_scorer(self) -> LinkEvaluator:
        """Scores pairs of the target edge type as the final evaluation does."""
        return self.parts.link_scorer()
