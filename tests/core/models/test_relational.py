"""R-GCN and HGT, core's heterogeneous models: one neutral state dict scores alike on PyG and
DGL (link and node tasks, every weight decomposition, batches where relations and
destinations have no edges); a destination with no incoming edge keeps its root / skip term
only; bad options, and a homogeneous node task, are one ConfigError line."""

from __future__ import annotations

import pytest
import torch

from gnnbridge.core.config import ModelSpec, Task
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.inference.evaluation import gather_inputs
from gnnbridge.core.models.build import build_model, model_dims
from gnnbridge.core.models.neutral import from_neutral, to_neutral
from gnnbridge.core.plugins import get_backend
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.core.sampling.build import make_hetero_sampler
from gnnbridge.core.sampling.hetero import HeteroNeighborSampler
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS
from gnnbridge.core.tasks import for_link_task, for_node_task
from gnnbridge.plugins.hetero_datasets import mag_graph, rec_graph
from gnnbridge.testing.conformance import small_graph

CONFIGS = {
    "rgcn": ("rgcn", {}),
    "rgcn-bases": ("rgcn", {"num_bases": 2}),
    "rgcn-blocks": ("rgcn", {"num_blocks": 4}),
    "hgt": ("hgt", {}),
}


def rec_link():
    source = rec_graph(
        num_users=200,
        num_items=120,
        num_categories=6,
        purchases_per_user=6,
        num_features=8,
        taste_dim=4,
        feature_noise=0.5,
        temperature=0.5,
        seed=3,
    )
    return for_link_task(source, "", True, seed=0, val_fraction=0.1, test_fraction=0.1, eval_negatives=20)


def mag_node():
    source = mag_graph(
        num_papers=300,
        num_authors=120,
        num_venues=12,
        num_topics=4,
        num_features=8,
        authors_per_paper=2,
        citations_per_paper=3,
        homophily=0.5,
        feature_signal=0.5,
        seed=0,
    )
    return for_node_task(source, reverse=True, seed=0)


def spec(config: str, **kw) -> ModelSpec:
    arch, options = CONFIGS[config]
    return ModelSpec(arch=arch, hidden=16, layers=2, heads=4, dropout=0.0, options={**options, **kw})


def both(config: str, task: Task, data, **kw) -> dict:
    """The model on each backend, from different seeds, then DGL's weights moved to PyG."""
    models = {}
    for name in ("pyg", "dgl"):
        torch.manual_seed(len(models))
        models[name] = build_model(spec(config, **kw), name, task, *model_dims(data), data)[0].eval()
    neutral = to_neutral(models["dgl"], models["dgl"].state_dict(), config)
    assert len(neutral) == len(models["pyg"].state_dict())
    models["pyg"].load_state_dict(from_neutral(models["pyg"], neutral, config))
    return models


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_scores_agree_on_both_backends_after_moving_weights_by_neutral_name(config, decoder):
    data = rec_link()
    scores = {}
    for name, model in both(config, Task.LINK, data, decoder=decoder).items():
        sampler = make_hetero_sampler(get_backend(name), data, [5, 3], {}, "core", negatives=2)
        sampler.reseed(7, 1, 0)
        mb = next(iter(sampler.loader([data.split("train")[:64]])))
        with torch.no_grad():
            scores[name] = model(mb.graph, gather_inputs(data, mb.input_nodes, None), mb.pairs)
    torch.testing.assert_close(scores["pyg"], scores["dgl"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_node_logits_and_gradients_agree_on_both_backends(config):
    """Small fanouts: in the deeper hop, relations and destinations without edges."""
    data = mag_node()
    logits, grads = {}, {}
    for name, model in both(config, Task.NODE, data).items():
        sampler = make_hetero_sampler(get_backend(name), data, [2, 1], {}, "core", negatives=1)
        sampler.reseed(3, 0, 0)
        mb = next(iter(sampler.loader([data.split("train")[:32]])))
        out = model(mb.graph, gather_inputs(data, mb.input_nodes, None))
        out.square().sum().backward()
        logits[name] = out.detach()
        grads[name] = {k: p.grad for k, p in model.neutral_parameters().items() if p.grad is not None}
    torch.testing.assert_close(logits["pyg"], logits["dgl"], rtol=1e-4, atol=1e-5)
    assert grads["pyg"].keys() == grads["dgl"].keys()
    for key in grads["pyg"]:
        torch.testing.assert_close(grads["pyg"][key], grads["dgl"][key], rtol=1e-4, atol=1e-5, msg=key)


def lonely() -> HeteroSource:
    """Papers 0-2 are written by authors; paper 3 has no incoming edge at all."""
    return HeteroSource(
        {"author": 2, "paper": 4},
        {"author": torch.randn(2, 3), "paper": torch.randn(4, 3)},
        {("author", "writes", "paper"): torch.tensor([[0, 1, 1], [0, 1, 2]])},
        target_node="paper",
        y=torch.tensor([0, 1, 0, 1]),
        name="lonely",
    )


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize("config", ["rgcn", "hgt"])
def test_a_destination_without_incoming_edges_gets_its_root_or_skip_term_only(backend, config):
    data = for_node_task(lonely(), reverse=False, seed=0)
    model = build_model(spec(config), backend, Task.NODE, *model_dims(data), data)[0].eval()
    sub = HeteroNeighborSampler(data, {et: [ALL_NEIGHBORS] for et in data.edge_types}).sample(
        {"paper": torch.tensor([3, 0])}
    )
    graph = get_backend(backend).from_hetero_sampled(sub)
    with torch.no_grad():
        h = model.embed_inputs({t: data.x[t][ids] for t, ids in sub.node.items()})
        out = model.conv(0, graph, h, 0)["paper"][0]
        layer, x = model.convs[0], h["paper"][0]
        if config == "rgcn":
            expected = x @ layer.root + layer.bias
        else:
            gate = torch.sigmoid(layer.skip["paper"])
            expected = gate * layer.a["paper"].bias + (1 - gate) * x
    torch.testing.assert_close(out, expected)
    assert not torch.isnan(out).any()


def test_bad_options_are_one_config_error_line():
    data = rec_link()
    cases = [
        (spec("rgcn", num_bases=2, num_blocks=4), "are both set"),
        (spec("rgcn", num_blocks=3), "num_blocks=3 does not divide model.hidden=16"),
        (spec("rgcn", num_bases=0), "num_bases=0 is not a positive integer"),
        (ModelSpec(arch="hgt", hidden=16, heads=3), "model.hidden=16 is not divisible by model.heads=3"),
    ]
    for bad, message in cases:
        with pytest.raises(ConfigError, match=message) as info:
            build_model(bad, "pyg", Task.LINK, *model_dims(data), data)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("arch", ["rgcn", "hgt"])
def test_a_homogeneous_node_task_is_refused_in_one_line(arch):
    data = small_graph()
    with pytest.raises(ConfigError, match=f"model.arch={arch} is a heterogeneous model") as info:
        build_model(ModelSpec(arch=arch), "dgl", Task.NODE, *model_dims(data), data)
    assert "\n" not in str(info.value)
