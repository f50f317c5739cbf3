"""``gnnbridge partition``: a prepared folder cut into K parts, one per machine of a job.

Nodes are relabelled so that each part owns a contiguous range of ids (the owner of any id is
a binary search in ``K + 1`` boundaries, which every machine holds, instead of an N-sized
owner map). Within a part, nodes keep their original order. Part ``M`` is written as
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
from pathlib import Path

import numpy as np

from gnnbridge.core.app.prepare import chunk_bytes, full_disk, write_array
from gnnbridge.core.compiled import signals_deferred
from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.files import PARTIAL, partial_name, replace, taking_turns
from gnnbridge.core.records.data import random_split
from gnnbridge.core.records.folder import CSC_EDGE_ATTR, SPLITS, changed_input, read_manifest, stat_input
from gnnbridge.core.records.formats import EDGE_LABEL
from gnnbridge.core.records.partition import (
    PART_FILE,
    PARTITION_FILE,
    PARTITIONS,
    part_folder,
    partition_folder_of,
)
from gnnbridge.core.runtime.host import available_memory
from gnnbridge.core.runtime.launcher import undone_on_stop

FORMAT = 1
METHODS = ("auto", "metis", "stream")
STREAM_SLACK = 0.05  # the streaming method fills a part to at most 5% above the mean


def partition_command(path: str, parts: int, method: str = "auto", seed: int = 0, progress: bool = True) -> dict:
    """:func:`partition` as the command runs it: a stop signal (Ctrl-C, SIGTERM, SIGHUP) undoes
    what it wrote, and says so."""
    with undone_on_stop("the parts this partition wrote were removed", f"gnnbridge partition {path} --parts {parts}"):
        return partition(path, parts, method, seed, progress)


def partition(path: str | os.PathLike, parts: int, method: str = "auto", seed: int = 0, progress: bool = True) -> dict:
    """Partition the prepared folder ``path`` into ``parts``; returns the partitioning's
    description (``partition.json``) with ``already`` (nothing was to do) and ``out``."""
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
        done = _already(root, out, manifest, method, seed)
        if done is not None:
            return {**done, "already": True, "out": str(out)}
        tmp = root / PARTITIONS / f".{parts}{PARTIAL}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            description = {**_write(root, tmp, manifest, parts, chosen, seed, progress), "requested": method}
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
    if manifest["kind"] != "node":
        kind = {"hetero": "heterogeneous graph", "collection": "collection of graphs"}.get(manifest["kind"])
        raise DataError(
            f"{root} holds a {kind or manifest['kind']}; partition cuts one homogeneous graph "
            "(heterogeneous graphs are not partitioned yet; a collection trains on one machine's copy)."
        )
    arrays = manifest["arrays"]
    if "y" not in arrays or EDGE_LABEL in arrays:
        raise DataError(f"{root} has no node labels (its labels are its edges'); partition serves node tasks so far.")
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
    e, n = int(manifest["summary"]["num_edges"]), int(manifest["summary"]["num_nodes"])
    return 3 * 2 * e * 8 + 2 * n * 8


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


def _already(root: Path, out: Path, manifest: dict, method: str, seed: int) -> dict | None:
    """The partitioning in ``out`` when it was made of this source as asked (``method`` as given:
    ``auto`` matches what ``auto`` chose then) and every part of it is there; None when there is
    none or it is stale (the source was prepared again, a part is missing or of another
    partitioning), to be made again under a new id (machines holding the old parts are then
    refused, never mixed); one asked another way is refused (machines may hold its parts)."""
    try:
        found = json.loads((out / PARTITION_FILE).read_text())
    except (OSError, ValueError):
        return None
    if found.get("source") != _stamp(root, manifest) or not _parts_whole(out, found):
        return None
    if method not in (found.get("method"), found.get("requested")) or found.get("seed") != seed:
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
    """What identifies the source: its manifest's size and time (prepare rewrites it last)."""
    return stat_input(root / "prepared" / "manifest.json") | {"kind": manifest["kind"]}


def _publish(tmp: Path, out: Path) -> None:
    """``tmp`` becomes ``out``; a stale ``out`` (its source prepared again) goes."""
    if out.exists():
        old = partial_name(out.with_name(f"{out.name}-old"))
        os.replace(out, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, out)


# --------------------------------------------------------------------------- writing the parts


class Source:
    """The prepared folder's arrays, mapped (numpy, as stored: bfloat16 as uint16)."""

    def __init__(self, root: Path, manifest: dict, seed: int):
        self.root, self.manifest = root, manifest
        arrays = manifest["arrays"]
        self.specs = arrays
        self.x = self._load("x")
        self.y = self._load("y")
        self.indptr = self._load("indptr")
        self.indices = self._load("indices")
        self.edge_attr = self._load(CSC_EDGE_ATTR) if CSC_EDGE_ATTR in arrays else None
        self.n = int(self.indptr.shape[0]) - 1
        if SPLITS[0] in arrays:
            self.splits = {k: self._load(k) for k in SPLITS}
        else:  # the splits a run of this seed draws, fixed now: machines hold only their members
            self.splits = {k: s.numpy() for k, s in zip(SPLITS, random_split(self.n, seed))}

    def _load(self, key: str) -> np.ndarray:
        return np.load(self.root / self.specs[key]["file"], mmap_mode="r", allow_pickle=False)


def _write(root: Path, tmp: Path, manifest: dict, parts: int, method: str, seed: int, progress: bool) -> dict:
    src = Source(root, manifest, seed)
    bar = _bar(progress, root, parts)
    with bar:
        train = _members(src.splits["train_idx"], src.n)
        bar.set_postfix_str(f"assigning nodes ({method})")
        if method == "metis":
            assignment = _assign_metis(src, parts, train, seed)
        else:
            assignment = _assign_stream(src, parts, train, tmp)
        bounds, order, new_of = _relabel(assignment, parts, tmp)
        del assignment
        empty = [m for m in range(parts) if bounds[m] == bounds[m + 1]]
        if empty:
            raise ConfigError(
                f"--parts {parts}: {method} left part {empty[0]} without nodes ({len(empty)} empty); the graph is "
                "too small for that many machines: give fewer parts."
            )
        bar.update(1)
        pid = uuid.uuid4().hex
        edge_bounds, written = [0], []
        for m in range(parts):
            bar.set_postfix_str(f"writing part {m}")
            stats = _write_part(src, tmp, m, parts, pid, bounds, edge_bounds[-1], order, new_of)
            edge_bounds.append(edge_bounds[-1] + stats["edges"])
            written.append(stats)
            bar.update(1)
        for scratch in ("order", "new_of", "assignment"):
            (tmp / f"{scratch}.npy").unlink(missing_ok=True)
    return _description(root, manifest, src, pid, parts, method, seed, bounds, edge_bounds, written)


def _members(ids: np.ndarray, n: int) -> np.ndarray:
    """A 0/1 int8 vector of length ``n`` marking ``ids``."""
    mark = np.zeros(n, dtype=np.int8)
    mark[np.asarray(ids)] = 1
    return mark


def _assign_metis(src: Source, parts: int, train: np.ndarray, seed: int) -> np.ndarray:
    """METIS on both directions of every edge (no self loops, no repeats), balancing nodes and,
    where there are any, training seeds."""
    pymetis = _pymetis()
    n = src.n
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.asarray(src.indptr)))
    sources = np.asarray(src.indices)
    keys = np.concatenate([sources * n + dst, dst * n + sources])
    del dst
    keys = np.unique(keys[keys // n != keys % n])
    rows, cols = keys // n, keys % n
    del keys
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=xadj[1:])
    weights = np.stack([np.ones(n, dtype=np.int64), train.astype(np.int64)], axis=1).ravel() if train.any() else None
    options = pymetis.Options(seed=seed)
    result = pymetis.part_graph(parts, pymetis.CSRAdjacency(xadj, cols), vweights=weights, options=options)
    return np.asarray(result.vertex_part, dtype=np.int64)


def _assign_stream(src: Source, parts: int, train: np.ndarray, tmp: Path) -> np.ndarray:
    """Linear deterministic greedy over the CSC, a chunk of nodes at a time (see the module); the
    assignment is a file in ``tmp`` (the training mark, one byte a node, is the pass's memory)."""
    n = src.n
    assignment = np.lib.format.open_memmap(tmp / "assignment.npy", mode="w+", dtype=np.int32, shape=(n,))
    assignment[:] = -1
    node_cap = (1 + STREAM_SLACK) * n / parts
    train_cap = max(1.0, (1 + STREAM_SLACK) * float(train.sum()) / parts)
    sizes = np.zeros(parts, dtype=np.float64)
    train_sizes = np.zeros(parts, dtype=np.float64)
    step = max(1, chunk_bytes() // 64)
    for start in range(0, n, step):
        stop = min(n, start + step)
        indptr = np.asarray(src.indptr[start : stop + 1])
        indices = np.asarray(src.indices[indptr[0] : indptr[-1]])
        with signals_deferred():
            _greedy()(indptr - indptr[0], indices, start, train, assignment, sizes, train_sizes, node_cap, train_cap)
    return assignment


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


def _relabel(assignment: np.ndarray, parts: int, tmp: Path) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Part boundaries, and the maps new -> old id (``order``) and old -> new (``new_of``), as
    files in ``tmp`` (N each); within a part, nodes keep their order."""
    n = assignment.shape[0]
    counts = np.bincount(assignment, minlength=parts)
    bounds = [0, *np.cumsum(counts).tolist()]
    order = np.lib.format.open_memmap(tmp / "order.npy", mode="w+", dtype=np.int64, shape=(n,))
    new_of = np.lib.format.open_memmap(tmp / "new_of.npy", mode="w+", dtype=np.int64, shape=(n,))
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
    src: Source, tmp: Path, m: int, parts: int, pid: str, bounds: list, edge_start: int, order, new_of
) -> dict:
    """``part-m/``: rows, labels, ids, split members and the in-edges of the nodes in
    ``[bounds[m], bounds[m + 1])``; returns its counts."""
    lo, hi = bounds[m], bounds[m + 1]
    folder = part_folder(tmp, m)
    folder.mkdir()
    owned = np.asarray(order[lo:hi])  # original ids, ascending
    step = max(1, chunk_bytes() // max(64, src.x[:1].nbytes * 2))
    arrays = {
        "node_ids": _write_rows(folder / "node_ids.npy", owned, step, lambda ids: ids),
        "x": _write_rows(folder / "x.npy", owned, step, lambda ids: src.x[ids], src.x)
        | {"dtype": src.specs["x"]["dtype"]},
        "y": _write_rows(folder / "y.npy", owned, step, lambda ids: src.y[ids], src.y),
    }
    indptr = np.asarray(src.indptr)
    degrees = indptr[owned + 1] - indptr[owned]
    part_indptr = np.zeros(owned.shape[0] + 1, dtype=np.int64)
    np.cumsum(degrees, out=part_indptr[1:])
    write_array(
        folder / "indptr.npy", np.int64, part_indptr.shape, lambda out: out.__setitem__(slice(None), part_indptr)
    )
    arrays["indptr"] = _spec("indptr.npy", part_indptr)
    remote = _write_edges(src, folder, owned, part_indptr, new_of, lo, hi, arrays)
    for key in SPLITS:
        members = new_of[np.asarray(src.splits[key])]
        members = np.sort(members[(members >= lo) & (members < hi)])
        write_array(
            folder / f"{key}.npy", np.int64, members.shape, lambda out, v=members: out.__setitem__(slice(None), v)
        )
        arrays[key] = _spec(f"{key}.npy", members)
    for spec in arrays.values():
        spec.update(stat_input(folder / spec["file"]))
    part = {"format": FORMAT, "id": pid, "part": m, "parts": parts, "start": lo, "stop": hi}
    part.update(edge_start=edge_start, edge_stop=edge_start + int(part_indptr[-1]), arrays=arrays)
    replace(folder / PART_FILE, json.dumps(part, indent=1) + "\n")
    return {
        "nodes": hi - lo,
        "edges": int(part_indptr[-1]),
        "remote_edges": remote,
        **{key.replace("_idx", ""): int(arrays[key]["shape"][0]) for key in SPLITS},
        "bytes": sum(int(spec["size"]) for spec in arrays.values()),
    }


def _write_rows(target: Path, owned: np.ndarray, step: int, rows, like: np.ndarray | None = None) -> dict:
    sample = rows(owned[:0]) if like is None else like
    shape = (owned.shape[0], *sample.shape[1:])

    def fill(out: np.ndarray) -> None:
        for start in range(0, owned.shape[0], step):
            out[start : start + step] = rows(owned[start : start + step])

    write_array(target, sample.dtype, shape, fill)
    return {"file": target.name, "dtype": sample.dtype.name, "shape": list(shape)}


def _write_edges(src: Source, folder: Path, owned, part_indptr, new_of, lo: int, hi: int, arrays: dict) -> int:
    """The part's CSC sources in global (new) ids, and its edges' features in that order; returns
    how many of its edges come from another part (the edge cut it sees)."""
    e = int(part_indptr[-1])
    indptr = np.asarray(src.indptr)
    remote = [0]
    width = src.edge_attr[:1].nbytes if src.edge_attr is not None else 0
    step = max(1, chunk_bytes() // (48 + 2 * width))

    def positions(start: int, stop: int) -> np.ndarray:
        """Source CSC positions of the part's edges ``[start, stop)``: each node's in-edges that
        fall in the window, never a whole hub's list per chunk."""
        first = int(np.searchsorted(part_indptr, start, side="right")) - 1
        last = int(np.searchsorted(part_indptr, stop, side="left"))
        lo = np.maximum(part_indptr[first:last], start)
        hi = np.minimum(part_indptr[first + 1 : last + 1], stop)
        lengths = hi - lo
        begin = indptr[owned[first:last]] + (lo - part_indptr[first:last])
        return np.repeat(begin - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))

    def sources(out: np.ndarray) -> None:
        for start in range(0, e, step):
            stop = min(e, start + step)
            ids = new_of[np.asarray(src.indices[positions(start, stop)])]
            remote[0] += int(((ids < lo) | (ids >= hi)).sum())
            out[start:stop] = ids

    write_array(folder / "indices.npy", np.int64, (e,), sources)
    arrays["indices"] = {"file": "indices.npy", "dtype": "int64", "shape": [e]}
    if src.edge_attr is not None:

        def features(out: np.ndarray) -> None:
            for start in range(0, e, step):
                stop = min(e, start + step)
                out[start:stop] = src.edge_attr[positions(start, stop)]

        shape = (e, *src.edge_attr.shape[1:])
        write_array(folder / "edge_attr.npy", src.edge_attr.dtype, shape, features)
        arrays["edge_attr"] = {"file": "edge_attr.npy", "dtype": src.edge_attr.dtype.name, "shape": list(shape)}
    return remote[0]


def _spec(file: str, array: np.ndarray) -> dict:
    return {"file": file, "dtype": array.dtype.name, "shape": list(array.shape)}


def _description(root, manifest, src: Source, pid, parts, method, seed, bounds, edge_bounds, written) -> dict:
    """``partition.json``: what every machine reads (boundaries, counts), and what a person
    reads (balance as the largest part over the mean, the edge cut)."""
    edges = sum(p["edges"] for p in written)
    cut = sum(p["remote_edges"] for p in written)

    def balance(key: str) -> float:
        values = [p[key] for p in written]
        mean = sum(values) / parts
        return round(max(values) / mean, 3) if mean else 1.0

    x_spec = manifest["arrays"]["x"]
    return {
        "format": FORMAT,
        "id": pid,
        "parts": parts,
        "method": method,
        "seed": seed,
        "splits": "files" if SPLITS[0] in manifest["arrays"] else f"drawn with seed {seed}",
        "splits_seed": None if SPLITS[0] in manifest["arrays"] else seed,
        "boundaries": bounds,
        "edge_boundaries": edge_bounds,
        "dtype": x_spec["dtype"],
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
