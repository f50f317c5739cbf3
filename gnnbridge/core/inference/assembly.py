"""A run's parts, assembled once from its config: the data placed on the rank's device (and its
feature cache), the backend, the training sampler, the model (with a checkpoint's weights when
given, on the device) and the evaluators, the final one chosen by ``eval.mode``. It holds no
optimizer, no DDP wrapper and no loggers: the trainer adds those
(:mod:`gnnbridge.core.training.trainer`), and ``evaluate`` and ``predict`` use these parts alone
(:mod:`.scorer`).
"""

from __future__ import annotations

from contextlib import ExitStack

import torch

from gnnbridge.core.config import EvalMode, ExperimentConfig, SamplerKind, Task
from gnnbridge.core.contracts.interfaces import Backend, Sampler
from gnnbridge.core.contracts.targets import Target
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.inference.checkpoint import load_model_state
from gnnbridge.core.inference.evaluation import (
    EdgeEvaluator,
    Evaluator,
    GraphEvaluator,
    LayerwiseEvaluator,
    LinkEvaluator,
    SampledEvaluator,
    evaluation_mode,
    supports_layerwise,
)
from gnnbridge.core.inference.placement import feature_caches, place
from gnnbridge.core.inference.typed_layerwise import (
    TypedLayerwise,
    TypedLayerwiseEdges,
    TypedLayerwiseEvaluator,
    TypedLayerwiseLinks,
    supports_typed_layerwise,
)
from gnnbridge.core.models.build import ModelCall, build_model, model_dims
from gnnbridge.core.models.init import initialise
from gnnbridge.core.plugins import get_backend, get_target
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.features import set_read_depth
from gnnbridge.core.records.hetero import HeteroGraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.sampling.build import make_hetero_sampler, make_sampler
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS


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
        self.sampler: Sampler = self._sampler()
        self.model, choice = build_model(config.model, config.backend, config.task, *model_dims(data), data)
        self.call = ModelCall(choice.origin, data.num_classes, per_graph=config.task is Task.GRAPH)
        self.call.tell = ctx.doing  # calls into the model outside training steps are watched
        self.is_link = config.task is Task.LINK
        self.is_edge = config.task is Task.EDGE
        self.target: Target = get_target(config.target)  # what the outputs predict: loss, metrics, monitor
        self.loss_name = config.train.loss or self.target.losses[0]
        if weights is not None:
            load_model_state(self.model, weights, weights.get("path", "checkpoint"))
        else:  # a built-in model starts from the same weights on every backend (no global stream is drawn)
            with self.call.blame("initialisation"):
                initialise(self.model, config.train.seed)
        self.model.to(ctx.device)

    @property
    def output_width(self) -> int:
        """The columns of a training batch's outputs: a pair's two (not an edge, an edge) for link
        prediction, else the record's (classes, labels or values)."""
        return 2 if self.is_link else self.data.num_classes

    def _sampler(self, every_neighbour: bool = False) -> Sampler:
        """The training sampler, or (``every_neighbour``) one taking all neighbours at every hop."""
        cfg = self.config.sampler
        fanouts = [ALL_NEIGHBORS] * len(cfg.fanouts) if every_neighbour else cfg.fanouts
        if self.config.task is Task.GRAPH:
            return self.backend.collection_sampler(self.backend.collection_store(self.data), SamplerKind(cfg.kind))
        if isinstance(self.data, HeteroGraphData):
            return make_hetero_sampler(
                self.backend,
                self.data,
                fanouts,
                {} if every_neighbour else cfg.edge_fanouts,
                SamplerKind.AUTO.value if every_neighbour else cfg.kind,
                self.config.link.negatives if self.config.task is Task.LINK else 0,
            )
        if every_neighbour:
            return self.backend.sampler(self.sampler.store, fanouts, SamplerKind.AUTO)
        return make_sampler(self.backend, self.backend.graph_store(self.data), fanouts, cfg.kind)

    # ------------------------------------------------------------------ evaluators

    def validation_evaluator(self) -> Evaluator:
        if self.is_link:
            return self._links(self.sampler)
        if self.is_edge:
            return self._sampled(self.sampler, EdgeEvaluator)
        if self.config.task is Task.GRAPH:
            return GraphEvaluator(
                self.backend,
                self.data,
                self.ctx,
                self.config.eval.batch_size,
                self.sampler,
                self.call,
                self.config.eval.layer_store,
                self.target,
            )
        return self._sampled(self.sampler)

    def _links(self, sampler: Sampler) -> LinkEvaluator:
        return LinkEvaluator(
            self.backend,
            self.data,
            self.ctx,
            self.config.train.batch_size,
            sampler,
            self.config.train.seed,
            self.call,
            self.config.link.ks,
        )

    def _sampled(self, sampler: Sampler, kind: type[SampledEvaluator] = SampledEvaluator) -> SampledEvaluator:
        """Items through ``sampler``: nodes, or an edge task's edges (``kind`` EdgeEvaluator)."""
        return kind(
            self.backend,
            self.data,
            self.ctx,
            self.config.eval.batch_size,
            sampler,
            self.config.train.seed,
            self.call,
            self.config.eval.layer_store,
            self.target,
        )

    def _typed_layerwise(self) -> Evaluator:
        store = self.config.eval.layer_store
        if self.is_link:
            full = self._sampler(every_neighbour=True)  # only reseeded: every pair is scored from states
            cfg = self.config
            return TypedLayerwiseLinks(
                self.backend, self.data, self.ctx, cfg.eval.batch_size, full, cfg.train.seed, self.call, cfg.link.ks,
                layer_store=store,
            )  # fmt: skip
        kind = TypedLayerwiseEdges if self.is_edge else TypedLayerwiseEvaluator
        return kind(self.backend, self.data, self.ctx, self.config.eval.batch_size, self.call, store, self.target)

    def evaluate(self) -> dict[str, float]:
        """The final evaluation (``eval.mode``) of the current weights on every split."""
        return self.final_evaluator().evaluate(self.model, ("train", "val", "test"))

    def predict(self) -> torch.Tensor:
        """Logits of every node (or graph, or an edge task's edge, in the order its
        ``edge_index`` gave them), by the same evaluator as :meth:`evaluate`."""
        rows = self.final_evaluator().predict(self.model)
        return self.data.given_rows(rows) if self.is_edge else rows  # (the record sorts its edges)

    def embeddings(self, stack: ExitStack) -> dict[str, torch.Tensor]:
        """Every node type's final states ``{type: [N, hidden]}`` from the exact typed layer-wise
        pass (mapped from files removed when ``stack`` closes, where they would not fit)."""
        if not isinstance(self.data, HeteroGraphData):
            raise ConfigError(
                "--embeddings writes each node type's final states of a heterogeneous graph or a link task; "
                "this run classifies the nodes of a homogeneous graph, whose final layer is its logits."
            )
        if not supports_typed_layerwise(self.model):
            raise ConfigError(
                f"--embeddings needs typed layer-wise inference, which {self.call.origin} does not offer."
            )
        cfg = self.config.eval
        with evaluation_mode(self.ctx, self.model, self.call, "its embeddings pass"):
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
        if self.config.task is Task.GRAPH:
            return None
        mode = self.config.eval.mode
        if isinstance(self.data, HeteroGraphData):
            layerwise = supports_typed_layerwise(self.model)
        else:
            layerwise = supports_layerwise(self.model)
        return EvalMode.FULL if mode is EvalMode.LAYERWISE and not layerwise else mode

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
        mode = self.final_mode()
        if mode is EvalMode.LAYERWISE and isinstance(self.data, HeteroGraphData):
            return self._typed_layerwise()
        if mode is EvalMode.LAYERWISE:
            cfg = self.config.eval
            return LayerwiseEvaluator(
                self.backend, self.data, self.ctx, cfg.batch_size, self.call, cfg.layer_store, self.target
            )
        if mode is EvalMode.FULL:
            full = self._sampler(every_neighbour=True)
            if self.is_link:
                return self._links(full)
            return self._sampled(full, EdgeEvaluator if self.is_edge else SampledEvaluator)
        return self.validation_evaluator()
