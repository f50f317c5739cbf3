"""A prepared folder's derived files are not trusted: a run refuses one that changed since
``prepare`` wrote it (its size and time are in the manifest, as the inputs' are), and one
corrupted in place with its time put back is caught by the kernels that read it, in one line
naming the file, on both backends: never a segmentation fault or an abort."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from gnnbridge.core.errors import signal_name
from gnnbridge.plugins.folder_datasets import prepare
from gnnbridge.testing.conformance import small_graph

TRAIN = (
    "--nproc",
    "1",
    "--set",
    "train.epochs=1",
    "--set",
    "model.hidden=8",
    "--set",
    "sampler.fanouts=[4,4]",
    "--set",
    "train.batch_size=32",
)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """One prepared homogeneous folder; each test works on a copy with the times kept."""
    folder = tmp_path_factory.mktemp("derived") / "g"
    folder.mkdir()
    g = small_graph(n=300)
    for key, value in {"x": g.x.numpy(), "edge_index": g.edge_index.numpy(), "y": g.y.numpy()}.items():
        np.save(folder / f"{key}.npy", value)
    prepare(str(folder), progress=False)
    return folder


def copy_of(folder, to):
    """``folder`` copied with every file's modification time kept (a prepared folder moved)."""
    for src in [p for p in folder.rglob("*") if p.is_file()]:
        dst = to / src.relative_to(folder)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
        os.utime(dst, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns))
    return to


def manifest(folder) -> dict:
    return json.loads((folder / "prepared" / "manifest.json").read_text())


def corrupt_in_place(folder, key: str, position: int, value: int) -> str:
    """Set the entries of the array ``key`` from ``position`` on (so the first batch meets one) and
    put its recorded time back: only its content says."""
    spec = manifest(folder)["arrays"][key]
    file = folder / spec["file"]
    array = np.load(file, mmap_mode="r+")
    array.reshape(-1)[position:] = value
    array.flush()
    del array
    os.utime(file, ns=(spec["mtime_ns"], spec["mtime_ns"]))
    return spec["file"]


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("indices", 10**7, "names source node 10000000, outside [0, 300)"),
        ("indices", -3, "names source node -3, outside [0, 300)"),
        ("indptr", 10**9, "the offsets "),
    ],
)
def test_a_derived_file_corrupted_in_place_is_one_line_naming_it(
    prepared, tmp_path, refused, backend, key, value, needle
):
    folder = copy_of(prepared, tmp_path / "g")
    file = corrupt_in_place(folder, key, 40, value)
    seen = refused("train", "--dataset", str(folder), "--backend", backend, *TRAIN, "--out", "run")
    assert seen.returncode == 1, seen.stderr
    lines = seen.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {folder / file}: "), seen.stderr
    assert needle in lines[0] and f"run gnnbridge prepare {folder}" in lines[0], lines[0]
    assert "gnnbridge bug" not in lines[0]
    assert not (tmp_path / "run").exists()


def test_a_derived_file_that_changed_is_refused_at_open_and_prepared_again(prepared, tmp_path, refused):
    folder = copy_of(prepared, tmp_path / "g")
    indices = folder / "prepared" / "indices.npy"
    array = np.load(indices)
    array[0] = 10**7
    np.save(indices, array)
    seen = refused("train", "--dataset", str(folder), *TRAIN)
    assert seen.returncode == 1
    assert seen.stderr.strip() == (
        f"Error: {indices} changed since `gnnbridge prepare` (size/modified time); run gnnbridge prepare {folder} again"
    )
    assert not prepare(str(folder), progress=False)["already"]  # prepare derives it again
    assert int(np.load(indices).max()) < 300


def test_a_manifest_pointing_an_array_at_another_file_is_refused(prepared, tmp_path, refused):
    folder = copy_of(prepared, tmp_path / "g")
    edited = manifest(folder)
    edited["arrays"]["indices"]["file"] = "prepared/indptr.npy"
    edited["arrays"]["indices"]["shape"] = edited["arrays"]["indptr"]["shape"]
    (folder / "prepared" / "manifest.json").write_text(json.dumps(edited))
    seen = refused("train", "--dataset", str(folder), *TRAIN)
    assert seen.returncode == 1
    lines = seen.stderr.strip().splitlines()
    assert len(lines) == 1 and "prepared/indptr.npy" in lines[0] and "prepare" in lines[0], seen.stderr


def test_a_manifest_from_before_derived_files_were_recorded_is_prepared_again(prepared, tmp_path):
    folder = copy_of(prepared, tmp_path / "g")
    old = manifest(folder)
    for spec in old["arrays"].values():
        del spec["size"], spec["mtime_ns"]
    (folder / "prepared" / "manifest.json").write_text(json.dumps(old))
    assert not prepare(str(folder), progress=False)["already"]
    assert all("mtime_ns" in spec for spec in manifest(folder)["arrays"].values())


@pytest.mark.parametrize("name", ["train_idx", "val_idx", "test_idx"])
def test_a_member_file_added_after_prepare_is_refused_not_ignored(prepared, tmp_path, refused, name):
    """A split file added later would be skipped silently, and a seeded split drawn instead."""
    folder = copy_of(prepared, tmp_path / "g")
    np.save(folder / f"{name}.npy", np.arange(10, dtype=np.int64))
    seen = refused("train", "--dataset", str(folder), *TRAIN)
    assert seen.returncode == 1
    assert seen.stderr.strip() == (
        f"Error: {folder / (name + '.npy')} was added after `gnnbridge prepare` (its manifest does not list it); "
        f"run gnnbridge prepare {folder} again to use it, or remove it"
    )


def test_a_file_outside_the_format_beside_a_prepared_folder_is_left_alone(prepared, tmp_path):
    """Only the format's names are members: a user's notes.npy beside them is not refused."""
    from gnnbridge.core.storage.folder import open_prepared

    folder = copy_of(prepared, tmp_path / "g")
    np.save(folder / "notes.npy", np.zeros(3))
    assert open_prepared(folder).num_nodes == 300


STOPPED_DRIVER = """
import signal, sys, time
import gnnbridge.core.storage.prepare as preparing
from gnnbridge.cli import main

# As a terminal starts it: a suite run under nohup passes SIGHUP on ignored, and gnnbridge keeps
# an ignored SIGHUP ignored (nohup's meaning), so the SIGHUP case could never stop it.
signal.signal(signal.SIGHUP, signal.SIG_DFL)

def held(*args, **kwargs):  # the topology is written by now: indptr.npy, indices.npy
    print("ready", flush=True)
    time.sleep(120)

preparing._labels = held
main(["prepare", sys.argv[1], "--quiet"])
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_during_prepare_removes_what_it_wrote_and_says_so(tmp_path, signum):
    """Killed by SIGTERM, prepare used to exit 143 with no line, leaving indptr.npy and
    .partial files (about 40% of the input's size) behind; every stop signal now undoes it."""
    folder = tmp_path / "g"
    folder.mkdir()
    g = small_graph(n=200)
    for key, value in {"x": g.x.numpy(), "edge_index": g.edge_index.numpy(), "y": g.y.numpy()}.items():
        np.save(folder / f"{key}.npy", value)
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPED_DRIVER, str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        assert (folder / "prepared" / "indptr.npy").exists()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert err.strip().splitlines() == [
        f"Stopped by {signal_name(signum)}: nothing half-written is left (the derived files of this prepare were "
        f"removed); run gnnbridge prepare {folder} again to finish."
    ]
    assert sorted(p.name for p in folder.iterdir()) == ["edge_index.npy", "x.npy", "y.npy"]


def test_features_that_vanish_in_float16_are_refused_with_the_numbers(tmp_path, refused):
    """1e-9 is 0 in float16: prepare said "x finite (and within float16)" and wrote zeros."""
    folder = tmp_path / "g"
    folder.mkdir()
    g = small_graph(n=200)
    x = g.x.numpy().copy()
    x[:, 3] *= 1e-9
    for key, value in {"x": x, "edge_index": g.edge_index.numpy(), "y": g.y.numpy()}.items():
        np.save(folder / f"{key}.npy", value)
    seen = refused("prepare", str(folder), "--dtype", "float16", "--quiet")
    assert seen.returncode == 1
    line = seen.stderr.strip()
    assert line.startswith(f"Error: {folder}: x column 3 loses its signal in float16: 200 of its 200 nonzero values")
    assert "round to zero" in line and "--dtype bfloat16 or float32" in line, line
    assert sorted(p.name for p in folder.iterdir()) == ["edge_index.npy", "x.npy", "y.npy"]  # no prepared/.lock
    kept = prepare(str(folder), dtype="bfloat16", progress=False)
    assert "x in bfloat16 (relative error <= " in ", ".join(kept["checked"]), kept["checked"]
    spec = manifest(folder)["arrays"]["x"]
    assert spec["precision"]["flushed_to_zero"] == 0 and 0 < spec["precision"]["max_relative_error"] < 2**-8
    opened = np.load(folder / spec["file"]).astype(np.uint32) << 16
    assert np.allclose(opened.view(np.float32)[:, 3], x[:, 3], rtol=2**-8)  # the small column survives in bfloat16


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_a_relations_corrupted_topology_is_one_line_naming_its_file(tmp_path, refused, backend):
    """The heterogeneous node task maps each relation's sorted edges from prepared/: a source id
    out of its type's range there is named, on both backends."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "shop"
    folder.mkdir()
    arrays = {
        "num_nodes__user": np.array([30], dtype=np.int64),
        "x__item": rng.normal(size=(20, 5)).astype(np.float32),
        "y__item": (np.arange(20) % 3).astype(np.int64),
        "edge_index__user__buys__item": np.stack([np.repeat(np.arange(30), 4), rng.integers(0, 20, 120)]),
    }
    for key, value in arrays.items():
        np.save(folder / f"{key}.npy", value)
    prepare(str(folder), progress=False)
    spec = manifest(folder)["arrays"]["csc_edges__user__buys__item"]
    edges = np.load(folder / spec["file"], mmap_mode="r+")
    edges[0, 5:] = 31  # user ids run to 29
    edges.flush()
    del edges
    os.utime(folder / spec["file"], ns=(spec["mtime_ns"], spec["mtime_ns"]))
    seen = refused("train", "--dataset", str(folder), "--backend", backend, *TRAIN, "--set", "train.batch_size=8")
    lines = seen.stderr.strip().splitlines()
    assert seen.returncode == 1 and len(lines) == 1, seen.stderr
    assert (
        lines[0].startswith(f"Error: {folder / spec['file']}: ") and "names source node 31, outside [0, 30)" in lines[0]
    )
