"""Conformance suites a plugin model or sampler runs against itself, from the plugin's own pytest::

    from gnnbridge.testing.plugins import ModelConformance, SamplerConformance

    class TestMyModel(ModelConformance):
        arch = "my-model"            # a registered name, or "my_lab.models:DeepSAGE"
        options = {"residual": True}  # model.options, if the model needs any

    class TestMySampler(SamplerConformance):
        kind = "my-sampler"

Each test is a promise the training loop relies on, checked on every available backend the
model or sampler is registered for (others are skipped): a model gives a row of logits per seed
on real sampled batches, its outputs keep the contract the training loop checks before its first
epoch (failures read as that contract, e.g. "layer_forward(0) returned 3 rows for a batch of 8
outputs; expected ..."), every parameter learns, evaluation is deterministic, layer-wise
inference (when the model has it) equals a full-neighbourhood forward pass, and a few steps
lower the loss; a sampler yields one batch per seed tensor with the seeds first, only real
edges, at most ``fanout`` neighbours per node, reproducibly per (seed, epoch, rank).
"""

from __future__ import annotations

import pytest
import torch

from gnnbridge.core.config import ModelSpec, Task
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.inference.evaluation import LayerwiseEvaluator, supports_layerwise
from gnnbridge.core.models.build import ModelCall, build_model, resolve
from gnnbridge.core.plugins import ANY_BACKEND, backends, models, samplers
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.sampling.build import make_sampler
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS
from gnnbridge.core.training.dry import SEEDS, check_layers
from gnnbridge.testing.conformance import small_graph

ALL_BACKENDS = tuple(backends.names())  # every installed backend, third-party ones included


def _usable(registry, name: str, backend_name: str) -> None:
    """Skip unless ``name`` serves ``backend_name`` (registered for it, or a class by import path
    that does not declare other ``backends``) and that backend runs here."""
    if backends.get(backend_name).availability() is not None:
        pytest.skip(f"backend {backend_name} unavailable")
    if ":" in name:
        try:
            resolve(ModelSpec(arch=name), backend_name, Task.NODE)
        except ConfigError as exc:
            if "is written for backend" in str(exc):
                pytest.skip(str(exc))
            raise
    elif not any(c.backend in (backend_name, ANY_BACKEND) for c in registry.entries() if c.name == name):
        pytest.skip(f"'{name}' is not registered for backend {backend_name}")
    elif registry is models and all(Task.NODE not in c.tasks for c in registry.entries() if c.name == name):
        pytest.skip(f"'{name}' is a graph-level model; ModelConformance checks node-level models")


class _OnASmallGraph:
    @pytest.fixture(scope="class")
    def graph(self):
        return small_graph(seed=3)


@pytest.mark.parametrize("backend_name", ALL_BACKENDS)
class ModelConformance(_OnASmallGraph):
    arch: str = ""
    options: dict = {}
    fanouts = (4, 3)

    def _setup(self, backend_name, data):
        _usable(models, self.arch, backend_name)
        backend = backends.get(backend_name)
        spec = ModelSpec(arch=self.arch, hidden=16, layers=len(self.fanouts), dropout=0.0, options=dict(self.options))
        torch.manual_seed(0)
        model, choice = build_model(spec, backend_name, Task.NODE, data.num_features, data.num_classes, data)
        sampler = make_sampler(backend, backend.graph_store(data), list(self.fanouts), "auto")
        return backend, model, ModelCall(choice.origin, data.num_classes), sampler

    def _batch(self, sampler, seeds):
        sampler.reseed(0, 0, 0)
        return next(iter(sampler.loader([seeds])))

    def test_gives_a_row_of_logits_per_seed(self, backend_name, graph) -> None:
        backend, model, call, sampler = self._setup(backend_name, graph)
        for seeds in (graph.train_idx[:1], graph.train_idx[:37]):
            mb = self._batch(sampler, seeds)
            assert call(model, mb.graph, graph.x[mb.input_nodes], seeds.numel()).shape == (
                seeds.numel(),
                graph.num_classes,
            )

    def test_outputs_keep_the_contract(self, backend_name, graph) -> None:
        """The training loop's dry step on a small batch: ``forward`` and every ``layer_forward``
        return finite floating-point rows, one per output (or per input node, outputs first),
        on the batch's device. A failure is the line a run would print before its first epoch."""
        backend, model, call, sampler = self._setup(backend_name, graph)
        seeds = graph.train_idx[:SEEDS]
        mb = self._batch(sampler, seeds)
        model.eval()
        with torch.no_grad():
            call.finite(call(model, mb.graph, graph.x[mb.input_nodes], seeds.numel()), "forward")
            if supports_layerwise(model):
                check_layers(call, backend, model, graph, seeds, torch.device("cpu"))

    def test_every_parameter_gets_a_gradient(self, backend_name, graph) -> None:
        backend, model, call, sampler = self._setup(backend_name, graph)
        mb = self._batch(sampler, graph.train_idx[:64])
        logits = call(model, mb.graph, graph.x[mb.input_nodes], 64)
        torch.nn.functional.cross_entropy(logits, graph.y[mb.seeds]).backward()
        missing = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
        assert not missing, f"no gradient reaches {missing}"

    def test_evaluation_is_deterministic(self, backend_name, graph) -> None:
        backend, model, call, sampler = self._setup(backend_name, graph)
        mb = self._batch(sampler, graph.val_idx[:40])
        model.eval()
        with torch.no_grad():
            first, second = (call(model, mb.graph, graph.x[mb.input_nodes], 40) for _ in range(2))
        torch.testing.assert_close(first, second)

    def test_layerwise_inference_equals_a_full_forward_pass(self, backend_name, graph) -> None:
        backend, model, call, _ = self._setup(backend_name, graph)
        if not supports_layerwise(model):
            pytest.skip("no layer_forward: evaluated on full neighbourhoods instead")
        model.eval()
        full = make_sampler(backend, backend.graph_store(graph), [ALL_NEIGHBORS] * len(self.fanouts), "auto")
        seeds = graph.val_idx[:25]
        mb = self._batch(full, seeds)
        with torch.no_grad():
            expected = call(model, mb.graph, graph.x[mb.input_nodes], 25)
        evaluator = LayerwiseEvaluator(backend, graph, DistContext(0, 1, 0, torch.device("cpu")), 64, call)
        torch.testing.assert_close(evaluator.full_logits(model)[seeds], expected, rtol=1e-4, atol=1e-5)

    def test_a_few_steps_lower_the_loss(self, backend_name, graph) -> None:
        backend, model, call, sampler = self._setup(backend_name, graph)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        mb = self._batch(sampler, graph.train_idx[:128])
        x, y = graph.x[mb.input_nodes], graph.y[mb.seeds]
        losses = []
        for _ in range(30):
            loss = torch.nn.functional.cross_entropy(call(model, mb.graph, x, y.numel()), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize("backend_name", ALL_BACKENDS)
class SamplerConformance(_OnASmallGraph):
    kind: str = ""
    fanouts = (3, 2)

    def _sampler(self, backend_name, data):
        _usable(samplers, self.kind, backend_name)
        backend = backends.get(backend_name)
        return make_sampler(backend, backend.graph_store(data), list(self.fanouts), self.kind)

    def test_one_batch_per_seed_tensor_seeds_first(self, backend_name, graph) -> None:
        sampler = self._sampler(backend_name, graph)  # checked: seeds and ids in range, or PluginError
        sampler.reseed(0, 0, 0)
        batches = [graph.train_idx[:17], graph.train_idx[17:18], graph.train_idx[18:60]]
        out = list(sampler.loader(batches))
        assert len(out) == len(batches)
        for seeds, mb in zip(batches, out):
            assert torch.equal(mb.input_nodes[: seeds.numel()], seeds)
            assert torch.unique(mb.input_nodes).numel() == mb.input_nodes.numel()

    def test_samples_real_edges_at_most_fanout_per_node(self, backend_name, graph) -> None:
        """Every node reached is a neighbour of the batch, the batch is no larger than the fanouts
        allow, and which nodes are drawn is a function of (seed, epoch, rank) (their order within
        the batch may vary: DGL's ``to_block`` numbers new nodes through a hash table)."""
        sampler = self._sampler(backend_name, graph)

        seeds = graph.train_idx[:5]  # few, so that taking every neighbour would exceed the fanouts

        def draw(epoch):
            sampler.reseed(5, epoch, 0)
            return next(iter(sampler.loader([seeds]))).input_nodes

        assert torch.equal(draw(1).sort().values, draw(1).sort().values)
        neighbours = set(map(tuple, graph.edge_index.t().tolist()))
        nodes = draw(1)
        assert nodes.numel() <= seeds.numel() * (1 + self.fanouts[0] + self.fanouts[0] * self.fanouts[1])
        reached = set(nodes[seeds.numel() :].tolist())
        assert all(any((u, v) in neighbours or (v, u) in neighbours for v in nodes.tolist()) for u in reached)
