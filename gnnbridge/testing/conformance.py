"""A conformance suite every backend runs against itself, ours or a plugin's.

Subclass :class:`BackendConformance` in a pytest file and name your backend::

    from gnnbridge.testing.conformance import BackendConformance

    class TestMyBackend(BackendConformance):
        backend_name = "mybackend"

Each test checks a promise the training loop relies on: one batch per seed tensor with the
seeds first, reproducible sampling, layer-wise inference equal to a full forward pass, weights
that mean the same thing as on the reference backend (ported weights, same logits), and a
model that learns. Fanout order is backend-specific and tested with each backend. A backend
that lists ``Task.GRAPH`` in ``tasks()`` is also held to the graph-classification promises
(the ``test_graph_*`` tests; skipped otherwise).
"""

from __future__ import annotations

import pytest
import torch

from gnnbridge.core.config import ModelSpec, SamplerKind, Task
from gnnbridge.core.contracts.interfaces import Backend
from gnnbridge.core.inference.evaluation import LayerwiseEvaluator
from gnnbridge.core.models.build import build_model
from gnnbridge.core.models.gin import GIN
from gnnbridge.core.plugins import backends, models
from gnnbridge.core.records.batches import IndexedRows
from gnnbridge.core.records.collection import GraphCollection, pack
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS, NeighborSampler
from gnnbridge.core.sampling.seeds import epoch_generator

REFERENCE_BACKEND = "pyg"
# The node-level architectures of the neutral ModelSpec. A backend builds those of them it
# registers (a subset is allowed), with the reference backend's parameter shapes (so weights
# move between backends); the tests of one it does not build are skipped.
ARCHITECTURES = ("sage", "gcn", "gat")


def build(backend: Backend, spec: ModelSpec, data, task: Task = Task.NODE) -> torch.nn.Module:
    """The model ``spec`` names, as a run on ``backend`` builds it (bound to ``data``)."""
    return build_model(spec, backend.name, task, data.num_features, data.num_classes, data)[0]


def small_graph(seed: int = 0, n: int = 300, classes: int = 4, features: int = 12) -> GraphData:
    from gnnbridge.plugins.datasets import synthetic_graph

    return synthetic_graph(n, classes, features, avg_degree=8.0, homophily=0.8, signal=0.5, seed=seed)


def in_degrees(dst: torch.Tensor, n: int) -> torch.Tensor:
    return torch.bincount(dst, minlength=n)


class BackendConformance:
    backend_name: str = ""

    @pytest.fixture(scope="class")
    def backend(self) -> Backend:
        backend = backends.get(self.backend_name)
        reason = backend.availability()
        if reason is not None:
            pytest.skip(f"backend {self.backend_name} unavailable: {reason}")
        return backend

    @pytest.fixture(scope="class")
    def data(self) -> GraphData:
        return small_graph()

    def test_declares_itself(self, backend: Backend) -> None:
        assert backend.name == self.backend_name
        assert isinstance(backend.versions(), dict)
        assert set(models.names(backend.name, Task.NODE)) & set(ARCHITECTURES), (
            f"backend {backend.name!r} builds none of the neutral node architectures {ARCHITECTURES}"
        )

    @pytest.mark.parametrize("kind", [SamplerKind.AUTO, SamplerKind.CORE])
    def test_sampler_yields_one_batch_per_seed_tensor_seeds_first(self, backend, data, kind) -> None:
        store = backend.graph_store(data)
        sampler = backend.sampler(store, [3, 2], kind)
        sampler.reseed(0, 0, 0)
        batches = [data.train_idx[:17], data.train_idx[17:40]]
        out = list(sampler.loader(batches))
        assert len(out) == len(batches)
        model = build(backend, ModelSpec(arch=self._first_arch(backend), hidden=8, layers=2, dropout=0.0), data)
        for seeds, mb in zip(batches, out):
            assert torch.equal(mb.seeds, seeds)
            assert torch.equal(mb.input_nodes[: seeds.numel()], seeds)
            assert torch.unique(mb.input_nodes).numel() == mb.input_nodes.numel()
            logits = model(backend.graph_to(mb.graph, torch.device("cpu")), data.x[mb.input_nodes])
            assert logits.shape == (seeds.numel(), 4)

    def test_sampling_is_reproducible_and_changes_with_the_epoch(self, backend, data) -> None:
        store = backend.graph_store(data)
        sampler = backend.sampler(store, [4, 4], SamplerKind.AUTO)

        def draw(epoch):
            sampler.reseed(7, epoch, 1)
            return [mb.input_nodes for mb in sampler.loader([data.train_idx[:50]])][0]

        assert torch.equal(draw(3), draw(3))
        assert not torch.equal(draw(3), draw(4))

    @pytest.mark.parametrize("arch", ARCHITECTURES)
    def test_layerwise_inference_equals_full_forward(self, backend, data, arch) -> None:
        """Exact inference one layer at a time equals a 2-hop full-neighbourhood forward pass,
        whatever the inference batch size."""
        torch.manual_seed(0)
        model = self._model(backend, data, self._built(backend, arch)).eval()
        seeds = data.val_idx[:25]
        full = NeighborSampler(data.indptr, data.indices, [ALL_NEIGHBORS, ALL_NEIGHBORS]).sample(seeds)
        with torch.no_grad():
            expected = model(backend.from_sampled(full), data.x[full.node])
        for batch_size in (16, 1000):
            evaluator = LayerwiseEvaluator(backend, data, DistContext(0, 1, 0, torch.device("cpu")), batch_size)
            torch.testing.assert_close(evaluator.full_logits(model)[seeds], expected, rtol=1e-4, atol=1e-5)

    @pytest.mark.parametrize("kind", [SamplerKind.AUTO, SamplerKind.CORE])
    def test_indexed_rows_give_what_gathered_rows_give(self, backend, data, kind) -> None:
        """A model that reads its input as :class:`IndexedRows` (core then stops gathering
        ``x[input_nodes]``) computes the logits, parameter gradients and layer-wise outputs it
        computes from the gathered rows."""
        torch.manual_seed(0)
        if "sage" not in models.names(backend.name, Task.NODE):
            pytest.skip(f"{backend.name} does not build GraphSAGE")
        model = self._model(backend, data, "sage")
        if not model.reads_indexed_rows:
            pytest.skip(f"{backend.name}'s GraphSAGE reads gathered rows only")
        sampler = backend.sampler(backend.graph_store(data), [5, 3], kind)
        sampler.reseed(0, 0, 0)
        mb = next(iter(sampler.loader([data.train_idx[:40]])))
        params = list(model.parameters())
        outputs = []
        for x in (data.x[mb.input_nodes], IndexedRows(data.x, mb.input_nodes)):
            logits = model(mb.graph, x)
            outputs.append((logits, torch.autograd.grad(logits.square().sum(), params)))
        torch.testing.assert_close(outputs[1][0], outputs[0][0], rtol=1e-4, atol=1e-5)
        for got, expected in zip(outputs[1][1], outputs[0][1]):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        sub = NeighborSampler(data.indptr, data.indices, [ALL_NEIGHBORS]).sample(data.val_idx[:30])
        graph = backend.from_sampled(sub)
        with torch.no_grad():
            torch.testing.assert_close(
                model.layer_forward(0, graph, IndexedRows(data.x, sub.node)),
                model.layer_forward(0, graph, data.x[sub.node]),
                rtol=1e-4,
                atol=1e-5,
            )

    @pytest.mark.parametrize("arch", ARCHITECTURES)
    def test_same_weights_give_the_reference_backends_outputs(self, backend, arch) -> None:
        """Neutral parameters name the same weights on both backends: ported weights reproduce the
        reference backend's logits on the same batch (on a graph with self-loops, too)."""
        reference = backends.get(REFERENCE_BACKEND)
        if reference.availability() is not None:
            pytest.skip("reference backend unavailable")
        self._built(backend, arch)
        data = with_some_self_loops(small_graph(seed=1))
        torch.manual_seed(0)
        ref_model = self._model(reference, data, arch, layers=3).eval()
        mine = self._model(backend, data, arch, layers=3).eval()
        theirs = ref_model.neutral_parameters()
        ours = mine.neutral_parameters()
        assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in theirs.items()}
        assert sum(p.numel() for p in mine.parameters()) == sum(v.numel() for v in ours.values())
        with torch.no_grad():
            for name, value in theirs.items():
                ours[name].copy_(value)
            sub = NeighborSampler(data.indptr, data.indices, [5, 4, 3]).sample(data.val_idx[:30], epoch_generator(0, 0))
            expected = ref_model(reference.from_sampled(sub), data.x[sub.node])
            actual = mine(backend.from_sampled(sub), data.x[sub.node])
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)

    def test_model_learns(self, backend, data) -> None:
        torch.manual_seed(0)
        store = backend.graph_store(data)
        sampler = backend.sampler(store, [5, 5], SamplerKind.AUTO)
        model = build(backend, ModelSpec(arch=self._first_arch(backend), hidden=32, layers=2, dropout=0.0), data)
        opt = torch.optim.Adam(model.parameters(), lr=0.02)
        sampler.reseed(0, 0, 0)
        losses = []
        for _ in range(15):
            for mb in sampler.loader([data.train_idx]):
                loss = torch.nn.functional.cross_entropy(model(mb.graph, data.x[mb.input_nodes]), data.y[mb.seeds])
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss))
        assert losses[-1] < 0.5 * losses[0]

    # ------------------------------------------------------------------ graph tasks

    @pytest.fixture(scope="class")
    def graphs(self, backend) -> GraphCollection:
        if Task.GRAPH not in backend.tasks():
            pytest.skip(f"backend {self.backend_name} does not train graph tasks")
        return small_collection()

    @pytest.mark.parametrize("kind", [SamplerKind.AUTO, SamplerKind.CORE])
    def test_graph_loader_yields_the_requested_graphs_in_order(self, backend, graphs, kind) -> None:
        loader = backend.collection_sampler(backend.collection_store(graphs), kind)
        batches = [torch.tensor([5, 2, 40]), torch.tensor([], dtype=torch.int64), torch.tensor([7])]
        out = list(loader.loader(batches))
        assert len(out) == 3  # the empty batch too: DDP needs every rank to step
        for mb, ids in zip(out, batches):
            assert torch.equal(mb.seeds, ids)
            assert torch.equal(mb.input_nodes, pack(graphs, ids).node)

    @pytest.mark.parametrize("pooling", ["sum", "mean"])
    def test_graph_loaders_native_and_core_give_the_same_logits(self, backend, graphs, pooling) -> None:
        store = backend.collection_store(graphs)
        model = self._gin(backend, graphs, pooling).eval()
        outputs = []
        for kind in (SamplerKind.NATIVE, SamplerKind.CORE):
            (mb,) = backend.collection_sampler(store, kind).loader([graphs.test_idx])
            with torch.no_grad():
                outputs.append(model(mb.graph, graphs.x[mb.input_nodes]))
        assert outputs[0].shape == (graphs.test_idx.numel(), graphs.num_classes)
        torch.testing.assert_close(outputs[0], outputs[1])

    @pytest.mark.parametrize("pooling", ["sum", "mean"])
    def test_graph_gin_with_the_reference_weights_gives_its_logits(self, backend, graphs, pooling) -> None:
        """One neutral GIN: identical parameter names and shapes, and the same function of them
        (self-loops included), so a state dict moves between backends unchanged."""
        reference = backends.get(REFERENCE_BACKEND)
        ref_model, mine = self._gin(reference, graphs, pooling, seed=0), self._gin(backend, graphs, pooling, seed=1)
        shapes = {k: v.shape for k, v in ref_model.neutral_parameters().items()}
        assert shapes == {k: v.shape for k, v in mine.neutral_parameters().items()}
        train = pack(graphs, graphs.train_idx)  # one step's BatchNorm statistics, in the reference only
        ref_model(reference.from_packed(train), graphs.x[train.node])
        mine.load_state_dict(ref_model.state_dict())
        packed = pack(graphs, graphs.val_idx)
        x = graphs.x[packed.node]
        with torch.no_grad():
            expected = ref_model.eval()(reference.from_packed(packed), x)
            torch.testing.assert_close(mine.eval()(backend.from_packed(packed), x), expected)

    def test_graph_gin_sums_messages_along_the_edges_direction(self, backend, graphs) -> None:
        """``h_v + sum over edges u -> v of h_u``: a swapped source and destination anywhere
        (packing, conversion, the conv) fails here, on graphs with one-way edges."""
        model = self._gin(backend, graphs)
        if not isinstance(model, GIN):
            pytest.skip("the backend's graph model is not core's GIN")
        packed = pack(graphs, graphs.val_idx)
        h = torch.randn(packed.node.numel(), 4, generator=torch.Generator().manual_seed(0))
        src, dst = packed.edge_index
        expected = h.clone().index_add_(0, dst, h[src])
        torch.testing.assert_close(model.aggregate(0, backend.from_packed(packed), h), expected)

    def test_graph_gin_trains_on_empty_and_one_node_batches(self, backend, graphs) -> None:
        """An empty batch (equal step counts need them) and a batch of one one-node graph
        (BatchNorm has no batch statistics there) both give logits and gradients."""
        one_node = GraphCollection.from_edges(
            torch.randn(5, graphs.num_features),
            torch.tensor([[1, 3], [2, 4]]),
            torch.tensor([0, 1, 3, 5]),
            torch.tensor([0, 1, 0]),
            (torch.tensor([0]), torch.tensor([1]), torch.tensor([2])),
            graphs.num_classes,
        )
        model = self._gin(backend, graphs).train()
        for data, ids in ((graphs, []), (one_node, [0])):
            packed = pack(data, torch.tensor(ids, dtype=torch.int64))
            logits = model(backend.from_packed(packed), data.x[packed.node])
            assert logits.shape == (len(ids), graphs.num_classes)
            model.zero_grad()
            torch.nn.functional.cross_entropy(
                logits, torch.zeros(len(ids), dtype=torch.int64), reduction="sum"
            ).backward()
            assert all(p.grad is not None for p in model.parameters())

    @staticmethod
    def _built(backend: Backend, arch: str) -> str:
        """``arch``, or a skip when ``backend`` does not build it."""
        if arch not in models.names(backend.name, Task.NODE):
            pytest.skip(f"backend {backend.name} does not build {arch!r} (a subset of the catalogue)")
        return arch

    @staticmethod
    def _first_arch(backend: Backend) -> str:
        """The first neutral node architecture ``backend`` builds (``sage`` on PyG and DGL)."""
        built = set(models.names(backend.name, Task.NODE))
        first = next((arch for arch in ARCHITECTURES if arch in built), None)
        if first is None:
            pytest.skip(f"backend {backend.name} builds none of the neutral node architectures")
        return first

    @staticmethod
    def _gin(backend: Backend, graphs: GraphCollection, pooling: str = "sum", seed: int = 0):
        torch.manual_seed(seed)
        spec = ModelSpec(arch="gin", hidden=16, layers=3, pooling=pooling, dropout=0.0)
        return build(backend, spec, graphs, Task.GRAPH)

    @staticmethod
    def _model(backend: Backend, data: GraphData, arch: str, layers: int = 2):
        spec = ModelSpec(arch=arch, hidden=8, layers=layers, heads=2, dropout=0.0)
        return build(backend, spec, data)


def with_some_self_loops(data: GraphData) -> GraphData:
    loops = torch.arange(0, data.num_nodes, 3).repeat(2, 1)
    edges = torch.cat([data.edge_index, loops], dim=1)
    return GraphData.from_edges(edges, data.x, data.y, data.train_idx, data.val_idx, data.test_idx, data.num_classes)


def small_collection() -> GraphCollection:
    """60 small graphs with random features, a self-loop on every fifth node, and in each graph
    a one-way edge from its third node to its first (so edge direction matters)."""
    from gnnbridge.plugins.datasets import family_graphs

    base = family_graphs(60, 6, 14, seed=0)
    loops = torch.arange(0, base.num_nodes, 5).repeat(2, 1)
    first = base.node_ptr[:-1]
    one_way = torch.stack([first + 2, first])
    x = torch.randn(base.num_nodes, 5, generator=torch.Generator().manual_seed(0))
    return GraphCollection.from_edges(
        x,
        torch.cat([base.edge_index, loops, one_way], dim=1),
        base.node_ptr,
        base.y,
        (base.train_idx, base.val_idx, base.test_idx),
        base.num_classes,
    )
