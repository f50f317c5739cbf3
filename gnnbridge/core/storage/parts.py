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
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import torch

from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.hetero import (
    REVERSE_PREFIX,
    EdgeType,
    HeteroGraphData,
    HeteroSource,
    edge_name,
)
from gnnbridge.core.records.labels import current_form, label_form
from gnnbridge.core.storage.folder import SPLITS, advise_uncacheable, folder_labels, mapped, stat_input

PARTITIONS = "partitions"
PARTITION_FILE = "partition.json"
PART_FILE = "part.json"


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


def open_machine_part(root: str | Path, parts: int, seed: int | None = None) -> GraphData | HeteroSource:
    """This machine's part of ``root`` partitioned into ``parts``: refused in one line unless the
    job has ``parts`` machines, and, where the partitioning drew the splits (the folder has no
    split files), unless the run's ``seed`` is the one it drew them with: a run of the folder
    whole draws them from its seed, and the two would not train and score the same nodes."""
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
    return open_partition(root, parts, machine)


def partition_folder_of(root: str | Path, parts: int) -> Path:
    return Path(root) / PARTITIONS / str(parts)


def part_folder(partition: Path, part: int) -> Path:
    return partition / f"part-{part}"


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


def open_partition(root: str | Path, parts: int, machine: int, form: str | None = None) -> GraphData | HeteroSource:
    """Machine ``machine``'s part of ``root`` partitioned into ``parts``, its arrays mapped."""
    with label_form(form or current_form()):
        return _open(Path(root), parts, machine)


def _open(root: Path, parts: int, machine: int) -> GraphData | HeteroSource:
    description = read_partition(root, parts)
    folder = part_folder(partition_folder_of(root, parts), machine)
    part = _read_part(folder, description, machine)
    arrays = {key: mapped(folder, spec) for key, spec in part["arrays"].items()}
    advise_uncacheable(arrays.values(), sum(a.nbytes for a in arrays.values()))
    if description.get("kind") == "hetero":
        record = _hetero_part(root, description, part, arrays, machine)
    else:
        record = _node_part(root, description, part, arrays, machine)
    record.folder = root
    record.mapped_from = (open_partition, (str(root), parts, machine, current_form()))
    return record


def _split_counts(description: dict) -> dict[str, list[int]]:
    """Every machine's members of each split (of the labelled type)."""
    return {
        key.replace("_idx", ""): [int(p[key.replace("_idx", "")]) for p in description["per_part"]] for key in SPLITS
    }


def _node_part(root: Path, description: dict, part: dict, arrays: dict, machine: int) -> PartGraph:
    start = int(part["start"])
    labelled = "y" in arrays  # (a graph without labels is partitioned for link tasks)
    record = PartGraph.unchecked(
        indptr=arrays["indptr"],
        indices=arrays["indices"],
        x=arrays["x"],
        y=folder_labels(arrays["y"], description["summary"], root.name) if labelled else None,
        **{key: arrays[key] - start for key in SPLITS if labelled},
        num_classes=int(description["summary"]["num_classes"]),
        name=root.name,
        edge_attr=arrays.get("edge_attr"),  # in the part's CSC order: its owner sends a sampled edge's row
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


def _hetero_part(root: Path, description: dict, part: dict, arrays: dict, machine: int) -> PartHeteroSource:
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
        y=folder_labels(arrays[f"y__{target}"], description["summary"], root.name) if target is not None else None,
        splits=tuple(arrays[f"{key}__{target}"] - start for key in SPLITS) if target is not None else None,
        name=root.name,
        topology=topology,
        topology_edge_attr=edge_attr,
        num_classes=int(description["summary"]["num_classes"]),
    )
    source.partition = TypedPartition(description["id"], int(description["parts"]), machine, types, relations, target)
    return source


def _read_part(folder: Path, description: dict, machine: int) -> dict:
    """``part.json`` of ``folder``, refused in one line unless it is part ``machine`` of this
    partitioning and its files are as written."""
    missing = (
        f"{folder} is missing: machine {machine} opens part-{machine} of the partitioning (copy "
        f"{folder.parent.name}/{folder.name} to this machine)."
    )
    part = _read_json(folder / PART_FILE, PartError, missing, "copy the part again")
    if part.get("id") != description["id"]:
        raise PartError(
            f"{folder} is a part of another partitioning (id {str(part.get('id'))[:8]}, not "
            f"{description['id'][:8]} as {PARTITION_FILE} says); copy this partitioning's part-{machine} again."
        )
    if part.get("part") != machine:
        raise PartError(
            f"{folder} holds part {part.get('part')}, but this machine (node rank {machine}) trains part {machine}; "
            f"give each machine its own part (node rank M opens part-M)."
        )
    for spec in part["arrays"].values():
        file = folder / spec["file"]
        try:
            now = stat_input(file)
        except OSError:
            raise PartError(f"{file} is missing; copy part-{machine} again.") from None
        if now["size"] != spec["size"]:
            raise PartError(
                f"{file} has {now['size']} bytes but its part says {spec['size']}: this copy differs from the "
                "one written; copy it again."
            )
    return part
