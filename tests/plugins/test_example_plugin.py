"""The example third-party package (examples/plugin), installed with pip as a user would (offline,
no build isolation), used through the command line. It is installed into a folder of its own on
``PYTHONPATH`` (``pip install --target``), not into the suite's environment: the suite's other
workers run commands all the while, and each would load a package half installed or half removed.
(The commands run in forks of warm interpreters started before the install, given the folder on
``PYTHONPATH`` as a fresh interpreter is: ``tests/warm.py``.)"""

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, gnnbridge, pip_install_target, suite_env

EXAMPLE = REPO / "examples" / "plugin"
DIST = "gnnbridge-example-plugin"


def run(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The plugin's source folder, and the environment whose Python finds it installed."""
    source = tmp_path_factory.mktemp("src") / "plugin"
    target = tmp_path_factory.mktemp("site")
    for _ in range(2):  # both warm interpreters (they take turns) start before the install
        assert "example" not in {p["name"] for p in json.loads(gnnbridge("plugins", cwd=source.parent).stdout)}
    pip_install_target(EXAMPLE, source, target)
    # only for those given its folder
    assert "example" not in {p["name"] for p in json.loads(gnnbridge("plugins", cwd=source.parent).stdout)}
    return source, suite_env(path=(target,))


@pytest.mark.slow
def test_the_installed_example_plugin_adds_models_a_dataset_a_sampler_and_a_command(installed, tmp_path):
    _, env = installed
    plugins = {p["name"]: p for p in json.loads(gnnbridge("plugins", cwd=tmp_path, env=env).stdout)}
    assert plugins["example"]["distribution"] == f"{DIST} 0.1.0"
    assert plugins["example"]["registers"] == {
        "datasets": ["example-caves", "example-counts"],
        "models": ["example-mlp", "example-ressage"],
        "samplers": ["example-multilayer"],
        "tasks": ["count", "degree"],
    }
    for backend in ("pyg", "dgl"):
        proc = gnnbridge(
            "train",
            "--set",
            "model.arch=example-mlp",
            "--backend",
            backend,
            "--set",
            "train.epochs=1",
            "--out",
            str(tmp_path / backend),
            "--quiet",
            cwd=tmp_path,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads((tmp_path / backend / "results.json").read_text())["eval"]["final"] == "full"
    proc = gnnbridge(
        "train",
        "--dataset",
        "example-caves",
        "--backend",
        "dgl",
        "--set",
        "model.arch=example-ressage",
        "--set",
        "sampler.kind=example-multilayer",
        "--set",
        "train.epochs=2",
        "--out",
        str(tmp_path / "caves"),
        "--quiet",
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    summary = gnnbridge("example-summary", str(tmp_path / "caves"), cwd=tmp_path, env=env).stdout.splitlines()
    check_the_plugins_own_target(tmp_path, env)
    check_the_plugins_own_family(tmp_path, env)
    assert len(summary) == 3 and summary[-1].endswith("(evaluation: layerwise)")
    proc = gnnbridge(
        "train", "--set", "model.arch=example-ressage", "--backend", "pyg", "--quiet", cwd=tmp_path, env=env
    )
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        "Error: model.arch='example-ressage' (plugin 'example') is built only for backend dgl, not 'pyg'; "
        "use --backend dgl, or one of the models 'pyg' has: "
        "EdgeCNN, GAT, GCN, GIN, GraphSAGE, PNA, example-mlp, gat, gcn, gine, hgt, rgcn, sage."
    ]


def check_the_plugins_own_target(tmp_path, env):
    """target=count (Poisson regression, the plugin's own): its loss trains, its metrics pick the
    best epoch the lower way, and predict writes what it derives (the expected count)."""
    run = tmp_path / "counts"
    settings = ["--set", "target=count", "--set", "train.epochs=4", "--set", "train.batch_size=64"]
    proc = gnnbridge("train", "--dataset", "example-counts", "--backend", "dgl", *settings, "--out", str(run),
                     "--quiet", cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((run / "results.json").read_text())
    deviance = [h["val_deviance"] for h in results["history"]]
    assert results["best"]["monitor"] == "val_deviance" and results["best"]["epoch"] == deviance.index(min(deviance))
    assert deviance[-1] < deviance[0] and {"test_deviance", "test_count_mae"} <= set(results["metrics"])
    proc = gnnbridge("predict", str(run), "--out", str(tmp_path / "counts.npz"), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "counts.npz") as written:
        assert np.allclose(written["rate"], np.exp(written["logits"]), rtol=1e-6)


def check_the_plugins_own_family(tmp_path, env):
    """task=degree (the plugin's own family, registered in register_tasks): each node's target is
    its log in-degree, made from the graph; it trains on 2 ranks as a node task, learns (its val
    RMSE beats predicting 0), predict writes the targets it made, and a target it does not take is
    refused in one line."""
    run, out = tmp_path / "degree", tmp_path / "degree.npz"
    settings = ["--set", "task=degree", "--set", "target=regression", "--set", "train.batch_size=64"]
    proc = gnnbridge("train", "--dataset", "example-caves", "--backend", "pyg", *settings, "--set", "train.epochs=4",
                     "--nproc", "2", "--out", str(run), "--quiet", cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((run / "results.json").read_text())
    assert results["task"] == "degree" and results["best"]["monitor"] == "val_rmse"
    proc = gnnbridge("predict", str(run), "--out", str(out), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as written:
        ids, y = np.arange(48 * 12), written["y"].reshape(-1)
        # each of the 48 cliques of 12 has 11 in-edges a node; the ring adds one to a clique's first two
        assert np.allclose(y, np.log1p(np.where(ids % 12 < 2, 12.0, 11.0))), y[:14]
        val = written["val_idx"]
        assert results["metrics"]["val_rmse"] < np.sqrt(np.mean(y[val] ** 2)) / 2  # predicting 0: about 2.5
    proc = gnnbridge("train", "--dataset", "example-caves", "--set", "task=degree", "--quiet", cwd=tmp_path, env=env)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        "Error: target=class does not apply to task=degree; it takes: regression."
    ]


@pytest.mark.slow
def test_the_example_plugin_passes_the_conformance_suites_from_its_own_tests(installed):
    source, env = installed
    proc = run("-m", "pytest", "-q", "-p", "no:cacheprovider", str(source / "tests"), cwd=source, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert " passed" in proc.stdout
