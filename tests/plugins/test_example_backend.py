"""The example third-party backend (examples/backend: a backend in plain torch, the plugin
contract's real test), installed with pip as a user would and driven through the command line:
it passes the backend conformance suite from its own tests, trains the default experiment on 2
ranks, refuses an architecture it does not build in one line, and moves to PyG with ``port``."""

import json
import subprocess
import sys

import pytest
from helpers import REPO, gnnbridge, ok, one_line, pip_install_target, suite_env

EXAMPLE = REPO / "examples" / "backend"
TWO_EPOCHS = ("--nproc", "2", "--set", "sampler.kind=core", "--set", "train.epochs=2", "--quiet")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The backend's source folder, and the environment whose Python finds it installed."""
    target = tmp_path_factory.mktemp("site")
    source = pip_install_target(EXAMPLE, tmp_path_factory.mktemp("src") / "backend", target)
    return source, suite_env(path=(target,))


@pytest.fixture(scope="module")
def env(installed):
    return installed[1]


@pytest.fixture(scope="module")
def runs(env, tmp_path_factory):
    """The default experiment on the plain backend and on PyG, both on core's sampler and 2 ranks."""
    root = tmp_path_factory.mktemp("runs")
    for backend in ("plain", "pyg"):
        ok(gnnbridge("train", "--backend", backend, *TWO_EPOCHS, "--out", str(root / backend), cwd=root, env=env))
    return root


def results(run):
    return json.loads((run / "results.json").read_text())


def test_it_registers_like_any_plugin_package(env, tmp_path):
    plugins = {p["name"]: p for p in json.loads(gnnbridge("plugins", cwd=tmp_path, env=env).stdout)}
    assert plugins["plain"]["distribution"] == "gnnbridge-plain-backend 0.1.0"
    assert plugins["plain"]["registers"] == {"backends": ["plain"], "models": ["gcn", "sage"]}
    listed = {b["name"]: b for b in json.loads(gnnbridge("backends", "--json", cwd=tmp_path, env=env).stdout)}
    assert listed["plain"]["available"] is True


def test_the_default_experiment_on_it_is_the_run_pyg_makes_from_the_same_batches(runs):
    """Same seed, core's sampler on both, one initialisation: the same losses and metrics."""
    plain, pyg = results(runs / "plain"), results(runs / "pyg")
    assert plain["backend"] == "plain" and plain["world_size"] == 2
    assert [h["loss"] for h in plain["history"]] == pytest.approx([h["loss"] for h in pyg["history"]], rel=1e-5)
    assert plain["metrics"] == pytest.approx(pyg["metrics"], abs=1e-3)
    assert plain["metrics"]["test_acc"] > 0.7


def test_a_run_on_it_ports_to_pyg_and_evaluates_to_its_numbers(runs, env):
    ok(gnnbridge("port", str(runs / "plain"), "--to", "pyg", "--out", str(runs / "ported"), cwd=runs, env=env))
    proc = ok(gnnbridge("evaluate", str(runs / "ported"), "--json", cwd=runs, env=env))
    best = results(runs / "plain")["best"]["metrics"]
    assert json.loads(proc.stdout)["metrics"]["test_acc"] == pytest.approx(best["test_acc"], abs=1e-9)


def test_an_architecture_it_does_not_build_is_one_line(env, tmp_path):
    proc = gnnbridge("train", "--backend", "plain", "--set", "model.arch=gat", "--quiet", cwd=tmp_path, env=env)
    one_line(proc, "model.arch='gat'")
    assert "use --backend dgl, or one of the models 'plain' has: gcn, sage." in proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_it_passes_the_backend_conformance_suite_from_its_own_tests(installed):
    source, env = installed
    args = ("-m", "pytest", "-q", "-p", "no:cacheprovider", str(source / "tests"))
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=source, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "9 passed" in proc.stdout  # sage and gcn, and what needs no architecture; gat and graph tasks skipped
