"""PyG's fused sparse aggregation: the same numbers as PyG's per-edge message passing."""

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
