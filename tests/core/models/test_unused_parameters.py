"""Whether a heterogeneous model's training step can leave parameters without a gradient, which
decides DDP's ``find_unused_parameters``: over only the node types its heads read (a homogeneous
graph's link task, users and items) every built-in architecture, on both libraries, gives every
parameter a gradient in every batch; a graph with another type is one where some go unused."""

from __future__ import annotations

import pytest
import torch

from gnnbridge.core.config import ModelSpec, Task
from gnnbridge.core.inference.evaluation import gather_inputs
from gnnbridge.core.models.build import build_model, model_dims
from gnnbridge.core.models.hetero import leaves_parameters_unused
from gnnbridge.core.plugins import get_backend
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.core.sampling.build import make_hetero_sampler
from gnnbridge.core.tasks import for_link_task, for_node_task
from gnnbridge.plugins.hetero_datasets import mag_graph


def graph(types: tuple[str, str]) -> HeteroSource:
    """Random edges from ``types[0]`` to ``types[1]`` (one type twice: a homogeneous graph)."""
    g = torch.Generator().manual_seed(0)
    src, dst = types
    nodes = {src: 80, dst: 60}
    ends = [torch.randint(0, nodes[t], (400,), generator=g) for t in types]
    edges = torch.stack(ends)
    x = {t: torch.randn(n, 5, generator=g) for t, n in nodes.items()}
    return HeteroSource(nodes, x, {(src, "to", dst): edges}, name="g")


def unused_in_steps(model, data, steps: int = 4) -> set[str]:
    """The parameters without a gradient after any of ``steps`` training batches (small fanouts:
    relations and destinations without edges in the deeper hop)."""
    sampler = make_hetero_sampler(get_backend(model.backend_name), data, [2, 1], {}, "core", negatives=1)
    sampler.reseed(0, 0, 0)
    seeds = data.split("train")
    unused: set[str] = set()
    for mb in sampler.loader([seeds[i * 16 : (i + 1) * 16] for i in range(steps)]):
        model.zero_grad(set_to_none=True)
        x = gather_inputs(data, mb.input_nodes, None)
        out = model(mb.graph, x, mb.pairs) if data.is_link else model(mb.graph, x)
        out.square().sum().backward()
        unused |= {name for name, p in model.named_parameters() if p.grad is None}
    return unused


def built(arch: str, backend: str, task: Task, data):
    model = build_model(ModelSpec(arch=arch, hidden=8, heads=2), backend, task, *model_dims(data), data)[0]
    model.backend_name = backend
    return model


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize("arch", ["sage", "rgcn", "hgt"])
@pytest.mark.parametrize("types", [("node", "node"), ("user", "item")], ids=["homogeneous", "users-items"])
def test_over_the_heads_types_alone_every_parameter_learns_in_every_step(backend, arch, types):
    data = for_link_task(graph(types), "", True, seed=0, val_fraction=0.1, test_fraction=0.1, eval_negatives=5)
    model = built(arch, backend, Task.LINK, data)
    assert not leaves_parameters_unused(model, data)
    assert unused_in_steps(model, data) == set()


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_a_type_the_head_does_not_read_may_leave_parameters_unused(backend):
    source = mag_graph(
        num_papers=200, num_authors=80, num_venues=8, num_topics=4, num_features=8, authors_per_paper=2,
        citations_per_paper=3, homophily=0.5, feature_signal=0.5, seed=0,
    )  # fmt: skip
    data = for_node_task(source, reverse=True, seed=0)
    model = built("sage", backend, Task.NODE, data)
    assert leaves_parameters_unused(model, data)
    assert unused_in_steps(model, data)  # (the last layer's relations into authors and venues)
