"""R-GCN and HGT from the command line, on both libraries: each trains (2 ranks, 2 epochs) and
evaluates layer-wise, ``compare --same-batches`` finds both libraries computing the same
function, and ``port`` moves the run to the other library with the same metrics."""

from __future__ import annotations

import json

import pytest
from helpers import gnnbridge as cli
from helpers import in_process, ok

pytestmark = pytest.mark.slow  # every test trains real runs through the CLI

MAG = ["dataset.options.num_papers=600", "dataset.options.num_authors=300"]
REC = ["dataset.options.num_users=150", "dataset.options.num_items=100", "link.eval_negatives=20"]
CASES = {  # name: (experiment, overrides)
    "rgcn": ("mag-synthetic", ["model.arch=rgcn", "model.options.num_bases=2", *MAG]),
    "rgcn-blocks": ("rec-synthetic", ["model.arch=rgcn", "model.options.num_blocks=4", *REC]),
    "hgt": ("rec-synthetic", ["model.arch=hgt", "model.heads=2", *REC]),
}
OTHER = {"pyg": "dgl", "dgl": "pyg"}


def sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def metrics(run, cwd) -> dict:
    return json.loads(ok(in_process("evaluate", str(run), "--json", cwd=cwd)).stdout)["metrics"]


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize("name", ["rgcn", "hgt"])
def test_trains_evaluates_layerwise_and_ports_to_the_other_library(tmp_path, name, backend):
    experiment, overrides = CASES[name]
    args = ("train", experiment, "--backend", backend, "--nproc", "2", "--quiet", "--out", "run")
    ok(cli(*args, *sets([*overrides, "train.epochs=2"]), cwd=tmp_path))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["eval"]["final"] == "layerwise" and results["backend"] == backend

    ok(in_process("port", "run", "--to", OTHER[backend], "--out", "moved", cwd=tmp_path))
    before, after = metrics("run", tmp_path), metrics("moved", tmp_path)
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert after[key] == pytest.approx(value, abs=1e-6), key


@pytest.mark.parametrize("name", list(CASES))
def test_on_the_same_batches_both_libraries_agree(tmp_path, name):
    experiment, overrides = CASES[name]
    out = ok(
        in_process("compare", experiment, "--same-batches", "--epochs", "2", "--json", *sets(overrides), cwd=tmp_path)
    )
    (pair,) = json.loads(out.stdout)["pairs"]
    assert pair["steps"] >= 4 and pair["max_loss_gap"] < 1e-4 and pair["max_logit_gap"] < 1e-4
    assert pair["first_divergence"] is None
