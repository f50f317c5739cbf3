"""A link task's topology from a prepared folder: built once, through the disk, and memory-mapped.

Which edges a link task holds out (and so which edges pass messages) depends on the target edge
type, ``train.seed``, ``link.val_fraction``/``test_fraction``/``eval_negatives``/``protocol``,
reverse edges and whether the dataset brings its own held-out edges: no file ``gnnbridge prepare`` writes
ahead of the run can hold it. So the first process that needs a given task builds it into
``FOLDER/prepared/link-<key>/`` (``key`` hashes all of those and the folder's manifest), under
the folder's prepare lock, every file under a temporary name renamed when whole and a small
``manifest.json`` written last; every later run, and every rank of this one (which re-derive
their record, see :func:`~gnnbridge.core.app.preflight.rederive`), finds it built and maps it
read-only, so a machine's ranks share it through the page cache and a topology larger than
memory trains.

The build reads the edges a chunk at a time (:func:`~gnnbridge.core.storage.prepare.chunk_bytes`)
and gives exactly the arrays of :func:`~gnnbridge.core.tasks.link.link_task` (tested tensor
for tensor): the distinct pairs by an external sort (sorted runs on disk, merged), the
val and test pairs drawn from ``random_split``'s permutation, the train pairs by a chunked scan
against the held-out pairs (small: in memory), the held-out edges' negatives a block of rows at
a time (or, under ``link.protocol=shared``, each split's negative pairs, drawn against binary
searches in the sorted target keys), the target's and its mirror's CSC by prepare's counting sort, ``reverse_eid`` and
``twin_eid`` by binary searches in sorted files; the other relations' CSC files are the ones
prepare wrote. What stays in memory: the
validation and test edges, node-sized arrays, and the permutation that draws the split (8
bytes per distinct target edge while it is drawn, as ``random_split`` draws it, so that the
split is the ``.npz``'s).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch

import gnnbridge.core.storage.prepare as preparing
from gnnbridge.core.errors import DataError, ResourceError
from gnnbridge.core.files import PARTIAL, replace, taking_turns
from gnnbridge.core.records.data import GraphData, held_out_split
from gnnbridge.core.records.hetero import (
    HOMOGENEOUS_EDGE,
    REVERSE_PREFIX,
    EdgeType,
    HeteroGraphData,
    HeteroSource,
    edge_name,
    find_edge_type,
    reverse_types,
)
from gnnbridge.core.storage.folder import MANIFEST, PREPARED, advise_uncacheable, mapped
from gnnbridge.core.tasks import (
    LinkSettings,
    check_pairs,
    distinct_pairs,
    for_link_task,
    homogeneous_source,
    negative_destinations,
    shared_negatives,
)

FORMAT = 1
FAN_IN = 64  # sorted runs merged at once (a block of each in memory)


class _NoBar:
    def update(self, _n) -> None:
        pass


def link_record(source, settings: LinkSettings, fits=None) -> HeteroGraphData:
    """The one way a link task's record is built, for every caller: mapped from the folder's link
    cache where ``source`` is a prepared folder (built now if this is the first process to need
    it), else built in memory (an ``.npz``, arrays, a read-only folder that lacks its cache). The
    two builds give the same tensors (tested); the disk's exists because the memory one holds the
    whole graph's pairs at once. ``source``: a homogeneous :class:`GraphData` (one node type, its
    reverse edges always added) or a :class:`HeteroSource`. ``fits(source, reverse)``: refuses a
    heterogeneous source this machine cannot hold, before either build."""
    if fits is not None and isinstance(source, HeteroSource):
        fits(source, settings.reverse)
    if getattr(source, "folder", None) is not None:
        cached = folder_link_task(source, *settings.arguments)
        if cached is not None:
            return cached
    if isinstance(source, GraphData):
        source = homogeneous_source(source, settings.seed)
        settings = dataclasses.replace(settings, reverse=True)
        if fits is not None:
            fits(source, True)
    return for_link_task(source, *settings.arguments)


def folder_link_task(
    source,
    edge_type: str,
    reverse: bool,
    seed: int,
    val_fraction: float,
    test_fraction: float,
    eval_negatives: int,
    protocol: str = "per-edge",
) -> HeteroGraphData | None:
    """The link record of a prepared folder's ``source`` (a homogeneous :class:`GraphData`, which
    always gets its reverse edges, or a :class:`HeteroSource`), its topology mapped from the
    folder's link cache (built now if this is the first process to need it). None where it
    cannot be: a folder this process may not write (read-only) that lacks the cache, or a
    heterogeneous folder prepared before prepare wrote topology; the caller then builds the
    record in memory, as from an ``.npz``."""
    root = Path(source.folder)
    if isinstance(source, GraphData):
        if edge_type:  # refused as homogeneous_source's one type refuses it
            find_edge_type([HOMOGENEOUS_EDGE], edge_type)
        task = _Task(
            root,
            source,
            {"node": source.num_nodes},
            {"node": source.x},
            HOMOGENEOUS_EDGE,
            None,
            True,
            True,
            source.name,
        )
    elif isinstance(source, HeteroSource) and source.mapped_topology(reverse) is not None:
        target = source.link_target(edge_type)
        held = source.held_out if target == source.target_edge else None
        task = _Task(
            root, source, dict(source.num_nodes), dict(source.x), target, held, reverse, source.undirected, source.name
        )
    else:
        return None
    settings = {
        "format": FORMAT,
        "target": list(task.target),
        "seed": seed,
        "val_fraction": val_fraction,
        "test_fraction": test_fraction,
        "eval_negatives": eval_negatives,
        "reverse": task.reverse,
        "held_out": task.held is not None,
        "homogeneous": isinstance(source, GraphData),
        "manifest": hashlib.sha256((root / MANIFEST).read_bytes()).hexdigest(),
    }
    if protocol != "per-edge":  # (absent for per-edge, so caches built before the protocol existed stay valid)
        settings["protocol"] = protocol
    task.protocol = protocol
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    cache = root / PREPARED / f"link-{key}"
    if not _built(cache, settings):
        try:
            with taking_turns(root / PREPARED):  # as prepare does: the two take turns
                if not _built(cache, settings):
                    task.build(cache, settings, seed, val_fraction, test_fraction, eval_negatives)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return None  # a read-only folder: built in memory instead
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ResourceError(
                    f"{cache}: the disk is full while building the link task's topology; nothing "
                    "half-written is left; free space, or prepare the dataset on another disk "
                    "(gnnbridge prepare DIR --out DIR)."
                ) from None
            raise
    return task.open(cache)


def _built(cache: Path, settings: dict) -> bool:
    """Whether ``cache`` holds a whole build for ``settings`` (its manifest, written last, says so;
    one that cannot be read is built again)."""
    try:
        manifest = json.loads((cache / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT and manifest.get("settings") == settings


class _Task:
    """One link task of one folder: what :func:`link_task` would be given, and the building of
    its cache."""

    def __init__(
        self,
        root: Path,
        source,
        num_nodes: dict,
        x: dict,
        target: EdgeType,
        held,
        reverse: bool,
        undirected: bool,
        name: str,
    ):
        self.root, self.source, self.num_nodes, self.x = root, source, num_nodes, x
        self.target, self.held, self.reverse, self.undirected, self.name = (
            tuple(target),
            held,
            reverse,
            undirected,
            name,
        )
        self.homogeneous = isinstance(source, GraphData)
        self.protocol = "per-edge"  # or "shared": see folder_link_task
        self.edge_types = [HOMOGENEOUS_EDGE] if self.homogeneous else list(source.edges)

    # ------------------------------------------------------------------ opening

    def open(self, cache: Path) -> HeteroGraphData:
        """The record, every topology tensor mapped read-only (from the cache, or from prepare's
        CSC files for the relations the task leaves as they are)."""
        manifest = json.loads((cache / "manifest.json").read_text())
        arrays = {k: mapped(self.root, spec) for k, spec in manifest["arrays"].items()}
        advise_uncacheable(arrays.values(), sum(a.nbytes for a in [*arrays.values(), *self.x.values()]))
        edge_index, indptr = {}, {}
        for et, where in manifest["edge_types"]:
            et = tuple(et)
            if where == "cache":
                indptr[et], edge_index[et] = arrays[f"indptr__{'__'.join(et)}"], arrays[f"edges__{'__'.join(et)}"]
            else:
                indptr[et], edge_index[et] = self.source.topology[et]
        rev = tuple(manifest["reverse_edge"]) if manifest["reverse_edge"] else None
        for name in ("val", "test"):  # the shared protocol keeps no per-edge negatives: [E, 0]
            if f"{name}_negatives" not in arrays:
                arrays[f"{name}_negatives"] = torch.zeros((arrays[f"{name}_edges"].shape[1], 0), dtype=torch.int64)
        return HeteroGraphData.unchecked(
            num_nodes=dict(self.num_nodes),
            x=dict(self.x),
            edge_index=edge_index,
            indptr=indptr,
            target_edge=self.target,
            reverse_edge=rev,
            reverse_eid=arrays.get("reverse_eid"),
            val_edges=arrays["val_edges"],
            test_edges=arrays["test_edges"],
            val_negatives=arrays["val_negatives"],
            test_negatives=arrays["test_negatives"],
            val_negative_pairs=arrays.get("val_negative_pairs"),
            test_negative_pairs=arrays.get("test_negative_pairs"),
            twin_eid=arrays.get("twin_eid"),
            undirected=self.undirected,
            name=self.name,
        )

    # ------------------------------------------------------------------ building

    def build(
        self, cache: Path, settings: dict, seed: int, val_fraction: float, test_fraction: float, eval_negatives: int
    ) -> None:
        """Write the cache (called under the folder's lock). A cache a killed build left without
        its manifest is removed first, with what any killed build left (none is running: this
        one holds the lock); so is this build's work, whatever ends it."""
        for dead in [
            *cache.parent.glob(f".link-*{PARTIAL}"),
            *(d for d in cache.parent.glob("link-*") if not (d / "manifest.json").is_file()),
        ]:
            shutil.rmtree(dead, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        work = cache.with_name(f".{cache.name}.{os.getpid()}{PARTIAL}")
        work.mkdir()
        try:
            manifest = self._derive(cache, work, seed, val_fraction, test_fraction, eval_negatives)
            replace(cache / "manifest.json", json.dumps({**manifest, "settings": settings}, indent=1) + "\n")
        except BaseException:
            shutil.rmtree(cache, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _derive(
        self, cache: Path, work: Path, seed: int, val_fraction: float, test_fraction: float, eval_negatives: int
    ) -> dict:
        target, num_nodes = self.target, self.num_nodes
        n_src, n_dst = num_nodes[target[0]], num_nodes[target[2]]
        if n_dst < 2:
            raise DataError(
                f"Link prediction on ({edge_name(target)}) needs at least 2 '{target[2]}' nodes to draw "
                f"negatives; the graph has {n_dst}."
            )
        if self.held is not None:
            for name, held in zip(("val_edges", "test_edges"), self.held):
                check_pairs(f"{name}[{edge_name(target)}]", held, target, num_nodes)
        pairs = external_unique((s * n_dst + d for s, d in self._target_chunks(work, seed)), work, "pairs")
        same = target[0] == target[2]
        if self.held is None:
            val, test = self._split(pairs, work, seed, val_fraction, test_fraction)
        else:
            val, test = self.held
        val, test = (distinct_pairs(e, n_dst) for e in (val, test))
        _check_held(val, test, n_dst)
        held_ids = np.unique(_pair_ids(torch.cat([val, test], dim=1).numpy(), n_dst, same))
        arrays = {}
        files = _Files(self.root, cache, arrays)
        train = self._train(pairs, held_ids, n_dst, same, work)
        if train.shape[1] == 0:
            raise DataError(f"The train split of ({edge_name(target)}) is empty.")
        mirrors = self._mirrors(pairs, n_src, n_dst, work)
        types = {et: ("mirror" if et in mirrors else "cache" if et == target else "prepared") for et in self.edge_types}
        if self.reverse:
            skip = {target, *mirrors} if mirrors else set()
            types.update(
                {
                    rev: ("mirror" if forward == target else "prepared")
                    for rev, forward in reverse_types(types, skip).items()
                }
            )
        rev = (target[2], REVERSE_PREFIX + target[1], target[0])
        reverse_edge = mirrors[0] if mirrors else rev if rev in types else None
        step = _edges_per_chunk()
        files.csc(target, train, n_dst, step)
        target_edges = np.load(cache / files.name("edges", target), mmap_mode="r")
        if reverse_edge is not None:
            files.csc(reverse_edge, train[::-1], n_src, step)
            files.write(
                "reverse_eid",
                (train.shape[1],),
                lambda out: _positions(target_edges, np.load(work / "train_keys.npy", mmap_mode="r"), n_dst, out, step),
            )
        if same:
            files.write("twin_eid", (train.shape[1],), lambda out: _twins(target_edges, n_dst, work, out, step))
        for name, edges in (("val", val), ("test", test)):
            files.small(f"{name}_edges", edges.contiguous().numpy())
        self._negatives(files, pairs, held_ids, val, test, seed, eval_negatives)
        order = [[list(et), "cache" if where in ("cache", "mirror") else "prepared"] for et, where in types.items()]
        return {
            "format": FORMAT,
            "target_edge": list(target),
            "reverse_edge": list(reverse_edge) if reverse_edge else None,
            "edge_types": order,
            "arrays": arrays,
        }

    def _negatives(self, files, pairs, held_ids, val, test, seed: int, eval_negatives: int) -> None:
        """As :func:`link_task` draws them, from the same generator: ``k`` per held-out edge (a
        block of rows at a time), or under the shared protocol each split's negative pairs, the
        pairs that are edges found by binary search in the sorted target keys."""
        n_dst, same = self.num_nodes[self.target[2]], self.target[0] == self.target[2]
        gen = torch.Generator().manual_seed(seed + 1)
        if self.protocol == "shared":
            edges = pairs.shape[0] + (val.shape[1] + test.shape[1] if self.held is not None else 0)
            is_edge = functools.partial(_is_edge, pairs, held_ids, n_dst, same)
            for name, chosen in zip(
                ("val", "test"), shared_negatives(self.target, self.num_nodes, eval_negatives, edges, gen, is_edge)
            ):
                files.small(f"{name}_negative_pairs", chosen.numpy())
            return
        k = min(eval_negatives, n_dst - 1)
        for name, edges in (("val", val), ("test", test)):
            files.write(
                f"{name}_negatives", (edges.shape[1], k), lambda out, dst=edges[1]: _negatives(dst, k, n_dst, gen, out)
            )

    def _target_chunks(self, work: Path, seed: int):
        """(src, dst) chunks of the target's edges, as :func:`link_task` is given them: a
        heterogeneous folder's edge file; a homogeneous graph's distinct undirected pairs, each
        in the direction :func:`~gnnbridge.core.tasks.link.from_homogeneous` draws (the same
        generator, drawn a chunk at a time: the same numbers)."""
        step = _edges_per_chunk()
        if not self.homogeneous:
            ei = self.source.edges[self.target].numpy()
            for start in range(0, ei.shape[1], step):
                yield np.array(ei[0, start : start + step]), np.array(ei[1, start : start + step])
            return
        n = self.num_nodes["node"]
        unordered = external_unique(_undirected_keys(self.source, step), work, "undirected")
        gen = torch.Generator().manual_seed(seed)  # homogeneous_source's seed: train.seed
        for start in range(0, unordered.shape[0], step):
            keys = np.array(unordered[start : start + step])
            lo, hi = keys // n, keys % n
            flip = (torch.rand(keys.shape[0], generator=gen) < 0.5).numpy()
            yield np.where(flip, hi, lo), np.where(flip, lo, hi)

    def _split(self, pairs: np.ndarray, work: Path, seed: int, val_fraction: float, test_fraction: float):
        """As :func:`~gnnbridge.core.tasks.link._split_pairs`: groups (a pair, or between
        nodes of one type an unordered pair), drawn by ``random_split``; the chosen groups' pairs
        (a few: the fractions) are gathered by a scan."""
        n_dst, same = self.num_nodes[self.target[2]], self.target[0] == self.target[2]
        step = _edges_per_chunk()
        groups = (
            pairs
            if not same
            else external_unique(
                (
                    _pair_ids(_split_keys(pairs[s : s + step], n_dst), n_dst, True)
                    for s in range(0, pairs.shape[0], step)
                ),
                work,
                "groups",
            )
        )
        if groups.shape[0] < 3:
            raise DataError(
                f"({edge_name(self.target)}) has {groups.shape[0]} distinct edges; link prediction needs "
                "at least 3 (one per split)."
            )
        val, test = held_out_split(groups.shape[0], seed, (1 - val_fraction - test_fraction, val_fraction), unit="edge")
        out = []
        for chosen in (val, test):
            wanted, kept = np.asarray(groups[chosen.numpy()]), [np.zeros((2, 0), np.int64)]
            for s in range(0, pairs.shape[0], step):
                part = _split_keys(pairs[s : s + step], n_dst)
                kept.append(part[:, _member(_pair_ids(part, n_dst, same), wanted)])
            out.append(torch.from_numpy(np.concatenate(kept, axis=1)))
        return out

    def _train(self, pairs: np.ndarray, held_ids: np.ndarray, n_dst: int, same: bool, work: Path) -> np.ndarray:
        """The pairs not held out, [2, T] in key order (as :func:`link_task` keeps them), in
        ``work/train.npy``, and their keys in ``work/train_keys.npy``."""
        step = _edges_per_chunk()

        def chunks():
            for s in range(0, pairs.shape[0], step):
                keys = np.array(pairs[s : s + step])
                yield keys[~_member(_pair_ids(_split_keys(keys, n_dst), n_dst, same), held_ids)]

        count = sum(k.shape[0] for k in chunks())

        def fill_keys(out: np.ndarray) -> None:
            at = 0
            for keys in chunks():
                out[at : at + keys.shape[0]] = keys
                at += keys.shape[0]

        preparing.write_array(work / "train_keys.npy", np.int64, (count,), fill_keys)
        keys = np.load(work / "train_keys.npy", mmap_mode="r")

        def fill(out: np.ndarray) -> None:
            for s in range(0, count, step):
                out[:, s : s + step] = _split_keys(keys[s : s + step], n_dst)

        preparing.write_array(work / "train.npy", np.int64, (2, count), fill)
        return np.load(work / "train.npy", mmap_mode="r")

    def _mirrors(self, pairs: np.ndarray, n_src: int, n_dst: int, work: Path) -> list[EdgeType]:
        """As :func:`~gnnbridge.core.tasks.link._message_passing`: a type running the other way
        that holds every target pair flipped (checked by binary search in its sorted keys)."""
        target, step = self.target, _edges_per_chunk()
        found = []
        for et in self.edge_types:
            if et == target or (et[0], et[2]) != (target[2], target[0]):
                continue
            ei = self.source.edges[et].numpy()
            if ei.shape[1] < self.source.edges[target].shape[1]:
                continue
            keys = external_unique(
                (
                    np.array(ei[0, s : s + step]) * n_src + np.array(ei[1, s : s + step])
                    for s in range(0, ei.shape[1], step)
                ),
                work,
                "mirror",
            )
            for s in range(0, pairs.shape[0], step):
                src, dst = _split_keys(pairs[s : s + step], n_dst)
                if not _member(dst * n_src + src, keys).all():
                    break
            else:
                found.append(et)
        if len(found) > 1:
            raise DataError(
                f"Edge types {' and '.join(f'({edge_name(et)})' for et in found)} both mirror the target "
                f"({edge_name(target)}); keep one."
            )
        return found


class _Files:
    """The cache's arrays, each written under a temporary name and renamed (prepare's
    :func:`~gnnbridge.core.storage.prepare.write_array`), recorded in ``arrays`` as the folder's
    manifest records its arrays (paths relative to the folder)."""

    def __init__(self, root: Path, cache: Path, arrays: dict):
        self.root, self.cache, self.arrays = root, cache, arrays

    @staticmethod
    def name(kind: str, et: EdgeType) -> str:
        return f"{kind}__{'__'.join(et)}.npy"

    def record(self, key: str, file: str, shape: tuple) -> None:
        self.arrays[key] = {
            "file": str((self.cache / file).relative_to(self.root)),
            "dtype": "int64",
            "shape": list(shape),
        }

    def csc(self, et: EdgeType, ei: np.ndarray, n: int, step: int) -> None:
        indptr, edges = self.name("indptr", et), self.name("edges", et)
        preparing.counting_sort(
            self.root, ei, n, _NoBar(), self.cache / indptr, self.cache / edges, step, with_destinations=True
        )
        self.record(indptr[:-4], indptr, (n + 1,))
        self.record(edges[:-4], edges, (2, int(ei.shape[1])))

    def write(self, key: str, shape: tuple, fill) -> None:
        preparing.write_array(self.cache / f"{key}.npy", np.int64, shape, fill)
        self.record(key, f"{key}.npy", shape)

    def small(self, key: str, array: np.ndarray) -> None:
        def fill(out: np.ndarray) -> None:
            out[...] = array

        self.write(key, array.shape, fill)


# --------------------------------------------------------------------------- out-of-core pieces


def _edges_per_chunk() -> int:
    return max(1, preparing.chunk_bytes() // 48)  # a chunk's two ids, keys, order and masks


def _split_keys(keys: np.ndarray, n_dst: int) -> np.ndarray:
    """[2, K] (src, dst) pairs of ``src * n_dst + dst`` keys."""
    keys = np.asarray(keys)
    return np.stack([keys // n_dst, keys % n_dst])


def _pair_ids(pairs: np.ndarray, n_dst: int, same: bool) -> np.ndarray:
    """As :func:`~gnnbridge.core.tasks.link._pair_ids`: one key per unordered pair between
    nodes of one type, the ordered key otherwise."""
    if not same:
        return pairs[0] * n_dst + pairs[1]
    return np.minimum(pairs[0], pairs[1]) * n_dst + np.maximum(pairs[0], pairs[1])


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each value is in ``sorted_set`` (sorted; it may be a memory map: a binary search
    reads a few of its pages per value)."""
    if sorted_set.shape[0] == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), sorted_set.shape[0] - 1)
    return np.asarray(sorted_set[at]) == values


def _undirected_keys(data: GraphData, step: int):
    """``min * N + max`` of a homogeneous graph's CSC edges, self-loops dropped, a chunk at a time."""
    indptr, indices, n = data.indptr.numpy(), data.indices.numpy(), data.num_nodes
    for start in range(0, indices.shape[0], step):
        src = np.array(indices[start : start + step])
        dst = np.searchsorted(indptr, np.arange(start, start + src.shape[0]), side="right") - 1
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        keep = lo != hi
        yield lo[keep] * n + hi[keep]


def external_unique(chunks, work: Path, name: str) -> np.ndarray:
    """The sorted distinct values of int64 ``chunks``, through the disk: each chunk is sorted
    into a run file, and runs are merged (at most :data:`FAN_IN` at once, in rounds) a block of
    each at a time. Memory: one chunk, or one block per run merged. Returns ``work/NAME.npy``
    memory-mapped (read-only)."""
    runs = []
    for keys in chunks:
        keys = np.unique(keys)
        if keys.shape[0]:
            runs.append(work / f"{name}.run{len(runs)}.bin")
            keys.astype(np.int64).tofile(runs[-1])
    while len(runs) > FAN_IN:
        runs = [
            _merge(runs[i : i + FAN_IN], work / f"{name}.run{len(runs)}-{i}.bin") for i in range(0, len(runs), FAN_IN)
        ]
    raw = _merge(runs, work / f"{name}.bin")
    count = raw.stat().st_size // 8
    out = work / f"{name}.npy"
    if not count:
        np.save(out, np.zeros(0, dtype=np.int64))
        return np.load(out)
    values = np.memmap(raw, dtype=np.int64, mode="r")
    preparing.write_array(out, np.int64, (count,), functools.partial(_copy_chunked, values))
    del values  # the merged run's mapping goes before its file
    raw.unlink()
    return np.load(out, mmap_mode="r")


def _merge(runs: list[Path], into: Path) -> Path:
    """Merge sorted distinct runs into one (``into``), removing them: every value up to the
    smallest of the blocks' last values is final in each step."""
    sizes = [f.stat().st_size // 8 for f in runs]
    block = max(1, _edges_per_chunk() * 4 // max(1, len(runs)))
    pos, last = [0] * len(runs), None
    with open(into, "wb") as f:
        while True:
            live = [i for i in range(len(runs)) if pos[i] < sizes[i]]
            if not live:
                break
            heads = {i: np.fromfile(runs[i], dtype=np.int64, count=block, offset=8 * pos[i]) for i in live}
            bound = min(int(h[-1]) for h in heads.values())
            parts = []
            for i, h in heads.items():
                cut = int(np.searchsorted(h, bound, side="right"))
                parts.append(h[:cut])
                pos[i] += cut
            merged = np.unique(np.concatenate(parts))
            if last is not None and merged.shape[0] and merged[0] == last:
                merged = merged[1:]
            if merged.shape[0]:
                merged.tofile(f)
                last = int(merged[-1])
    for run in runs:
        run.unlink()
    return into


def _positions(target_edges: np.ndarray, train_keys: np.ndarray, n_dst: int, out: np.ndarray, step: int) -> None:
    """``reverse_eid``: each target edge's position among the train pairs in key order, which is
    where its flipped copy stands in the mirror type (a stable sort by the train source keeps
    the key order)."""
    for s in range(0, target_edges.shape[1], step):
        keys = np.array(target_edges[0, s : s + step]) * n_dst + np.array(target_edges[1, s : s + step])
        out[s : s + step] = np.searchsorted(train_keys, keys)


def _twins(target_edges: np.ndarray, n: int, work: Path, out: np.ndarray, step: int) -> None:
    """``twin_eid``: the position of (v, u) among the target edges (sorted by destination, then
    source: by ``dst * n + src``) for each edge (u, v), or -1."""
    e = target_edges.shape[1]

    def fill_keys(keys: np.ndarray) -> None:
        for s in range(0, e, step):
            keys[s : s + step] = np.array(target_edges[1, s : s + step]) * n + np.array(target_edges[0, s : s + step])

    preparing.write_array(work / "csc_keys.npy", np.int64, (e,), fill_keys)
    csc_keys = np.load(work / "csc_keys.npy", mmap_mode="r")
    for s in range(0, e, step):
        wanted = np.array(target_edges[0, s : s + step]) * n + np.array(target_edges[1, s : s + step])
        at = np.minimum(np.searchsorted(csc_keys, wanted), e - 1)
        out[s : s + step] = np.where(np.asarray(csc_keys[at]) == wanted, at, -1)


def _negatives(positive_dst: torch.Tensor, k: int, n_dst: int, gen: torch.Generator, out: np.ndarray) -> None:
    """:func:`~gnnbridge.core.tasks.negatives.negative_destinations` a block of rows at a time into
    ``out``: the generator draws each row's numbers in turn, so the blocks are the whole draw's
    rows (tested against it)."""
    width = n_dst - 1 if 2 * k >= n_dst - 1 else k  # what one row draws
    rows = max(1, preparing.chunk_bytes() // (24 * width))
    for s in range(0, positive_dst.shape[0], rows):
        out[s : s + rows] = negative_destinations(positive_dst[s : s + rows], k, n_dst, gen).numpy()


def _is_edge(
    pairs: np.ndarray, held_ids: np.ndarray, n_dst: int, same: bool, src: torch.Tensor, dst: torch.Tensor
) -> torch.Tensor:
    """Whether each (src, dst) is a target pair (either direction between nodes of one type) or
    a held-out one: ``is_edge`` of :func:`~gnnbridge.core.tasks.negatives.shared_negative_pairs`
    over the sorted keys on disk."""
    s, d = src.numpy(), dst.numpy()
    hit = _member(s * n_dst + d, pairs) | _member(_pair_ids(np.stack([s, d]), n_dst, same), held_ids)
    if same:
        hit |= _member(d * n_dst + s, pairs)
    return torch.from_numpy(hit)


def _check_held(val: torch.Tensor, test: torch.Tensor, n_dst: int) -> None:
    """What :meth:`HeteroGraphData.validate` refuses of held-out edges, in its words (the train
    pairs exclude them by construction, so none can leak)."""
    for name, edges in (("val", val), ("test", test)):
        if edges.shape[1] == 0:
            raise DataError(f"{name}_edges must be [2, E>0] with one row of {name}_negatives per edge.")
    if bool(np.isin(val[0].numpy() * n_dst + val[1].numpy(), test[0].numpy() * n_dst + test[1].numpy()).any()):
        raise DataError("The val and test edges overlap; splits must be disjoint.")


def _copy_chunked(values: np.ndarray, array: np.ndarray) -> None:
    """``array[:] = values``, a chunk of edges at a time (bounded memory for mapped arrays)."""
    step = _edges_per_chunk()
    for s in range(0, values.shape[0], step):
        array[s : s + step] = values[s : s + step]
