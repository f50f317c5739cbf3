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
destination machine ``M`` owns, with their negatives (under ``link.protocol=shared``, the
split's shared negative pairs whose destination it owns: each pair is scored once, on that
machine, and the counts the metrics are made of are gathered over the job), in global ids.
``link.json`` holds the boundaries and every machine's split counts (what equal batch counts
are computed from), and under the shared protocol its negative pairs' counts.

The cut reads and writes edge-sized arrays a window of edges at a time and keeps the target
relation's and its mirror's edge-id maps in files: its memory is the link cache's (node-sized
arrays, the held-out edges), so a task whose edges outgrow memory is cut as it was built.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.files import PARTIAL, replace, taking_turns
from gnnbridge.core.records.hetero import HOMOGENEOUS_EDGE, EdgeType, HeteroGraphData, edge_name, find_edge_type
from gnnbridge.core.storage.folder import advise_uncacheable, check_offsets, mapped
from gnnbridge.core.storage.partition import part_offsets, window_positions
from gnnbridge.core.storage.parts import (
    PART_FILE,
    Cut,
    PartError,
    Partition,
    TypedPartition,
    _read_json,
    _read_part,
    _rows,
    description_digest,
    part_folder,
    part_written,
    partition_folder_of,
    read_partition,
    typed_part_summary,
    written_file,
)
from gnnbridge.core.storage.prepare import chunk_bytes, full_disk, write_array
from gnnbridge.core.tasks import LinkSettings

FORMAT = 2  # 2: each part records link.json's digest
LINK_FILE = "link.json"
WORK = ".work"  # the cut's edge-id maps, removed before the cut is published


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
            (tmp / WORK).mkdir()
            written, records = _Cut(root, parts, description, record, tmp / WORK).write(tmp)
            shutil.rmtree(tmp / WORK)
            written.update(settings=settings, partition=description["id"])
            digest = description_digest(written)
            for m, part in enumerate(records):  # with link.json's digest, which a machine checks its part by
                replace(part_folder(tmp, m) / PART_FILE, json.dumps({**part, "description": digest}, indent=1) + "\n")
            replace(tmp / LINK_FILE, json.dumps(written, indent=1) + "\n")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise full_disk(exc, out.parent, "writing a link task's parts", "free space") from None
    return {**written, "already": False, "out": str(out)}


class _Cut:
    """One link record cut along one node partitioning (see the module), an edge-sized array a
    window of edges at a time (:func:`~gnnbridge.core.storage.prepare.chunk_bytes`): what stays
    in memory is node-sized (the relabelling, each part's offsets) and held-out-sized, as in
    the link cache that built the record; the edge-id maps are files in ``work``."""

    def __init__(self, root, parts: int, description: dict, record: HeteroGraphData, work: Path):
        self.parts, self.record, self.work = parts, record, work
        self.partition = partition_folder_of(root, parts)
        self.homogeneous = description.get("kind") != "hetero"
        bounds = description["boundaries"]
        self.bounds = {"node": bounds} if self.homogeneous else {t: list(b) for t, b in bounds.items()}
        self.new_of, self.order = {}, {}
        for t, b in self.bounds.items():
            self.new_of[t], self.order[t] = self._relabelling(t, b)
        self.step = max(1, chunk_bytes() // 64)
        self.offsets: dict[tuple, np.ndarray] = {}
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

    def _machine_of(self, t: str, ids: np.ndarray) -> np.ndarray:
        """The machine owning each node of type ``t`` (new ids)."""
        return np.searchsorted(np.asarray(self.bounds[t]), ids, side="right") - 1

    def _owned(self, et: EdgeType, m: int) -> np.ndarray:
        b = self.bounds[et[2]]
        return self.order[et[2]][b[m] : b[m + 1]]

    def _offsets(self, et: EdgeType, m: int) -> np.ndarray:
        """Part ``m``'s CSC offsets of relation ``et``."""
        if (et, m) not in self.offsets:
            self.offsets[et, m] = part_offsets(np.asarray(self.record.indptr[et]), self._owned(et, m))
        return self.offsets[et, m]

    def _windows(self, et: EdgeType, m: int):
        """Part ``m``'s edges of ``et`` a window at a time: ``(start, stop, their old edge ids)``."""
        indptr, offsets, owned = np.asarray(self.record.indptr[et]), self._offsets(et, m), self._owned(et, m)
        edges = int(offsets[-1])
        for start in range(0, edges, self.step):
            stop = min(edges, start + self.step)
            yield start, stop, window_positions(indptr, offsets, owned, start, stop)

    def _new_edge_ids(self, et: EdgeType) -> np.ndarray:
        """Old edge id -> global (partitioned) edge id of relation ``et`` (a file in ``work``)."""
        edges = int(np.asarray(self.record.indptr[et])[-1])
        if not edges:
            return np.zeros(0, dtype=np.int64)
        target = self.work / f"eids__{edge_name_key(et)}.npy"

        def fill(new: np.ndarray) -> None:
            first = 0
            for m in range(self.parts):
                for start, stop, old in self._windows(et, m):
                    new[old] = first + np.arange(start, stop)
                first += int(self._offsets(et, m)[-1])

        write_array(target, np.int64, (edges,), fill)  # its space reserved: a full disk is ENOSPC, not SIGBUS
        return np.load(target, mmap_mode="r")

    def _save_edges(self, folder: Path, name: str, et: EdgeType, m: int, arrays: dict, values) -> int:
        """Part ``m``'s array ``name`` of one value per edge of ``et``, ``values(old edge ids)`` a
        window at a time; returns the part's edge count."""
        edges = int(self._offsets(et, m)[-1])

        def fill(out: np.ndarray) -> None:
            for start, stop, old in self._windows(et, m):
                out[start:stop] = values(old)

        write_array(folder / f"{name}.npy", np.int64, (edges,), fill)
        arrays[name] = {"file": f"{name}.npy", "dtype": "int64", "shape": [edges]}
        return edges

    def write(self, tmp: Path) -> tuple[dict, list[dict]]:
        """Every part's arrays; returns ``link.json``'s content and each part's ``part.json``
        (written once ``link.json``'s content is whole, with its digest)."""
        link_id, records = uuid.uuid4().hex, []
        edge_bounds = {edge_name_key(et): [0] for et in self.relations}
        counts = {"train": [], "val": [], "test": []}
        pairs: dict[str, list[int]] = {}  # the shared protocol's negative pairs per split and machine
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
                if self.record.protocol == "shared":
                    pairs.setdefault(split, []).append(self._negative_pairs(split, m, folder, arrays))
            for spec in arrays.values():  # size, time and digest, as a node part's (parts.written_file)
                spec.update(written_file(folder / spec["file"]))
            records.append({"format": FORMAT, "id": link_id, "part": m, "arrays": arrays})
        record = self.record
        described = {
            "format": FORMAT,
            "id": link_id,
            "parts": self.parts,
            "target_edge": list(record.target_edge),
            "reverse_edge": list(record.reverse_edge) if record.reverse_edge else None,
            "edge_types": [list(et) for et in record.edge_types],
            "relations": [edge_name_key(et) for et in self.relations],
            "edge_boundaries": edge_bounds,
            "counts": counts,
            "negative_pairs": pairs or None,
            "num_nodes": {t: int(n) for t, n in record.num_nodes.items()},
            "undirected": bool(record.undirected),
            "eval_negatives": int(
                record.val_negatives.shape[1]
                if record.protocol == "per-edge"
                else record.negative_pairs("val").shape[1]
            ),
        }
        return described, records

    def _relation(self, et: EdgeType, m: int, folder: Path, arrays: dict) -> int:
        key = edge_name_key(et)
        _save(folder, f"indptr__{key}", self._offsets(et, m), arrays)
        sources, new_of = np.asarray(self.record.edge_index[et][0]), self.new_of[et[0]]
        return self._save_edges(folder, f"indices__{key}", et, m, arrays, lambda old: new_of[sources[old]])

    def _train_edges(self, m: int, folder: Path, arrays: dict) -> int:
        """Part ``m``'s train edges' mirrors and twins, as global edge ids (-1: none); their count."""
        record, target, rev = self.record, self.record.target_edge, self.record.reverse_edge
        mirror = np.asarray(record.reverse_eid) if rev is not None else None
        twin = np.asarray(record.twin_eid) if record.twin_eid is not None else None

        def twins_of(old: np.ndarray, then) -> np.ndarray:
            found = twin[old]
            return np.where(found >= 0, then(np.maximum(found, 0)), -1)

        if rev is not None:
            self._save_edges(folder, "reverse_eid", target, m, arrays, lambda old: self.eids[rev][mirror[old]])
        if twin is not None:
            self._save_edges(
                folder, "twin_eid", target, m, arrays, lambda old: twins_of(old, lambda at: self.eids[target][at])
            )
            if rev is not None:  # a twin's mirror is the batch edge's own pair, reversed
                self._save_edges(
                    folder, "twin_reverse_eid", target, m, arrays,
                    lambda old: twins_of(old, lambda at: self.eids[rev][mirror[at]]),
                )  # fmt: skip
        return int(self._offsets(target, m)[-1])

    def _held_out(self, split: str, m: int, folder: Path, arrays: dict) -> int:
        """The split's edges whose destination machine ``m`` owns, with their negatives (a block
        of rows at a time), in global ids (in the split's order)."""
        s, _, d = self.record.target_edge
        edges, negatives = (np.asarray(a) for a in self.record.held_out(split))
        if split not in self.owners:  # (once per split, not per part)
            dst = self.new_of[d][edges[1]]
            self.owners[split] = (dst, self._machine_of(d, dst))
        dst, owner = self.owners[split]
        mine = np.flatnonzero(owner == m)
        _save(folder, f"{split}_edges", np.stack([self.new_of[s][edges[0][mine]], dst[mine]]), arrays)
        rows, new_of = max(1, self.step // max(1, negatives.shape[1])), self.new_of[d]

        def fill(out: np.ndarray) -> None:
            for start in range(0, mine.shape[0], rows):
                out[start : start + rows] = new_of[negatives[mine[start : start + rows]]]

        shape = (mine.shape[0], negatives.shape[1])
        write_array(folder / f"{split}_negatives.npy", np.int64, shape, fill)
        arrays[f"{split}_negatives"] = {"file": f"{split}_negatives.npy", "dtype": "int64", "shape": list(shape)}
        return int(mine.shape[0])

    def _negative_pairs(self, split: str, m: int, folder: Path, arrays: dict) -> int:
        """Under the shared protocol, the split's negative pairs whose destination machine ``m``
        owns, in global ids (in the split's order): that machine scores them."""
        s, _, d = self.record.target_edge
        pairs = np.asarray(self.record.negative_pairs(split))
        dst = self.new_of[d][pairs[1]]
        mine = self._machine_of(d, dst) == m
        _save(folder, f"{split}_negative_pairs", np.stack([self.new_of[s][pairs[0][mine]], dst[mine]]), arrays)
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

    negative_pairs_per_machine: dict[str, list[int]] | None = None  # shared protocol: per split

    def summary(self) -> dict:
        shared = self.negative_pairs_per_machine
        return typed_part_summary(
            self,
            target_edge=edge_name(self.target_edge),
            protocol=self.protocol,
            eval_negatives=int(self.val_negatives.shape[1]) if shared is None else sum(shared["val"]),
        )


def open_link_part(base, settings: dict) -> PartLinkGraph:
    """The link task of ``settings`` on the machine holding ``base`` (its part of the node
    partitioning: a :class:`~gnnbridge.core.storage.parts.PartGraph` or ``PartHeteroSource``),
    refused in one line where that task was not cut (naming the command that cuts it)."""
    part = base.partition
    root, parts, machine = Path(base.folder), part.parts, part.part
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
    # a part of this cut, its files as written (read where their times differ, unless the machine's first rank did)
    part_file = _read_part(folder, found, machine, out / LINK_FILE, not part.reopened)
    written = part_written(folder, machine)
    arrays = {key: mapped(folder, spec, written) for key, spec in part_file["arrays"].items()}
    _check_offsets(found, arrays, part, f"machine {machine}: {folder / PART_FILE}")
    advise_uncacheable(arrays.values(), sum(a.nbytes for a in arrays.values()))
    record = _record(base, found, arrays)
    digest = f"{part.cut.digest if part.cut else ''}:{part_file['description']}"
    record.partition.cut = Cut(found["id"], digest, str(out / LINK_FILE))
    return record


def _check_offsets(found: dict, arrays: dict, part, where: str) -> None:
    """Each relation's CSC of the part: as many offsets as the machine has destinations (and one),
    running from 0 to its edge count (``link.json``'s boundaries); one pass over the offsets, the
    edges are checked where the sampler reads them (as a node part's, :mod:`.parts`)."""
    machine = part.part
    for key in found["relations"]:
        dst = key.split("__")[2]
        bounds = part.types[dst].bounds if isinstance(part, TypedPartition) else part.bounds
        edge_bounds = found["edge_boundaries"][key]
        edges = int(edge_bounds[machine + 1]) - int(edge_bounds[machine])
        _rows(arrays, [f"indptr__{key}"], int(bounds[machine + 1]) - int(bounds[machine]) + 1, where)
        _rows(arrays, [f"indices__{key}"], edges, where)
        check_offsets(arrays[f"indptr__{key}"], edges)


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
        val_negative_pairs=arrays.get("val_negative_pairs"),
        test_negative_pairs=arrays.get("test_negative_pairs"),
        undirected=bool(found["undirected"]),
        name=base.name,
    )
    record.twin_reverse_eid = arrays.get("twin_reverse_eid")
    record.negative_pairs_per_machine = found.get("negative_pairs")
    record.partition = TypedPartition(
        part.id, part.parts, part.part, types, {et: relations[et] for et in edge_types}, target[2],
        counts=found["counts"],
    )  # fmt: skip
    record.folder = base.folder
    return record
