"""A run's parts, assembled once from its config: the data placed on the rank's device (and its
feature cache), the backend, the training sampler, the model (with a checkpoint's weights when
given, on the device) and the evaluators, the final one chosen by ``eval.mode``; what differs
between node, graph, link and edge tasks is asked of the task's family (:mod:`.families`). It
holds no optimizer, no DDP wrapper and no loggers: the trainer adds those
(:mod:`gnnbridge.core.training.trainer`), and ``evaluate`` and ``predict`` use these parts alone
(:mod:`.scorer`).
"""

from __future__ import annotations

from contextlib import ExitStack

import torch

from gnnbridge.core.config import EvalMode, ExperimentConfig
from gnnbridge.core.contracts.interfaces import Backend, Sampler
from gnnbridge.core.contracts.targets import Target
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.inference.checkpoint import load_model_state
from gnnbridge.core.inference.evaluation import (
    Evaluator,
    LinkEvaluator,
    evaluation_mode,
)
from gnnbridge.core.inference.partitioned import PartitionedTypedPass
from gnnbridge.core.inference.placement import feature_caches, place
from gnnbridge.core.inference.typed_layerwise import (
    TypedLayerwise,
    supports_typed_layerwise,
)
from gnnbridge.core.models.build import ModelCall, build_model, model_dims
from gnnbridge.core.models.init import initialise
from gnnbridge.core.plugins import get_backend, get_family, get_target
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.features import set_read_depth
from gnnbridge.core.records.hetero import HeteroGraphData
from gnnbridge.core.runtime.context import DistContext

HOMOGENEOUS_EMBEDDINGS = (
    "--embeddings writes each node type's final states of a heterogeneous graph or a link task; this run "
    "classifies the nodes of a homogeneous graph, whose final layer is its logits."
)


class RunParts:
    """What training and inference share. ``weights``: a loaded checkpoint whose model weights
    are loaded before the model moves to ``ctx.device``."""

    def __init__(
        self,
        config: ExperimentConfig,
        data: GraphData | GraphCollection,
        ctx: DistContext,
        weights: dict | None = None,
    ):
        self.config = config
        self.data = place(data, config.placement, ctx.device)
        set_read_depth(config.placement.read_depth)  # first: the cache's rows are read with it
        self.feature_caches = feature_caches(self.data, config.placement, ctx)  # once per machine
        self.ctx = ctx
        self.backend: Backend = get_backend(config.backend).require()
        self.backend.check_device(ctx.device)
        torch.manual_seed(config.train.seed)
        self.family = get_family(config.task)  # what differs between node, graph, link and edge tasks
        self.sampler: Sampler = self.family.sampler(self)
        self.model, choice = build_model(config.model, config.backend, config.kind, *model_dims(data), data)
        self.call = ModelCall(choice.origin, data.num_classes, per_graph=self.family.per_graph)
        self.call.tell = ctx.doing  # calls into the model outside training steps are watched
        # What the outputs predict (loss, metrics, monitor), fitted to the training labels or as
        # the checkpoint kept it (nothing kept: as it was trained, unfitted).
        self.target: Target = get_target(config.target)
        self.loss_name = config.train.loss or self.target.losses[0]
        if weights is not None:
            load_model_state(self.model, weights, weights.get("path", "checkpoint"), data)
            self.target = self.target.restored(weights.get("target"))
        else:
            if config.model.init == "shared":  # the same weights on every backend (no global stream is drawn)
                with self.call.blame("initialisation"):
                    initialise(self.model, config.train.seed)
            if config.train.target_scaling != "none":
                self.target = self.target.fitted(self._train_labels, self.output_width, ctx.all_reduce_sum)
        self.model.to(ctx.device)

    def _train_labels(self) -> torch.Tensor:
        """This rank's share of the training split's labels, for a target to fit: each machine's
        first rank holds its record's (the whole graph's, or a partitioned graph's own part), the
        others none, so a sum over the ranks counts every label once per machine."""
        y = getattr(self.data, "y", None)
        if y is None or not self.ctx.is_local_main:
            return torch.zeros(0, self.output_width)
        return y[self.data.split("train").to(y.device)]

    @property
    def output_width(self) -> int:
        """The columns of a training batch's outputs (the family's: a link pair's two, else the
        record's classes, labels or values)."""
        return self.family.output_width(self)

    # ------------------------------------------------------------------ evaluators

    def validation_evaluator(self) -> Evaluator:
        """What scores each epoch: the items through the training sampler (or whole graphs)."""
        return self.family.through(self, self.sampler)

    def evaluate(self) -> dict[str, float]:
        """The final evaluation (``eval.mode``) of the current weights on every split."""
        return self.final_evaluator().evaluate(self.model, ("train", "val", "test"))

    def predict(self) -> torch.Tensor:
        """Logits of every node (or graph, or an edge task's edge, in the order its
        ``edge_index`` gave them), by the same evaluator as :meth:`evaluate`."""
        return self.family.in_given_order(self, self.final_evaluator().predict(self.model))

    def embeddings(self, stack: ExitStack) -> dict[str, torch.Tensor]:
        """Every node type's final states ``{type: [N, hidden]}`` from the exact typed layer-wise
        pass (mapped from files removed when ``stack`` closes, where they would not fit); on a
        machine's part of a partitioned graph, its own nodes' (the machines compute each layer
        together)."""
        if not isinstance(self.data, HeteroGraphData):
            raise ConfigError(HOMOGENEOUS_EMBEDDINGS)
        if not supports_typed_layerwise(self.model):
            raise ConfigError(
                f"--embeddings needs typed layer-wise inference, which {self.call.origin} does not offer."
            )
        cfg = self.config.eval
        with evaluation_mode(self.ctx, self.model, self.call, "its embeddings pass"):
            if self.data.partition is not None:
                machine = PartitionedTypedPass(self.backend, self.data, self.ctx, cfg.batch_size, self.call)
                return machine.states(self.model)
            typed = TypedLayerwise(self.backend, self.data, self.ctx, cfg.batch_size, cfg.layer_store, self.call)
            return typed.states(self.model, stack)

    def link_scorer(self) -> LinkEvaluator:
        """Scores pairs of the target edge type as the final evaluation does (``eval.mode``)."""
        evaluator = self.final_evaluator()
        if not isinstance(evaluator, LinkEvaluator):
            raise TypeError("link_scorer() needs a link task")
        return evaluator

    def final_mode(self) -> EvalMode | None:
        """How the final evaluation runs: ``eval.mode``, except that a model without
        ``layer_forward`` is evaluated on full neighbourhoods. None: whole graphs."""
        if not self.family.layered:
            return None
        mode = self.config.eval.mode
        return EvalMode.FULL if mode is EvalMode.LAYERWISE and not self.family.can_run_layerwise(self) else mode

    def eval_summary(self) -> dict:
        """What ``results.json`` says about evaluation: the mode that ran, and why when it is not
        the one asked for."""
        mode = self.final_mode()
        out = {
            "requested": self.config.eval.mode.value,
            "final": mode.value if mode else "whole graphs",
            "validation": "whole graphs" if mode is None else "sampled",
        }
        if mode is not None and mode.value != out["requested"]:
            why = (
                f"{self.call.origin} has no typed layer-wise inference (typed_layerwise)"
                if isinstance(self.data, HeteroGraphData)
                else f"{self.call.origin} has no layer_forward"
            )
            out["note"] = f"{why}: evaluated on every seed's full neighbourhood"
        return out

    def final_evaluator(self) -> Evaluator:
        """What scores the final weights: ``eval.mode``'s evaluator (see :meth:`final_mode`)."""
        mode = self.final_mode()
        if mode is EvalMode.LAYERWISE:
            return self.family.layerwise(self)
        if mode is EvalMode.FULL:
            return self.family.through(self, self.family.sampler(self, every_neighbour=True))
        return self.validation_evaluator()
