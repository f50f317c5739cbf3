"""One machine's part of a partitioned graph (``gnnbridge partition``), memory-mapped.

A part is a :class:`GraphData` of the machine's own nodes: ``x``, ``y`` and the splits hold
its nodes only (splits as *local* ids, ``0 .. n_M - 1``, so ``y[seeds]`` reads a batch's labels
as for any graph), while ``indptr`` / ``indices`` are the CSC of its nodes' in-edges whose
sources are *global* ids (any machine's nodes). Its ``partition`` (:class:`Partition`) says
which ids each machine owns; the partitioned sampler
(:mod:`gnnbridge.core.sampling.distributed`) turns local seeds into global ones, samples the
hops of other machines' nodes on their owners and fetches their rows from there.

The machine opens ``DIR/partitions/K/partition.json`` (a few hundred bytes) and
``DIR/partitions/K/part-M/``, nothing else: its copy of the dataset may hold only those.

What is checked when a part opens (:func:`open_partition`, on every machine), and why it is
enough. A part is a copy made for one machine, so it is untrusted as a prepared folder is:

* ``part.json`` names its partitioning (``id``), its place in it (``part``), the digest of the
  ``partition.json`` it was cut with and the stamp of the prepared folder it was cut from; a
  part of another partitioning, another machine's part, and an edited or swapped
  ``partition.json`` (its boundaries, counts or seed) are refused by those;
* every file of the part is refused if its size is not what ``partition`` recorded, and its
  dtype and shape by its ``.npy`` header. Its modification time is the fast path: where it is
  the recorded one, nothing is read (a stat a file). A part is *meant* to be copied, and a copy
  that does not keep times (``scp -r``, ``cp -r``, ``scp -p``'s whole seconds, a tar without
  them, a file system of coarser times) gives every file a new one: such a file is read and
  accepted when its content digest is the one ``partition`` recorded as it wrote it
  (:func:`file_digest`), refused naming it when not. That read is the whole part, by the
  machine's first rank (its other ranks reopen the part by its sizes), at every open of such a
  copy (nothing is written into the user's part to remember it): said once per process on
  stderr, with the copy that keeps times (``rsync -a``). ``partition`` reads each file back once
  to digest it, right after writing it;
* the part's own ranges in ``part.json`` must be ``partition.json``'s boundaries for it, and
  every array as long as those ranges say;
* the values a part is indexed by are read once, node-sized: each CSC's offsets run from 0 to
  its edge count without going backwards, the original ids rise and stay inside the graph, the
  split members rise inside the part's range. The edges (``indices``, the large files) are not
  read at open: the core sampler's kernels check every source id as they read it, naming the
  file. A file edited in place with its time put back is caught there or by these bounds;
* where the machine also holds the prepared folder (``prepared/manifest.json``), the folder
  must be the one the parts were cut from, unchanged since: labels changed and the folder
  prepared again leave parts that no longer describe it.

What one machine cannot see (another machine's copy of another partitioning, each whole on
its own) the job compares once its parts are open: every machine's partitioning's ``id`` and
digest (:func:`identity`, gathered by :func:`~gnnbridge.core.runtime.sharing.machine_shared`).
A refusal is one line naming the machine and the file; a machine that refuses while loading
ends the job on every machine (the watchdog posts its failure).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import torch

from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.host import format_bytes
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.hetero import (
    REVERSE_PREFIX,
    EdgeType,
    HeteroGraphData,
    HeteroSource,
    edge_name,
)
from gnnbridge.core.records.reading import Reading, as_reading
from gnnbridge.core.storage.folder import (
    CHECK_STEP,
    MANIFEST,
    SPLITS,
    TopologyError,
    Written,
    advise_uncacheable,
    changed_input,
    check_offsets,
    folder_labels,
    mapped,
    read_manifest,
    stat_input,
)
from gnnbridge.core.storage.formats import missing_arrays

FORMAT = 2  # of partition.json and part.json (2: parts record partition.json's digest, their source, file digests)
PARTITIONS = "partitions"
PARTITION_FILE = "partition.json"
PART_FILE = "part.json"
DIGEST = "sha256"  # the key of a part file's content digest in part.json (and the hashlib algorithm)
DIGEST_STEP = 1 << 20  # bytes a digest reads at a time


# (this machine's node rank, the job's machines): set around a job's dataset load (on_machine)
_MACHINE: ContextVar[tuple[int, int]] = ContextVar("gnnbridge_machine", default=(0, 1))


class PartError(DataError):
    """A part that is not this machine's, or not of this partitioning."""


@contextlib.contextmanager
def on_machine(machine: int, machines: int) -> Iterator[None]:
    """Loads inside the block are this machine's (``machine`` of ``machines``): a partitioned
    folder opens part ``machine``."""
    token = _MACHINE.set((machine, machines))
    try:
        yield
    finally:
        _MACHINE.reset(token)


def open_machine_part(
    root: str | Path, parts: int, seed: int | None = None, reading: Reading | str | None = None
) -> GraphData | HeteroSource:
    """This machine's part of ``root`` partitioned into ``parts``: refused in one line unless the
    job has ``parts`` machines, and, where the partitioning drew the splits (the folder has no
    split files), unless the run's ``seed`` is the one it drew them with: a run of the folder
    whole draws them from its seed, and the two would not train and score the same nodes. It is
    read as ``reading`` says (or its form alone; None: classes)."""
    drawn = read_partition(root, parts).get("splits_seed")
    if drawn is not None and seed is not None and seed != drawn:
        raise ConfigError(
            f"{partition_folder_of(root, parts)} drew its splits with seed {drawn} (the folder has no split "
            f"files), but this run's train.seed is {seed}: train with --set train.seed={drawn}, or save "
            "train_idx.npy, val_idx.npy and test_idx.npy in the folder and prepare and partition it again."
        )
    machine, machines = _MACHINE.get()
    if machines != parts:
        raise ConfigError(
            f"dataset.partitions={parts}: each of a job's {parts} machines trains its own part, but this job runs "
            f"on {machines} machine{'s' if machines > 1 else ''}; start {parts} (torchrun --nnodes {parts}, or srun "
            f"over {parts} nodes), or train the whole folder (dataset.partitions=0)."
        )
    return open_partition(root, parts, machine, reading)


def partition_folder_of(root: str | Path, parts: int) -> Path:
    return Path(root) / PARTITIONS / str(parts)


def part_folder(partition: Path, part: int) -> Path:
    return partition / f"part-{part}"


@dataclass(frozen=True)
class Cut:
    """The cut a machine's part belongs to, as its opener checked it: the cut's ``id``, the
    ``digest`` of its description (``partition.json``; with ``link.json`` for a link task's part)
    and that description's ``file`` on this machine. Every machine of a job must hold the same
    ``id`` and ``digest`` (:func:`disagreement`)."""

    id: str
    digest: str
    file: str


@dataclass
class Partition:
    """Who owns which node: machine ``m`` owns global ids ``[bounds[m], bounds[m + 1])`` and
    edges ``[edge_bounds[m], edge_bounds[m + 1])``; this machine is ``part``.

    ``split_counts[split][m]``: machine ``m``'s members of a split, from which every machine
    computes the same number of batches without asking the others. ``node_ids``: the original
    id of each of this machine's nodes (what ``predict`` writes)."""

    id: str
    parts: int
    part: int
    bounds: list[int]
    edge_bounds: list[int]
    split_counts: dict[str, list[int]]
    node_ids: torch.Tensor
    _edges: torch.Tensor | None = None  # the boundaries between machines, as owners reads them
    cut: Cut | None = None  # what this machine's part was checked against (every machine's must agree)
    reopened: bool = False  # opened by a rank after its machine's first rank read and checked the part

    @property
    def start(self) -> int:
        return self.bounds[self.part]

    @property
    def num_nodes(self) -> int:
        """Nodes of the whole graph."""
        return self.bounds[-1]

    @property
    def sizes(self) -> list[int]:
        """Nodes of each machine."""
        return [b - a for a, b in zip(self.bounds, self.bounds[1:])]

    def owners(self, ids: torch.Tensor) -> torch.Tensor:
        """The machine owning each global id."""
        if self._edges is None or self._edges.device != ids.device:  # made once: owners runs every hop
            self._edges = torch.tensor(self.bounds[1:-1], dtype=torch.int64, device=ids.device)
        return torch.bucketize(ids, self._edges, right=True)


class PartGraph(GraphData):
    """A machine's part (see the module), which describes itself as the whole graph: a run
    resumed on another partitioning of the same graph (or on the graph whole) trains on the
    same data."""

    partition: Partition

    def summary(self) -> dict:
        part = self.partition
        return {
            "name": self.name,
            "num_nodes": part.num_nodes,
            "num_edges": part.edge_bounds[-1],
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            **{split: sum(counts) for split, counts in part.split_counts.items()},
        }


@dataclass
class TypedPartition:
    """Who owns which node of a heterogeneous graph: each node type is cut as a homogeneous
    graph is (``types``: a :class:`Partition` of the type's ids), and each relation's edges are
    numbered part after part (``relations``: its destination type's ranges with the relation's
    edge ranges, what a hop along it asks and fetches by). The node task's questions (split
    counts, sizes, the original ids ``predict`` writes) are the labelled type's (``target``); a
    link task's split counts are its edges' (``counts``)."""

    id: str
    parts: int
    part: int
    types: dict[str, Partition]
    relations: dict[EdgeType, Partition]
    target: str
    counts: dict[str, list[int]] | None = None  # a link task's edges per split and machine
    cut: Cut | None = None  # what this machine's part was checked against (every machine's must agree)
    reopened: bool = False  # opened by a rank after its machine's first rank read and checked the part

    @property
    def split_counts(self) -> dict[str, list[int]]:
        return self.counts if self.counts is not None else self.types[self.target].split_counts

    @property
    def sizes(self) -> list[int]:
        return self.types[self.target].sizes

    @property
    def node_ids(self) -> torch.Tensor:
        return self.types[self.target].node_ids

    @property
    def start(self) -> int:
        return self.types[self.target].start

    @property
    def num_nodes(self) -> int:
        """Nodes of the labelled type in the whole graph."""
        return self.types[self.target].num_nodes


class PartHeteroGraph(HeteroGraphData):
    """A machine's part of a heterogeneous graph: per node type its own nodes' rows (``x``,
    ``y`` and splits local, as :class:`PartGraph`'s), per relation the CSC of its own nodes'
    in-edges; ``num_nodes`` counts every machine's nodes (ids are global), and
    ``edge_index[et]`` holds the sources only (``[1, E]``, global ids): no library graph is
    built of a part, its sampler reads the sources alone. It describes itself as the whole
    graph, as :class:`PartGraph` does."""

    partition: TypedPartition

    def summary(self) -> dict:
        return typed_part_summary(self, target_node=self.target_node)


def typed_part_summary(record: HeteroGraphData, **task) -> dict:
    """A heterogeneous part's summary as the whole graph's (every machine's edges and split
    members), with its task's own entries (``task``)."""
    part = record.partition
    edges = {et: part.relations[et].edge_bounds[-1] for et in record.edge_index}
    return {
        "name": record.name,
        "heterogeneous": True,
        "num_nodes": record.total_nodes,
        "num_edges": sum(edges.values()),
        "node_types": dict(record.num_nodes),
        "edge_types": {edge_name(et): count for et, count in edges.items()},
        "num_features": record.feature_dims(),
        "num_classes": record.num_classes,
        **task,
        **{split: sum(counts) for split, counts in part.split_counts.items()},
    }


class PartHeteroSource(HeteroSource):
    """A machine's part of a heterogeneous folder before the node task is chosen (which relations
    pass messages: ``dataset.reverse_edges``); its task record is a :class:`PartHeteroGraph`."""

    partition: TypedPartition

    def task_record(self, **values) -> HeteroGraphData:
        record = PartHeteroGraph.unchecked(**values)
        record.partition = self.partition
        return record

    def summary(self) -> dict:
        return {
            "name": self.name,
            "heterogeneous": True,
            "node_types": dict(self.num_nodes),
            "edge_types": {edge_name(et): self.partition.relations[et].edge_bounds[-1] for et in self.edges},
        }


def read_partition(root: str | Path, parts: int) -> dict:
    """``partition.json`` of ``root``'s partitioning into ``parts``, refused in one line if absent."""
    file = partition_folder_of(root, parts) / PARTITION_FILE
    missing = (
        f"{file} not found; run gnnbridge partition {root} --parts {parts} (each machine's copy needs "
        f"{PARTITIONS}/{parts}/{PARTITION_FILE} and its own part-M/)."
    )
    return _read_json(file, DataError, missing, "copy it again")


def _read_json(file: Path, error: type[DataError], missing: str, again: str) -> dict:
    """``file``'s JSON; ``error(missing)`` where it is absent, one line saying to copy it ``again``
    where it cannot be read."""
    try:
        return json.loads(file.read_text())
    except FileNotFoundError:
        raise error(missing) from None
    except (OSError, ValueError) as exc:
        raise error(f"{file} cannot be read ({str(exc)[:100]}); {again}.") from None


def open_partition(
    root: str | Path, parts: int, machine: int, reading: Reading | str | None = None, values: bool = True
) -> GraphData | HeteroSource:
    """Machine ``machine``'s part of ``root`` partitioned into ``parts``, its arrays mapped and
    checked (see the module). ``values``: read the node-sized arrays' bounds, and the content of
    files whose times are not the recorded ones, too; a rank reopening a part its machine's first
    rank has just checked skips those reads (the stat checks stay)."""
    return _open(Path(root), parts, machine, as_reading(reading), values)


def _open(root: Path, parts: int, machine: int, reading: Reading, values: bool = True) -> GraphData | HeteroSource:
    description = read_partition(root, parts)
    out = partition_folder_of(root, parts)
    if description.get("format") != FORMAT:
        raise PartError(
            f"machine {machine}: {out / PARTITION_FILE} was written by another version of gnnbridge (format "
            f"{description.get('format')}, not {FORMAT}), whose parts cannot be checked; run gnnbridge partition "
            f"{root} --parts {parts} again where the folder was partitioned, and give each machine its new part."
        )
    _check_source(root, parts, description, machine)
    folder = part_folder(out, machine)
    part = _read_part(folder, description, machine, out / PARTITION_FILE, values)
    written = part_written(folder, machine)
    arrays = {key: mapped(folder, spec, written) for key, spec in part["arrays"].items()}
    _check_layout(folder, part, description, arrays, machine, values)
    advise_uncacheable(arrays.values(), sum(a.nbytes for a in arrays.values()))
    if description.get("kind") == "hetero":
        record = _hetero_part(root, description, part, arrays, machine, reading.form)
    else:
        record = _node_part(root, description, part, arrays, machine, reading)
    record.partition.cut = Cut(description["id"], part["description"], str(out / PARTITION_FILE))
    record.partition.reopened = not values
    record.folder = root
    record.mapped_from = (open_partition, (str(root), parts, machine, reading, False))
    return record


def description_digest(description: dict) -> str:
    """What a part records of the ``partition.json`` (or ``link.json``) it was cut with: the
    digest of its content in a canonical form, so an edited or swapped copy is refused however
    it was copied (its time need not be kept)."""
    return hashlib.sha256(json.dumps(description, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def source_stamp(root: Path, kind: str) -> dict:
    """What identifies the prepared folder a partitioning was cut from: its manifest's size and
    time (``prepare`` rewrites it last), and its kind."""
    return stat_input(root / MANIFEST) | {"kind": kind}


def part_written(folder: Path, machine: int) -> Written:
    """Who wrote a part's files and what gives the machine them again (the lines refusing them)."""
    name = folder.name if folder.parent.name.isdigit() else f"{folder.parent.name}/{folder.name}"  # a link cut's
    return Written(
        "gnnbridge partition",
        f"copy {name} to machine {machine} again from where the folder was partitioned (rsync -a keeps its times)",
    )


def _check_source(root: Path, parts: int, description: dict, machine: int) -> None:
    """Where this machine also holds the prepared folder, the partitioning must have been cut from
    it as it is now: prepared again since (its manifest's stamp moved), or its inputs changed since
    prepare, the parts describe another graph. A machine holding only its part has nothing to
    compare (the machines holding the folder do)."""
    if not (root / MANIFEST).is_file():
        return
    again = f"gnnbridge partition {root} --parts {parts} again, and give each machine its new part"
    if source_stamp(root, description.get("kind")) != description.get("source"):
        raise PartError(
            f"machine {machine}: {partition_folder_of(root, parts)} was cut from an earlier prepare of {root} "
            f"({root / MANIFEST} changed since); run {again}."
        )
    changed = changed_input(root, read_manifest(root))
    if changed:
        raise PartError(f"machine {machine}: {changed}, then {again}.")


def _split_counts(description: dict) -> dict[str, list[int]]:
    """Every machine's members of each split (of the labelled type)."""
    return {
        key.replace("_idx", ""): [int(p[key.replace("_idx", "")]) for p in description["per_part"]] for key in SPLITS
    }


def _node_part(root: Path, description: dict, part: dict, arrays: dict, machine: int, reading: Reading) -> PartGraph:
    start, form = int(part["start"]), reading.form
    labelled = "y" in arrays  # (a graph without labels is partitioned for link tasks)
    if not labelled and reading.node_labels_needed:  # refused as the whole folder refuses it
        raise missing_arrays(root, ["y"], reading)
    record = PartGraph.unchecked(
        indptr=arrays["indptr"],
        indices=arrays["indices"],
        x=arrays["x"],
        y=folder_labels(arrays["y"], description["summary"], root.name, form) if labelled else None,
        **{key: arrays[key] - start for key in SPLITS if labelled},
        num_classes=int(description["summary"]["num_classes"]),
        name=root.name,
        edge_attr=arrays.get("edge_attr"),  # in the part's CSC order: its owner sends a sampled edge's row
        labels=form,
    )
    record.partition = Partition(
        id=description["id"],
        parts=int(description["parts"]),
        part=machine,
        bounds=[int(b) for b in description["boundaries"]],
        edge_bounds=[int(b) for b in description["edge_boundaries"]],
        split_counts=_split_counts(description),
        node_ids=arrays["node_ids"],
    )
    return record


def _hetero_part(root: Path, description: dict, part: dict, arrays: dict, machine: int, form: str) -> PartHeteroSource:
    """The part as a :class:`PartHeteroSource` whose topology is every relation the folder
    holds (``rev_`` types included): the node task picks its relations from it."""
    target = description["target"]
    bounds = {t: [int(b) for b in b_] for t, b_ in description["boundaries"].items()}
    types = {
        t: Partition(description["id"], int(description["parts"]), machine, b, [], {}, arrays[f"node_ids__{t}"])
        for t, b in bounds.items()
    }
    if target is not None:  # (a graph without node labels is partitioned for link tasks)
        types[target].split_counts = _split_counts(description)
    relations, topology, edge_attr = {}, {}, {}
    for key, edge_bounds in description["edge_boundaries"].items():
        et = tuple(key.split("__"))
        relations[et] = Partition(
            description["id"], int(description["parts"]), machine, bounds[et[2]], [int(b) for b in edge_bounds], {},
            arrays[f"node_ids__{et[2]}"],
        )  # fmt: skip
        topology[et] = (arrays[f"indptr__{key}"], arrays[f"indices__{key}"].view(1, -1))
        if f"edge_attr__{key}" in arrays:
            edge_attr[et] = arrays[f"edge_attr__{key}"]
    start = bounds[target][machine] if target is not None else 0
    plain = [et for et in topology if not et[1].startswith(REVERSE_PREFIX)]
    source = PartHeteroSource(
        {t: b[-1] for t, b in bounds.items()},
        {t: arrays[f"x__{t}"] for t in bounds if f"x__{t}" in arrays},
        {et: topology[et][1] for et in plain},
        target_node=target,
        y=folder_labels(arrays[f"y__{target}"], description["summary"], root.name, form)
        if target is not None
        else None,
        splits=tuple(arrays[f"{key}__{target}"] - start for key in SPLITS) if target is not None else None,
        name=root.name,
        topology=topology,
        topology_edge_attr=edge_attr,
        num_classes=int(description["summary"]["num_classes"]),
    )
    source.partition = TypedPartition(description["id"], int(description["parts"]), machine, types, relations, target)
    return source


def _read_part(folder: Path, description: dict, machine: int, described: Path, content: bool = True) -> dict:
    """``part.json`` of ``folder``, refused in one line unless it is part ``machine`` of the cut
    that ``description`` (the file ``described``) describes, cut with that very description (its
    digest), and its files are as written (:func:`_check_files`; ``content``: read those whose
    times differ)."""
    again = part_written(folder, machine).fix
    missing = f"{folder} is missing: machine {machine} opens part-{machine}; {again}."
    part = _read_json(folder / PART_FILE, PartError, missing, again)
    if part.get("id") != description["id"]:
        raise PartError(
            f"machine {machine}: {folder} is a part of another partitioning (id {str(part.get('id'))[:8]}, not "
            f"{description['id'][:8]} as {described} says); give the machine {described.name} and its "
            f"part-{machine} of one partitioning: {again}."
        )
    if part.get("part") != machine:
        raise PartError(
            f"machine {machine}: {folder} holds part {part.get('part')}, but this machine (node rank {machine}) "
            f"trains part {machine}; give each machine its own part (node rank M opens part-M): {again}."
        )
    if part.get("description") != description_digest(description):
        raise PartError(
            f"machine {machine}: {described} is not the one {folder.name} was cut with (it was edited, or copied "
            f"from another cut); copy {described.name} and {folder.name} to machine {machine} again from where "
            "the folder was partitioned."
        )
    _check_files(folder, part["arrays"].values(), machine, content)
    return part


def file_digest(file: Path) -> str:
    """The sha256 of ``file``'s bytes, read a MiB at a time (memory: that buffer, whatever the
    file's size). What ``partition`` records of each part file as it writes it (:func:`written_file`)
    and what a copy of a part with other modification times is checked by at open.

    Its cost is the file's size over the slower of the disk and the hash: hashlib's sha256
    (OpenSSL, SHA-NI where the CPU has it) ran at 530-650 MB/s on one core of the two-core
    development machine, shared with other work (sha1 was no faster, blake2b half as fast). A
    100 GB part is read in about 3 minutes there: once by ``partition`` right after writing it
    (mostly from the page cache), and at every open of a copy that did not keep its times."""
    digest, buffer = hashlib.new(DIGEST), bytearray(DIGEST_STEP)
    view = memoryview(buffer)
    with open(file, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def written_file(file: Path) -> dict:
    """What a part records of each of its files as ``partition`` writes it: its size and
    modification time (the stat an open checks first) and its content digest (what a copy with
    other times is checked by)."""
    return stat_input(file) | {DIGEST: file_digest(file)}


def _check_files(folder: Path, specs, machine: int, content: bool) -> None:
    """Each file of a part (``specs``: part.json's arrays) as ``partition`` wrote it, or one line
    naming the machine, the file and the fix: a file gone or of another size is refused at once;
    one whose modification time is the recorded one is taken as written (nothing read); one whose
    time differs (a copy that did not keep times) is read and taken when its digest is the
    recorded one (``content``: False on a rank reopening a part its machine's first rank has just
    read, which takes it by its size). Nothing is written into the part."""
    again, moved = part_written(folder, machine).fix, []
    for spec in specs:
        file = folder / spec["file"]
        try:
            now = stat_input(file)
        except OSError:
            raise PartError(f"machine {machine}: {file} is missing; {again}.") from None
        if now["size"] != spec.get("size"):
            raise PartError(
                f"machine {machine}: {file} holds {now['size']} bytes where gnnbridge partition wrote "
                f"{spec.get('size')} (a copy cut short, or another file); {again}."
            )
        if now["mtime_ns"] != spec.get("mtime_ns"):
            moved.append((file, spec))
    if not content or not moved:
        return
    began = time.perf_counter()
    for file, spec in moved:
        try:
            same = file_digest(file) == spec.get(DIGEST)
        except OSError as exc:
            raise PartError(f"machine {machine}: {file} cannot be read ({exc.strerror}); {again}.") from None
        if not same:
            raise PartError(
                f"machine {machine}: {file} changed since gnnbridge partition wrote it (its content is not the "
                f"one it recorded); {again}."
            )
    _note_read(folder, machine, [int(spec["size"]) for _, spec in moved], time.perf_counter() - began)


_NOTED: set[str] = set()  # the parts whose read of a copy without times this process has said


def _note_read(folder: Path, machine: int, sizes: list[int], seconds: float) -> None:
    """Say once per process and part that its files were read because the copy lost their times,
    that every open of the copy repeats it, and which copy keeps times."""
    if str(folder) in _NOTED:
        return
    _NOTED.add(str(folder))
    print(
        f"Note: machine {machine}: {len(sizes)} files of {folder} do not have the modification times gnnbridge "
        f"partition gave them (copied without them), so their content was read and checked ({format_bytes(sum(sizes))} "
        f"in {seconds:.1f} s); every open of this copy reads them again: copy the part with rsync -a (it keeps times) "
        "to skip this.",
        file=sys.stderr,
        flush=True,
    )


def _check_layout(folder: Path, part: dict, description: dict, arrays: dict, machine: int, values: bool) -> None:
    """The part's ranges in ``part.json`` are ``partition.json``'s boundaries for it, every array is
    as long as they say, and (``values``) the node-sized arrays hold what a part holds: offsets
    from 0 to the edge count, original ids rising inside the graph, split members rising inside
    the part's range (see the module: the edges are checked where they are read)."""
    where, again = f"machine {machine}: {folder / PART_FILE}", part_written(folder, machine).fix
    typed = description.get("kind") == "hetero"
    bounds = description["boundaries"] if typed else {"": description["boundaries"]}
    edge_bounds = description["edge_boundaries"] if typed else {"": description["edge_boundaries"]}
    for what, given, first in (("nodes", bounds, "start"), ("edges", edge_bounds, "edge_start")):
        last = first.replace("start", "stop")
        for name, b in given.items():
            says = [_own(part, first, name, typed), _own(part, last, name, typed)]
            if says != [int(b[machine]), int(b[machine + 1])]:
                raise PartError(
                    f"{where} says its {what}{f' of {name}' if name else ''} are [{says[0]}, {says[1]}) but "
                    f"{PARTITION_FILE} gives them [{b[machine]}, {b[machine + 1]}); {again}."
                )
    for t, b in bounds.items():
        sfx = f"__{t}" if t else ""
        lo, hi = int(b[machine]), int(b[machine + 1])
        _rows(arrays, [f"node_ids{sfx}", f"x{sfx}", f"y{sfx}"], hi - lo, where)
        if values:
            _rising(arrays[f"node_ids{sfx}"], 0, int(b[-1]), "original id")
        for key, count in _split_counts(description).items() if f"y{sfx}" in arrays else ():
            members = arrays[f"{key}_idx{sfx}"]
            _rows(arrays, [f"{key}_idx{sfx}"], count[machine], where)
            if values:
                _rising(members, lo, hi, f"{key} member")
    for key, b in edge_bounds.items():
        sfx = f"__{key}" if key else ""
        dst = key.split("__")[2] if key else ""
        edges = int(b[machine + 1]) - int(b[machine])
        _rows(arrays, [f"indptr{sfx}"], int(bounds[dst][machine + 1]) - int(bounds[dst][machine]) + 1, where)
        _rows(arrays, [f"indices{sfx}", f"edge_attr{sfx}"], edges, where)
        if values:
            check_offsets(arrays[f"indptr{sfx}"], edges)


def _own(part: dict, key: str, name: str, typed: bool) -> int | None:
    """``part.json``'s own ``key`` (``start``, ``stop``, ``edge_start``, ``edge_stop``) of node type
    or relation ``name`` (per name in a heterogeneous part's ``starts`` ...)."""
    return (part.get(f"{key}s") or {}).get(name) if typed else part.get(key)


def _rows(arrays: dict, keys: list[str], count: int, where: str) -> None:
    """Each of ``keys`` the part holds has ``count`` rows, refused in one line naming it."""
    for key in keys:
        if key in arrays and int(arrays[key].shape[0]) != count:
            raise PartError(f"{where} lists {key} of {int(arrays[key].shape[0])} rows where its range holds {count}.")


def _rising(ids: torch.Tensor, low: int, high: int, what: str) -> None:
    """``ids`` strictly rising inside ``[low, high)``, a block at a time (one pass), or the one
    line naming their file (:class:`~.folder.TopologyError`)."""
    for start in range(0, ids.shape[0], CHECK_STEP):
        block = ids[start : start + CHECK_STEP + 1]
        first, last = int(block.min()), int(block.max())
        if first < low or last >= high:
            bad = first if first < low else last
            at = start + int((block == bad).nonzero()[0])
            raise TopologyError(f"{what} {bad} at row {at} lies outside [{low}, {high})", ids)
        if block.numel() > 1 and bool((block.diff() <= 0).any()):
            at = start + int((block.diff() <= 0).nonzero()[0]) + 1
            raise TopologyError(f"the {what}s stop rising at row {at} (a part keeps them in order)", ids)


def identity(record) -> Cut | None:
    """What every machine of a job must share of its record: for a machine's part, the cut it
    belongs to (:class:`Cut`); None for a record that is not a part."""
    part = record.partition
    return None if part is None else part.cut


def disagreement(everyone: list[tuple[int, Cut | None]]) -> str | None:
    """The line refusing a job whose machines (``(node rank, identity)`` of every rank) do not all
    hold parts of one partitioning, naming the first machine that differs from machine 0 and
    its file; None when they agree. Each machine checked its own part against its own
    ``partition.json``: two machines given two partitionings of one folder (each whole) would
    otherwise train on nodes held twice and nodes held nowhere."""
    first = everyone[0][1]
    for machine, mine in everyone:
        if mine is None and first is None:
            continue
        if mine is None or first is None:
            whole, part = (everyone[0][0], machine) if first is None else (machine, everyone[0][0])
            return (
                f"machine {part} opened its part of a partitioned folder but machine {whole} opened its dataset "
                "whole; give every machine the same dataset.partitions."
            )
        if (mine.id, mine.digest) != (first.id, first.digest):
            return (
                f"machine {machine}: {mine.file} is of another cut (id {mine.id[:8]}) than machine "
                f"{everyone[0][0]}'s {first.file} (id {first.id[:8]}); give every machine {Path(first.file).name} and "
                "its own part-M of one cut, copied from where the folder was partitioned."
            )
    return None
