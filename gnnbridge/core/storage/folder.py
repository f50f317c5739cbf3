"""A dataset that is a folder: opening what ``gnnbridge prepare`` derived, memory-mapped.

A *prepared folder* holds the dataset's ``.npy`` files (the ``.npz`` format, one file per
member) and ``prepared/``: the CSC topology (of a homogeneous graph; of each edge type and
each ``rev_`` type of a heterogeneous one), features converted to a smaller dtype if asked,
and ``prepared/manifest.json``, written last. The manifest lists every input with its size
and modification time, every array a record is built from (file, dtype, shape, all paths
relative to the folder, so a copy elsewhere works) and what was checked.

Opening maps every array read-only (``np.load(mmap_mode="r")``): pages come from the OS page
cache as a batch touches them, file-backed, so a graph larger than memory trains and the ranks
of a machine share one copy. When the arrays together exceed half of the machine's RAM, so the
page cache cannot keep them, the large ones are advised ``MADV_RANDOM`` (:func:`advise_uncacheable`):
a page fault then reads one page instead of the kernel's read-around window (measured on a
31 GB feature file: 1.2 MB read per 3 KB row and 1.5k rows/s with read-around, 7 KB and 58k
rows/s without). A folder that fits keeps the read-around, which fills the page cache faster on
a cold first epoch. Nothing is validated again (that would read every page); instead an input
whose size or modification time differs from the manifest's is refused, naming it.
"""

from __future__ import annotations

import json
import os
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnnbridge.core.errors import DataError, DataFileNotFoundError
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData, random_split
from gnnbridge.core.records.features import advise
from gnnbridge.core.records.labels import classes_under, placeholder, stored
from gnnbridge.core.records.reading import Reading, as_reading
from gnnbridge.core.storage.formats import (
    EDGE_ATTR,
    NPZ_ARRAYS,
    as_edge_source,
    edge_labelled,
    hetero_source,
    is_member_name,
    missing_arrays,
)

FORMAT = 1
PREPARED = "prepared"
MANIFEST = f"{PREPARED}/manifest.json"
SPLITS = ("train_idx", "val_idx", "test_idx")
CSC_INDPTR, CSC_EDGES = "csc_indptr", "csc_edges"  # a heterogeneous folder's prepared topology (csc_keys)
CSC_EDGE_ATTR = "csc_edge_attr"  # edge features in the CSC order of the prepared topology (per type: csc_keys)
CHECK_STEP = 1 << 22  # elements a bounds check reads at a time
RANDOM_MIN_BYTES = 64 << 20  # an array read at random (no read-around) when the folder is too large to cache


def is_prepared(path: str | os.PathLike) -> bool:
    return (Path(path) / MANIFEST).is_file()


def not_prepared(path) -> DataError:
    return DataError(f"{path} is not prepared; run: gnnbridge prepare {path}")


def read_manifest(path: str | os.PathLike) -> dict:
    """The folder's manifest; a folder without one (or with one of another format) is refused."""
    root = Path(path)
    if not root.is_dir():
        # A run's config names the folder it was prepared in: say how to point the run elsewhere.
        raise DataFileNotFoundError(
            f"Dataset folder '{root}' does not exist; give a folder of .npy files that gnnbridge prepare has "
            "prepared (a run or checkpoint whose data moved: --set dataset.path=NEW)."
        )
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise not_prepared(root) from None
    except (OSError, ValueError) as exc:
        raise DataError(
            f"{root / MANIFEST} cannot be read ({str(exc)[:100]}); run gnnbridge prepare {root} again."
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{root / MANIFEST} is not a format-{FORMAT} manifest; run gnnbridge prepare {root} again.")
    return manifest


def prepared_bytes(path: str | os.PathLike) -> int:
    """The bytes of the arrays a run maps, from the manifest's shapes and dtypes (nothing read)."""
    arrays = read_manifest(path)["arrays"].values()
    return sum(
        int(np.prod(a["shape"])) * (2 if a["dtype"] == "bfloat16" else np.dtype(a["dtype"]).itemsize) for a in arrays
    )


def stat_input(file: Path) -> dict:
    st = file.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def changed_input(root: Path, manifest: dict) -> str | None:
    """The first input or derived file whose size or modification time differs from the
    manifest's (or that is gone), as the line that refuses it; None when every file is as
    prepared. Derived files are checked too: an edited ``prepared/indices.npy``, or a manifest
    pointing one array at another's file, is refused before any kernel reads it."""
    recorded = {name: seen for name, seen in manifest.get("inputs", {}).items()}
    for spec in manifest.get("arrays", {}).values():
        if isinstance(spec, dict) and "size" in spec:  # manifests written before this recorded none
            recorded.setdefault(spec["file"], {"size": spec["size"], "mtime_ns": spec.get("mtime_ns")})
            if recorded[spec["file"]] != {"size": spec["size"], "mtime_ns": spec.get("mtime_ns")}:
                return (
                    f"{root / MANIFEST} names {spec['file']} twice with different sizes; run gnnbridge prepare "
                    f"{root} again"
                )
    changed = changed_file(root, recorded)
    if changed is not None:
        file, missing = changed
        if missing:
            return f"{file} is missing since `gnnbridge prepare`; restore it, or run gnnbridge prepare {root} again"
        return f"{file} changed since `gnnbridge prepare` (size/modified time); run gnnbridge prepare {root} again"
    return unknown_member(root, manifest)


def changed_file(root: Path, recorded: dict[str, dict]) -> tuple[Path, bool] | None:
    """The first of the files ``recorded`` (name under ``root`` -> the size and modification
    time :func:`stat_input` gave when it was written) that is gone or differs now, with whether
    it is gone; None when every one is as written. What a prepared folder is checked by at open
    (it is used where it was prepared): a stat a file, nothing read. A machine's part, which is
    copied, is checked by content where its times differ (:mod:`.parts`)."""
    for name, seen in recorded.items():
        try:
            now = stat_input(root / name)
        except OSError:
            return root / name, True
        if now != {"size": seen.get("size"), "mtime_ns": seen.get("mtime_ns")}:
            return root / name, False
    return None


def unknown_member(root: Path, manifest: dict) -> str | None:
    """The line refusing a dataset file the manifest does not know (``train_idx.npy`` added after
    prepare, say): a run would otherwise ignore it silently and draw a split of its own."""
    known = set(manifest.get("inputs", {}))
    for file in sorted(root.glob("*.npy")):
        if file.name not in known and is_member_name(file.stem):
            return (
                f"{file} was added after `gnnbridge prepare` (its manifest does not list it); run gnnbridge "
                f"prepare {root} again to use it, or remove it"
            )
    return None


@dataclass(frozen=True)
class Written:
    """Who wrote a mapped file (``by``: the command) and what makes it whole again (``fix``):
    the end of the line that refuses it, or a corrupt array found in it."""

    by: str
    fix: str

    @classmethod
    def prepared(cls, root: Path) -> Written:
        return cls("gnnbridge prepare", f"remove {root / PREPARED} and run gnnbridge prepare {root}")


# Where each mapped array came from: (first byte, end byte, the array while alive, file, what
# wrote it and the fix). A kernel that finds an array corrupt names the file and the fix through
# :func:`origin`; the weak reference keeps a later allocation at the same address from being
# taken for it.
_ORIGINS: list[tuple[int, int, weakref.ref, Path, Written]] = []


def origin(tensor: torch.Tensor | None) -> tuple[Path, Written] | None:
    """``(file, who wrote it)`` of the mapped array that ``tensor`` views, or None."""
    if tensor is None or tensor.numel() == 0:
        return None
    address = tensor.data_ptr()
    _ORIGINS[:] = [entry for entry in _ORIGINS if entry[2]() is not None]
    for first, end, _, file, written in _ORIGINS:
        if first <= address < end:
            return file, written
    return None


class TopologyError(DataError):
    """A graph's CSC arrays name a node or an offset outside the graph: a corrupt (or edited)
    file, since every array a run builds itself is checked. ``array``: the tensor at fault,
    whose file (:func:`origin`) the line names."""

    def __init__(self, what: str, array: torch.Tensor | None):
        found = origin(array)
        super().__init__(
            f"{found[0]}: {what}: the file is corrupt or was changed after {found[1].by} wrote it; {found[1].fix}"
            if found
            else f"The graph's topology is corrupt: {what} (a corrupt dataset file?)."
        )


def check_mapped_csc(indptr: torch.Tensor, indices: torch.Tensor, num_src: int) -> None:
    """Refuse CSC arrays read from files whose offsets or ids leave the graph, before a library
    that trusts them (DGL's graph and sampler: a bad offset aborted the process) reads them.
    Arrays built in memory were checked when built, and are passed through. One pass over each
    array, a block at a time (the core sampler's kernels check as they read instead)."""
    if origin(indptr) is None and origin(indices) is None:
        return
    edges = int(indices.shape[0])
    check_offsets(indptr, edges)
    for start in range(0, edges, CHECK_STEP):
        block = indices[start : start + CHECK_STEP]
        low, high = int(block.min()), int(block.max())
        if low < 0 or high >= num_src:
            bad = low if low < 0 else high
            edge = start + int((block == bad).nonzero()[0])
            raise TopologyError(f"edge {edge} names source node {bad}, outside [0, {num_src})", indices)


def check_offsets(indptr: torch.Tensor, edges: int) -> None:
    """Refuse CSC offsets that do not run from 0 to ``edges`` without going backwards, naming
    the file they were mapped from (:class:`TopologyError`). One pass over ``indptr`` (8 bytes
    a node), a block at a time; the edges themselves are not read."""
    if int(indptr[0]) != 0 or int(indptr[-1]) != edges:
        raise TopologyError(f"the offsets run from {int(indptr[0])} to {int(indptr[-1])}, not 0 to {edges}", indptr)
    for start in range(0, indptr.shape[0] - 1, CHECK_STEP):
        block = indptr[start : start + CHECK_STEP + 1]
        if block.numel() > 1 and bool((block.diff() < 0).any()):
            node = start + int((block.diff() < 0).nonzero()[0])
            raise TopologyError(f"the offsets of node {node} run backwards", indptr)


def mapped(root: Path, spec: dict, written: Written | None = None) -> torch.Tensor:
    """One array of the manifest, memory-mapped read-only as a tensor of the recorded dtype.
    ``written``: who wrote the file and its fix, for the lines that refuse it (default: a
    prepared folder's)."""
    file = root / spec["file"]
    fix, recorded = (written.fix, f"{written.by} wrote") if written else (f"run gnnbridge prepare {root} again", "")
    try:
        array = np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{file} cannot be read ({str(exc)[:100]}); {fix}.") from None
    stored = "uint16" if spec["dtype"] == "bfloat16" else spec["dtype"]
    if array.dtype != np.dtype(stored) or list(array.shape) != list(spec["shape"]):
        raise DataError(
            f"{file} holds {array.dtype} {list(array.shape)} but {recorded or 'the manifest says'} {stored} "
            f"{spec['shape']}; {fix}."
        )
    written = written or Written.prepared(root)
    with warnings.catch_warnings():
        # torch warns that the array is not writable: the mapping is read-only on purpose (the
        # files are the dataset), and nothing writes into a record's tensors.
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(array)
    if array.nbytes:
        _ORIGINS.append((tensor.data_ptr(), tensor.data_ptr() + array.nbytes, weakref.ref(array), file, written))
    return tensor.view(torch.bfloat16) if spec["dtype"] == "bfloat16" else tensor


def open_prepared(path: str | os.PathLike, seed: int = 0, reading: Reading | str | None = None):
    """The record of a prepared folder (:class:`GraphData`, :class:`HeteroSource` or
    :class:`GraphCollection`), its arrays memory-mapped and not validated again; splits the
    folder lacks are drawn from ``seed`` exactly as the ``.npz`` loader draws them. It is read as
    ``reading`` says (a :class:`~gnnbridge.core.records.reading.Reading`, or its form alone;
    None: classes): the labels' form, an edge task's edge labels, a graph without node labels
    where the task reads none; the reading is part of ``mapped_from``, which a rank reopening
    the record is handed."""
    return _open_prepared(Path(path), seed, as_reading(reading))


def _open_prepared(root: Path, seed: int, reading: Reading):
    manifest = read_manifest(root)
    changed = changed_input(root, manifest)
    if changed:
        raise DataError(changed)
    arrays = {key: mapped(root, spec) for key, spec in manifest["arrays"].items()}
    advise_uncacheable(arrays.values(), sum(a.nbytes for a in arrays.values()))
    kind, name, form = manifest["kind"], root.name, reading.form
    if kind == "node" and as_edge_source(arrays, reading):  # as from an .npz, built at load
        record = edge_labelled(root, {k: v for k, v in arrays.items() if k in NPZ_ARRAYS}, name, reading)
    elif kind == "node" and "y" not in arrays:
        record = _unlabelled_graph(root, arrays, name, reading)
    elif kind == "node":
        record = _node_graph(arrays, manifest, seed, name, form)
    elif kind == "hetero":
        record = _hetero(root, arrays, manifest, name, reading)
    elif kind == "collection":  # loaded whole and validated: collections are many small graphs
        arrays = {k: v.clone() for k, v in arrays.items()}
        splits = [arrays[k] for k in SPLITS] if "train_idx" in arrays else None
        record = GraphCollection.from_edges(
            arrays["x"], arrays["edge_index"], arrays["node_ptr"], arrays["y"], splits, seed=seed, name=name,
            edge_attr=arrays.get(EDGE_ATTR), labels=form,
        )  # fmt: skip
    else:
        raise DataError(f"{root / MANIFEST} names kind {kind!r}; run gnnbridge prepare {root} again.")
    record.folder = root
    record.mapped_from = (open_prepared, (str(root), seed, reading))
    return record


def advise_uncacheable(arrays, total: int) -> None:
    """``MADV_RANDOM`` on each of ``arrays`` of at least RANDOM_MIN_BYTES when ``total`` (the
    bytes that compete for the page cache with them) exceeds half of the machine's RAM."""
    if total > physical_memory() // 2:
        for array in arrays:
            if array.nbytes >= RANDOM_MIN_BYTES:
                advise(array, "random")


def physical_memory() -> int:
    """The machine's RAM in bytes (``MemTotal``); 0 where it cannot be read (then every
    folder counts as too large to cache: the safe side for a gather's speed)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def csc_keys(edge_type: tuple) -> tuple[str, str]:
    """The manifest keys of one edge type's prepared topology: its CSC offsets, and its edges
    sorted by destination ([2, E]; row 0 is the CSC indices, row 1 their destinations)."""
    suffix = "__".join(edge_type)
    return f"{CSC_INDPTR}__{suffix}", f"{CSC_EDGES}__{suffix}"


def _hetero(root: Path, arrays: dict, manifest: dict, name: str, reading: Reading):
    """A :class:`HeteroSource` of the folder's typed arrays, with its prepared topology (per
    edge type and per ``rev_`` type) attached for node tasks. A manifest written before prepare
    wrote topology has none: node tasks then build it in memory, as from an ``.npz``."""
    topology = {}
    for key in [k for k in arrays if k.startswith(CSC_INDPTR + "__")]:
        edge_type = tuple(key.split("__")[1:])
        indptr_key, edges_key = csc_keys(edge_type)
        if edges_key in arrays:
            topology[edge_type] = (arrays[indptr_key], arrays[edges_key])
    derived = (CSC_INDPTR + "__", CSC_EDGES + "__", CSC_EDGE_ATTR + "__")
    typed = {k: v for k, v in arrays.items() if not k.startswith(derived)}
    record = hetero_source(root, typed, name, reading)
    if record.target_edge is None and manifest.get("target_edge"):  # a named dataset's default link target
        record.target_edge = tuple(manifest["target_edge"])
    if topology:
        record.topology = topology
        record.topology_edge_attr = {
            tuple(k.split("__")[1:]): v for k, v in arrays.items() if k.startswith(CSC_EDGE_ATTR + "__")
        }
        record.num_classes = int(manifest["summary"]["num_classes"])
    return record


def folder_labels(y: torch.Tensor, summary: dict, name: str, form: str) -> torch.Tensor:
    """A prepared folder's ``y`` as the run's target reads it (in ``form``, :mod:`.labels`): what prepare found
    (classes, or rows of targets and whether each is 0, 1 or NaN; a manifest from before targets
    holds classes) must suit the target, said in one line where it does not. Targets other than
    float32 are read into memory as float32 (mapped labels of classes stay mapped)."""
    found = summary.get("labels", "class")
    width = int(summary["num_classes"])
    if form == "class" and found != "class":
        raise DataError(
            f"Folder '{name}': y holds {width} target value(s) per node, not classes; set target=regression"
            f"{' or target=multilabel' if summary.get('binary') else ''}."
        )
    if form != "class" and found == "class":
        raise DataError(f"Folder '{name}': {classes_under(form, 'node', width)}")
    if form == "multilabel" and not summary.get("binary"):
        raise DataError(f"Folder '{name}': y holds values other than 0, 1 and NaN; target=multilabel reads 0/1 labels.")
    return y if form == "class" else stored(y, form)


def _unlabelled_graph(root: Path, arrays: dict, name: str, reading: Reading) -> GraphData:
    """A folder of a graph without node labels, as :func:`~.formats.unlabelled_graph` opens its
    ``.npz``: where the task reads none (link prediction) or for predict; else refused in the
    ``.npz``'s line."""
    if reading.node_labels_needed:
        raise missing_arrays(root, ["y"], reading)
    width, empty, form = reading.unlabelled_classes or 0, torch.empty(0, dtype=torch.int64), reading.form
    record = GraphData.unchecked(
        indptr=arrays["indptr"],
        indices=arrays["indices"],
        x=arrays["x"],
        y=placeholder(int(arrays["x"].shape[0]), width, form),
        train_idx=empty,
        val_idx=empty,
        test_idx=empty,
        num_classes=width,
        name=name,
        labels=form,
        edge_attr=arrays.get(CSC_EDGE_ATTR),
    )
    record.labelled = False
    return record


def _node_graph(arrays: dict, manifest: dict, seed: int, name: str, form: str) -> GraphData:
    n = int(arrays["x"].shape[0])
    splits = [arrays[k] for k in SPLITS] if "train_idx" in arrays else list(random_split(n, seed))
    return GraphData.unchecked(
        indptr=arrays["indptr"],
        indices=arrays["indices"],
        x=arrays["x"],
        y=folder_labels(arrays["y"], manifest["summary"], name, form),
        train_idx=splits[0],
        val_idx=splits[1],
        test_idx=splits[2],
        num_classes=int(manifest["summary"]["num_classes"]),
        name=name,
        labels=form,
        edge_attr=arrays.get(CSC_EDGE_ATTR),  # in the topology's CSC order (prepare sorted it)
    )
