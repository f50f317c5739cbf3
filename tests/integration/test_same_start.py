"""One experiment, the same numbers on either library: a built-in model built from one
``train.seed`` holds the same weights on PyG and DGL (under ``port``'s neutral names) and gives
the same outputs on the same batch, for every architecture and task shape both build; and with
core's sampler on both, a training run is the same run, loss for loss."""

from __future__ import annotations

import pytest
import torch

import gnnbridge
from gnnbridge.core.app.compare import TOLERANCE
from gnnbridge.core.app.preflight import load_dataset, preflight
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.inference.assembly import RunParts
from gnnbridge.core.inference.evaluation import step_outputs
from gnnbridge.core.models import init
from gnnbridge.core.models.neutral import to_neutral
from gnnbridge.core.runtime.context import DistContext

NODES = ["dataset.options.num_nodes=300"]
MAG = ["dataset.options.num_papers=200", "dataset.options.num_authors=100"]
REC = ["dataset.options.num_users=60", "dataset.options.num_items=50", "link.eval_negatives=20"]
CASES = {  # every built-in architecture and task shape both libraries build: (experiment, overrides)
    "sage-node": ("sage-synthetic", NODES),
    "gcn-node": ("gcn-synthetic", NODES),
    "gat-node": ("gat-synthetic", NODES),
    "gin-graph": ("gin-synthetic", ["dataset.options.num_graphs=40"]),
    "sage-hetero-node": ("mag-synthetic", MAG),
    "rgcn-hetero-node": ("mag-synthetic", [*MAG, "model.arch=rgcn", "model.options.num_bases=2"]),
    "hgt-hetero-node": ("mag-synthetic", [*MAG, "model.arch=hgt", "model.heads=2"]),
    "sage-link": ("rec-synthetic", REC),
    "sage-link-mlp-sparse": (
        "rec-synthetic",
        [*REC, "model.options.decoder=mlp", "model.embeddings=sparse"],
    ),
    "rgcn-link": ("rec-synthetic", [*REC, "model.arch=rgcn", "model.options.num_blocks=4"]),
    "hgt-link": ("rec-synthetic", [*REC, "model.arch=hgt", "model.heads=2"]),
}
ALONE = DistContext(0, 1, 0, torch.device("cpu"))


def parts(experiment: str, overrides: list[str], backend: str) -> RunParts:
    """The run's parts as ``train`` assembles them on one CPU rank, with core's sampler."""
    config = preflight(
        resolve_config(experiment, backend=backend, overrides=[*overrides, "sampler.kind=core"], nproc=1, device="cpu")
    )
    return RunParts(config, load_dataset(config), ALONE)


def first_batch(run: RunParts):
    """The first training batch of epoch 0, as the trainer draws it (core's sampler, reseeded)."""
    seed = run.config.train.seed
    run.sampler.reseed(seed, 0, 0)
    items = run.data.split("train")[: run.config.train.batch_size]
    return next(iter(run.sampler.loader([items])))


@pytest.mark.parametrize("name", list(CASES))
def test_one_seed_builds_the_same_weights_and_outputs_on_both_libraries(name):
    experiment, overrides = CASES[name]
    runs = {backend: parts(experiment, overrides, backend) for backend in ("pyg", "dgl")}
    for run in runs.values():  # core draws every parameter (none left to the library)
        assert all(rule is not None for _, rule in init.initial_rules(run.model).values())
    states = {b: to_neutral(r.model, r.model.state_dict(), r.call.origin) for b, r in runs.items()}
    assert states["pyg"].keys() == states["dgl"].keys()
    for key, value in states["pyg"].items():
        assert torch.equal(value, states["dgl"][key]), f"{key} starts apart"
    outputs = {}
    for backend, run in runs.items():
        run.model.eval()
        with torch.no_grad():
            outputs[backend], _ = step_outputs(run, run.model, first_batch(run))
    torch.testing.assert_close(outputs["dgl"], outputs["pyg"], atol=1e-5, rtol=1e-5)


def test_the_initialisation_is_drawn_by_core_not_by_the_library():
    """PyG's Kaiming-uniform scale for SAGEConv (not DGL's Xavier with ReLU's gain, three times
    larger), and the same draws for the same seed, other draws for another."""
    run = parts("sage-synthetic", NODES, "dgl")
    weight = run.model.neutral_parameters()["layers.0.neigh.weight"]
    assert float(weight.abs().max()) <= 1 / weight.shape[1] ** 0.5
    other = parts("sage-synthetic", [*NODES, "train.seed=1"], "dgl").model.neutral_parameters()
    assert not torch.equal(other["layers.0.neigh.weight"], weight)


def test_model_init_library_keeps_each_librarys_own_draws():
    """``model.init=library``: the weights each library draws itself (DGL's SAGEConv Xavier with
    ReLU's gain, up to three times PyG's Kaiming bound; PyG's bias nonzero), so the two start
    apart, and the seed still decides them."""
    library = [*NODES, "model.init=library"]
    own = {b: parts("sage-synthetic", library, b).model.neutral_parameters() for b in ("pyg", "dgl")}
    shared = parts("sage-synthetic", NODES, "dgl").model.neutral_parameters()
    bound = 1 / shared["layers.0.neigh.weight"].shape[1] ** 0.5
    assert float(own["dgl"]["layers.0.neigh.weight"].abs().max()) > 1.5 * bound  # DGL's own scale
    assert float(own["pyg"]["layers.0.bias"].abs().max()) > 0 == float(shared["layers.0.bias"].abs().max())
    assert not torch.equal(own["pyg"]["layers.0.neigh.weight"], own["dgl"]["layers.0.neigh.weight"])
    again = parts("sage-synthetic", library, "dgl").model.neutral_parameters()
    assert torch.equal(again["layers.0.neigh.weight"], own["dgl"]["layers.0.neigh.weight"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "experiment, overrides",
    [
        ("sage-synthetic", ["dataset.options.num_nodes=600"]),  # dropout 0.5: the same masks too
        ("rec-synthetic", ["dataset.options.num_users=150", "dataset.options.num_items=100", "link.eval_negatives=20"]),
    ],
    ids=["sage-node", "sage-link"],
)
def test_with_cores_sampler_a_run_is_the_same_run_on_either_library(tmp_path, experiment, overrides):
    """No weights are copied between them: each library builds its model from the seed."""
    runs = {
        backend: gnnbridge.run(
            experiment,
            backend=backend,
            nproc=1,
            overrides=[*overrides, "train.epochs=3", "sampler.kind=core"],
            out=tmp_path / backend,
            progress=False,
        )
        for backend in ("pyg", "dgl")
    }
    losses = {b: [h["loss"] for h in r["history"]] for b, r in runs.items()}
    assert len(losses["pyg"]) == 3
    # compare --same-batches' tolerance: float summation order differs between the libraries
    assert losses["dgl"] == pytest.approx(losses["pyg"], abs=TOLERANCE)
    for key, value in runs["pyg"]["metrics"].items():
        assert runs["dgl"]["metrics"][key] == pytest.approx(value, abs=1e-3), key
