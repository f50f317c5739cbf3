"""Memory-mapped records reach the ranks as "open it yourself": each rank maps the dataset's
files (one copy in the page cache per machine), nothing is copied into shared memory; records
without ``mapped_from`` still travel through shared memory. Real ranks, both ways ranks get data:
``--nproc``'s spawned ranks (arguments pickled by torch.multiprocessing) and a job's node
(``node_shared``)."""
import json
import pickle
from pathlib import Path

import pytest

from gnnbridge.core.runtime.launcher import launch
from gnnbridge.testing.conformance import small_graph
from gnnbridge.testing.workers import open_mapped_graph, save_graph_files, where_x_lives


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
        launch(where_x_lives, 2, "cpu", (open_mapped_graph(folder).share_memory_(), str(out)), timeout_s=120)
    else:
        launch(where_x_lives, 2, "cpu", (None, str(out), folder), timeout_s=120)
    expected = float(small_graph().x.sum())
    for rank in _ranks(out):
        assert rank["x_line"].endswith(f"{folder}/x.npy"), rank  # x's pages are the file's
        assert rank["shm"] == [] and rank["mapped"] and rank["x_sum"] == expected


@pytest.mark.slow
def test_a_record_without_mapped_from_still_goes_through_shared_memory(folder, tmp_path):
    spawned, job = tmp_path / "spawned", tmp_path / "job"
    spawned.mkdir(), job.mkdir()
    launch(where_x_lives, 2, "cpu", (open_mapped_graph(folder, mapped=False).share_memory_(), str(spawned)),
           timeout_s=120)
    for rank in _ranks(spawned):
        assert "x.npy" not in rank["x_line"] and not rank["mapped"], rank
    launch(where_x_lives, 2, "cpu", (None, str(job), folder, False), timeout_s=120)
    for rank in _ranks(job):  # the node's exported copy, in shared memory
        assert "/gnnbridge-" in rank["x_line"] and "x.npy" not in rank["x_line"] and not rank["mapped"], rank
