"""``gnnbridge compare`` (side by side, and on identical batches) and ``gnnbridge plot``."""

from __future__ import annotations

import json

import pytest
from helpers import gnnbridge as cli
from helpers import in_process, ok, one_line

import gnnbridge
from gnnbridge.core.app import compare

SMALL = {  # every built-in architecture, node, graph and link tasks, kept small
    "sage": ("sage-synthetic", ["dataset.options.num_nodes=600"]),
    "gcn": ("gcn-synthetic", ["dataset.options.num_nodes=600"]),
    "gat": ("gat-synthetic", ["dataset.options.num_nodes=600"]),
    "gin": ("gin-synthetic", ["dataset.options.num_graphs=100"]),
    "link": (
        "rec-synthetic",
        ["dataset.options.num_users=150", "dataset.options.num_items=100", "link.eval_negatives=20"],
    ),
}


@pytest.mark.parametrize("name", list(SMALL))
def test_on_the_same_batches_both_libraries_compute_the_same_losses_and_logits(name):
    experiment, overrides = SMALL[name]
    report = gnnbridge.compare(experiment, same_batches=True, epochs=3, overrides=overrides)
    (pair,) = report["pairs"]
    assert sorted(pair["backends"]) == ["dgl", "pyg"]
    assert pair["steps"] >= 6 and len(pair["loss_gaps"]) == pair["steps"]
    assert pair["max_loss_gap"] < 1e-4 and pair["max_logit_gap"] < 1e-4
    assert report["agree"] and pair["first_divergence"] is None


@pytest.mark.parametrize("name, prefix", [("sage", "layers.1."), ("gin", "mlps.1.")])
def test_a_divergence_names_the_first_step_and_layer(monkeypatch, name, prefix):
    # One weight of the second layer differs on arrival: the first step parts there, in layer 1.
    move = compare.from_neutral

    def off_by_one_weight(model, neutral, origin):
        neutral = dict(neutral)
        key = next(k for k in neutral if k.startswith(prefix))
        neutral[key] = neutral[key].clone()
        neutral[key].view(-1)[0] += 0.05
        return move(model, neutral, origin)

    monkeypatch.setattr(compare, "from_neutral", off_by_one_weight)
    experiment, overrides = SMALL[name]
    report = compare.same_batches(experiment, epochs=1, overrides=overrides)
    first = report["pairs"][0]["first_divergence"]
    assert not report["agree"]
    assert (first["epoch"], first["step"], first["layer"]) == (0, 0, 1)
    assert first["layer_gaps"][0] < 1e-4 < first["layer_gaps"][1]
    assert "apart from epoch 1 step 1, in layer 1" in compare.verdicts(report)[1]


@pytest.mark.slow
def test_side_by_side_trains_each_library_and_draws_them_together(tmp_path):
    sets = [a for o in ["dataset.options.num_nodes=600", "train.epochs=2"] for a in ("--set", o)]
    table = ok(cli("compare", "sage-synthetic", *sets, "--quiet", "--out", "both", cwd=tmp_path)).stdout
    report = json.loads((tmp_path / "both" / "compare.json").read_text())
    assert sorted(r["backend"] for r in report["rows"]) == ["dgl", "pyg"]
    for row in report["rows"]:
        results = json.loads((tmp_path / "both" / row["backend"] / "results.json").read_text())
        assert results["backend"] == row["backend"]
        assert row["metrics"] == {k: v for k, v in results["metrics"].items() if k.startswith("test_")}
        assert row["median_epoch_s"] > 0 and row["peak_rss_bytes"] > 100 * 2**20
        assert f"both/{row['backend']}" in table
    assert (tmp_path / "both" / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    ok(in_process("plot", "both/pyg", "both/dgl", "--out", "curves.png", cwd=tmp_path))
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    one_line(in_process("plot", "both/pyg", "--out", "curves.png", cwd=tmp_path), "already exists")
    one_line(in_process("plot", "both", "--out", "other.png", cwd=tmp_path), "holds no results.json")
    one_line(in_process("plot", "both/pyg", "--out", "other.jpg", cwd=tmp_path), "must end in .png")
    one_line(in_process("plot", "both/pyg", "--out", "curves.png/x.png", cwd=tmp_path), "curves.png")
    assert not (tmp_path / "other.png").exists() and not (tmp_path / "other.jpg").exists()


@pytest.mark.slow
def test_a_failed_backend_is_a_row_saying_why_and_the_exit_code_says_so(tmp_path):
    sets = [a for o in ["dataset.options.num_nodes=600", "train.epochs=2", "train.lr=1e30"] for a in ("--set", o)]
    proc = cli("compare", "sage-synthetic", *sets, "--quiet", "--out", "both", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "Error: the run on dgl, pyg failed (its line is in the table)."
    ]
    report = json.loads((tmp_path / "both" / "compare.json").read_text())
    assert all(row["error"].startswith("Training diverged in epoch 1") for row in report["rows"])
    assert report["plot"] is None and not (tmp_path / "both" / "compare.png").exists()
    assert "failed: Training diverged" in proc.stdout


def test_bad_compare_input_is_one_line(tmp_path, refused):
    for args, needle in [
        (["--backend", "pyg", "--backend", "mxnet"], "mxnet"),
        (["--backend", "pyg"], "compare needs two backends"),
        (["--epochs", "2"], "--epochs needs --same-batches"),
        (["--same-batches", "--nproc", "2"], "--nproc does not apply to --same-batches"),
        (["--same-batches", "--tolerance", "-1"], "--tolerance"),
        (["--set", "model.arch=GraphSAGE"], "GraphSAGE"),
    ]:
        one_line(refused("compare", "sage-synthetic", *args), needle)
    assert list(tmp_path.iterdir()) == []
