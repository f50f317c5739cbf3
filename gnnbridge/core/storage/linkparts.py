"""A link task cut once into a partitioned folder's parts, and a machine's part of it opened.

Why the task is cut where the whole folder is, and not on the machines: which edges a link task
holds out is a permutation of every distinct pair of its target type (drawn from ``train.seed``),
and each held-out edge's fixed negatives are drawn from one generator in edge order
(:mod:`gnnbridge.core.tasks.link`); a machine holding one part could draw neither. So
``gnnbridge partition DIR --parts K --task link`` builds the task's record as a whole run builds
it (through the folder's link cache, :mod:`gnnbridge.core.storage.linkcache`) and writes its
parts into ``DIR/partitions/K/link-<key>/``: ``key`` hashes the settings that fix the split
(the target, ``train.seed``, the fractions, ``eval_negatives``, the protocol, reverse edges),
which a machine computes from its own config without the folder. Every machine then trains
and scores exactly the whole run's split and negatives.

Part ``M`` of the task holds, for the relations the task changes (the target, holding its train
edges only, and its mirror; every relation of a homogeneous graph, which the task turns into
``to`` and ``rev_to``), the in-edges of machine ``M``'s nodes with global sources, numbered
part after part as the node partitioning numbers its relations (the other relations are read
from ``part-M/``, unchanged); per train edge the *global* edge ids of its mirror, its twin and
its twin's mirror (the edges a training batch leaves out, as the whole record does, which may
live on other machines: their owners redraw without them,
:mod:`gnnbridge.core.sampling.distributed`); and the held-out edges whose
destination machine ``M`` owns, with their negatives, in global ids. ``link.json`` holds the
boundaries and every machine's split counts (what equal batch counts are computed from).

The cut holds the target relation's and its mirror's edge-id maps in memory (8 bytes per edge
each) and one part's edges at a time: the node partitioning's streaming bound does not extend
to it yet.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import torch

from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.files import PARTIAL, replace, taking_turns
from gnnbridge.core.records.hetero import HOMOGENEOUS_EDGE, EdgeType, HeteroGraphData, edge_name, find_edge_type
from gnnbridge.core.storage.folder import advise_uncacheable, mapped, stat_input
from gnnbridge.core.storage.parts import (
    PART_FILE,
    PartError,
    Partition,
    TypedPartition,
    _read_json,
    _read_part,
    part_folder,
    partition_folder_of,
    read_partition,
    typed_part_summary,
)
from gnnbridge.core.storage.prepare import full_disk, write_array
from gnnbridge.core.tasks import LinkSettings

FORMAT = 1
LINK_FILE = "link.json"
SHARED_REFUSED = (
    "link.protocol=shared ranks every held-out edge against one list of pairs, which a partitioned graph does "
    "not score yet; cut and train it with link.protocol=per-edge."
)


def link_settings(config) -> dict:
    """What fixes a link task's split and negatives, as ``--set`` names them (the folder name's
    key; the partition command and every machine compute it from their configs)."""
    return LinkSettings.of(config).as_set()


def _as_keyed(settings: dict, homogeneous: bool, target) -> dict:
    """``settings`` as the key reads them, so that settings giving the same record give the same
    key: a named target as its full ``src,relation,dst`` (``target(text)`` resolves it), and a
    homogeneous graph's reverse edges on (its link task always adds them)."""
    keyed = dict(settings)
    if keyed["link.edge_type"]:
        keyed["link.edge_type"] = edge_name(tuple(target(keyed["link.edge_type"])))
    if homogeneous:
        keyed["dataset.reverse_edges"] = True
    return keyed


def link_key(settings: dict) -> str:
    """The folder name's key of a link task's settings (a machine computes it from its config)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def link_folder(root: str | Path, parts: int, settings: dict) -> Path:
    return partition_folder_of(root, parts) / f"link-{link_key(settings)}"


# --------------------------------------------------------------------------- cutting


def cut_link_task(root: str | Path, parts: int, record: HeteroGraphData, settings: dict) -> dict:
    """Write ``record`` (the whole folder's link record for ``settings``) into the parts of
    ``root``'s partitioning into ``parts``; returns ``link.json`` with ``already`` and ``out``.
    Written under a temporary name and renamed when whole: an interrupted cut leaves nothing."""
    if record.val_negative_pairs is not None:
        raise ConfigError(SHARED_REFUSED)
    description = read_partition(root, parts)
    settings = _as_keyed(settings, description.get("kind") != "hetero", lambda _: record.target_edge)
    out = link_folder(root, parts, settings)
    with taking_turns(out.parent):
        try:
            found = json.loads((out / LINK_FILE).read_text())
            if found.get("partition") == description["id"] and found.get("format") == FORMAT:
                return {**found, "already": True, "out": str(out)}
        except (OSError, ValueError):
            pass
        tmp = out.with_name(f".{out.name}{PARTIAL}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            written = _Cut(root, parts, description, record).write(tmp)
            written.update(settings=settings, partition=description["id"])
            replace(tmp / LINK_FILE, json.dumps(written, indent=1) + "\n")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise full_disk(exc, out.parent, "writing a link task's parts", "free space") from None
    return {**written, "already": False, "out": str(out)}


class _Cut:
    """One link record cut along one node partitioning (see the module)."""

    def __init__(self, root, parts: int, description: dict, record: HeteroGraphData):
        self.parts, self.record = parts, record
        self.partition = partition_folder_of(root, parts)
        self.homogeneous = description.get("kind") != "hetero"
        bounds = description["boundaries"]
        self.bounds = {"node": bounds} if self.homogeneous else {t: list(b) for t, b in bounds.items()}
        self.new_of, self.order = {}, {}
        for t, b in self.bounds.items():
            self.new_of[t], self.order[t] = self._relabelling(t, b)
        target, rev = record.target_edge, record.reverse_edge
        changed = record.edge_types if self.homogeneous else [et for et in (target, rev) if et is not None]
        self.relations = sorted(changed)
        self.eids = {et: self._new_edge_ids(et) for et in {target, rev} - {None}}
        self.owners: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # per held-out split: (dst, its machine)

    def _relabelling(self, t: str, bounds: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Node type ``t``'s maps old -> new id and new -> old, from the parts' original ids."""
        sfx = "" if self.homogeneous else f"__{t}"
        order = np.concatenate(
            [np.load(part_folder(self.partition, m) / f"node_ids{sfx}.npy") for m in range(self.parts)]
        ).astype(np.int64)
        new_of = np.empty_like(order)
        new_of[order] = np.arange(order.shape[0])
        return new_of, order

    def _positions(self, et: EdgeType, m: int) -> tuple[np.ndarray, np.ndarray]:
        """Part ``m``'s CSC offsets of relation ``et`` and the old edge ids of its edges, in order."""
        indptr = np.asarray(self.record.indptr[et])
        b = self.bounds[et[2]]
        owned = self.order[et[2]][b[m] : b[m + 1]]
        degree = indptr[owned + 1] - indptr[owned]
        part_indptr = np.zeros(owned.shape[0] + 1, dtype=np.int64)
        np.cumsum(degree, out=part_indptr[1:])
        first = np.repeat(indptr[owned] - part_indptr[:-1], degree)
        return part_indptr, first + np.arange(int(part_indptr[-1]), dtype=np.int64)

    def _new_edge_ids(self, et: EdgeType) -> np.ndarray:
        """Old edge id -> global (partitioned) edge id of relation ``et``."""
        new = np.empty(int(np.asarray(self.record.indptr[et])[-1]), dtype=np.int64)
        start = 0
        for m in range(self.parts):
            _, old = self._positions(et, m)
            new[old] = start + np.arange(old.shape[0])
            start += old.shape[0]
        return new

    def write(self, tmp: Path) -> dict:
        link_id = uuid.uuid4().hex
        edge_bounds = {edge_name_key(et): [0] for et in self.relations}
        counts = {"train": [], "val": [], "test": []}
        for m in range(self.parts):
            folder = part_folder(tmp, m)
            folder.mkdir()
            arrays: dict = {}
            for et in self.relations:
                edges = self._relation(et, m, folder, arrays)
                key = edge_name_key(et)
                edge_bounds[key].append(edge_bounds[key][-1] + edges)
            counts["train"].append(self._train_edges(m, folder, arrays))
            for split in ("val", "test"):
                counts[split].append(self._held_out(split, m, folder, arrays))
            for spec in arrays.values():
                spec.update(stat_input(folder / spec["file"]))
            part = {"format": FORMAT, "id": link_id, "part": m, "arrays": arrays}
            replace(folder / PART_FILE, json.dumps(part, indent=1) + "\n")
        record = self.record
        return {
            "format": FORMAT,
            "id": link_id,
            "parts": self.parts,
            "target_edge": list(record.target_edge),
            "reverse_edge": list(record.reverse_edge) if record.reverse_edge else None,
            "edge_types": [list(et) for et in record.edge_types],
            "relations": [edge_name_key(et) for et in self.relations],
            "edge_boundaries": edge_bounds,
            "counts": counts,
            "num_nodes": {t: int(n) for t, n in record.num_nodes.items()},
            "undirected": bool(record.undirected),
            "eval_negatives": int(record.val_negatives.shape[1]),
        }

    def _relation(self, et: EdgeType, m: int, folder: Path, arrays: dict) -> int:
        part_indptr, old = self._positions(et, m)
        sources = self.new_of[et[0]][np.asarray(self.record.edge_index[et][0])[old]]
        key = edge_name_key(et)
        _save(folder, f"indptr__{key}", part_indptr, arrays)
        _save(folder, f"indices__{key}", sources, arrays)
        return int(old.shape[0])

    def _train_edges(self, m: int, folder: Path, arrays: dict) -> int:
        """Part ``m``'s train edges' mirrors and twins, as global edge ids (-1: none)."""
        record, target = self.record, self.record.target_edge
        _, old = self._positions(target, m)
        if record.reverse_edge is not None:
            mirror = np.asarray(record.reverse_eid)[old]
            _save(folder, "reverse_eid", self.eids[record.reverse_edge][mirror], arrays)
        if record.twin_eid is not None:
            twin = np.asarray(record.twin_eid)[old]
            has, at = twin >= 0, np.maximum(twin, 0)
            _save(folder, "twin_eid", np.where(has, self.eids[target][at], -1), arrays)
            if record.reverse_edge is not None:  # a twin's mirror is the batch edge's own pair, reversed
                mirror = np.asarray(record.reverse_eid)[at]
                _save(folder, "twin_reverse_eid", np.where(has, self.eids[record.reverse_edge][mirror], -1), arrays)
        return int(old.shape[0])

    def _held_out(self, split: str, m: int, folder: Path, arrays: dict) -> int:
        """The split's edges whose destination machine ``m`` owns, with their negatives, in global
        ids (in the split's order)."""
        s, _, d = self.record.target_edge
        edges, negatives = (np.asarray(a) for a in self.record.held_out(split))
        if split not in self.owners:  # (once per split, not per part)
            dst = self.new_of[d][edges[1]]
            self.owners[split] = (dst, np.searchsorted(np.asarray(self.bounds[d]), dst, side="right") - 1)
        dst, owner = self.owners[split]
        mine = owner == m
        _save(folder, f"{split}_edges", np.stack([self.new_of[s][edges[0][mine]], dst[mine]]), arrays)
        _save(folder, f"{split}_negatives", self.new_of[d][negatives[mine]], arrays)
        return int(mine.sum())


def edge_name_key(et: EdgeType) -> str:
    return "__".join(et)


def _save(folder: Path, name: str, array: np.ndarray, arrays: dict) -> None:
    array = np.ascontiguousarray(array, dtype=np.int64)
    write_array(folder / f"{name}.npy", np.int64, array.shape, lambda out: out.__setitem__(Ellipsis, array))
    arrays[name] = {"file": f"{name}.npy", "dtype": "int64", "shape": list(array.shape)}


def describe_cut(result: dict) -> str:
    """The command's line for a cut link task."""
    if result["already"]:
        return f"{result['out']}: the link task is already cut; nothing to do"
    counts = result["counts"]
    per = ", ".join(f"{t:,}/{v:,}/{e:,}" for t, v, e in zip(counts["train"], counts["val"], counts["test"]))
    return (
        f"{result['out']}: link task on ({edge_name(tuple(result['target_edge']))}) cut into "
        f"{result['parts']} parts (train/val/test edges per part: {per})"
    )


# --------------------------------------------------------------------------- opening


class PartLinkGraph(HeteroGraphData):
    """A machine's part of a link task (see the module): the message-passing relations' CSC of
    its own nodes (``edge_index[et]`` the sources only, ``[1, E]``, global ids, as
    :class:`~gnnbridge.core.storage.parts.PartHeteroGraph`'s), its train edges (the target
    relation's edges here), their mirrors' and twins' global edge ids, and the held-out edges
    whose destination it owns. ``partition.split_counts`` are every machine's edges per split."""

    partition: TypedPartition
    twin_reverse_eid: torch.Tensor | None = None  # per train edge, its twin's mirror (global), or -1

    def excluded(self, eids: torch.Tensor) -> dict[EdgeType, torch.Tensor]:
        """The global edge ids a batch of this machine's train edges ``eids`` (local) leaves out, as
        the whole graph's record leaves them out: themselves, their twins, and the mirrors of both
        (some owned by other machines; a twin's mirror is the batch edge's own pair)."""
        first = self.partition.relations[self.target_edge].edge_bounds[self.partition.part]
        own = eids + first
        if self.twin_eid is not None:
            twins = self.twin_eid[eids]
            own = torch.cat([own, twins[twins >= 0]])
        out = {self.target_edge: own}
        if self.reverse_edge is not None:
            mirrors = [self.reverse_eid[eids]]
            if self.twin_reverse_eid is not None:
                twin_mirrors = self.twin_reverse_eid[eids]
                mirrors.append(twin_mirrors[twin_mirrors >= 0])
            out[self.reverse_edge] = torch.cat(mirrors)
        return out

    def train_pairs(self, eids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(sources, destinations) of this machine's train edges ``eids``, global ids."""
        indptr = self.indptr[self.target_edge]
        dst = torch.searchsorted(indptr, eids, right=True) - 1
        start = self.partition.types[self.target_edge[2]].start
        return self.edge_index[self.target_edge][0][eids], dst + start

    def summary(self) -> dict:
        return typed_part_summary(
            self,
            target_edge=edge_name(self.target_edge),
            protocol="per-edge",
            eval_negatives=int(self.val_negatives.shape[1]),
        )


def open_link_part(base, settings: dict) -> PartLinkGraph:
    """The link task of ``settings`` on the machine holding ``base`` (its part of the node
    partitioning: a :class:`~gnnbridge.core.storage.parts.PartGraph` or ``PartHeteroSource``),
    refused in one line where that task was not cut (naming the command that cuts it)."""
    part = base.partition
    root, parts, machine = Path(base.folder), part.parts, part.part
    if settings["link.protocol"] == "shared":
        raise ConfigError(SHARED_REFUSED)
    typed = isinstance(part, TypedPartition)
    relations = list(part.relations) if typed else [HOMOGENEOUS_EDGE]
    settings = _as_keyed(settings, not typed, lambda text: find_edge_type(relations, text))
    out = link_folder(root, parts, settings)
    how = " ".join(f"--set {k}={v}" for k, v in settings.items() if v != "")
    missing = (
        f"{out.parent} holds no link task cut for these settings ({how}); cut it where the whole folder is: "
        f"gnnbridge partition {root} --parts {parts} --task link {how}, and copy {out.name}/part-M to machine M."
    )
    found = _read_json(out / LINK_FILE, PartError, missing, "cut it again")
    if found.get("format") != FORMAT:
        raise PartError(
            f"{out} was cut by another version of gnnbridge (format {found.get('format')}, not {FORMAT}); cut the "
            f"link task again: gnnbridge partition {root} --parts {parts} --task link {how}."
        )
    if found.get("partition") != part.id:
        raise PartError(
            f"{out} was cut from another partitioning (id {str(found.get('partition'))[:8]}, not {part.id[:8]}); "
            f"cut the link task again: gnnbridge partition {root} --parts {parts} --task link {how}."
        )
    folder = part_folder(out, machine)
    part_file = _read_part(folder, found, machine)  # a part of this cut, its files as written
    arrays = {key: mapped(folder, spec) for key, spec in part_file["arrays"].items()}
    advise_uncacheable(arrays.values(), sum(a.nbytes for a in arrays.values()))
    return _record(base, found, arrays)


def _record(base, found: dict, arrays: dict) -> PartLinkGraph:
    part = base.partition
    target = tuple(found["target_edge"])
    if isinstance(part, TypedPartition):
        types, x = dict(part.types), dict(base.x)
        relations = dict(part.relations)
        topology = {et: topo for et, topo in base.topology.items()}
    else:  # a homogeneous graph is the one type "node", its edges the task's "to" and "rev_to"
        types = {"node": Partition(part.id, part.parts, part.part, part.bounds, [], {}, part.node_ids)}
        x, relations, topology = {"node": base.x}, {}, {}
    for key in found["relations"]:
        et = tuple(key.split("__"))
        dst = types[et[2]]
        edge_bounds = found["edge_boundaries"][key]
        relations[et] = Partition(part.id, part.parts, part.part, dst.bounds, edge_bounds, {}, dst.node_ids)
        topology[et] = (arrays[f"indptr__{key}"], arrays[f"indices__{key}"].view(1, -1))
    edge_types = [tuple(et) for et in found["edge_types"]]
    missing = [et for et in edge_types if et not in topology]
    if missing:
        raise DataError(f"the link task needs relation ({edge_name(missing[0])}), which this part does not hold.")
    record = PartLinkGraph.unchecked(
        num_nodes={t: int(n) for t, n in found["num_nodes"].items()},
        x=x,
        edge_index={et: topology[et][1] for et in edge_types},
        indptr={et: topology[et][0] for et in edge_types},
        target_edge=target,
        reverse_edge=tuple(found["reverse_edge"]) if found["reverse_edge"] else None,
        reverse_eid=arrays.get("reverse_eid"),
        twin_eid=arrays.get("twin_eid"),
        val_edges=arrays["val_edges"],
        test_edges=arrays["test_edges"],
        val_negatives=arrays["val_negatives"],
        test_negatives=arrays["test_negatives"],
        undirected=bool(found["undirected"]),
        name=base.name,
    )
    record.twin_reverse_eid = arrays.get("twin_reverse_eid")
    record.partition = TypedPartition(
        part.id, part.parts, part.part, types, {et: relations[et] for et in edge_types}, target[2],
        counts=found["counts"],
    )  # fmt: skip
    record.folder = base.folder
    return record
