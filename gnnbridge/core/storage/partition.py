"""``gnnbridge partition``: a prepared folder cut into K parts, one per machine of a job.

Nodes are relabelled so that each part owns a contiguous range of ids (the owner of any id is
a binary search in ``K + 1`` boundaries, which every machine holds, instead of an N-sized
owner map). Within a part, nodes keep their original order. A heterogeneous graph is cut the
same way per node type (each type its own ranges and boundaries), and each relation (its
``rev_`` relations included, whose CSC prepare wrote) is written per part as a homogeneous
graph's edges are; the assignment runs over one flat numbering of all types, so METIS and the
streaming pass see every relation at once. Part ``M`` is written as
``DIR/partitions/K/part-M/``: its owned nodes' feature rows, labels, original ids and split
members, and the in-edges of its owned nodes as a CSC over them whose sources are *global*
(relabelled) ids, so a machine samples any hop of its own nodes locally and asks the owners
only for other nodes' neighbours and rows. Edges are numbered part after part in that CSC
order, so an edge's global id is its part's first edge id plus its position there (what edge
features are fetched by). ``DIR/partitions/K/partition.json`` (boundaries, counts, balance and
edge cut, the partitioning's id) is the small file every machine also holds.

Two ways to assign nodes to parts (``--method``):

* ``metis``: METIS through ``pymetis`` on the symmetrised graph, balancing nodes and training
  seeds (two constraints), where the graph fits in memory (its adjacency is built there);
* ``stream``: linear deterministic greedy (Stanton and Kliot, KDD 2012) in one pass over the
  CSC in id order, each node to the part that holds most of its in-neighbours, discounted by
  how full that part is (of nodes, and of training seeds); memory is a byte a node (the
  training mark; the assignment is a file) and a chunk, as ``prepare``'s. Why written here:
  METIS needs the whole adjacency in memory, and the streaming partitioners on PyPI are
  research code tied to their own formats.

``auto`` takes METIS when it is installed and its adjacency fits in a quarter of free memory.

Everything is written into ``partitions/.K.partial`` and renamed to ``partitions/K`` when
whole (``partition.json`` last), so an interrupted or failed partitioning leaves nothing; the
refusals are ``prepare``'s (a source changed since it was prepared, a read-only folder, a full
disk).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnbridge.core.compiled import signals_deferred
from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.files import PARTIAL, partial_name, replace, taking_turns
from gnnbridge.core.host import available_memory
from gnnbridge.core.records.data import random_split
from gnnbridge.core.storage.folder import (
    CSC_EDGE_ATTR,
    CSC_EDGES,
    CSC_INDPTR,
    SPLITS,
    changed_input,
    read_manifest,
)
from gnnbridge.core.storage.formats import EDGE_LABEL
from gnnbridge.core.storage.parts import (
    FORMAT,
    PART_FILE,
    PARTITION_FILE,
    PARTITIONS,
    description_digest,
    part_folder,
    partition_folder_of,
    source_stamp,
    written_file,
)
from gnnbridge.core.storage.prepare import chunk_bytes, full_disk, write_array

METHODS = ("auto", "metis", "stream")
STREAM_SLACK = 0.05  # the streaming method fills a part to at most 5% above the mean


def partition(
    path: str | os.PathLike, parts: int, method: str = "auto", seed: int = 0, progress: bool = True, reuse: bool = False
) -> dict:
    """Partition the prepared folder ``path`` into ``parts``; returns the partitioning's
    description (``partition.json``) with ``already`` (nothing was to do) and ``out``.
    ``reuse``: a partitioning of this source already there is taken however it was made (what
    cutting a link task into it wants: machines may hold its parts)."""
    root = Path(path)
    if method not in METHODS:
        raise ConfigError(f"--method {method!r} is not a partitioning method; use one of: {', '.join(METHODS)}.")
    manifest = _source(root)
    n = int(manifest["summary"]["num_nodes"])
    if not 2 <= parts <= n:
        raise ConfigError(f"--parts {parts}: give 2 to {n} parts (one per machine; the graph has {n} nodes).")
    chosen = _method(method, manifest)
    out = partition_folder_of(root, parts)
    _writable(root)
    with taking_turns(root / PARTITIONS):
        done = _already(root, out, manifest, method, seed, reuse)
        if done is not None:
            return {**done, "already": True, "out": str(out)}
        tmp = root / PARTITIONS / f".{parts}{PARTIAL}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            description, written = _write(root, tmp, manifest, parts, chosen, seed, progress)
            description["requested"] = method
            _record_parts(tmp, description, written)
            replace(tmp / PARTITION_FILE, json.dumps(description, indent=1) + "\n")
            _publish(tmp, out)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise full_disk(exc, root / PARTITIONS, "writing a part", "free space") from None
    return {**description, "already": False, "out": str(out)}


def _source(root: Path) -> dict:
    """The folder's manifest, refused where it cannot be partitioned (yet)."""
    manifest = read_manifest(root)
    changed = changed_input(root, manifest)
    if changed:
        raise DataError(changed)
    kind, arrays = manifest["kind"], manifest["arrays"]
    if kind not in ("node", "hetero"):
        raise DataError(
            f"{root} holds a {'collection of graphs' if kind == 'collection' else kind}; partition cuts one graph "
            "(a collection trains on one machine's copy)."
        )
    if EDGE_LABEL in arrays or any(k.startswith(EDGE_LABEL + "__") for k in arrays):
        raise DataError(f"{root} has edge labels (an edge task's); partition serves node and link tasks so far.")
    if kind == "hetero" and not any(k.startswith(CSC_INDPTR + "__") for k in arrays):
        raise DataError(f"{root} was prepared before prepare wrote typed topology; run gnnbridge prepare {root} again.")
    return manifest


def _method(method: str, manifest: dict) -> str:
    """``auto`` made concrete; ``metis`` refused in one line where pymetis is missing."""
    installed = _pymetis() is not None
    if method == "metis" and not installed:
        raise ConfigError(
            "--method metis needs pymetis (pip install pymetis, or gnnbridge[partition]); or use --method stream."
        )
    if method != "auto":
        return method
    fits = _metis_bytes(manifest) < available_memory() // 4
    return "metis" if installed and fits else "stream"


def _pymetis():
    try:
        import pymetis
    except ImportError:
        return None
    return pymetis


def _metis_bytes(manifest: dict) -> int:
    """What METIS' input takes: both directions of every edge (deduplicated by a sort of 8-byte
    keys) and the offsets, three copies at the peak."""
    arrays = manifest["arrays"]
    e = sum(int(spec["shape"][-1]) for key, spec in arrays.items() if key == "indices" or key.startswith(CSC_EDGES))
    return 3 * 2 * e * 8 + 2 * int(manifest["summary"]["num_nodes"]) * 8


def _writable(root: Path) -> None:
    try:
        (root / PARTITIONS).mkdir(exist_ok=True)
        probe = partial_name(root / PARTITIONS / "probe")
        probe.touch()
        probe.unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{root} is not writable ({exc.strerror}), and partition writes its parts in {root / PARTITIONS}; "
            "copy the prepared folder somewhere writable (cp -a keeps its times) and partition the copy."
        ) from None


def _already(root: Path, out: Path, manifest: dict, method: str, seed: int, reuse: bool = False) -> dict | None:
    """The partitioning in ``out`` when it was made of this source as asked (``method`` as given:
    ``auto`` matches what ``auto`` chose then) and every part of it is there; None when there is
    none or it is stale (the source was prepared again, it was written by another version of
    gnnbridge, a part is missing or of another partitioning), to be made again under a new id
    (machines holding the old parts are then refused, never mixed); one asked another way is
    refused (machines may hold its parts)."""
    try:
        found = json.loads((out / PARTITION_FILE).read_text())
    except (OSError, ValueError):
        return None
    stale = found.get("format") != FORMAT or found.get("source") != _stamp(root, manifest)
    if stale or not _parts_whole(out, found):
        return None
    if not reuse and (method not in (found.get("method"), found.get("requested")) or found.get("seed") != seed):
        raise ConfigError(
            f"{out} holds a partitioning by {found.get('method')} (seed {found.get('seed')}); machines may "
            f"hold its parts: remove {out} first to partition by {method} (seed {seed})."
        )
    return found


def _parts_whole(out: Path, found: dict) -> bool:
    """Whether every part of the partitioning ``found`` describes is in ``out``, of it."""
    for m in range(int(found.get("parts", 0))):
        try:
            part = json.loads((part_folder(out, m) / PART_FILE).read_text())
        except (OSError, ValueError):
            return False
        if part.get("id") != found.get("id"):
            return False
    return True


def _stamp(root: Path, manifest: dict) -> dict:
    """What identifies the source (:func:`~.parts.source_stamp`)."""
    return source_stamp(root, manifest["kind"])


def _record_parts(tmp: Path, description: dict, parts: list[dict]) -> None:
    """Each part's ``part.json``, written once ``partition.json``'s content is known: with its
    digest and the source's stamp, what a machine's opener checks the part against (see
    :mod:`.parts`)."""
    digest = description_digest(description)
    for m, part in enumerate(parts):
        part.update(description=digest, source=description["source"])
        replace(part_folder(tmp, m) / PART_FILE, json.dumps(part, indent=1) + "\n")


def _publish(tmp: Path, out: Path) -> None:
    """``tmp`` becomes ``out``; a stale ``out`` (its source prepared again) goes."""
    if out.exists():
        old = partial_name(out.with_name(f"{out.name}-old"))
        os.replace(out, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, out)


# --------------------------------------------------------------------------- writing the parts


@dataclass
class NodeSet:
    """One node type's stored arrays (numpy, as stored: bfloat16 as uint16); a homogeneous graph
    is one set named ``""``. ``offset``: its first id in the flat numbering the assignment uses
    (types one after another, in name order)."""

    name: str
    n: int
    offset: int
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    splits: dict | None = None  # the labelled type's members (original ids)

    @property
    def suffix(self) -> str:
        return f"__{self.name}" if self.name else ""


@dataclass
class Relation:
    """One edge type's prepared CSC (its ``rev_`` types are relations too): ``indices`` the
    sources (type-local ids of ``src``), grouped by destination (``dst``)."""

    key: str  # "" (homogeneous) or "src__relation__dst"
    src: NodeSet
    dst: NodeSet
    indptr: np.ndarray
    indices: np.ndarray
    edge_attr: np.ndarray | None

    @property
    def suffix(self) -> str:
        return f"__{self.key}" if self.key else ""


class Source:
    """The prepared folder's node sets and relations, mapped."""

    def __init__(self, root: Path, manifest: dict, seed: int):
        self.root, self.specs = root, manifest["arrays"]
        self.hetero = manifest["kind"] == "hetero"
        if self.hetero:
            self.types = self._typed(manifest["summary"]["node_types"], seed)
            self.relations = self._typed_relations()
        else:
            indptr = self._load("indptr")
            n = int(indptr.shape[0]) - 1
            labelled = "y" in self.specs
            y, splits = (self._load("y"), self._splits("", n, seed)) if labelled else (None, None)
            one = NodeSet("", n, 0, self._load("x"), y, splits)
            self.types = {"": one}
            attr = self._load(CSC_EDGE_ATTR) if CSC_EDGE_ATTR in self.specs else None
            self.relations = {"": Relation("", one, one, indptr, self._load("indices"), attr)}
        self.n = sum(t.n for t in self.types.values())
        # the labelled node type (None: a graph without node labels, partitioned for link tasks)
        self.labelled = next((t for t in self.types.values() if t.y is not None), None)

    def _typed(self, counts: dict, seed: int) -> dict[str, NodeSet]:
        types, offset = {}, 0
        for name in sorted(counts):
            n, sfx = int(counts[name]), f"__{name}"
            labelled = f"y{sfx}" in self.specs
            types[name] = NodeSet(
                name,
                n,
                offset,
                self._load(f"x{sfx}") if f"x{sfx}" in self.specs else None,
                self._load(f"y{sfx}") if labelled else None,
                self._splits(sfx, n, seed) if labelled else None,
            )
            offset += n
        return types

    def _typed_relations(self) -> dict[str, Relation]:
        relations = {}
        for key in sorted(k for k in self.specs if k.startswith(CSC_INDPTR + "__")):
            name = key[len(CSC_INDPTR) + 2 :]
            s, _, d = name.split("__")
            attr = f"{CSC_EDGE_ATTR}__{name}"
            relations[name] = Relation(
                name,
                self.types[s],
                self.types[d],
                self._load(key),
                self._load(f"{CSC_EDGES}__{name}")[0],  # row 0: the sources, in CSC order
                self._load(attr) if attr in self.specs else None,
            )
        return relations

    def _splits(self, sfx: str, n: int, seed: int) -> dict:
        if f"{SPLITS[0]}{sfx}" in self.specs:
            return {k: self._load(f"{k}{sfx}") for k in SPLITS}
        # the splits a run of this seed draws, fixed now: machines hold only their members
        return {k: s.numpy() for k, s in zip(SPLITS, random_split(n, seed))}

    def _load(self, key: str) -> np.ndarray:
        return np.load(self.root / self.specs[key]["file"], mmap_mode="r", allow_pickle=False)

    def into(self, t: NodeSet) -> list[Relation]:
        """The relations whose destinations are ``t``'s nodes."""
        return [r for r in self.relations.values() if r.dst is t]


@dataclass
class Layout:
    """Where every node went: per node set, the K + 1 boundaries of its new ids and the maps new
    -> old (``order``) and old -> new (``new_of``), files in the scratch folder."""

    bounds: dict[str, list[int]]
    order: dict[str, np.ndarray]
    new_of: dict[str, np.ndarray]

    def owned(self, t: NodeSet, m: int) -> tuple[int, int, np.ndarray]:
        lo, hi = self.bounds[t.name][m], self.bounds[t.name][m + 1]
        return lo, hi, np.asarray(self.order[t.name][lo:hi])


def _write(root: Path, tmp: Path, manifest: dict, parts: int, method: str, seed: int, progress: bool) -> dict:
    src = Source(root, manifest, seed)
    bar = _bar(progress, root, parts)
    with bar:
        train = _train_mark(src)
        bar.set_postfix_str(f"assigning nodes ({method})")
        if method == "metis":
            assignment = _assign_metis(src, parts, train, seed)
        else:
            assignment = _assign_stream(src, parts, train, tmp)
        layout = _relabel_all(src, assignment, parts, tmp)
        del assignment
        _refuse_empty(src, layout, parts, method)
        bar.update(1)
        pid = uuid.uuid4().hex
        edge_bounds, written, records = {key: [0] for key in src.relations}, [], []
        for m in range(parts):
            bar.set_postfix_str(f"writing part {m}")
            stats, part = _write_part(src, tmp, m, parts, pid, layout, {k: b[-1] for k, b in edge_bounds.items()})
            for key, count in stats.pop("relations").items():
                edge_bounds[key].append(edge_bounds[key][-1] + count)
            written.append(stats)
            records.append(part)
            bar.update(1)
        for scratch in tmp.glob("*.npy"):
            scratch.unlink()
    return _description(root, manifest, src, pid, parts, method, seed, layout, edge_bounds, written), records


def _train_mark(src: Source) -> np.ndarray:
    """A 0/1 int8 vector over the flat ids marking the labelled type's training seeds."""
    mark = np.zeros(src.n, dtype=np.int8)
    t = src.labelled
    if t is not None:
        mark[t.offset + np.asarray(t.splits["train_idx"])] = 1
    return mark


def _refuse_empty(src: Source, layout: Layout, parts: int, method: str) -> None:
    sizes = [sum(layout.bounds[t][m + 1] - layout.bounds[t][m] for t in src.types) for m in range(parts)]
    empty = [m for m in range(parts) if not sizes[m]]
    if empty:
        raise ConfigError(
            f"--parts {parts}: {method} left part {empty[0]} without nodes ({len(empty)} empty); the graph is "
            "too small for that many machines: give fewer parts."
        )


def _assign_metis(src: Source, parts: int, train: np.ndarray, seed: int) -> np.ndarray:
    """METIS on both directions of every edge of every relation (no self loops, no repeats), over
    the flat ids, balancing nodes of each type and, where there are any, training seeds."""
    pymetis = _pymetis()
    n = src.n
    keys = []
    for rel in src.relations.values():
        dst = rel.dst.offset + np.repeat(np.arange(rel.dst.n, dtype=np.int64), np.diff(np.asarray(rel.indptr)))
        sources = rel.src.offset + np.asarray(rel.indices)
        keys += [sources * n + dst, dst * n + sources]
        del dst, sources
    keys = np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
    keys = keys[keys // n != keys % n]
    rows, cols = keys // n, keys % n
    del keys
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=xadj[1:])
    options = pymetis.Options(seed=seed)
    weights = _vertex_weights(src, train)
    result = pymetis.part_graph(parts, pymetis.CSRAdjacency(xadj, cols), vweights=weights, options=options)
    return np.asarray(result.vertex_part, dtype=np.int64)


def _vertex_weights(src: Source, train: np.ndarray) -> np.ndarray | None:
    """METIS' constraints, a column each: one per node type (so each part gets its share of every
    type), and the training seeds; None where that is one plain count."""
    columns = []
    if len(src.types) > 1:
        for t in src.types.values():
            column = np.zeros(src.n, dtype=np.int64)
            column[t.offset : t.offset + t.n] = 1
            columns.append(column)
    else:
        columns.append(np.ones(src.n, dtype=np.int64))
    if train.any():
        columns.append(train.astype(np.int64))
    return np.stack(columns, axis=1).ravel() if len(columns) > 1 else None


def _assign_stream(src: Source, parts: int, train: np.ndarray, tmp: Path) -> np.ndarray:
    """Linear deterministic greedy over the CSC, a chunk of one type's nodes at a time, with
    their in-edges along every relation into the type (see the module); each type fills its
    parts to its own cap. The assignment is a file in ``tmp`` (the training mark, one byte a
    node, is the pass's memory)."""
    assignment = np.lib.format.open_memmap(tmp / "assignment.npy", mode="w+", dtype=np.int32, shape=(src.n,))
    assignment[:] = -1
    train_cap = max(1.0, (1 + STREAM_SLACK) * float(train.sum()) / parts)
    train_sizes = np.zeros(parts, dtype=np.float64)
    step = max(1, chunk_bytes() // 64)
    for t in src.types.values():
        node_cap = (1 + STREAM_SLACK) * t.n / parts
        sizes = np.zeros(parts, dtype=np.float64)
        into = src.into(t)
        for start in range(0, t.n, step):
            indptr, indices = _chunk_in_edges(into, start, min(t.n, start + step))
            with signals_deferred():
                _greedy()(indptr, indices, t.offset + start, train, assignment, sizes, train_sizes, node_cap, train_cap)
    return assignment


def _chunk_in_edges(into: list[Relation], start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``[start, stop)``'s in-neighbours along ``into`` as one CSC (offsets from 0, sources
    as flat ids), each node's relations one after another."""
    blocks, degrees = [], []
    for rel in into:
        indptr = np.asarray(rel.indptr[start : stop + 1])
        blocks.append(rel.src.offset + np.asarray(rel.indices[indptr[0] : indptr[-1]]))
        degrees.append(np.diff(indptr))
    if len(into) == 1:
        return np.concatenate([[0], np.cumsum(degrees[0])]), blocks[0]
    count = np.zeros(stop - start, dtype=np.int64)
    for d in degrees:
        count += d
    indptr = np.concatenate([[0], np.cumsum(count)])
    if not blocks:
        return indptr, np.zeros(0, dtype=np.int64)
    node = np.concatenate([np.repeat(np.arange(stop - start), d) for d in degrees])
    return indptr, np.concatenate(blocks)[np.argsort(node, kind="stable")]


_GREEDY = []


def _greedy():
    """The streaming kernel, compiled on first use (numba; a plain-Python loop over billions of
    edges would take days)."""
    if not _GREEDY:
        import numba

        _GREEDY.append(numba.njit(cache=False, nogil=True)(_greedy_chunk))
    return _GREEDY[0]


def _greedy_chunk(indptr, indices, first, train, assignment, sizes, train_sizes, node_cap, train_cap):
    """Nodes ``first ..`` (CSC offsets ``indptr`` into ``indices``) each to the part with the most
    of its assigned in-neighbours times the room left (of nodes; and of seeds, for a training
    seed); a full part takes none, ties go to the emptier part."""
    parts = sizes.shape[0]
    counts = np.zeros(parts, dtype=np.float64)
    for i in range(indptr.shape[0] - 1):
        v = first + i
        counts[:] = 0.0
        for e in range(indptr[i], indptr[i + 1]):
            owner = assignment[indices[e]]
            if owner >= 0:
                counts[owner] += 1.0
        best, best_score = -1, -1.0
        for p in range(parts):
            if sizes[p] + 1 > node_cap or (train[v] and train_sizes[p] + 1 > train_cap):
                continue
            room = 1.0 - sizes[p] / node_cap
            if train[v]:
                room *= 1.0 - train_sizes[p] / train_cap
            score = (counts[p] + 1e-9) * room
            if score > best_score or (score == best_score and sizes[p] < sizes[best]):
                best, best_score = p, score
        if best < 0:  # every part at its cap (rounding): the emptiest
            best = int(np.argmin(sizes))
        assignment[v] = best
        sizes[best] += 1.0
        train_sizes[best] += train[v]


def _relabel_all(src: Source, assignment: np.ndarray, parts: int, tmp: Path) -> Layout:
    layout = Layout({}, {}, {})
    for t in src.types.values():
        own = assignment[t.offset : t.offset + t.n]
        layout.bounds[t.name], layout.order[t.name], layout.new_of[t.name] = _relabel(own, parts, tmp, t.suffix)
    return layout


def _relabel(
    assignment: np.ndarray, parts: int, tmp: Path, suffix: str = ""
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Part boundaries, and the maps new -> old id (``order``) and old -> new (``new_of``), as
    files in ``tmp`` (N each); within a part, nodes keep their order."""
    n = assignment.shape[0]
    counts = np.bincount(assignment, minlength=parts)
    bounds = [0, *np.cumsum(counts).tolist()]
    order = np.lib.format.open_memmap(tmp / f"order{suffix}.npy", mode="w+", dtype=np.int64, shape=(n,))
    new_of = np.lib.format.open_memmap(tmp / f"new_of{suffix}.npy", mode="w+", dtype=np.int64, shape=(n,))
    fill = np.array(bounds[:-1], dtype=np.int64)
    step = max(1, chunk_bytes() // 32)
    for start in range(0, n, step):
        block = assignment[start : start + step]
        within = np.argsort(block, kind="stable")
        owners = block[within]
        ids, first, sizes = np.unique(owners, return_index=True, return_counts=True)
        new = fill[owners] + np.arange(owners.shape[0]) - np.repeat(first, sizes)
        fill[ids] += sizes
        old = start + within
        new_of[old] = new
        order[new] = old
    return bounds, order, new_of


def _write_part(
    src: Source, tmp: Path, m: int, parts: int, pid: str, layout: Layout, edge_starts: dict
) -> tuple[dict, dict]:
    """``part-m/``: each node set's rows, labels, ids and split members, and each relation's
    in-edges of the part's nodes; returns its counts (``relations``: edges per relation) and
    its ``part.json`` (written by :func:`_record_parts`)."""
    folder = part_folder(tmp, m)
    folder.mkdir()
    arrays: dict[str, dict] = {}
    for t in src.types.values():
        _write_nodes(t, folder, layout, m, arrays)
    edges, remote = {}, 0
    for key, rel in src.relations.items():
        lo, hi, owned = layout.owned(rel.dst, m)
        src_lo, src_hi = layout.bounds[rel.src.name][m], layout.bounds[rel.src.name][m + 1]
        edges[key], cut = _write_relation(rel, folder, owned, layout.new_of[rel.src.name], src_lo, src_hi, arrays)
        remote += cut
    for spec in arrays.values():  # its size, time and digest (read back at once: see parts.file_digest)
        spec.update(written_file(folder / spec["file"]))
    part = {"format": FORMAT, "id": pid, "part": m, "parts": parts}
    sfx = src.labelled.suffix if src.labelled is not None else None
    if src.hetero:
        part["starts"] = {t: layout.bounds[t][m] for t in src.types}
        part["stops"] = {t: layout.bounds[t][m + 1] for t in src.types}
        part["edge_starts"] = dict(edge_starts)
        part["edge_stops"] = {k: edge_starts[k] + edges[k] for k in edges}
    else:
        part.update(start=layout.bounds[""][m], stop=layout.bounds[""][m + 1])
        part.update(edge_start=edge_starts[""], edge_stop=edge_starts[""] + edges[""])
    part["arrays"] = arrays
    nodes = {t: layout.bounds[t][m + 1] - layout.bounds[t][m] for t in src.types}
    stats = {
        "nodes": sum(nodes.values()),
        "edges": sum(edges.values()),
        "remote_edges": remote,
        **{key.replace("_idx", ""): int(arrays[f"{key}{sfx}"]["shape"][0]) if sfx is not None else 0 for key in SPLITS},
        "bytes": sum(int(spec["size"]) for spec in arrays.values()),
        "relations": edges,
    }
    return ({**stats, "types": nodes} if src.hetero else stats), part


def _write_nodes(t: NodeSet, folder: Path, layout: Layout, m: int, arrays: dict) -> None:
    """Node set ``t``'s owned rows of part ``m``: original ids, features, labels, split members
    (new, global ids)."""
    lo, hi, owned = layout.owned(t, m)
    sfx = t.suffix
    width = t.x[:1].nbytes if t.x is not None else 8
    step = max(1, chunk_bytes() // max(64, width * 2))
    arrays[f"node_ids{sfx}"] = _write_rows(folder / f"node_ids{sfx}.npy", owned, step, lambda ids: ids)
    if t.x is not None:
        arrays[f"x{sfx}"] = _write_rows(folder / f"x{sfx}.npy", owned, step, lambda ids: t.x[ids], t.x)
    if t.y is None:
        return
    arrays[f"y{sfx}"] = _write_rows(folder / f"y{sfx}.npy", owned, step, lambda ids: t.y[ids], t.y)
    new_of = layout.new_of[t.name]
    for key in SPLITS:
        members = new_of[np.asarray(t.splits[key])]
        members = np.sort(members[(members >= lo) & (members < hi)])
        name = f"{key}{sfx}"
        write_array(
            folder / f"{name}.npy", np.int64, members.shape, lambda out, v=members: out.__setitem__(slice(None), v)
        )
        arrays[name] = _spec(f"{name}.npy", members)


def _write_rows(target: Path, owned: np.ndarray, step: int, rows, like: np.ndarray | None = None) -> dict:
    sample = rows(owned[:0]) if like is None else like
    shape = (owned.shape[0], *sample.shape[1:])

    def fill(out: np.ndarray) -> None:
        for start in range(0, owned.shape[0], step):
            out[start : start + step] = rows(owned[start : start + step])

    write_array(target, sample.dtype, shape, fill)
    return {"file": target.name, "dtype": sample.dtype.name, "shape": list(shape)}


def _write_relation(rel: Relation, folder: Path, owned, new_of, lo: int, hi: int, arrays: dict) -> tuple[int, int]:
    """The in-edges of ``owned`` (the part's nodes of ``rel``'s destination type) along ``rel``:
    CSC offsets, sources in global (new) ids, edge features in that order. Returns the edge count
    and how many come from another part (``[lo, hi)``: the part's range of the source type)."""
    indptr = np.asarray(rel.indptr)
    part_indptr = part_offsets(indptr, owned)
    sfx = rel.suffix
    write_array(
        folder / f"indptr{sfx}.npy", np.int64, part_indptr.shape, lambda out: out.__setitem__(slice(None), part_indptr)
    )
    arrays[f"indptr{sfx}"] = _spec(f"indptr{sfx}.npy", part_indptr)
    e = int(part_indptr[-1])
    remote = [0]
    width = rel.edge_attr[:1].nbytes if rel.edge_attr is not None else 0
    step = max(1, chunk_bytes() // (48 + 2 * width))

    def positions(start: int, stop: int) -> np.ndarray:
        return window_positions(indptr, part_indptr, owned, start, stop)

    def sources(out: np.ndarray) -> None:
        for start in range(0, e, step):
            stop = min(e, start + step)
            ids = new_of[np.asarray(rel.indices[positions(start, stop)])]
            remote[0] += int(((ids < lo) | (ids >= hi)).sum())
            out[start:stop] = ids

    write_array(folder / f"indices{sfx}.npy", np.int64, (e,), sources)
    arrays[f"indices{sfx}"] = {"file": f"indices{sfx}.npy", "dtype": "int64", "shape": [e]}
    if rel.edge_attr is not None:

        def features(out: np.ndarray) -> None:
            for start in range(0, e, step):
                stop = min(e, start + step)
                out[start:stop] = rel.edge_attr[positions(start, stop)]

        shape = (e, *rel.edge_attr.shape[1:])
        write_array(folder / f"edge_attr{sfx}.npy", rel.edge_attr.dtype, shape, features)
        arrays[f"edge_attr{sfx}"] = {
            "file": f"edge_attr{sfx}.npy",
            "dtype": rel.edge_attr.dtype.name,
            "shape": list(shape),
        }
    return e, remote[0]


def part_offsets(indptr: np.ndarray, owned: np.ndarray) -> np.ndarray:
    """The CSC offsets of ``owned``'s in-edges, in that order, cut from the whole CSC ``indptr``."""
    part_indptr = np.zeros(owned.shape[0] + 1, dtype=np.int64)
    np.cumsum(indptr[owned + 1] - indptr[owned], out=part_indptr[1:])
    return part_indptr


def window_positions(
    indptr: np.ndarray, part_indptr: np.ndarray, owned: np.ndarray, start: int, stop: int
) -> np.ndarray:
    """Whole-CSC positions of a part's edges ``[start, stop)`` (the part's CSC ``part_indptr``
    over ``owned``): each node's in-edges that fall in the window, never a whole hub's list per
    chunk."""
    first = int(np.searchsorted(part_indptr, start, side="right")) - 1
    last = int(np.searchsorted(part_indptr, stop, side="left"))
    begin_at = np.maximum(part_indptr[first:last], start)
    end_at = np.minimum(part_indptr[first + 1 : last + 1], stop)
    lengths = end_at - begin_at
    begin = indptr[owned[first:last]] + (begin_at - part_indptr[first:last])
    return np.repeat(begin - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))


def _spec(file: str, array: np.ndarray) -> dict:
    return {"file": file, "dtype": array.dtype.name, "shape": list(array.shape)}


def _description(root, manifest, src: Source, pid, parts, method, seed, layout: Layout, edge_bounds, written) -> dict:
    """``partition.json``: what every machine reads (boundaries, counts), and what a person
    reads (balance as the largest part over the mean, the edge cut). A heterogeneous graph's
    boundaries are per node type and its edge boundaries per relation."""
    edges = sum(p["edges"] for p in written)
    cut = sum(p["remote_edges"] for p in written)

    def balance(key: str) -> float:
        values = [p[key] for p in written]
        mean = sum(values) / parts
        return round(max(values) / mean, 3) if mean else 1.0

    given = src.labelled is None or f"{SPLITS[0]}{src.labelled.suffix}" in manifest["arrays"]
    described = {
        "format": FORMAT,
        "id": pid,
        "kind": manifest["kind"],
        "parts": parts,
        "method": method,
        "seed": seed,
        "splits": "none" if src.labelled is None else "files" if given else f"drawn with seed {seed}",
        "splits_seed": None if given else seed,
    }
    if src.hetero:
        target = src.labelled.name if src.labelled is not None else None
        described.update(boundaries=layout.bounds, edge_boundaries=edge_bounds, target=target)
    else:
        described.update(boundaries=layout.bounds[""], edge_boundaries=edge_bounds[""])
    return {
        **described,
        "dtype": manifest["arrays"]["x"]["dtype"] if "x" in manifest["arrays"] else manifest.get("dtype"),
        "summary": manifest["summary"],
        "per_part": written,
        "balance": {key: balance(key) for key in ("nodes", "edges", "train")},
        "edge_cut": round(cut / edges, 4) if edges else 0.0,
        "source": _stamp(root, manifest),
    }


def _bar(progress: bool, root: Path, parts: int):
    from tqdm import tqdm

    return tqdm(total=parts + 1, desc=f"partition {root.name}", disable=not progress, file=sys.stderr, leave=False)


def describe(result: dict) -> str:
    """The command's output: where the parts are, their balance and the edge cut."""
    if result["already"]:
        return f"{result['out']}: already partitioned into {result['parts']} parts ({result['method']}); nothing to do"
    b = result["balance"]
    sizes = ", ".join(f"{p['nodes']:,}" for p in result["per_part"])
    return (
        f"{result['out']}: {result['parts']} parts by {result['method']} (nodes {sizes}); largest part over the "
        f"mean: nodes {b['nodes']}, edges {b['edges']}, training seeds {b['train']}; edge cut "
        f"{100 * result['edge_cut']:.1f}% of edges cross parts"
    )
