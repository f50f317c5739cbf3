"""PyG's fused sparse aggregation: the same numbers as PyG's per-edge message passing."""

import pytest
import torch

from gnnbridge.backends.pyg.backend import PygBackend
from gnnbridge.core.config import ModelSpec
from gnnbridge.core.records.csc import dst_offsets
from gnnbridge.core.sampling.neighbors import NeighborSampler
from gnnbridge.core.sampling.seeds import epoch_generator
from gnnbridge.testing.conformance import build


def test_fused_aggregation_matches_per_edge_messages(small_data, monkeypatch):
    import gnnbridge.backends.pyg.models as models

    fused_layers = []
    adjacency = models.layer_adjacency
    monkeypatch.setattr(models, "layer_adjacency", lambda *a: fused_layers.append(a) or adjacency(*a))
    backend = PygBackend()
    sub = NeighborSampler(small_data.indptr, small_data.indices, [5, 3]).sample(
        small_data.train_idx[:40], epoch_generator(0, 0)
    )
    fused = backend.from_sampled(sub)
    assert fused.dst_ptr is not None
    per_edge = fused.clone()
    per_edge.dst_ptr = None
    torch.manual_seed(0)
    model = build(backend, ModelSpec(arch="sage", hidden=16, layers=2, dropout=0.0, aggr="mean"), small_data)
    x = small_data.x[sub.node].requires_grad_()
    out = model(fused, x)
    grad_fused = torch.autograd.grad(out.square().sum(), x)[0]
    ref = model(per_edge, x)
    grad_ref = torch.autograd.grad(ref.square().sum(), x)[0]
    assert len(fused_layers) == 2  # both layers took the CSR path, the reference none
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(grad_fused, grad_ref)


def test_unsorted_destinations_fall_back_to_messages():
    # A plugin sampler may emit edges in any order: no CSR offsets, so the per-edge path runs.
    assert dst_offsets(torch.tensor([0, 2, 1]), 3) is None
    assert dst_offsets(torch.tensor([0, 0, 2]), 3).tolist() == [0, 2, 2, 3]


@pytest.mark.parametrize("arch", ["sage", "rgcn"])
def test_heterogeneous_models_fuse_each_relations_mean_with_the_same_numbers(monkeypatch, arch):
    """Core's typed sampler emits every relation's edges in destination order, so each relation's
    mean (SAGEConv's, R-GCN's) reads a CSR adjacency: the same logits and input gradients as
    per-edge messages, on a citation graph with reverse edges (two relations papers to papers)."""
    import gnnbridge.backends.pyg.hetero as hetero
    from gnnbridge.core.config import Task
    from gnnbridge.core.models.build import build_model, model_dims
    from gnnbridge.core.sampling.hetero import HeteroNeighborSampler
    from gnnbridge.core.tasks import for_node_task
    from gnnbridge.plugins.hetero_datasets import mag_graph

    fused_relations = []
    adjacency = hetero.layer_adjacency
    monkeypatch.setattr(hetero, "layer_adjacency", lambda *a: fused_relations.append(a) or adjacency(*a))
    data = for_node_task(mag_graph(200, 100, 5, 4, 8, 2, 3, 0.8, 0.5, seed=0), reverse=True, seed=0)
    fanouts = {et: [4, 3] for et in data.edge_types}
    sub = HeteroNeighborSampler(data, fanouts).sample({"paper": torch.arange(12)}, epoch_generator(0, 0))
    fused = hetero.to_hetero_data(sub)
    per_edge = fused.clone()
    for store in per_edge.edge_stores:
        del store.dst_ptr
    spec = ModelSpec(arch=arch, hidden=8, layers=2, dropout=0.0, aggr="mean")
    torch.manual_seed(0)
    model = build_model(spec, "pyg", Task.NODE, *model_dims(data), data)[0]
    x = {t: data.x[t][ids].requires_grad_() for t, ids in sub.node.items() if t in data.x}
    feats = {**{t: sub.node[t] for t in sub.node if t not in data.x}, **x}
    out = model(fused, feats)
    grads_fused = torch.autograd.grad(out.square().sum(), list(x.values()))
    drawn = sum(1 for _, _, edges in fused.bounds for n in edges.values() if n)  # (layer, relation) pairs
    assert len(fused_relations) == drawn > 0  # every relation-layer with edges took the CSR
    ref = model(per_edge, feats)
    grads_ref = torch.autograd.grad(ref.square().sum(), list(x.values()))
    assert len(fused_relations) == drawn  # the reference passed messages
    torch.testing.assert_close(out, ref)
    for a, b in zip(grads_fused, grads_ref):
        torch.testing.assert_close(a, b)
