"""gnnbridge as a package a user installs: the sdist and the wheel built from it, installed into a
fresh virtual environment, train; and a plain ``import dgl`` works there and in the environment
``make install`` builds (PyPI's DGL 2.1 alone fails on this torch: no graphbolt library for it).

The fresh environment does not download its dependencies again (CI has no time for a second
torch): it sees this environment's packages through a path line, and installs gnnbridge itself
from the wheel with ``--no-deps``. What is tested is what the wheel carries: the package, its
entry points (the built-in plugins register through them), the experiments, and the start-up
line behind ``import dgl``."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DGL_CHECK = "import dgl; g = dgl.graph(([0, 1], [1, 2])); print(dgl.__version__, g.num_edges())"
ENTRY_POINTS_CHECK = """
from importlib.metadata import distribution
from gnnbridge.plugins import BUILTIN_PLUGINS
points = {e.name: e.value for e in distribution("gnnbridge").entry_points if e.group == "gnnbridge"}
print(points == BUILTIN_PLUGINS, sorted(points))
"""


def python(exe, code: str, cwd, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GNNBRIDGE_DGL", "DGL"))}
    return subprocess.run(
        [str(exe), "-W", "ignore", "-c", code],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_built_in_plugins_are_installed_as_entry_points_from_their_one_list(tmp_path):
    done = python(sys.executable, ENTRY_POINTS_CHECK, tmp_path)
    assert done.stdout.startswith("True "), (done.stdout, done.stderr[-2000:])


def test_a_plain_import_dgl_works_in_the_environment_make_install_builds(tmp_path):
    done = python(sys.executable, DGL_CHECK, tmp_path)
    assert done.returncode == 0 and done.stdout.split() == ["2.1.0", "2"], done.stderr[-2000:]
    off = python(sys.executable, DGL_CHECK, tmp_path, GNNBRIDGE_DGL_HOOK="0")
    dgl_dir = Path(site.getsitepackages()[0]) / "dgl" / "graphbolt"
    import torch

    if not list(dgl_dir.glob(f"libgraphbolt_pytorch_{torch.__version__.split('+')[0]}.so")):
        assert off.returncode != 0 and "graphbolt" in off.stderr  # what the start-up line repairs


@pytest.mark.slow
def test_the_sdist_builds_a_wheel_that_installs_into_a_fresh_environment_and_trains(tmp_path):
    from setuptools import build_meta

    dist = tmp_path / "dist"
    dist.mkdir()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        sdist = dist / build_meta.build_sdist(str(dist))
    finally:
        os.chdir(cwd)
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    purelib = Path(sysconfig.get_paths(vars={"base": str(env), "platbase": str(env)})["purelib"])
    # This environment's packages (torch, PyG, DGL ...), but not its editable gnnbridge: a path
    # line adds the folder, and the .pth files in it (the editable finder) are not run.
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    built = subprocess.run(
        [*pip, "--target", str(purelib), "--upgrade", str(sdist)], capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert (purelib / "gnnbridge-dgl.pth").is_file() and (purelib / "_gnnbridge_dgl.py").is_file()
    exe = env / "bin" / "python"
    where = python(exe, "import gnnbridge, sys; print(gnnbridge.__file__)", tmp_path)
    assert where.stdout.strip().startswith(str(purelib)), (where.stdout, where.stderr[-2000:])
    done = python(exe, DGL_CHECK, tmp_path)
    assert done.returncode == 0 and done.stdout.split() == ["2.1.0", "2"], done.stderr[-2000:]
    points = python(exe, ENTRY_POINTS_CHECK, tmp_path)
    assert points.stdout.startswith("True "), (points.stdout, points.stderr[-2000:])
    train = subprocess.run(
        [
            str(exe),
            "-m",
            "gnnbridge",
            "train",
            "--backend",
            "dgl",
            "--quiet",
            "--set",
            "train.epochs=1",
            "--set",
            "dataset.options.num_nodes=300",
            "--out",
            "run",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert (tmp_path / "run" / "results.json").is_file()
