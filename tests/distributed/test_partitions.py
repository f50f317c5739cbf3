"""Graphs partitioned across machines: ``gnnbridge partition`` writes parts that together are the
graph, and a job of K machines, each holding only its own part, trains as the whole graph does.

The parts are checked against the prepared folder they came from (every edge, row, label and
split member, by the original ids each part keeps); the sampler across machines is checked on
real gloo ranks against the graph itself (every sampled edge is an edge, every fetched row is
that node's); whole jobs run as torchrun "machines", each in a folder holding only its part.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import gnnbridge as gnnbridge_command
from helpers import job

from gnnbridge.core.errors import ConfigError, DataError, ResourceError
from gnnbridge.core.storage.folder import open_prepared
from gnnbridge.core.storage.partition import partition
from gnnbridge.core.storage.parts import PartError, on_machine, open_machine_part, open_partition
from gnnbridge.core.storage.prepare import prepare_folder
from gnnbridge.testing.conformance import small_graph
from gnnbridge.testing.workers import launch_ranks, part_layers_and_dump, sample_parts_and_dump

METHODS = ("metis", "stream")


def write_graph(folder: Path, n: int = 300, edge_features: bool = False) -> Path:
    g = small_graph(n=n)
    folder.mkdir(parents=True)
    arrays = {"x": g.x, "edge_index": g.edge_index, "y": g.y, "train_idx": g.train_idx}
    arrays.update(val_idx=g.val_idx, test_idx=g.test_idx)
    for key, value in arrays.items():
        np.save(folder / f"{key}.npy", value.numpy())
    if edge_features:  # each edge's row names it: (source, destination, position in edge_index)
        ei = g.edge_index.numpy()
        np.save(folder / "edge_attr.npy", np.stack([ei[0], ei[1], np.arange(ei.shape[1])], 1).astype(np.float32))
    prepare_folder(folder, progress=False)
    return folder


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return write_graph(tmp_path_factory.mktemp("partitions") / "g", edge_features=True)


def _parts(root: Path, k: int) -> list:
    return [open_partition(root, k, m) for m in range(k)]


def _edges(indptr: torch.Tensor, indices: torch.Tensor, dst_ids: torch.Tensor) -> set:
    dst = torch.repeat_interleave(dst_ids, indptr[1:] - indptr[:-1])
    return set(zip(indices.tolist(), dst.tolist()))


@pytest.mark.parametrize(("method", "chunk"), [("metis", None), ("stream", None), ("stream", 200)])
def test_the_parts_together_are_the_graph(graph, tmp_path, monkeypatch, method, chunk):
    """Each node in exactly one part, its row, label and split membership as in the folder; the
    parts' in-edges (global ids mapped back to the original ones) are the graph's edges, their
    edge features each edge's own; ids are contiguous per part; the report adds up. ``chunk``:
    bytes a step reads, small enough that chunks start and stop inside a node's edges."""
    if chunk is not None:
        import gnnbridge.core.storage.partition as module

        monkeypatch.setattr(module, "chunk_bytes", lambda: chunk)
    root = tmp_path / "g"
    shutil.copytree(graph, root, ignore=shutil.ignore_patterns("partitions"))
    k = 3
    result = partition(root, k, method=method, progress=False)
    full, parts = open_prepared(root), _parts(root, k)
    original = torch.cat([p.partition.node_ids for p in parts])
    assert sorted(original.tolist()) == list(range(full.num_nodes))
    assert result["boundaries"] == [0, *np.cumsum([p.num_nodes for p in parts]).tolist()]
    seen, positions = set(), []
    for p in parts:
        ids, start = p.partition.node_ids, p.partition.start
        assert torch.equal(p.x, full.x[ids]) and torch.equal(p.y, full.y[ids])
        seen |= _edges(p.indptr, original[p.indices], ids)
        dst = torch.repeat_interleave(ids, p.indptr[1:] - p.indptr[:-1])
        assert torch.equal(p.edge_attr[:, 0].long(), original[p.indices]) and torch.equal(p.edge_attr[:, 1].long(), dst)
        positions.append(p.edge_attr[:, 2].long())
        for split in ("train", "val", "test"):
            assert set(ids[p.split(split)].tolist()) == set(full.split(split).tolist()) & set(ids.tolist())
            assert (p.split(split) >= 0).all() and (p.split(split) < p.num_nodes).all()
        assert p.partition.owners(torch.arange(start, start + p.num_nodes)).eq(p.partition.part).all()
    assert seen == _edges(full.indptr, full.indices, torch.arange(full.num_nodes))
    assert sorted(torch.cat(positions).tolist()) == list(range(full.indices.numel()))  # every edge once
    cut = sum(p["remote_edges"] for p in result["per_part"]) / sum(p["edges"] for p in result["per_part"])
    assert result["edge_cut"] == round(cut, 4) and 0 < cut < 2 / 3  # better than a random cut of 3 parts
    assert result["balance"]["nodes"] <= 1.1 and sum(p["train"] for p in result["per_part"]) == full.train_idx.numel()


def _copy(graph: Path, tmp_path: Path) -> Path:
    root = tmp_path / "g"
    shutil.copytree(graph, root, ignore=shutil.ignore_patterns("partitions"))
    return root


def test_partitioning_again_is_nothing_to_do_and_another_method_is_refused_not_overwritten(graph, tmp_path):
    root = _copy(graph, tmp_path)
    first = partition(root, 2, method="stream", progress=False)
    again = partition(root, 2, method="stream", progress=False)
    assert again["already"] and again["id"] == first["id"]
    with pytest.raises(ConfigError, match=r"holds a partitioning by stream \(seed 0\); machines may hold its parts: "):
        partition(root, 2, method="metis", progress=False)
    assert json.loads((root / "partitions/2/partition.json").read_text())["id"] == first["id"]
    assert sorted(p.name for p in (root / "partitions").iterdir()) == [".lock", "2"]


def test_a_source_prepared_again_is_partitioned_again_and_a_changed_one_refused(graph, tmp_path):
    root = _copy(graph, tmp_path)
    first = partition(root, 2, method="stream", progress=False)
    np.save(root / "y.npy", np.load(root / "y.npy")[::-1].copy())
    with pytest.raises(DataError, match="y.npy changed since `gnnbridge prepare`"):
        partition(root, 2, method="stream", progress=False)
    prepare_folder(root, progress=False)
    second = partition(root, 2, method="stream", progress=False)
    assert not second["already"] and second["id"] != first["id"]
    assert sorted(p.name for p in (root / "partitions" / "2").iterdir()) == ["part-0", "part-1", "partition.json"]


def test_a_failed_partitioning_leaves_nothing(graph, tmp_path, monkeypatch):
    """A part that fails midway (a full disk, a stop signal) takes every file of this run with it."""
    import gnnbridge.core.storage.partition as module

    root = _copy(graph, tmp_path)
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    real = module._write_part
    monkeypatch.setattr(module, "_write_part", failing)
    with pytest.raises(ResourceError, match=r"the disk is full .*nothing half-written is left"):
        partition(root, 2, method="stream", progress=False)
    assert not (root / "partitions").exists()  # not even the lock


def test_what_cannot_be_partitioned_is_one_line(graph, tmp_path):
    root = _copy(graph, tmp_path)
    with pytest.raises(ConfigError, match=r"--parts 400: give 2 to 300 parts"):
        partition(root, 400, progress=False)
    with pytest.raises(
        ConfigError, match=r"--method 'kl' is not a partitioning method; use one of: auto, metis, stream"
    ):
        partition(root, 2, method="kl", progress=False)
    (tmp_path / "raw").mkdir()
    with pytest.raises(DataError, match=r"raw is not prepared; run: gnnbridge prepare"):
        partition(tmp_path / "raw", 2, progress=False)
    if os.geteuid() != 0:  # root writes anywhere
        root.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            with pytest.raises(ConfigError, match="is not writable"):
                partition(root, 2, progress=False)
        finally:
            root.chmod(stat.S_IRWXU)


def test_a_machine_opens_only_its_own_part_of_this_partitioning(graph, tmp_path):
    """The wrong part, a part of another partitioning, a missing part and a job of another size
    are each refused in one line; the machine's copy holds nothing but its part."""
    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    machine = tmp_path / "machine1" / "data"
    (machine / "partitions" / "2").mkdir(parents=True)
    shutil.copy(root / "partitions/2/partition.json", machine / "partitions/2")
    shutil.copytree(root / "partitions/2/part-1", machine / "partitions/2/part-1")
    with on_machine(1, 2):
        assert open_machine_part(machine, 2).partition.part == 1
    with on_machine(0, 2), pytest.raises(PartError, match=r"part-0 is missing: machine 0 opens part-0"):
        open_machine_part(machine, 2)
    shutil.copytree(root / "partitions/2/part-1", machine / "partitions/2/part-0")
    with (
        on_machine(0, 2),
        pytest.raises(PartError, match=r"holds part 1, but this machine \(node rank 0\) trains part 0"),
    ):
        open_machine_part(machine, 2)
    with on_machine(0, 3), pytest.raises(ConfigError, match=r"but this job runs on 3 machines; start 2"):
        open_machine_part(machine, 2)
    shutil.rmtree(root / "partitions/2")
    partition(root, 2, method="metis", progress=False)
    shutil.copy(root / "partitions/2/partition.json", machine / "partitions/2")
    with on_machine(1, 2), pytest.raises(PartError, match=r"part-1 is a part of another partitioning"):
        open_machine_part(machine, 2)


def _machine_copy(root: Path, tmp_path: Path, m: int, k: int = 2, keep_times: bool = True) -> Path:
    """Machine ``m``'s copy of ``root``'s partitioning into ``k``: partition.json (its time not
    kept) and part-M (times kept, as rsync -a keeps them; or not, as scp -r and cp -r copy),
    nothing else."""
    machine = tmp_path / f"machine{m}" / "data"
    (machine / "partitions" / str(k)).mkdir(parents=True)
    shutil.copy(root / f"partitions/{k}/partition.json", machine / f"partitions/{k}")
    copy = shutil.copy2 if keep_times else shutil.copyfile
    shutil.copytree(root / f"partitions/{k}/part-{m}", machine / f"partitions/{k}/part-{m}", copy_function=copy)
    return machine


PART_ARRAYS = ("x", "y", "indptr", "indices", "edge_attr", "train_idx", "val_idx", "test_idx")


def test_a_part_copied_without_its_times_opens_as_written_checked_by_its_content(graph, tmp_path, capsys):
    """A part is meant to be copied, and scp -r, cp -r or a tar without times give every file a new
    modification time: the copy opens as the part written (each file read and taken by the digest
    partition recorded of it), and the machine is told once that every open reads it, and that
    rsync -a keeps times."""
    from gnnbridge.core.storage.parts import identity

    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    machine = _machine_copy(root, tmp_path, 1, keep_times=False)
    folder = machine / "partitions/2/part-1"
    recorded = json.loads((folder / "part.json").read_text())["arrays"].values()
    assert all((folder / spec["file"]).stat().st_mtime_ns != spec["mtime_ns"] for spec in recorded)
    capsys.readouterr()
    with on_machine(1, 2):
        copied, again = open_machine_part(machine, 2), open_machine_part(machine, 2)
    written = open_partition(root, 2, 1)
    for key in PART_ARRAYS:
        assert torch.equal(getattr(copied, key), getattr(written, key)) and torch.equal(
            getattr(again, key), getattr(written, key)
        ), key
    assert torch.equal(copied.partition.node_ids, written.partition.node_ids)
    assert (identity(copied).id, identity(copied).digest) == (identity(written).id, identity(written).digest)
    notes = capsys.readouterr().err.splitlines()
    assert len(notes) == 1 and notes[0].startswith(
        f"Note: machine 1: {len(recorded)} files of {folder} do not have the modification times gnnbridge partition "
        "gave them (copied without them), so their content was read and checked ("
    ), notes
    assert notes[0].endswith(
        "every open of this copy reads them again: copy the part with rsync -a (it keeps times) to skip this."
    )


def _flip_last_byte(file: Path) -> None:
    """One byte of ``file`` changed, its size kept (nothing a bounds check sees in a feature row)."""
    data = bytearray(file.read_bytes())
    data[-1] ^= 0x01
    file.write_bytes(bytes(data))


def test_a_part_copied_without_its_times_and_edited_is_refused_naming_the_file(graph, tmp_path):
    """A copy whose times are new is read: a feature row with one byte changed (its size kept, its
    values inside every bound) is refused in one line naming the machine, the file and the fix."""
    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    machine = _machine_copy(root, tmp_path, 1, keep_times=False)
    file = machine / "partitions/2/part-1/x.npy"
    _flip_last_byte(file)
    with on_machine(1, 2), pytest.raises(PartError) as err:
        open_machine_part(machine, 2)
    assert str(err.value) == (
        f"machine 1: {file} changed since gnnbridge partition wrote it (its content is not the one it recorded); "
        "copy part-1 to machine 1 again from where the folder was partitioned (rsync -a keeps its times)."
    )


def test_a_part_whose_times_are_kept_is_opened_without_reading_its_files(graph, tmp_path, monkeypatch):
    """The stat is the fast path: a part in place, or copied with its times (rsync -a), opens without
    a byte of its files digested; so does a rank reopening a copy without times after its machine's
    first rank read it, while that first open digests every file; a file of another size is refused
    at once, nothing read."""
    import gnnbridge.core.storage.parts as parts

    read, digest = [], parts.file_digest
    monkeypatch.setattr(parts, "file_digest", lambda file: read.append(file.name) or digest(file))
    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    kept = _machine_copy(root, tmp_path / "kept", 1)
    bare = _machine_copy(root, tmp_path / "bare", 1, keep_times=False)
    files = sorted(
        spec["file"] for spec in json.loads((bare / "partitions/2/part-1/part.json").read_text())["arrays"].values()
    )
    read.clear()
    with on_machine(1, 2):
        open_machine_part(root, 2)
        open_machine_part(kept, 2)
    open_partition(bare, 2, 1, values=False)
    assert read == []
    with on_machine(1, 2):
        open_machine_part(bare, 2)
    assert sorted(read) == files
    read.clear()
    file = bare / "partitions/2/part-1/indices.npy"
    size = file.stat().st_size
    with open(file, "ab") as f:
        f.write(b"\0")
    with on_machine(1, 2), pytest.raises(PartError) as err:
        open_machine_part(bare, 2)
    assert str(err.value) == (
        f"machine 1: {file} holds {size + 1} bytes where gnnbridge partition wrote {size} (a copy cut short, or "
        "another file); copy part-1 to machine 1 again from where the folder was partitioned (rsync -a keeps its "
        "times)."
    )
    assert read == []


def _edit(file: Path, change, keep_time: bool = True) -> None:
    """``change(array)`` written into the .npy ``file`` in place (same size); its modification
    time put back unless ``keep_time`` is False (an edit that no stat can see)."""
    before = file.stat()
    array = np.load(file)
    change(array)
    np.save(file, array)
    assert file.stat().st_size == before.st_size
    if keep_time:
        os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize(
    ("name", "change", "keep_time", "line"),
    [
        ("indptr", lambda a: a.__setitem__(5, 10**9), True, r"indptr\.npy: the offsets of node 5 run backwards"),
        ("indptr", lambda a: a.__setitem__(-1, 10**9), True, r"indptr\.npy: the offsets run from 0 to 1000000000"),
        ("node_ids", lambda a: a.__setitem__(3, 10**12), True, r"node_ids\.npy: original id 1000000000000 at row 3"),
        ("node_ids", lambda a: a.__setitem__(slice(0, 2), a[1::-1].copy()), True, r"original ids stop rising at row 1"),
        ("train_idx", lambda a: a.__setitem__(0, -1), True, r"train_idx\.npy: train member -1 at row 0 lies outside"),
        ("indptr", lambda a: a.__setitem__(5, 10**9), False, r"indptr\.npy changed since gnnbridge partition wrote it"),
        ("node_ids", lambda a: a.__setitem__(3, 10**12), False, r"node_ids\.npy changed since gnnbridge partition"),
    ],
    ids=["offset-1e9", "last-offset", "id-1e12", "ids-unordered", "split-member", "offset-stat", "id-stat"],
)
def test_an_edited_part_file_is_refused_at_open_naming_the_machine_and_the_file(
    graph, tmp_path, name, change, keep_time, line
):
    """Any edit of a part's files is one line at open on its machine, naming the machine, the
    file and the fix (copy the part again), never a run that trains on it or a hang: by its
    recorded size and time, and, where the time was put back, by the bounds of the node-sized
    arrays (offsets, original ids, split members)."""
    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    machine = _machine_copy(root, tmp_path, 1)
    _edit(machine / f"partitions/2/part-1/{name}.npy", change, keep_time)
    with on_machine(1, 2), pytest.raises(DataError) as err:
        open_machine_part(machine, 2)
    message = str(err.value)
    assert re.search(line, message) and "\n" not in message, message
    assert str(machine / "partitions/2/part-1") in message
    assert message.rstrip(".").endswith(
        "copy part-1 to machine 1 again from where the folder was partitioned (rsync -a keeps its times)"
    )
    assert "prepare" not in message


def test_an_edge_of_a_part_is_checked_where_it_is_read_with_the_parts_fix(graph, tmp_path):
    """The edges are not read at open (they are a part's large file): a source id edited in place
    is found where the sampler's kernels read it, and the line names the part's file and fix."""
    from gnnbridge.core.storage.folder import check_mapped_csc

    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    machine = _machine_copy(root, tmp_path, 1)
    _edit(machine / "partitions/2/part-1/indices.npy", lambda a: a.__setitem__(7, 10**9))
    with on_machine(1, 2):
        part = open_machine_part(machine, 2)
    with pytest.raises(DataError) as err:
        check_mapped_csc(part.indptr, part.indices, part.partition.num_nodes)
    assert str(err.value) == (
        f"{machine}/partitions/2/part-1/indices.npy: edge 7 names source node 1000000000, outside [0, 300): the file "
        "is corrupt or was changed after gnnbridge partition wrote it; copy part-1 to machine 1 again from where "
        "the folder was partitioned (rsync -a keeps its times)"
    )


def test_an_edited_partition_json_or_part_json_is_refused(graph, tmp_path):
    """partition.json is every machine's map of who owns what: one whose boundaries were edited (or
    that came from another cut of the same partitioning) is refused by the digest each part
    recorded of it, however it was copied; a part.json whose own range was edited is refused
    against partition.json's boundaries."""
    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    machine = _machine_copy(root, tmp_path, 1)
    file = machine / "partitions/2/partition.json"
    description = json.loads(file.read_text())
    edited = {**description, "boundaries": [0, description["boundaries"][1] - 1, description["boundaries"][2]]}
    file.write_text(json.dumps(edited))
    with on_machine(1, 2), pytest.raises(PartError) as err:
        open_machine_part(machine, 2)
    assert str(err.value) == (
        f"machine 1: {file} is not the one part-1 was cut with (it was edited, or copied from another cut); copy "
        "partition.json and part-1 to machine 1 again from where the folder was partitioned."
    )
    file.write_text(json.dumps(description))  # the right one again, under a new time: accepted
    with on_machine(1, 2):
        assert open_machine_part(machine, 2).partition.part == 1
    part_file = machine / "partitions/2/part-1/part.json"
    part = json.loads(part_file.read_text())
    part_file.write_text(json.dumps({**part, "start": part["start"] - 1}))
    with on_machine(1, 2), pytest.raises(PartError, match=r"part\.json says its nodes are \[\d+, 300\) but partition"):
        open_machine_part(machine, 2)


def test_parts_of_a_folder_changed_or_prepared_again_since_are_refused(graph, tmp_path):
    """Where the machine holds the folder too, its parts must be cut from it as it is: labels
    changed (not prepared again, then prepared again) leave parts that no longer describe it."""
    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    np.save(root / "y.npy", np.load(root / "y.npy")[::-1].copy())
    with on_machine(0, 2), pytest.raises(PartError) as err:
        open_machine_part(root, 2)
    assert str(err.value) == (
        f"machine 0: {root}/y.npy changed since `gnnbridge prepare` (size/modified time); run gnnbridge prepare "
        f"{root} again, then gnnbridge partition {root} --parts 2 again, and give each machine its new part."
    )
    prepare_folder(root, progress=False)
    with on_machine(0, 2), pytest.raises(PartError) as err:
        open_machine_part(root, 2)
    assert str(err.value) == (
        f"machine 0: {root}/partitions/2 was cut from an earlier prepare of {root} ({root}/prepared/manifest.json "
        f"changed since); run gnnbridge partition {root} --parts 2 again, and give each machine its new part."
    )
    partition(root, 2, method="stream", progress=False)  # cut again: accepted
    with on_machine(0, 2):
        assert torch.equal(
            open_machine_part(root, 2).y, open_prepared(root).y[open_partition(root, 2, 0).partition.node_ids]
        )


def test_a_partitioning_of_an_earlier_format_is_refused_and_partitioned_again(graph, tmp_path):
    """Parts written before parts recorded what they are checked by cannot be checked: refused in
    one line saying to partition again, which makes them again (not "already partitioned")."""
    root = _copy(graph, tmp_path)
    first = partition(root, 2, method="stream", progress=False)
    file = root / "partitions/2/partition.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), "format": 1}))
    with (
        on_machine(0, 2),
        pytest.raises(PartError, match=r"written by another version of gnnbridge \(format 1, not 2\)"),
    ):
        open_machine_part(root, 2)
    again = partition(root, 2, method="stream", progress=False)
    assert not again["already"] and again["id"] != first["id"]


def test_machines_given_two_partitionings_of_one_folder_are_told_which_differs(graph, tmp_path):
    """Each machine's part is whole with its own partition.json, but machine 1's is of another
    partitioning than machine 0's: what the job compares names machine 1 and its file."""
    from gnnbridge.core.storage.parts import disagreement, identity

    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    first = _machine_copy(root, tmp_path / "a", 0)
    shutil.rmtree(root / "partitions/2")
    partition(root, 2, method="stream", seed=1, progress=False)
    second = _machine_copy(root, tmp_path / "b", 1)
    with on_machine(0, 2):
        zero = open_machine_part(first, 2)
    with on_machine(1, 2):
        one = open_machine_part(second, 2)
    with on_machine(1, 2):
        same = open_machine_part(root, 2)
    assert disagreement([(0, identity(same)), (1, identity(one))]) is None
    line = disagreement([(0, identity(zero)), (0, identity(zero)), (1, identity(one))])
    assert line == (
        f"machine 1: {second}/partitions/2/partition.json is of another cut (id {one.partition.id[:8]}) than "
        f"machine 0's {first}/partitions/2/partition.json (id {zero.partition.id[:8]}); give every machine "
        "partition.json and its own part-M of one cut, copied from where the folder was partitioned."
    )
    assert "opened its dataset whole" in disagreement([(0, None), (1, identity(one))])


@pytest.mark.slow
def test_sampling_across_machines_returns_the_graphs_own_edges_and_rows(graph, tmp_path):
    """Three gloo ranks, each machine M of a 3-part graph, without and with a remote cache: every
    sampled edge is an edge of the graph (in original ids) with its global edge id, each hop's
    edges in destination order, at most that hop's fanout per node, every fetched row the
    node's own (also those the cache served); an empty batch on every machine at the same step
    joins the exchanges."""
    root = _copy(graph, tmp_path)
    partition(root, 3, method="metis", progress=False)
    fanouts = [4, 3]
    launch_ranks(sample_parts_and_dump, 3, (str(root), 3, fanouts, str(tmp_path), (0, 2000)), timeout_s=120)
    full, parts = open_prepared(root), _parts(root, 3)
    edges = _edges(full.indptr, full.indices, torch.arange(full.num_nodes))
    original = torch.cat([p.partition.node_ids for p in parts])
    global_sources = original[torch.cat([p.indices for p in parts])]
    for cache in (0, 2000):
        for rank in range(3):
            saved = torch.load(tmp_path / f"rank{rank}-{cache}.pt")
            first, empty, third = saved["batches"]
            assert empty["seeds"].numel() == 0 and empty["nodes"].numel() == 0
            for batch in (first, third):
                pairs = set(zip(batch["src"].tolist(), batch["dst"].tolist()))
                assert pairs and pairs <= edges
                assert torch.equal(global_sources[batch["edges"]], batch["src"])  # edge ids name the edge
                assert batch["cols_sorted"]
                assert torch.equal(batch["rows"], full.x[batch["nodes"]])
                assert set(batch["seeds"].tolist()) <= set(parts[rank].partition.node_ids.tolist())
                for hop, dst in zip(fanouts, batch["dst"].split(batch["hop_edges"])):
                    assert torch.bincount(dst, minlength=full.num_nodes).max() <= hop
            traffic = saved["traffic"]
            assert traffic["remote_rows"] > 0 and traffic["exchanged_bytes"] > 0, traffic
            assert (traffic["remote_cache_hits"] > 0) == bool(cache), traffic


# --------------------------------------------------------------------------- whole jobs

JOB = ["--set", "train.epochs=4", "--set", "model.hidden=32", "--set", "train.batch_size=128", "--timeout", "120"]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """The default experiment's graph as a prepared folder, and its test accuracy trained whole
    on one machine (two ranks), as the partitioned jobs train it."""
    import gnnbridge
    from gnnbridge.plugins.folder_datasets import prepare

    root = tmp_path_factory.mktemp("synthetic") / "syn"
    prepare("synthetic", out=root, progress=False)
    overrides = [JOB[i + 1] for i in range(0, 6, 2)]
    whole = gnnbridge.run(
        dataset=str(root), backend="pyg", nproc=2, overrides=overrides, out=str(root.parent / "whole"), progress=False
    )
    return root, whole["metrics"]["test_acc"]


def machines(
    root: Path, k: int, tmp_path: Path, backend: str, *extra: str, env=None, launcher=("--nproc-per-node", "1")
) -> tuple[list[int], list[list[str]]]:
    """A job of ``k`` torchrun "machines" (of one rank unless ``launcher`` says otherwise),
    machine M in ``tmp_path/machineM`` whose ``data`` holds partition.json and part-M alone,
    copied as ``scp -r`` copies (new modification times: every job trains on parts checked by
    their content); their exit codes and stderr lines. ``launcher``: more torchrun flags."""
    for m in range(k):
        folder = tmp_path / f"machine{m}" / "data" / "partitions" / str(k)
        folder.mkdir(parents=True)
        shutil.copy(root / "partitions" / str(k) / "partition.json", folder)
        shutil.copytree(root / "partitions" / str(k) / f"part-{m}", folder / f"part-{m}", copy_function=shutil.copyfile)
        for link in (root / "partitions" / str(k)).glob("link-*"):  # a cut link task: its part M too
            (folder / link.name).mkdir()
            shutil.copy(link / "link.json", folder / link.name)
            shutil.copytree(link / f"part-{m}", folder / link.name / f"part-{m}", copy_function=shutil.copyfile)
    train = ["train", "--dataset", "data", "--backend", backend, "--out", "out"]
    codes, outs = job(k, tmp_path, [*train, "--set", f"dataset.partitions={k}", *JOB, *extra], env, launcher)
    return codes, [err.splitlines() for _, err in outs]


def _results(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "machine0" / "out" / "results.json").read_text())


@pytest.fixture(scope="module")
def two_machines(synthetic, tmp_path_factory):
    """The synthetic graph METIS-partitioned in two, trained by two machines on PyG."""
    root, _ = synthetic
    partition(root, 2, method="metis", progress=False)
    where = tmp_path_factory.mktemp("two_machines")
    codes, errors = machines(root, 2, where, "pyg")
    assert codes == [0, 0], errors
    for machine in range(2):  # its copy without times was read once, and said so once
        notes = [line for line in errors[machine] if line.startswith("Note: ")]
        assert len(notes) == 1 and f"partitions/2/part-{machine} do not have the modification times" in notes[0], notes
    return where


def _check_job(tmp_path: Path, k: int, whole_acc: float) -> None:
    """Each machine's copy held only its part; the job trained to the whole graph's accuracy
    (within run-to-run noise), evaluated layer-wise across machines, and results.json says
    what each epoch took from other machines."""
    for m in range(k):
        data = tmp_path / f"machine{m}" / "data"
        held = sorted(str(p.relative_to(data)) for p in data.rglob("*.npy"))
        assert all(p.startswith(f"partitions/{k}/part-{m}/") for p in held), held
    results = _results(tmp_path)
    assert abs(results["metrics"]["test_acc"] - whole_acc) <= 0.04, (results["metrics"], whole_acc)
    assert results["world_size"] == k and results["eval"]["final"] == "layerwise"
    for epoch in results["history"]:
        assert epoch["remote_rows"] > 0 and epoch["remote_nodes"] > 0 and epoch["exchanged_bytes"] > 0, epoch


@pytest.mark.slow
def test_two_machines_holding_one_part_each_train_as_the_whole_graph_does(synthetic, two_machines):
    _check_job(two_machines, 2, synthetic[1])


@pytest.mark.slow
def test_three_machines_of_a_streamed_partitioning_train_on_dgl_as_the_whole_graph_does(synthetic, tmp_path):
    """With a remote cache: the rows of other machines' most-named nodes come from it."""
    root, whole_acc = synthetic
    partition(root, 3, method="stream", progress=False)
    codes, errors = machines(root, 3, tmp_path, "dgl", "--set", "placement.remote_cache=64KB")
    assert codes == [0, 0, 0], errors
    _check_job(tmp_path, 3, whole_acc)
    assert all(0 < e["remote_cache_hits"] < e["remote_rows"] for e in _results(tmp_path)["history"])


@pytest.mark.slow
def test_a_job_of_machines_given_two_partitionings_is_refused_on_every_machine(graph, tmp_path):
    """Machine 0 holds its part of a METIS partitioning, machine 1 its part of a streamed one of
    the same folder (each whole with its own partition.json): both machines end at once, before
    any training, with the one line naming machine 1's file (no crash in a batch, no hang)."""
    root = _copy(graph, tmp_path)
    partition(root, 2, method="metis", progress=False)
    first = _machine_copy(root, tmp_path, 0)
    shutil.rmtree(root / "partitions/2")
    partition(root, 2, method="stream", progress=False)
    second = _machine_copy(root, tmp_path, 1)
    train = ["train", "--dataset", "data", "--backend", "pyg", "--out", "out", "--set", "dataset.partitions=2", *JOB]
    codes, outs = job(2, tmp_path, train)
    line = (
        f"machine 1: {second}/partitions/2/partition.json is of another cut (id "
        f"{json.loads((second / 'partitions/2/partition.json').read_text())['id'][:8]}) than machine 0's "
        f"{first}/partitions/2/partition.json"
    )
    assert codes[0] != 0 and codes[1] != 0, outs
    for _, err in outs:
        errors = [e for e in err.splitlines() if e.startswith("Error: ")]
        assert len(errors) == 1 and line in errors[0], err
    assert not (tmp_path / "machine0" / "out").exists()


def test_a_remote_cache_of_a_graph_that_is_not_partitioned_is_refused(tmp_path):
    import gnnbridge
    from gnnbridge.core.errors import ConfigError as Refused

    with pytest.raises(Refused, match=r"placement.remote_cache=1MB caches other machines' rows of a partitioned graph"):
        gnnbridge.run(
            overrides=["placement.remote_cache=1MB", "train.epochs=1"], out=str(tmp_path / "r"), progress=False
        )
    assert not (tmp_path / "r").exists()


# Rank 1 (machine 1) SIGKILLs itself as epoch 3 starts, on the job's first attempt only.
MACHINE_DIES = """
import os, signal
from gnnbridge.core.training.trainer import Trainer

_train_epoch = Trainer.train_epoch

def train_epoch(self, epoch):
    if epoch == 2 and self.ctx.rank == 1 and self.ctx.attempt == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return _train_epoch(self, epoch)

Trainer.train_epoch = train_epoch
"""


@pytest.mark.slow
def test_a_machine_that_dies_is_restarted_and_the_job_ends_as_if_uninterrupted(synthetic, two_machines, tmp_path):
    """torchrun --max-restarts 1, the run folder on storage both machines see (here a link): the
    restarted job reopens each machine's part, continues from the last checkpoint and ends with
    the uninterrupted job's numbers."""
    root, _ = synthetic
    codes, errors = machines(root, 2, tmp_path, "pyg", **_machine_dies(tmp_path))
    assert codes == [0, 0], errors
    _check_as_uninterrupted(_results(tmp_path), _results(two_machines))


def _machine_dies(tmp_path: Path) -> dict:
    """``env`` and ``launcher`` of a job of two machines (under ``tmp_path``) whose machine 1
    dies as epoch 3 starts (:data:`MACHINE_DIES`), restarted once by torchrun; the run folder is
    on storage both machines see (here a link)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(MACHINE_DIES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    (tmp_path / "machine1").mkdir()
    (tmp_path / "machine1" / "out").symlink_to(tmp_path / "machine0" / "out")
    return {"env": env, "launcher": ("--nproc-per-node", "1", "--max-restarts", "1")}


def _check_as_uninterrupted(restarted: dict, uninterrupted: dict) -> None:
    """The restarted job resumed from epoch 1's checkpoint and ended with the uninterrupted job's
    losses and metrics."""
    assert [r["resumed_from_epoch"] for r in restarted["restarts"]] == [1], restarted["restarts"]
    assert restarted["metrics"] == uninterrupted["metrics"]
    assert [e["loss"] for e in restarted["history"]] == [e["loss"] for e in uninterrupted["history"]]


@pytest.mark.slow
def test_layerwise_inference_across_machines_equals_the_whole_graphs(graph, tmp_path):
    """Each machine's layer-wise logits of its own nodes (rows of other machines' nodes fetched
    layer by layer) are the whole graph's layer-wise logits of those nodes, for the same weights,
    on both backends."""
    from gnnbridge.core.config import ModelSpec, Task
    from gnnbridge.core.inference.evaluation import LayerwiseEvaluator
    from gnnbridge.core.models.build import build_model, model_dims
    from gnnbridge.core.models.init import initialise
    from gnnbridge.core.plugins import get_backend
    from gnnbridge.core.runtime.context import DistContext

    root = _copy(graph, tmp_path)
    partition(root, 2, method="metis", progress=False)
    launch_ranks(part_layers_and_dump, 2, (str(root), 2, ("pyg", "dgl"), "sage", str(tmp_path)), timeout_s=120)
    full = open_prepared(root)
    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    for backend in ("pyg", "dgl"):
        model, _ = build_model(ModelSpec(arch="sage", hidden=16), backend, Task.NODE, *model_dims(full), full)
        initialise(model, 0)
        whole = LayerwiseEvaluator(get_backend(backend).require(), full, ctx, 64).full_logits(model.eval())
        for rank in range(2):
            saved = torch.load(tmp_path / f"rank{rank}-{backend}.pt")
            torch.testing.assert_close(saved["logits"], whole[saved["ids"]], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_evaluate_and_predict_run_on_the_machines_each_scoring_its_own_nodes(synthetic, two_machines):
    """``gnnbridge evaluate`` as a job of the two machines gives the run's final metrics;
    ``predict`` writes each machine's rows to its own file (OUT.part-M.npz, named by node_ids),
    which together are the whole graph's predictions of the same checkpoint; ``--embeddings`` of
    a homogeneous graph (whose final layer is its logits) and ``--index`` of a node task are
    refused in one line."""
    import gnnbridge

    root, _ = synthetic
    shared = two_machines / "machine1" / "out"
    if not shared.exists():
        shared.symlink_to(two_machines / "machine0" / "out")  # the run folder, on storage both see
    codes, outs = job(2, two_machines, ["evaluate", "out", "--set", "dataset.path=data", "--json"])
    assert codes == [0, 0], outs
    assert outs[1][0] == ""  # rank 0 alone prints
    assert json.loads(outs[0][0])["metrics"] == _results(two_machines)["metrics"]
    codes, outs = job(2, two_machines, ["predict", "out", "--out", "preds.npz", "--set", "dataset.path=data"])
    assert codes == [0, 0], outs
    assert outs[0][0].startswith("preds.part-0.npz, preds.part-1.npz: logits, node_ids, pred, probs")
    whole = gnnbridge.predict(
        two_machines / "machine0" / "out", overrides=[f"dataset.path={root}", "dataset.partitions=0"]
    )
    seen = []
    for m in range(2):
        part = np.load(two_machines / f"machine{m}" / f"preds.part-{m}.npz")
        ids = part["node_ids"]
        seen.extend(ids.tolist())
        np.testing.assert_allclose(part["logits"], whole["logits"][ids], rtol=1e-5, atol=1e-5)
        assert (part["y"] == whole["y"][ids]).all() and set(part["test_idx"]) <= set(whole["test_idx"].tolist())
    assert sorted(seen) == list(range(whole["logits"].shape[0]))
    for option, needle in (("--embeddings", "homogeneous graph"), ("--index=hnsw", "no top-k lists")):
        command = ["predict", "out", "--out", "e.npz", option, "--set=dataset.path=data"]
        done = gnnbridge_command(*command, cwd=two_machines / "machine0", timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1 and needle in lines[0], lines  # before any machine loads
        assert not list((two_machines / "machine0").glob("e*"))


def _without_training_seeds(root: Path, k: int, m: int) -> None:
    """Part ``m`` of ``root``'s partitioning into ``k`` made to hold no training seed (its
    ``train_idx.npy`` emptied, its records and the counts updated as partition writes them)."""
    from gnnbridge.core.storage.parts import written_file

    folder = root / "partitions" / str(k)
    part = json.loads((folder / f"part-{m}" / "part.json").read_text())
    np.save(folder / f"part-{m}" / "train_idx.npy", np.zeros(0, dtype=np.int64))
    part["arrays"]["train_idx"].update(shape=[0], **written_file(folder / f"part-{m}" / "train_idx.npy"))
    (folder / f"part-{m}" / "part.json").write_text(json.dumps(part))
    description = json.loads((folder / "partition.json").read_text())
    description["per_part"][m]["train"] = 0
    (folder / "partition.json").write_text(json.dumps(description))
    _recorded(folder, description)


def _recorded(folder: Path, description: dict) -> None:
    """Every part.json of ``folder`` records ``description`` (partition.json) as partition writes it."""
    from gnnbridge.core.storage.parts import description_digest

    for file in folder.glob("part-*/part.json"):
        part = json.loads(file.read_text())
        part["description"] = description_digest(description)
        file.write_text(json.dumps(part))


@pytest.mark.slow
def test_two_ranks_a_machine_and_a_machine_without_training_seeds(graph, tmp_path):
    """Two machines of two ranks each (exchange groups of one rank per machine, each machine's
    layers joined among its ranks), one machine holding no training seed: its ranks run as many
    (empty) batches as the other's, so the job trains, evaluates and ends."""
    root = _copy(graph, tmp_path)
    partition(root, 2, method="metis", progress=False)
    _without_training_seeds(root, 2, 1)
    where = tmp_path / "job"
    codes, errors = machines(
        root, 2, where, "dgl", "--set", "placement.remote_cache=16KB", launcher=("--nproc-per-node", "2")
    )
    assert codes == [0, 0], errors
    for lines in errors:  # the first rank of each machine read its copy (without times), the other reopened it
        assert len([line for line in lines if line.startswith("Note: ")]) == 1, lines
    results = _results(where)
    assert results["world_size"] == 4 and results["eval"]["final"] == "layerwise"
    # every training seed sits on machine 0 (METIS cut along the classes): those it learned
    assert results["metrics"]["train_acc"] > 0.8, results["metrics"]
    assert all(e["remote_rows"] > 0 and e["remote_cache_hits"] > 0 for e in results["history"])


def test_splits_a_partitioning_drew_are_those_of_its_seed_only(tmp_path):
    """A folder without split files: the partitioning draws them as a run of its --seed would;
    a run of another train.seed would train other nodes than the folder whole, so it is refused."""
    g = small_graph(n=200)
    folder = tmp_path / "g"
    folder.mkdir()
    for key, value in {"x": g.x, "edge_index": g.edge_index, "y": g.y}.items():
        np.save(folder / f"{key}.npy", value.numpy())
    prepare_folder(folder, progress=False)
    partition(folder, 2, method="stream", seed=3, progress=False)
    whole = open_prepared(folder, seed=3)
    with on_machine(0, 2):
        part = open_machine_part(folder, 2, seed=3)
        with pytest.raises(ConfigError, match=r"drew its splits with seed 3 .* this run's train.seed is 0"):
            open_machine_part(folder, 2, seed=0)
    assert set(part.partition.node_ids[part.train_idx].tolist()) <= set(whole.train_idx.tolist())


def test_more_parts_than_the_graph_can_fill_are_refused(tmp_path):
    folder = write_graph(tmp_path / "tiny", n=40)
    with pytest.raises(ConfigError, match=r"--parts 30: metis left part \d+ without nodes"):
        partition(folder, 30, method="metis", progress=False)
    assert not (folder / "partitions").exists()


@pytest.mark.parametrize(
    ("experiment", "dataset", "line"),
    [
        ("sage-synthetic", [], r"dataset 'synthetic' is not one: give --dataset DIR"),
        ("sage-synthetic", ["task=edge", "dataset.name=folder", "dataset.path=g"], r"link tasks so far, not task=edge"),
    ],
)
def test_partitions_of_what_was_not_partitioned_are_refused(tmp_path, experiment, dataset, line):
    import gnnbridge

    with pytest.raises(ConfigError, match=line):
        overrides = [*dataset, "dataset.partitions=2"]
        gnnbridge.run(experiment, overrides=overrides, out=str(tmp_path / "r"), progress=False)
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- heterogeneous graphs


def write_typed_graph(folder: Path) -> Path:
    """Users (featureless), items (features whose first column is the item's id, labelled, no
    split files: partition draws them), categories; (user, buys, item) edges carry a feature
    row naming each edge (source, destination, position)."""
    rng = np.random.default_rng(3)
    users, items, cats = 90, 60, 6
    buys = np.stack([rng.integers(0, users, 400), rng.integers(0, items, 400)]).astype(np.int64)
    x_item = np.concatenate([np.arange(items)[:, None], rng.normal(size=(items, 3))], 1).astype(np.float32)
    arrays = {
        "num_nodes__user": np.array([users], dtype=np.int64),
        "x__item": x_item,
        "x__cat": rng.normal(size=(cats, 2)).astype(np.float32),
        "y__item": (np.arange(items) % 3).astype(np.int64),
        "edge_index__user__buys__item": buys,
        "edge_attr__user__buys__item": np.stack([buys[0], buys[1], np.arange(400)], 1).astype(np.float32),
        "edge_index__item__in__cat": np.stack([np.arange(items), np.arange(items) % cats]).astype(np.int64),
    }
    folder.mkdir(parents=True)
    for key, value in arrays.items():
        np.save(folder / f"{key}.npy", value)
    prepare_folder(folder, progress=False)
    return folder


@pytest.fixture(scope="module")
def typed_graph(tmp_path_factory):
    return write_typed_graph(tmp_path_factory.mktemp("typed") / "g")


def _originals(root: Path, k: int) -> dict[str, torch.Tensor]:
    """Each node type's ids in the dataset, indexed by global (partitioned) id."""
    opened = [open_partition(root, k, m).partition for m in range(k)]
    return {t: torch.cat([p.types[t].node_ids for p in opened]) for t in opened[0].types}


@pytest.mark.parametrize("method", METHODS)
def test_a_heterogeneous_graphs_parts_together_are_the_graph(typed_graph, tmp_path, method):
    """Ranges per node type: each type's nodes in exactly one part, contiguous there; every
    relation's (and every ``rev_`` relation's) in-edges together the folder's, each with its own
    feature row; rows, labels and drawn splits as the folder whole gives them."""
    root = _copy(typed_graph, tmp_path)
    result = partition(root, 2, method=method, progress=False)
    source, parts = open_prepared(root), _parts(root, 2)
    original = _originals(root, 2)
    assert result["kind"] == "hetero" and result["target"] == "item" and result["splits_seed"] == 0
    for t, n in source.num_nodes.items():
        assert sorted(original[t].tolist()) == list(range(n))
        sizes = [p.partition.types[t].sizes[m] for m, p in enumerate(parts)]
        assert result["boundaries"][t] == [0, *np.cumsum(sizes).tolist()] and min(sizes) > 0
    whole = for_node_task_of(source)
    for p in parts:
        ids = p.partition.types["item"].node_ids
        assert torch.equal(p.x["item"], source.x["item"][ids]) and torch.equal(p.y, source.y[ids])
        for split, members in zip(("train", "val", "test"), p.splits):
            assert set(ids[members].tolist()) == set(whole.split(split).tolist()) & set(ids.tolist())
    assert set(source.topology) == {et for p in parts for et in p.topology}
    for et, (_, edges) in source.topology.items():
        seen = set()
        for p in parts:
            indptr, sources = p.topology[et]
            src, dst_ids = original[et[0]][sources[0]], p.partition.types[et[2]].node_ids
            seen |= _edges(indptr, src, dst_ids)
            if et in source.topology_edge_attr:
                dst = torch.repeat_interleave(dst_ids, indptr[1:] - indptr[:-1])
                ends = (dst, src) if et[1].startswith("rev_") else (src, dst)  # a mirror's row is its edge's
                rows = p.topology_edge_attr[et]
                assert torch.equal(rows[:, 0].long(), ends[0]) and torch.equal(rows[:, 1].long(), ends[1])
        assert seen == set(zip(edges[0].tolist(), edges[1].tolist())), et
    assert sum(p["train"] for p in result["per_part"]) == whole.train_idx.numel()


def for_node_task_of(source):
    from gnnbridge.core.tasks.node import for_node_task

    return for_node_task(source, True, 0)


def _assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


def test_a_heterogeneous_part_is_sampled_across_three_machines(typed_graph, tmp_path):
    """Three gloo ranks, each holding one part: every sampled edge is an edge of its relation in
    the folder (its feature row its own), no node draws more than its fanout per relation and
    hop, every fetched row is that node's (a featureless type's: the node's id in the dataset),
    and an empty batch on one rank still pairs every exchange. A hop's relations exchanged at
    once sample exactly what they sample one relation at a time."""
    from gnnbridge.testing.workers import sample_typed_parts_and_dump

    root = _copy(typed_graph, tmp_path)
    partition(root, 3, method="metis", progress=False)
    launch_ranks(sample_typed_parts_and_dump, 3, (str(root), 3, [3, 2], str(tmp_path)), timeout_s=120)
    source = open_prepared(root)
    edges = {et: set(zip(e[0].tolist(), e[1].tolist())) for et, (_, e) in source.topology.items()}
    for rank in range(3):
        saved = torch.load(tmp_path / f"rank{rank}.pt")
        _assert_same(saved[True], saved[False])  # every relation in one exchange: the same sample
        first, empty = saved[True]
        assert empty["seeds"].numel() == 0 and all(not e["src"].numel() for e in empty["edges"].values())
        assert first["seeds"].numel() and set(first["edges"]) == set(edges)
        for et, got in first["edges"].items():
            assert set(zip(got["src"].tolist(), got["dst"].tolist())) <= edges[et], et
            for hop, dst in zip([3, 2], got["dst"].split(got["hops"])):
                assert not dst.numel() or torch.bincount(dst).max() <= hop
            if got["attr"] is not None:
                ends = (got["dst"], got["src"]) if et[1].startswith("rev_") else (got["src"], got["dst"])
                assert torch.equal(got["attr"][:, 0].long(), ends[0]) and torch.equal(got["attr"][:, 1].long(), ends[1])
        assert torch.equal(first["rows"]["item"], source.x["item"][first["nodes"]["item"]])
        assert torch.equal(first["rows"]["user"], first["nodes"]["user"])  # featureless: its own id
        assert saved["traffic"]["remote_nodes"] > 0 and saved["traffic"]["remote_rows"] > 0


@pytest.mark.slow
def test_a_heterogeneous_parts_typed_layerwise_logits_are_the_whole_graphs(typed_graph, tmp_path):
    """Each machine's labelled nodes' logits from the typed layer-wise pass across machines are
    the folder whole's, for the same weights, on both backends (a featureless type's embedding
    rows read by the nodes' own ids, as the whole graph reads them)."""
    from gnnbridge.core.config import ModelSpec, Task
    from gnnbridge.core.inference.typed_layerwise import TypedLayerwiseEvaluator
    from gnnbridge.core.models.build import build_model, model_dims
    from gnnbridge.core.models.init import initialise
    from gnnbridge.core.plugins import get_backend
    from gnnbridge.core.runtime.context import DistContext
    from gnnbridge.testing.workers import typed_part_layers_and_dump

    root = _copy(typed_graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    launch_ranks(typed_part_layers_and_dump, 2, (str(root), 2, ("pyg", "dgl"), str(tmp_path)), timeout_s=120)
    full = for_node_task_of(open_prepared(root))
    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    for backend in ("pyg", "dgl"):
        model, _ = build_model(ModelSpec(hidden=16), backend, Task.NODE, *model_dims(full), full)
        initialise(model, 0)
        whole = TypedLayerwiseEvaluator(get_backend(backend).require(), full, ctx, 64, None).predict(model.eval())
        for rank in range(2):
            saved = torch.load(tmp_path / f"rank{rank}-{backend}.pt")
            torch.testing.assert_close(saved["logits"], whole[saved["ids"]], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_two_machines_train_a_heterogeneous_graph_and_predict_their_own_nodes(tmp_path_factory):
    """mag-synthetic partitioned in two, trained by two DGL machines holding one part each: the
    whole graph's accuracy (within noise), layer-wise evaluation across machines, what crossed
    machines in results.json; ``predict --embeddings`` as a job writes each machine's rows and its
    nodes' final states of every type, which are the whole folder's of the same checkpoint (a
    featureless type's embeddings keyed by the dataset's ids, so a checkpoint reads the same rows
    partitioned or whole)."""
    import gnnbridge
    from gnnbridge.plugins.folder_datasets import prepare

    root = tmp_path_factory.mktemp("mag") / "mag"
    prepare("mag-synthetic", out=root, progress=False)
    overrides = [JOB[i + 1] for i in range(0, 6, 2)]
    whole = gnnbridge.run(
        dataset=str(root), backend="dgl", nproc=2, overrides=overrides, out=str(root.parent / "whole")
    )
    partition(root, 2, method="metis", progress=False)
    where = tmp_path_factory.mktemp("mag_machines")
    codes, errors = machines(root, 2, where, "dgl")
    assert codes == [0, 0], errors
    _check_job(where, 2, whole["metrics"]["test_acc"])
    (where / "machine1" / "out").symlink_to(where / "machine0" / "out")  # the run folder, on storage both see
    command = ["predict", "out", "--out", "preds.npz", "--embeddings", "--set", "dataset.path=data"]
    codes, outs = job(2, where, command)
    assert codes == [0, 0], outs
    predicted = gnnbridge.predict(
        where / "machine0" / "out", overrides=[f"dataset.path={root}", "dataset.partitions=0"], embeddings=True
    )
    seen, types = [], [key.split("__")[1] for key in predicted if key.startswith("embedding__")]
    assert len(types) > 1, types
    for m in range(2):
        part = np.load(where / f"machine{m}" / f"preds.part-{m}.npz")
        seen.extend(part["node_ids"].tolist())
        np.testing.assert_allclose(part["logits"], predicted["logits"][part["node_ids"]], rtol=1e-5, atol=1e-5)
        for t in types:  # every type's final states of this machine's nodes
            ids = part[f"node_ids__{t}"]
            np.testing.assert_allclose(part[f"embedding__{t}"], predicted[f"embedding__{t}"][ids], rtol=1e-4, atol=1e-4)
    assert sorted(seen) == list(range(predicted["logits"].shape[0]))


def test_a_remote_cache_on_a_heterogeneous_part_is_refused_in_one_line(typed_graph, tmp_path):
    """``placement.remote_cache`` serves a homogeneous part's rows; on a heterogeneous part it is
    refused before any machine starts, naming the setting."""
    from gnnbridge.core.app.preflight import load_dataset
    from gnnbridge.core.app.resolve import resolve_config

    root = _copy(typed_graph, tmp_path)
    partition(root, 2, method="metis", progress=False)
    config = resolve_config(dataset=str(root), overrides=["dataset.partitions=2", "placement.remote_cache=1MB"])
    with on_machine(0, 2), pytest.raises(ConfigError, match=r"^placement.remote_cache=1MB caches a homogeneous"):
        load_dataset(config)


@pytest.mark.parametrize("step", [7, 64, 1 << 24])
def test_the_remote_cache_counts_a_parts_edges_a_step_at_a_time(graph, tmp_path, step):
    """The other machines' nodes a part's edges name, and how often, are the same counted a few
    edges at a time (steps that cut a node's in-edges) as all at once."""
    from gnnbridge.core.sampling.distributed import PartitionSampler

    root = _copy(graph, tmp_path)
    partition(root, 3, method="metis", progress=False)
    for m in range(3):
        part = open_partition(root, 3, m)
        sampler = PartitionSampler.of(part, [2], exchange=None)
        sources = part.indices
        whole = torch.unique(sources[part.partition.owners(sources) != m], return_counts=True)
        ids, counts = sampler.remote_counts(step)
        assert ids.numel() > 0 and torch.equal(ids, whole[0]) and torch.equal(counts, whole[1])


# --------------------------------------------------------------------------- link tasks


def _link_config(root: Path, *overrides: str):
    from gnnbridge.core.app.resolve import resolve_config

    return resolve_config(None, dataset=str(root), overrides=("task=link", *overrides))


def _link_parts(root: Path, k: int, config) -> list:
    from gnnbridge.core.storage.linkparts import link_settings, open_link_part

    return [open_link_part(open_partition(root, k, m), link_settings(config)) for m in range(k)]


def _global_edges(parts: list, et) -> tuple[torch.Tensor, torch.Tensor]:
    """(sources, destinations) of relation ``et`` by global edge id, from every machine's part."""
    src, dst = [], []
    for p in parts:
        indptr = torch.as_tensor(p.indptr[et])
        src.append(torch.as_tensor(p.edge_index[et][0]))
        start = p.partition.types[et[2]].start
        dst.append(start + torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1]))
    return torch.cat(src), torch.cat(dst)


def write_follows_graph(folder: Path) -> Path:
    """Users following users, a third of the follows returned (so train edges have twins), and
    users buying items: a heterogeneous link target whose two ends are one type."""
    rng = np.random.default_rng(11)
    users, items = 80, 30
    follows = np.stack([rng.integers(0, users, 300), rng.integers(0, users, 300)])
    follows = follows[:, follows[0] != follows[1]]
    follows = np.concatenate([follows, follows[::-1, ::3]], axis=1).astype(np.int64)
    arrays = {
        "x__user": rng.normal(size=(users, 3)).astype(np.float32),
        "x__item": rng.normal(size=(items, 3)).astype(np.float32),
        "edge_index__user__follows__user": follows,
        "edge_index__user__buys__item": np.stack([rng.integers(0, users, 200), rng.integers(0, items, 200)]),
    }
    folder.mkdir(parents=True)
    for key, value in arrays.items():
        np.save(folder / f"{key}.npy", value)
    prepare_folder(folder, progress=False)
    return folder


def _named(original: dict | None, et, src: torch.Tensor, dst: torch.Tensor) -> set:
    """Edges as (source, destination) pairs of the dataset's ids (``original``: by global id)."""
    if original is not None:
        src, dst = original[et[0]][src], original[et[2]][dst]
    return set(zip(src.tolist(), dst.tolist()))


@pytest.mark.parametrize("typed", [False, True, "same-type"], ids=["homogeneous", "heterogeneous", "same-type"])
def test_a_link_tasks_parts_together_are_the_whole_runs_split_and_negatives(
    graph, typed_graph, tmp_path, monkeypatch, typed
):
    """gnnbridge partition --task link cuts the record a run of the folder whole trains on: the
    machines' train edges are its train edges, their held-out edges (each on its destination's
    machine) with their fixed negatives are its own, each train edge leaves out exactly what the
    whole record leaves out (itself, its twin, both mirrors: global ids, possibly on another
    machine; a same-type target with returned edges has twins), and the counts every machine
    batches by add up. Cutting it again is nothing to do. The cut reads 7 edges (or one held-out
    edge's negatives) a step, so windows start and stop inside a node's edges."""
    import gnnbridge.core.storage.linkparts as module
    from gnnbridge.core.app.partitioning import cut_link
    from gnnbridge.core.app.preflight import task_record

    monkeypatch.setattr(module, "chunk_bytes", lambda: 7 * 64)

    if typed == "same-type":
        root = write_follows_graph(tmp_path / "follows")
    else:
        root = _copy(typed_graph if typed else graph, tmp_path)
    k = 3
    partition(root, k, method="metis", progress=False)
    target = "follows" if typed == "same-type" else "buys"
    overrides = ["dataset.reverse_edges=true", f"link.edge_type={target}"] if typed else []
    result = cut_link(root, k, overrides=overrides)
    config = _link_config(root, *overrides)
    whole, parts = task_record(config), _link_parts(root, k, config)
    s, _, d = whole.target_edge
    target = whole.target_edge
    original = {t: torch.cat([torch.as_tensor(p.partition.types[t].node_ids) for p in parts]) for t in whole.num_nodes}
    pairs = set()
    for p in parts:
        got_src, got_dst = p.train_pairs(torch.arange(p.split("train").numel()))
        pairs |= set(zip(original[s][got_src].tolist(), original[d][got_dst].tolist()))
    train = whole.edge_index[target]
    assert pairs == set(zip(train[0].tolist(), train[1].tolist())) and len(pairs) == train.shape[1]
    for split in ("val", "test"):
        edges, negatives = whole.held_out(split)
        want = sorted(zip(edges[0].tolist(), edges[1].tolist(), map(tuple, negatives.tolist())))
        have = []
        for m, p in enumerate(parts):
            e, n = p.held_out(split)
            assert bool((p.partition.types[d].owners(e[1]) == m).all())  # on its destination's machine
            have += zip(original[s][e[0]].tolist(), original[d][e[1]].tolist(), map(tuple, original[d][n].tolist()))
        assert sorted(have) == want, split
        assert result["counts"][split] == [p.split(split).numel() for p in parts]
    # each train edge leaves out what the whole record's rule leaves out (itself, its twin, both
    # mirrors), compared as pairs of the dataset's ids
    whole_at = {pair: i for i, pair in enumerate(zip(train[0].tolist(), train[1].tolist()))}
    ends = {et: _global_edges(parts, et) for et in whole.excluded(torch.arange(1))}
    twins = 0
    for p in parts:
        for e in range(p.split("train").numel()):
            one = torch.tensor([e])
            u, v = (int(original[t][i]) for t, i in zip((s, d), p.train_pairs(one)))
            mine = {et: _named(original, et, ends[et][0][ids], ends[et][1][ids]) for et, ids in p.excluded(one).items()}
            theirs = whole.excluded(torch.tensor([whole_at[u, v]]))
            full = {et: _named(None, et, *whole.edge_index[et][:, ids]) for et, ids in theirs.items()}
            assert mine == full, (u, v, mine, full)
            twins += len(full[target]) - 1
    assert (twins > 0) == (typed == "same-type")  # the twins' path ran where there are twins
    assert cut_link(root, k, overrides=overrides)["already"]


@pytest.mark.parametrize("same_type", [False, True], ids=["homogeneous", "same-type"])
def test_a_link_batch_leaves_its_edges_out_on_whichever_machine_owns_them(graph, tmp_path, same_type):
    """Three gloo ranks, each holding one part of a link task: a batch of train edges sampled with
    its own edges, twins and mirrors left out (on the machines that own them) samples every other
    in-edge of its nodes (fanout -1) and none of those; with fanout 2, none of those either, and
    each node as many of the rest as it has, up to 2. On a homogeneous graph, and on a
    heterogeneous one whose target joins one type (twins, several relations hopped at once)."""
    from gnnbridge.core.app.partitioning import cut_link
    from gnnbridge.core.storage.linkparts import link_settings
    from gnnbridge.testing.workers import sample_link_parts_and_dump

    root = write_follows_graph(tmp_path / "follows") if same_type else _copy(graph, tmp_path)
    partition(root, 3, method="metis", progress=False)
    overrides = ["dataset.reverse_edges=true", "link.edge_type=follows"] if same_type else []
    cut_link(root, 3, overrides=overrides)
    config = _link_config(root, *overrides)
    parts = _link_parts(root, 3, config)
    launch_ranks(sample_link_parts_and_dump, 3, (str(root), 3, link_settings(config), str(tmp_path)), timeout_s=120)
    crossing = 0
    for rank in range(3):
        saved = torch.load(tmp_path / f"rank{rank}.pt")
        for et in parts[0].edge_types:
            _, dst = _global_edges(parts, et)
            banned = set(saved["excluded"].get(et, torch.zeros(0, dtype=torch.int64)).tolist())
            crossing += sum(parts[0].partition.relations[et].owners(dst[list(banned)]) != rank) if banned else 0
            ends = saved["seeds"].get(et[2], torch.zeros(0, dtype=torch.int64))
            into = set(torch.isin(dst, ends).nonzero().flatten().tolist())
            every, _ = saved[-1][et]
            assert set(every.tolist()) == into - banned and every.numel() == len(into - banned), et
            two, two_dst = saved[2][et]
            assert not set(two.tolist()) & banned and set(two.tolist()) <= into
            allowed = torch.tensor(sorted(into - banned), dtype=torch.int64)
            want = torch.bincount(dst[allowed], minlength=dst.max() + 1).clamp(max=2) if allowed.numel() else None
            got = torch.bincount(two_dst, minlength=dst.max() + 1)
            assert want is None or torch.equal(got, want), et
    assert crossing > 0  # some left-out edges lived on another machine


@pytest.fixture(scope="module")
def rec_link(tmp_path_factory):
    """The recommendation graph (users, items, categories) prepared, partitioned in two with its
    link task cut, and that task's test MRR trained whole on one machine (two ranks)."""
    import gnnbridge
    from gnnbridge.core.app.partitioning import cut_link
    from gnnbridge.plugins.folder_datasets import prepare

    root = tmp_path_factory.mktemp("rec") / "rec"
    prepare("rec-synthetic", out=root, progress=False)
    partition(root, 2, method="metis", progress=False)
    cut_link(root, 2, overrides=["dataset.reverse_edges=true"])
    overrides = [*JOB[1:6:2], *LINK_JOB[1::2]]  # (the link job's own settings last: they win)
    whole = gnnbridge.run(
        dataset=str(root), backend="pyg", nproc=2, overrides=overrides, out=str(root.parent / "whole"), progress=False
    )
    return root, whole["metrics"]


LINK_JOB = ["--set", "task=link", "--set", "dataset.reverse_edges=true", "--set", "train.batch_size=512"]


def _link_job(root: Path, tmp_path: Path, backend: str, env=None, launcher=("--nproc-per-node", "1")) -> list:
    """The rec graph's link task trained by two machines each holding its part; stderr lines."""
    codes, errors = machines(root, 2, tmp_path, backend, *LINK_JOB, env=env, launcher=launcher)
    assert codes == [0, 0], errors
    return errors


@pytest.fixture(scope="module")
def link_machines(rec_link, tmp_path_factory):
    """The link task trained by two machines on PyG, uninterrupted."""
    where = tmp_path_factory.mktemp("link_machines")
    _link_job(rec_link[0], where, "pyg")
    return where


def _check_link_job(where: Path, whole: dict) -> None:
    """Each machine held its part only; the job ranks as the whole graph does (within run-to-run
    noise), scoring the held-out edges layer-wise, each on its destination's machine."""
    for m in range(2):
        data = where / f"machine{m}" / "data" / "partitions" / "2"
        held = {p.parent.name for p in data.rglob("*.npy")}
        assert held == {f"part-{m}"}, held
    results = _results(where)
    metrics = results["metrics"]
    assert metrics["test_roc_auc"] > 0.6, metrics
    assert abs(metrics["test_mrr"] - whole["test_mrr"]) <= 0.05, (metrics, whole)
    assert results["eval"]["final"] == "layerwise" and results["history"][-1]["remote_rows"] > 0


@pytest.mark.slow
def test_two_machines_train_a_link_task_as_the_whole_graph_does_and_predict(rec_link, link_machines):
    """On PyG: the job trains to the whole graph's ranking, and predict as a job of the machines
    writes the whole graph's lists and states."""
    root, whole = rec_link
    _check_link_job(link_machines, whole)
    _check_machine_lists(root, link_machines)


@pytest.mark.slow
def test_two_machines_train_a_link_task_on_dgl_as_the_whole_graph_does(rec_link, tmp_path):
    root, whole = rec_link
    _link_job(root, tmp_path, "dgl")
    _check_link_job(tmp_path, whole)


@pytest.mark.slow
def test_a_link_job_whose_machine_dies_is_restarted_and_ends_as_if_uninterrupted(rec_link, link_machines, tmp_path):
    """A link task's batches (its edges, negatives and left-out neighbours, some on the other
    machine) are a function of the seed and the epoch: the job restarted from its last checkpoint
    by torchrun --max-restarts 1 ends with the uninterrupted job's losses and metrics."""
    _link_job(rec_link[0], tmp_path, "pyg", **_machine_dies(tmp_path))
    _check_as_uninterrupted(_results(tmp_path), _results(link_machines))


def _shared_run_folder(where: Path, k: int) -> None:
    """Machine 0's run folder seen by every machine (as on storage they all see)."""
    for m in range(1, k):
        out = where / f"machine{m}" / "out"
        if not out.is_symlink():
            shutil.rmtree(out, ignore_errors=True)
            out.symlink_to(where / "machine0" / "out")


@pytest.mark.slow
def test_the_shared_protocol_scored_on_the_machines_is_the_whole_graphs(rec_link, link_machines):
    """link.protocol=shared (ogbl-collab's: every held-out edge ranked against one list of
    negative pairs), cut into the parts with each pair on its destination's machine: the parts'
    pairs are the whole record's, and ``evaluate`` as a job of the machines gives the folder
    whole's metrics for the same checkpoint, layer-wise and sampled (all neighbours: the batches
    of pairs sampled and fetched across machines, two ranks a machine)."""
    import gnnbridge
    from gnnbridge.core.app.partitioning import cut_link
    from gnnbridge.core.app.preflight import task_record

    root, _ = rec_link
    shared = ["dataset.reverse_edges=true", "link.protocol=shared", "link.eval_negatives=400"]
    cut = Path(cut_link(root, 2, overrides=shared)["out"])
    config = _link_config(root, *shared)
    whole, parts = task_record(config), _link_parts(root, 2, config)
    s, _, d = whole.target_edge
    original = {t: torch.cat([torch.as_tensor(p.partition.types[t].node_ids) for p in parts]) for t in (s, d)}
    for split in ("val", "test"):
        have = []
        for m, p in enumerate(parts):
            pairs = p.negative_pairs(split)
            assert bool((p.partition.types[d].owners(pairs[1]) == m).all())  # on its destination's machine
            have += zip(original[s][pairs[0]].tolist(), original[d][pairs[1]].tolist())
        assert sorted(have) == sorted(zip(*whole.negative_pairs(split).tolist())), split
    summary, described = parts[0].summary(), whole.summary()  # what a run's plan compares on resuming
    assert {k: summary[k] for k in ("protocol", "eval_negatives", "val", "test")} == {
        k: described[k] for k in ("protocol", "eval_negatives", "val", "test")
    }
    for m in range(2):  # each machine is given its part of the cut (copied without times, as scp -r copies)
        held = link_machines / f"machine{m}" / "data" / "partitions" / "2" / cut.name
        held.mkdir()
        shutil.copy(cut / "link.json", held)
        shutil.copytree(cut / f"part-{m}", held / f"part-{m}", copy_function=shutil.copyfile)
    _shared_run_folder(link_machines, 2)
    run = link_machines / "machine0" / "out"
    expected = gnnbridge.evaluate(run, overrides=[f"dataset.path={root}", "dataset.partitions=0", *shared])["metrics"]
    assert "test_roc_auc" in expected and not any("mrr" in key for key in expected)  # the shared protocol's
    sampled = ["eval.mode=sampled", "sampler.fanouts=[-1,-1]"]
    for mode, ranks in (([], "1"), (sampled, "2")):  # sampled: two ranks a machine share its pairs
        command = ["evaluate", "out", "--set", "dataset.path=data", *(f"--set={o}" for o in (*shared, *mode)), "--json"]
        codes, outs = job(2, link_machines, command, launcher=("--nproc-per-node", ranks))
        assert codes == [0, 0], outs
        for _, err in outs:  # the node part and the link part read by content once a machine (by its first rank)
            assert len([line for line in err.splitlines() if line.startswith("Note: ")]) == 2, err
        metrics = json.loads(outs[0][0])["metrics"]
        assert metrics == pytest.approx(expected, abs=2e-3), (mode, metrics, expected)


def _check_machine_lists(root: Path, where: Path) -> None:
    """``predict`` as a job of the machines writes each machine's sources' top-k lists and its
    nodes' final states, which are the folder whole's for the same checkpoint; scores given
    pairs as the folder whole does; and searches an approximate index."""
    import gnnbridge

    _shared_run_folder(where, 2)
    command = ["predict", "out", "--out", "p.npz", "--top-k", "5", "--embeddings", "--set", "dataset.path=data"]
    codes, outs = job(2, where, command)
    assert codes == [0, 0], outs
    whole = gnnbridge.predict(
        where / "machine0" / "out", overrides=[f"dataset.path={root}", "dataset.partitions=0"], top_k=5, embeddings=True
    )
    sources = []
    for m in range(2):
        part = np.load(where / f"machine{m}" / f"p.part-{m}.npz")
        src = part["src"]
        sources += src.tolist()
        assert (part["counts"] == whole["counts"][src]).all() and (part["top_dst"] == whole["top_dst"][src]).all()
        np.testing.assert_allclose(part["top_scores"], whole["top_scores"][src], rtol=1e-5, atol=1e-5)
        for t in ("user", "item", "category"):
            ids = part[f"node_ids__{t}"]
            np.testing.assert_allclose(part[f"embedding__{t}"], whole[f"embedding__{t}"][ids], rtol=1e-4, atol=1e-4)
    assert sorted(sources) == list(range(whole["src"].shape[0]))
    _check_machine_pairs(root, where, whole["src"].shape[0], whole["embedding__item"].shape[0])
    _check_machine_index(root, where, whole["top_dst"])


def _check_machine_pairs(root: Path, where: Path, n_src: int, n_dst: int) -> None:
    """``predict --pairs`` as a job of the machines, two ranks each: every machine reads its own
    copy of the file (the dataset's ids), scores the pairs whose destination it owns and writes
    them with their places in the file; together they are the folder whole's scores. A machine
    whose copy holds other pairs is named in one line on every machine, and nothing is
    written."""
    import gnnbridge

    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, n_src, 300), rng.integers(0, n_dst, 300)
    for m in range(2):
        np.savez(where / f"machine{m}" / "pairs.npz", src=src, dst=dst if m == 0 else dst[::-1])
    command = ["predict", "out", "--out", "s.npz", "--pairs", "pairs.npz", "--set", "dataset.path=data"]
    codes, outs = job(2, where, command)
    for (_, err), code in zip(outs, codes):  # (torchrun's own report of the failed agent follows)
        first = [line for line in err.strip().splitlines() if not line.startswith("Note:")][
            0
        ]  # (parts copied as scp -r does)
        assert code != 0 and first.startswith("Error:") and "machine 1 read other pairs than machine 0" in first, err
    assert not list(where.glob("machine*/s.part-*"))
    np.savez(where / "machine1" / "pairs.npz", src=src, dst=dst)
    codes, outs = job(2, where, command, launcher=("--nproc-per-node", "2"))
    assert codes == [0, 0], outs
    expected = gnnbridge.predict(
        where / "machine0" / "out",
        overrides=[f"dataset.path={root}", "dataset.partitions=0"],
        pairs=where / "machine0" / "pairs.npz",
    )
    scores, places = np.full(300, np.nan, dtype=np.float32), []
    for m in range(2):
        part = np.load(where / f"machine{m}" / f"s.part-{m}.npz")
        index = part["index"]
        assert (part["src"] == src[index]).all() and (part["dst"] == dst[index]).all()
        scores[index], places = part["scores"], places + index.tolist()
    assert sorted(places) == list(range(300))  # every pair once, on one machine
    np.testing.assert_allclose(scores, expected["scores"], rtol=1e-4, atol=1e-4)


# Each process notes (a file in its working folder) that FAISS's index was searched.
SEARCH_NOTED = """
import pathlib
import gnnbridge.core.tasks.retrieval as retrieval

_search = retrieval.approximate_top_k

def approximate_top_k(*args, **kwargs):
    pathlib.Path("searched-hnsw").touch()
    return _search(*args, **kwargs)

retrieval.approximate_top_k = approximate_top_k
"""


def _check_machine_index(root: Path, where: Path, exact: np.ndarray) -> None:
    """``predict --index hnsw`` as a job of the machines: each machine searches FAISS's index of
    every destination's states for its sources, near the exact lists; with ``--pairs`` it is
    refused in one line, before any machine loads."""
    hook = where / "hnsw-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SEARCH_NOTED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    command = ["predict", "out", "--out", "h.npz", "--top-k", "5", "--index", "hnsw", "--set", "dataset.path=data"]
    codes, outs = job(2, where, command, env=env)
    assert codes == [0, 0], outs
    assert all((where / f"machine{m}" / "searched-hnsw").exists() for m in range(2))  # the index, not exact lists
    for m in range(2):
        part = np.load(where / f"machine{m}" / f"h.part-{m}.npz")
        found = [len(set(a) & set(b)) / 5 for a, b in zip(part["top_dst"], exact[part["src"]])]
        assert np.mean(found) > 0.9, np.mean(found)  # a few hundred items: near exact
    command = ["predict", "out", "--out", "q.npz", "--index", "hnsw", "--pairs", "pairs.npz"]
    done = gnnbridge_command(*command, cwd=where / "machine0", timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "this prediction has no top-k lists" in lines[0], lines
    assert not list((where / "machine0").glob("q*"))


def test_a_link_task_not_cut_or_cut_otherwise_is_refused_in_one_line(graph, tmp_path):
    """A machine asked for a link task nobody cut (another seed) is told the command that cuts it;
    one cut from another partitioning is refused; settings that build the same record are one
    task (a homogeneous graph's reverse edges, which its link task always adds). The command
    cuts a link task into a folder partitioned already, however that was made (its parts may be
    on the machines)."""
    from gnnbridge.core.storage.linkparts import link_settings, open_link_part

    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    command = ["partition", str(root), "--parts", "2", "--task", "link", "--set", "task=node"]
    done = gnnbridge_command(*command, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "already partitioned" in done.stdout and "link task on (node,to,node) cut into 2 parts" in done.stdout
    both = _link_config(root, "dataset.reverse_edges=true")
    assert open_link_part(open_partition(root, 2, 0), link_settings(both)).split("train").numel()
    config = _link_config(root, "train.seed=5")
    with pytest.raises(PartError, match=r"gnnbridge partition .* --parts 2 --task link .*--set train.seed=5"):
        open_link_part(open_partition(root, 2, 0), link_settings(config))
    cuts, partial = (list((root / "partitions" / "2").glob(pattern)) for pattern in ("link-*", ".link-*"))
    assert len(cuts) == 1 and not partial  # one cut, none of its working files
    cut = cuts[0]
    shutil.move(cut, tmp_path / cut.name)
    shutil.rmtree(root / "partitions" / "2")
    partition(root, 2, method="metis", progress=False)  # another partitioning, then the old cut back
    shutil.move(tmp_path / cut.name, cut)
    with pytest.raises(PartError, match="cut from another partitioning"):
        open_link_part(open_partition(root, 2, 0), link_settings(_link_config(root)))


def test_an_edited_link_part_is_refused_naming_the_machine_and_the_file(graph, tmp_path):
    """A link task's parts are checked as node parts are: a file changed since the cut (by its
    recorded time), an offset edited with its time put back (by its bounds), and an edited
    link.json (by the digest each link part recorded of it) are each one line naming the machine,
    the file and the fix."""
    from gnnbridge.core.app.partitioning import cut_link
    from gnnbridge.core.storage.linkparts import link_settings, open_link_part

    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    config = _link_config(root)
    cut = Path(cut_link(root, 2, config)["out"])
    settings = link_settings(config)
    assert open_link_part(open_partition(root, 2, 0), settings).partition.cut.file == str(cut / "link.json")
    indptr = cut / "part-0" / "indptr__node__to__node.npy"
    _edit(indptr, lambda a: a.__setitem__(3, 10**9))
    with pytest.raises(DataError) as err:
        open_link_part(open_partition(root, 2, 0), settings)
    assert str(err.value) == (
        f"{indptr}: the offsets of node 3 run backwards: the file is corrupt or was changed after gnnbridge "
        f"partition wrote it; copy {cut.name}/part-0 to machine 0 again from where the folder was partitioned "
        "(rsync -a keeps its times)"
    )
    _edit(indptr, lambda a: None, keep_time=False)
    with pytest.raises(PartError, match=rf"^machine 0: {re.escape(str(indptr))} changed since gnnbridge partition"):
        open_link_part(open_partition(root, 2, 0), settings)
    described = json.loads((cut / "link.json").read_text())
    (cut / "link.json").write_text(json.dumps({**described, "counts": {**described["counts"], "train": [1, 1]}}))
    with pytest.raises(PartError, match=r"^machine 0: .*link\.json is not the one part-0 was cut with"):
        open_link_part(open_partition(root, 2, 0), settings)


def test_a_link_part_copied_without_its_times_opens_checked_by_its_content(graph, tmp_path, monkeypatch):
    """A link task's part is copied as a node part is: with new times on every file it opens as
    cut (read, by the digests the cut recorded), a rank reopening it after its machine's first rank
    reads nothing, and one byte changed in its negatives (inside every bound) is refused naming
    the file."""
    import gnnbridge.core.storage.parts as parts
    from gnnbridge.core.app.partitioning import cut_link
    from gnnbridge.core.storage.linkparts import link_settings, open_link_part

    read, digest = [], parts.file_digest
    monkeypatch.setattr(parts, "file_digest", lambda file: read.append(file.name) or digest(file))
    root = _copy(graph, tmp_path)
    partition(root, 2, method="stream", progress=False)
    config = _link_config(root)
    cut, settings = Path(cut_link(root, 2, config)["out"]), link_settings(config)
    written = open_link_part(open_partition(root, 2, 0), settings)
    for file in (cut / "part-0").glob("*.npy"):
        os.utime(file, ns=(10**18, 10**18))
    read.clear()
    copied = open_link_part(open_partition(root, 2, 0, values=False), settings)
    assert read == []  # the reopening rank's: the machine's first rank read the part
    copied = open_link_part(open_partition(root, 2, 0), settings)
    assert sorted(read) == sorted(f.name for f in (cut / "part-0").glob("*.npy"))
    for key in ("val_edges", "test_edges", "val_negatives", "test_negatives", "reverse_eid", "twin_eid"):
        assert torch.equal(getattr(copied, key), getattr(written, key)), key
    et = written.target_edge
    assert torch.equal(copied.indptr[et], written.indptr[et]) and torch.equal(
        copied.edge_index[et], written.edge_index[et]
    )
    file = cut / "part-0" / "val_negatives.npy"
    _flip_last_byte(file)
    with pytest.raises(PartError) as err:
        open_link_part(open_partition(root, 2, 0), settings)
    assert str(err.value) == (
        f"machine 0: {file} changed since gnnbridge partition wrote it (its content is not the one it recorded); "
        f"copy {cut.name}/part-0 to machine 0 again from where the folder was partitioned (rsync -a keeps its times)."
    )


@pytest.mark.slow
def test_a_machine_holding_no_node_of_the_labelled_type_still_joins_every_exchange(tmp_path):
    """Four machines of a graph whose labelled type has three nodes (one per split), streamed so
    that one machine holds none of them: its dry step, training batches, layer-wise tables and
    predict rows are empty, and it still joins every exchange, so the job trains, evaluates and
    predicts."""
    rng = np.random.default_rng(5)
    users, items = 40, 24
    buys = np.stack([rng.integers(0, users, 160), rng.integers(0, items, 160)]).astype(np.int64)
    arrays = {
        "num_nodes__user": np.array([users], dtype=np.int64),
        "x__item": rng.normal(size=(items, 4)).astype(np.float32),
        "x__cat": rng.normal(size=(3, 2)).astype(np.float32),
        "y__cat": np.array([0, 1, 0], dtype=np.int64),
        **{f"{s}_idx__cat": np.array([i], dtype=np.int64) for i, s in enumerate(("train", "val", "test"))},
        "edge_index__user__buys__item": buys,
        "edge_index__item__in__cat": np.stack([np.arange(items), np.arange(items) % 3]).astype(np.int64),
    }
    root = tmp_path / "g"
    root.mkdir()
    for key, value in arrays.items():
        np.save(root / f"{key}.npy", value)
    prepare_folder(root, progress=False)
    result = partition(root, 4, method="stream", progress=False)
    empty = [m for m, p in enumerate(result["per_part"]) if p["types"]["cat"] == 0]
    assert empty, result["per_part"]  # the case this test is about
    where = tmp_path / "job"
    codes, errors = machines(root, 4, where, "pyg", "--set", "dataset.reverse_edges=true", "--set", "train.epochs=2")
    assert codes == [0, 0, 0, 0], errors
    results = _results(where)
    assert results["world_size"] == 4 and results["eval"]["final"] == "layerwise"
    assert set(results["metrics"]) >= {"val_acc", "test_acc"}
    for m in range(1, 4):  # the run folder, on storage every machine sees
        out = where / f"machine{m}" / "out"
        shutil.rmtree(out, ignore_errors=True)
        out.symlink_to(where / "machine0" / "out")
    codes, outs = job(4, where, ["predict", "out", "--out", "p.npz", "--set", "dataset.path=data"])
    assert codes == [0, 0, 0, 0], outs
    rows = [np.load(where / f"machine{m}" / f"p.part-{m}.npz")["node_ids"] for m in range(4)]
    assert sorted(np.concatenate(rows).tolist()) == [0, 1, 2] and all(not rows[m].size for m in empty)
