"""Memory-mapped records reach the ranks as "open it yourself": each rank maps the dataset's
files (one copy in the page cache per machine), nothing is copied into shared memory; records
without ``mapped_from`` still travel through shared memory. Real ranks, both ways ranks get data:
``--nproc``'s spawned ranks (arguments pickled by torch.multiprocessing) and a job's node
(``node_shared``)."""

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnnbridge.core.errors import RankFailedError
from gnnbridge.testing.conformance import small_graph
from gnnbridge.testing.ports import free_port
from gnnbridge.testing.workers import launch_ranks, mapping_of, open_mapped_graph, save_graph_files, where_x_lives


@pytest.fixture
def folder(tmp_path):
    save_graph_files(small_graph(), tmp_path / "graph")
    return str(tmp_path / "graph")


def _ranks(out):
    return [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(2)]


def test_a_mapped_record_pickles_to_its_opener_not_its_tensors(folder):
    data = open_mapped_graph(folder)
    blob = pickle.dumps(data)
    assert len(blob) < 1000 and data.x.numel() * 4 > 1000
    again = pickle.loads(blob)
    assert again.mapped_from == data.mapped_from and again.x.sum() == data.x.sum()
    assert data.share_memory_().x.untyped_storage().filename is None  # not moved to shared memory


@pytest.mark.slow
@pytest.mark.parametrize("via", ["spawn", "node_shared"])
def test_ranks_map_a_mapped_record_from_its_file_not_shared_memory(via, folder, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    if via == "spawn":  # as train's _run_local hands the record to --nproc's ranks
        launch_ranks(where_x_lives, 2, (open_mapped_graph(folder).share_memory_(), str(out)), timeout_s=120)
    else:
        launch_ranks(where_x_lives, 2, (None, str(out), folder), timeout_s=120)
    expected = float(small_graph().x.sum())
    for rank in _ranks(out):
        assert rank["x_line"].endswith(f"{folder}/x.npy"), rank  # x's pages are the file's
        assert rank["shm"] == [] and rank["mapped"] and rank["x_sum"] == expected


@pytest.mark.slow
def test_a_record_without_mapped_from_still_goes_through_shared_memory(folder, tmp_path):
    spawned, job = tmp_path / "spawned", tmp_path / "job"
    spawned.mkdir(), job.mkdir()
    launch_ranks(
        where_x_lives, 2, (open_mapped_graph(folder, mapped=False).share_memory_(), str(spawned)), timeout_s=120
    )
    for rank in _ranks(spawned):
        assert "x.npy" not in rank["x_line"] and not rank["mapped"], rank
    launch_ranks(where_x_lives, 2, (None, str(job), folder, False), timeout_s=120)
    for rank in _ranks(job):  # the node's exported copy, in shared memory
        assert "/gnnbridge-" in rank["x_line"] and "x.npy" not in rank["x_line"] and not rank["mapped"], rank


def test_a_task_record_derived_from_a_mapped_graph_keeps_its_features_mapped(folder):
    """A link task builds new topology around the opened graph's features: it travels as
    "reopen and derive again" (the same seed, the same record) and its x stays the file's."""
    from gnnbridge.core.app.preflight import for_task
    from gnnbridge.core.config import from_dict

    config = from_dict({"task": "link", "train": {"seed": 3}})
    derived = for_task(config, open_mapped_graph(folder))
    blob = pickle.dumps(derived.share_memory_())
    assert len(blob) < 10_000  # the config and the opener, not the graph
    again = pickle.loads(blob)
    assert again.mapped_from is not None and again.summary() == derived.summary()
    for name in ("val_edges", "test_edges", "val_negatives", "test_negatives"):
        assert torch.equal(getattr(again, name), getattr(derived, name)), name
    assert all(torch.equal(again.edge_index[et], derived.edge_index[et]) for et in derived.edge_index)
    assert mapping_of(again.x["node"].data_ptr()).endswith(f"{folder}/x.npy")


def _corrupt(folder):
    """A copy that differs from its manifest: x.npy gained a few bytes."""
    with open(Path(folder) / "x.npy", "ab") as f:
        f.write(b"\0" * 8)


@pytest.mark.slow
def test_a_mapped_record_refused_in_the_spawned_ranks_is_one_line(folder, tmp_path, capfd):
    """The folder changed after the launching process opened it: each rank's reopening refuses
    it, and the run ends with that line, as a failure of a rank, without a traceback."""
    data = open_mapped_graph(folder)
    _corrupt(folder)
    with pytest.raises(RankFailedError) as err:
        launch_ranks(where_x_lives, 2, (data, str(tmp_path)), timeout_s=120)
    assert re.fullmatch(
        rf"rank [01] failed: {re.escape(folder)}/x\.npy has \d+ bytes but its manifest says \d+: "
        r"this copy of the folder differs from the one prepared; copy it again\.",
        str(err.value),
    )
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.slow
def test_two_machines_map_their_own_copies_and_a_copy_that_differs_ends_the_job_in_one_line(folder, tmp_path):
    """Two torchrun "machines" of two ranks, each in its own folder with its own copy of the data;
    first both copies are good (every rank maps its machine's file, nothing goes to shared
    memory), then node 1's differs: its first rank (rank 2) refuses it and both machines end with
    that line."""
    for node in ("node0", "node1"):
        shutil.copytree(folder, tmp_path / node / "data")
        (tmp_path / node / "out").mkdir()
    codes, errors = _two_nodes(tmp_path)
    assert codes == [0, 0], errors
    for node, rank in (("node0", 0), ("node0", 1), ("node1", 2), ("node1", 3)):
        seen = json.loads((tmp_path / node / "out" / f"rank{rank}.json").read_text())
        assert seen["x_line"].endswith(f"{tmp_path / node}/data/x.npy") and seen["shm"] == [], seen
    _corrupt(tmp_path / "node1" / "data")
    codes, errors = _two_nodes(tmp_path)
    line = (
        f"Error: rank 2 failed: data/x.npy has {4 * small_graph().x.numel() + 128 + 8} bytes but its manifest "
        f"says {4 * small_graph().x.numel() + 128}: this copy of the folder differs from the one prepared; copy it "
        "again."
    )
    assert codes[1] != 0 and codes[0] != 0, errors
    # gnnbridge's one line on each machine (torchrun's own failure report follows it, as for any job).
    assert [[e for e in lines if e.startswith("Error: ")] for lines in errors] == [[line], [line]], errors


def _two_nodes(tmp_path):
    """Run the two "machines" of the job; their exit codes and the lines each printed on stderr."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node-rank",
                str(r),
                "--nproc-per-node",
                "2",
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "-m",
                "gnnbridge.testing.mapped_job",
                "data",
                "out",
            ],
            cwd=tmp_path / f"node{r}",
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (1, 0)
    ]
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [p.returncode for p in reversed(procs)], [e.splitlines() for _, e in reversed(outs)]
