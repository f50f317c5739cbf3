"""``gnnbridge prepare``: derive once, from a folder of ``.npy`` files, what training needs.

What a run would otherwise do at every start, on the whole graph in memory, is done here once,
a chunk at a time, with memory bounded by the chunk size (a fraction of RAM), never by the
data: every array's header is checked (dtype, dimensions) before it is read; node ids are
checked to lie in range, features to be finite, labels to be ``0 .. C-1``, splits to be
disjoint; a homogeneous graph's CSC topology (``prepared/indptr.npy``, ``prepared/indices.npy``)
is built by a stable counting sort over chunks of ``edge_index`` into memory-mapped outputs
(exactly :func:`~gnnbridge.core.records.csc.csc_from_coo`'s arrays, so batches equal the
``.npz``'s), and so is a heterogeneous graph's, per edge type and per ``rev_`` type (what
``dataset.reverse_edges`` adds), for its node tasks (link tasks hold edges out by seed, and
build their topology at load); features are converted to float16 or bfloat16 when asked. The
manifest (:mod:`gnnbridge.core.storage.folder`) is written last, so a folder without one is
never used half-prepared.

Every derived file is written under a temporary name, its space reserved up front
(``posix_fallocate``: a full disk is an error here, not a SIGBUS while writing a mapped page),
and renamed into place; ``prepared/.lock`` makes two prepares of one folder take turns.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from gnnbridge.core.errors import ConfigError, DataError, ResourceError
from gnnbridge.core.files import PARTIAL, fsync_file, partial_name, remove_partial, replace, replacing, taking_turns
from gnnbridge.core.host import available_memory
from gnnbridge.core.records.data import check_ids
from gnnbridge.core.records.hetero import edge_name, reverse_types
from gnnbridge.core.records.labels import infer_num_classes
from gnnbridge.core.records.reading import Reading
from gnnbridge.core.storage.folder import (
    CSC_EDGE_ATTR,
    CSC_INDPTR,
    FORMAT,
    MANIFEST,
    PREPARED,
    SPLITS,
    changed_input,
    csc_keys,
    read_manifest,
    stat_input,
)
from gnnbridge.core.storage.formats import (
    EDGE_ATTR,
    EDGE_LABEL,
    EDGE_SPLITS,
    NODE_PTR,
    NPZ_ARRAYS,
    check_header,
    check_member_header,
    hetero_source,
    is_hetero,
    is_label_key,
    is_member_name,
    missing_members,
    typed_keys,
)
from gnnbridge.core.storage.npy import read_header

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}  # bfloat16 stored as uint16
FLOAT16_MAX = float(np.finfo(np.float16).max)


def chunk_bytes() -> int:
    """How much of an array one step reads: 1/16 of the free memory, between 8 MiB and 256 MiB."""
    return int(min(256 << 20, max(8 << 20, available_memory() // 16)))


# --------------------------------------------------------------------------- the whole command


def prepare_folder(
    src: str | os.PathLike,
    out: str | os.PathLike | None = None,
    dtype: str = "float32",
    progress: bool = True,
    fill: Callable[[Path], None] | None = None,
) -> dict:
    """Prepare the folder ``src`` into ``out`` (default: ``src`` itself); returns
    ``{"out", "kind", "already", "summary", "checked"}``. ``fill(out)``, when given, first writes
    the source files into ``out`` (an ``.npz`` or a named dataset streamed member by member); what
    it returns (a dict, e.g. a heterogeneous dataset's default ``target_edge``) joins the manifest."""
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is not a feature dtype; use one of: {', '.join(DTYPES)}.")
    src = Path(src)
    out = Path(out) if out is not None else src
    if fill is None and not src.is_dir():
        raise DataError(
            f"Dataset folder '{src}' does not exist; give a folder of .npy files, an .npz file or a dataset name."
        )
    _make_writable_folder(out, src)
    with taking_turns(out / PREPARED):  # two prepares of one folder take turns
        done = _already(out, dtype)
        if done is not None:
            return {
                "out": str(out),
                "kind": done["kind"],
                "already": True,
                "summary": done["summary"],
                "checked": done["checked"],
            }
        (out / MANIFEST).unlink(missing_ok=True)  # what follows replaces what it described
        for stale in (out / PREPARED).glob("link-*"):  # link tasks' topology of what it described (linkcache)
            shutil.rmtree(stale, ignore_errors=True)
        remove_partial(out / PREPARED)
        try:
            extra = (fill(out) if fill is not None else _link_sources(src, out) if out != src else None) or {}
            manifest = {**_derive(out, dtype, progress), **extra}
            _stamp(out, manifest)
            replace(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
        except BaseException as exc:
            _discard(out)
            raise full_disk(
                exc, out, "writing a derived file", "free space, or give --out DIR on another disk"
            ) from None
    return {
        "out": str(out),
        "kind": manifest["kind"],
        "already": False,
        "summary": manifest["summary"],
        "checked": manifest["checked"],
    }


def full_disk(exc: BaseException, where: Path, writing: str, hint: str) -> BaseException:
    """What a failed write of derived files (removed already) raises: a full disk or quota as
    one line naming ``where`` and the file, anything else as it was."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceError(
            f"{where}: the disk is full ({exc.filename or writing}); nothing half-written is left; {hint}."
        )
    return exc


def _stamp(root: Path, manifest: dict) -> None:
    """Each array's size and modification time, as the inputs' are recorded: a run refuses a
    derived file that changed since, or a manifest pointing an array at another's file."""
    for spec in manifest["arrays"].values():
        spec.update(stat_input(root / spec["file"]))


def _discard(out: Path) -> None:
    """After a failed prepare: its derived files (whole or not) go, and their space with them.
    Without a manifest none of them was in use, and the lock keeps every other prepare out."""
    for leftover in [*(out / PREPARED).glob("*.npy"), *(out / PREPARED).glob(f".*{PARTIAL}")]:
        with contextlib.suppress(OSError):
            leftover.unlink()
    remove_partial(out)


def _make_writable_folder(out: Path, src: Path) -> None:
    try:
        (out / PREPARED).mkdir(parents=True, exist_ok=True)
        probe = partial_name(out / PREPARED / "probe")
        probe.touch()
        # missing_ok: a prepare holding the lock may have swept it up with its own leftovers
        # (remove_partial) between the two calls; the touch already showed the folder writable.
        probe.unlink(missing_ok=True)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ConfigError(f"--out {out} cannot be made ({exc.strerror}); give a folder you can write.") from None
        hint = (
            f"give --out DIR (a folder to write them in): gnnbridge prepare {src} --out DIR"
            if out == src
            else "give another --out DIR"
        )
        raise ConfigError(
            f"{out} is not writable, and prepare writes its derived files in {out / PREPARED}; {hint}."
        ) from None


def _already(out: Path, dtype: str) -> dict | None:
    """The folder's manifest when it is valid for this ``dtype`` (nothing to do), else None."""
    try:
        manifest = read_manifest(out)
    except DataError:
        return None
    fresh = (
        manifest.get("dtype") == dtype
        and _stamped(manifest)
        and changed_input(out, manifest) is None
        and not _lacks_topology(manifest)
    )
    return manifest if fresh and not _source_changed(manifest) else None


def _stamped(manifest: dict) -> bool:
    """Whether the manifest records its arrays' sizes and times (see :func:`_stamp`); one
    written before it did is prepared again, so its runs check their derived files too."""
    return all(isinstance(spec, dict) and "size" in spec for spec in manifest.get("arrays", {}).values())


def _lacks_topology(manifest: dict) -> bool:
    """A heterogeneous folder prepared before prepare wrote its node tasks' topology: it is
    prepared again (its runs still work, building that topology in memory)."""
    return manifest.get("kind") == "hetero" and not any(k.startswith(CSC_INDPTR) for k in manifest.get("arrays", {}))


def _source_changed(manifest: dict) -> bool:
    """Whether the file the folder was streamed from (an ``.npz``) has changed since: then it is
    streamed again. A source that is gone changes nothing (the folder stands on its own)."""
    source = manifest.get("source")
    if not isinstance(source, dict) or not Path(source.get("file", "")).is_file():
        return False
    return stat_input(Path(source["file"])) != {k: source.get(k) for k in ("size", "mtime_ns")}


def _link_sources(src: Path, out: Path) -> None:
    """``--out`` for a folder: ``out`` gets a link to each source file, so it is a complete dataset
    folder (its manifest's paths stay relative to it)."""
    for file in sorted(src.glob("*.npy")):
        link = out / file.name
        target = file.resolve()
        if link.is_symlink() and link.resolve() == target:
            continue
        if link.exists() or link.is_symlink():
            raise ConfigError(f"--out {out} already holds {file.name}; give an empty folder (or a new one) as --out.")
        os.symlink(target, link)


# --------------------------------------------------------------------------- reading the sources


def source_members(root: Path) -> dict[str, Path]:
    """``{key: file}`` of the format's ``.npy`` files in ``root`` (other files are ignored)."""
    found = {f.stem: f for f in sorted(root.glob("*.npy")) if f.is_file()}
    if is_hetero(found):
        members = {k: f for k, f in found.items() if is_member_name(k)}  # refused when kinds mix
        return {k: members[k] for k in typed_keys(root, members)}
    return {k: f for k, f in found.items() if k in NPZ_ARRAYS}


def open_checked(root: Path, key: str, file: Path, spec: tuple) -> np.ndarray:
    """``file`` memory-mapped read-only, its header checked (dtype, dimensions) before any data."""
    try:
        with open(file, "rb") as f:
            shape, _, found = read_header(f)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(
            f"{root}: {key} ({file.name}) is not a numpy array ({str(exc)[:100]}); save arrays with numpy.save."
        ) from None
    if is_label_key(key):  # classes or rows of targets: which, the run's target says (see _prepare_node)
        check_member_header(root, key, found, shape, *spec, labels_of(found, shape))
    else:
        check_header(root, key, found, shape, *spec)
    try:
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(
            f"{root}: {key} ({file.name}) cannot be mapped ({str(exc)[:100]}): the file is truncated or "
            "corrupt; write it again."
        ) from None


def _derive(root: Path, dtype: str, progress: bool) -> dict:
    members = source_members(root)
    inputs = {f"{k}.npy": stat_input(f) for k, f in members.items()}  # before reading: a later change shows
    if is_hetero(members):
        body = _prepare_hetero(root, members, dtype, progress)
    elif NODE_PTR in members:
        body = _prepare_collection(root, members)
    else:
        body = _prepare_node(root, members, dtype, progress)
    return {
        "format": FORMAT,
        "kind": body["kind"],
        "gnnbridge": _version(),
        "dtype": dtype,
        "inputs": inputs,
        **{k: v for k, v in body.items() if k != "kind"},
    }


def _version() -> str:
    try:
        return importlib.metadata.version("gnnbridge")
    except importlib.metadata.PackageNotFoundError:  # a source checkout that was never installed
        return "unknown"


def _spec(file: str, array: np.ndarray, dtype: str | None = None) -> dict:
    return {"file": file, "dtype": dtype or array.dtype.name, "shape": list(array.shape)}


# --------------------------------------------------------------------------- homogeneous node graphs

# A folder serves every task: one without y trains link tasks, so its members are read as a
# task that needs no node labels reads them.
ANY_TASK = Reading(node_labels=False)


def _prepare_node(root: Path, members: dict, dtype: str, progress: bool) -> dict:
    missing = missing_members(members, ANY_TASK)
    if missing:
        raise DataError(
            f"{root}: missing {', '.join(f'{k}.npy' for k in missing)}; a graph folder needs "
            "edge_index.npy int64 [2,E] and x.npy float32 [N,F] (y.npy int64 [N] for node classification, and "
            f"optionally train_idx.npy, val_idx.npy, test_idx.npy); a collection of graphs also has {NODE_PTR}.npy; "
            "a heterogeneous graph has typed files such as x__paper.npy."
        )
    a = {k: open_checked(root, k, f, NPZ_ARRAYS[k]) for k, f in members.items()}
    x, ei, y = a["x"], a["edge_index"], a.get("y")
    if ei.shape[0] != 2:
        raise DataError(f"{root}: edge_index has shape {list(ei.shape)}; expected [2, E].")
    n = int(x.shape[0])
    if n == 0 or x.shape[1] == 0:
        raise DataError(f"{root}: x has shape {list(x.shape)}; every graph needs nodes and every node a feature.")
    if y is not None and y.shape[0] != n:
        raise DataError(
            f"{root}: y has {y.shape[0]} labels but x has {n} rows; give one label per node (or add "
            f"{NODE_PTR} for a collection of graphs with one label each)."
        )
    present = [k for k in SPLITS if k in a]
    if present and len(present) != 3:
        absent = sorted(set(SPLITS) - set(present))
        raise DataError(f"{root}: has {', '.join(present)} but not {', '.join(absent)}; give all three splits or none.")
    bar = _bar(
        progress, x.nbytes * (2 if dtype != "float32" else 1) + ei.nbytes * 2 + (y.nbytes if y is not None else 0), root
    )
    with bar:
        checked = ["headers (dtype, shape)"]
        arrays = {"x": _features(root, "x", x, dtype, bar, f"{PREPARED}/x.{dtype}.npy")}
        checked.append("x finite" + (f", {precision_note('x', arrays['x'])}" if dtype != "float32" else ""))
        arrays.update(build_csc(root, ei, n, bar))
        checked.append("edge ids in [0, N)")
        summary = _edge_members(root, a, arrays, checked, bar)
        if y is not None:  # (none: a link task's graph, or one whose edges carry the labels)
            summary.update(_node_labels(root, a, arrays, checked, bar))
    summary = {
        "num_nodes": n,
        "num_edges": int(ei.shape[1]),
        "num_features": int(x.shape[1]),
        "num_classes": 0,
        **summary,
    }
    return {"kind": "node", "arrays": arrays, "checked": checked, "summary": summary}


def _node_labels(root: Path, a: dict, arrays: dict, checked: list, bar) -> dict:
    """A homogeneous graph's node labels and splits, checked; their manifest entries join
    ``arrays`` and what was checked ``checked``; the summary a run reads of them."""
    y, n = a["y"], int(a["x"].shape[0])
    labels = labels_of(y.dtype, y.shape)
    if labels == "class":
        num_classes, binary = _labels(root, "y", y, bar), False
        checked.append("labels in [0, C), every class present")
    else:
        num_classes, binary = _targets(root, y, bar)
        checked.append("targets: no infinite value" + (", each 0, 1 or NaN" if binary else ""))
    arrays["y"] = _spec("y.npy", y)
    present = SPLITS[0] in a
    if present:
        _splits(root, {k: a[k] for k in SPLITS}, n, "node")
        arrays.update({k: _spec(f"{k}.npy", a[k]) for k in SPLITS})
        checked.append("splits non-empty, in range, disjoint")
    return {
        "num_classes": num_classes,
        "labels": "class" if labels == "class" else "targets",  # targets: regression, or multilabel where binary
        "binary": binary,
        "splits": "files" if present else "drawn from the seed at load",
    }


def _edge_members(root: Path, a: dict, arrays: dict, checked: list, bar) -> dict:
    """A homogeneous graph's edge features and edge labels, checked; their manifest entries join
    ``arrays`` and what was checked ``checked``. Edge features are also written in the CSC order
    of the topology (``prepared/edge_attr.npy``, what node and graph batches gather); edge labels,
    their splits and ``edge_index`` as given are what an edge task's record is built from."""
    ei, e, summary = a["edge_index"], int(a["edge_index"].shape[1]), {}
    if EDGE_ATTR in a:
        rows = a[EDGE_ATTR]
        if rows.shape[0] != e or rows.shape[1] == 0:
            raise DataError(f"{root}: edge_attr has shape {list(rows.shape)}; expected [{e}, D] with D >= 1.")
        csc = f"{PREPARED}/edge_attr.npy"
        sorted_rows(root, EDGE_ATTR, rows, ei, root / arrays["indptr"]["file"], root / csc, bar)
        arrays[EDGE_ATTR] = _spec(f"{EDGE_ATTR}.npy", rows)
        arrays[CSC_EDGE_ATTR] = _spec(csc, rows)
        checked.append("edge features finite")
        summary["edge_features"] = int(rows.shape[1])
    if EDGE_LABEL in a:
        summary.update(_edge_labels(root, a, EDGE_LABEL, EDGE_SPLITS, e, bar, "edge"))
        arrays.update({k: _spec(f"{k}.npy", a[k]) for k in (EDGE_LABEL, *EDGE_SPLITS) if k in a})
        arrays["edge_index"] = _spec("edge_index.npy", ei)
        checked.append("edge labels" + (", edge splits in range, disjoint" if EDGE_SPLITS[0] in a else ""))
    elif any(k in a for k in EDGE_SPLITS):
        raise DataError(f"{root}: has edge splits ({', '.join(k for k in EDGE_SPLITS if k in a)}) but no edge_label.")
    return summary


def _edge_labels(root: Path, a: dict, key: str, split_keys: tuple, e: int, bar, unit: str) -> dict:
    """An edge task's labels (``key``, one per edge) and splits (``split_keys``, columns of the
    edge type), checked as a node's are; the summary a run reads of them."""
    y = a[key]
    if y.shape[0] != e:
        raise DataError(f"{root}: {key} has {y.shape[0]} labels for {e} edges (columns of edge_index).")
    labels = labels_of(y.dtype, y.shape)
    if labels == "class":
        width, binary = _labels(root, key, y, bar), False
    else:
        width, binary = _targets(root, y, bar)
    present = [k for k in split_keys if k in a]
    if present and len(present) != 3:
        absent = sorted(set(split_keys) - set(present))
        raise DataError(f"{root}: has {', '.join(present)} but not {', '.join(absent)}; give all three splits or none.")
    if present:
        _splits(root, dict(zip(SPLITS, (a[k] for k in split_keys))), e, unit, prefix=f"{key}: ")
    return {"edge_labels": "class" if labels == "class" else "targets", "edge_classes": width, "edge_binary": binary}


def labels_of(dtype: np.dtype, shape: tuple) -> str:
    """The label form a ``y`` of ``dtype`` and ``shape`` is checked in when no target is known
    (``prepare`` serves every target): int64 ``[N]`` classes; 0/1 integers or booleans ``[N, L]``
    multi-label; floats regression (which takes multi-label's 0/1/NaN rows too)."""
    if dtype.kind in "iub" and len(shape) == 2:
        return "multilabel"
    return "regression" if dtype.kind == "f" else "class"


def _targets(root: Path, y: np.ndarray, bar) -> tuple[int, bool]:
    """The columns of a ``y`` of targets (checked a chunk at a time: no infinite value), and
    whether every value is 0, 1 or NaN (what target=multilabel reads)."""
    step = max(1, chunk_bytes() // max(1, y[:1].nbytes))
    binary = True
    for start in range(0, y.shape[0], step):
        raw = np.asarray(y[start : start + step])
        block = raw.astype(np.float64)
        if np.isinf(block).any():
            row = start + int(np.isinf(block.reshape(block.shape[0], -1)).any(axis=1).nonzero()[0][0])
            raise DataError(f"{root}: y holds an infinite value (first at node {row}); a missing label is NaN.")
        known = block[~np.isnan(block)]
        binary = binary and bool(((known == 0) | (known == 1)).all())
        bar.update(raw.nbytes)
    return (1 if y.ndim == 1 else int(y.shape[1])), binary


def _features(root: Path, key: str, x: np.ndarray, dtype: str, bar, converted: str) -> dict:
    """Check ``x`` finite a block of rows at a time; with ``dtype`` other than float32, write it
    converted to ``root/converted``. Returns the manifest entry of the features a run reads."""
    rows = max(1, chunk_bytes() // max(1, x.shape[1] * 4))

    def check(start: int, block: np.ndarray) -> None:
        bad = ~np.isfinite(block).all(axis=1)
        if bad.any():
            raise DataError(
                f"{root}: {key} holds NaN or inf values (first at node {start + int(bad.argmax())}); "
                "clean the features first."
            )
        bar.update(block.nbytes)

    if dtype == "float32":
        for start in range(0, x.shape[0], rows):
            check(start, np.asarray(x[start : start + rows]))
        return _spec(f"{key}.npy", x)

    precision = Precision(x.shape[1])

    def fill(out: np.ndarray) -> None:
        for start in range(0, x.shape[0], rows):
            block = np.asarray(x[start : start + rows])
            check(start, block)
            if dtype == "float16":
                over = (np.abs(block) > FLOAT16_MAX).any(axis=1)
                if over.any():
                    raise DataError(
                        f"{root}: {key} holds values beyond float16's range (+-65504, first at node "
                        f"{start + int(over.argmax())}); use --dtype bfloat16 or float32."
                    )
                converted_block = block.astype(np.float16)
            else:
                converted_block = to_bfloat16(block)
            precision.add(block, converted_block if dtype == "float16" else from_bfloat16(converted_block))
            out[start : start + len(block)] = converted_block
            bar.update(block.nbytes)
        precision.refuse_lost_columns(root, key, dtype)

    write_array(root / converted, DTYPES[dtype], x.shape, fill)
    return {"file": converted, "dtype": dtype, "shape": list(x.shape), "precision": precision.summary()}


class Precision:
    """What converting features to a half-width dtype lost, column by column, a block at a time.

    Overflow is refused where it is seen; underflow needs the whole column: a value too small
    for the dtype (below 6e-8 in float16) becomes 0, and a column whose nonzero values mostly
    do so has lost its signal, while training on it runs on, silently, on zeros. A column is
    refused when more than ``LOST`` of its nonzero values become zero; what was lost otherwise
    (values flushed to zero, the largest relative rounding error) is recorded in the manifest
    and said in prepare's line.
    """

    LOST = 0.01

    def __init__(self, columns: int):
        self.nonzero = np.zeros(columns, np.int64)
        self.flushed = np.zeros(columns, np.int64)
        self.smallest = np.full(columns, np.inf, np.float64)  # the smallest |value| that became zero
        self.values = 0
        self.max_relative = 0.0

    def add(self, block: np.ndarray, converted: np.ndarray) -> None:
        was = block != 0
        gone = was & (converted == 0)
        self.nonzero += was.sum(axis=0)
        self.flushed += gone.sum(axis=0)
        if gone.any():
            self.smallest = np.minimum(self.smallest, np.where(gone, np.abs(block), np.inf).min(axis=0))
        kept = was & ~gone
        if kept.any():
            error = np.abs(converted.astype(np.float32)[kept] - block[kept]) / np.abs(block[kept])
            self.max_relative = max(self.max_relative, float(error.max()))
        self.values += block.size

    def refuse_lost_columns(self, root: Path, key: str, dtype: str) -> None:
        lost = np.nonzero(self.flushed > self.LOST * np.maximum(self.nonzero, 1))[0]
        if lost.size:
            c = int(lost[0])
            tiny = float(np.finfo(np.float16).smallest_subnormal) if dtype == "float16" else 9.2e-41
            raise DataError(
                f"{root}: {key} column {c} loses its signal in {dtype}: {int(self.flushed[c]):,} of its "
                f"{int(self.nonzero[c]):,} nonzero values (down to {self.smallest[c]:.3g}) round to zero "
                f"({dtype}'s smallest is {tiny:.2g}){_more(lost.size - 1, 'column')}; scale the features (standardise "
                "them), or use " + ("--dtype bfloat16 or float32." if dtype == "float16" else "--dtype float32.")
            )

    def summary(self) -> dict:
        return {
            "values": self.values,
            "flushed_to_zero": int(self.flushed.sum()),
            "max_relative_error": self.max_relative,
        }


def _more(count: int, what: str) -> str:
    return f", and {count} more {what}{'s' if count > 1 else ''}" if count else ""


def precision_note(key: str, spec: dict) -> str:
    """What a conversion kept, for prepare's line: ``x float16 (relative error <= 4.9e-04, 3 of
    24,000 values flushed to zero)``."""
    p = spec["precision"]
    flushed = f", {p['flushed_to_zero']:,} of {p['values']:,} values flushed to zero" if p["flushed_to_zero"] else ""
    return f"{key} in {spec['dtype']} (relative error <= {p['max_relative_error']:.1e}{flushed})"


def from_bfloat16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) back to float32 values."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_bfloat16(block: np.ndarray) -> np.ndarray:
    """Finite float32 values as bfloat16 bit patterns (uint16), rounded to nearest, ties to even,
    as torch rounds them. In numpy on the block itself (a read-only mapped view: no copy, no
    torch tensor over memory it may not write)."""
    bits = np.ascontiguousarray(block, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def build_csc(root: Path, ei: np.ndarray, n: int, bar, edges_per_chunk: int | None = None) -> dict:
    """``prepared/indptr.npy`` and ``prepared/indices.npy`` from ``ei`` [2, E] by a stable counting
    sort over chunks of edges, writing into memory-mapped files: the same arrays as
    :func:`~gnnbridge.core.records.csc.csc_from_coo`, in memory bounded by the chunk. Checks the ids."""

    def check(row: np.ndarray) -> None:
        try:
            check_ids("edge_index", torch.from_numpy(row), n)
        except DataError as exc:
            raise DataError(f"{root}: {exc}") from None

    prepared = root / PREPARED
    counting_sort(root, ei, n, bar, prepared / "indptr.npy", prepared / "indices.npy", edges_per_chunk, check)
    return {
        "indptr": {"file": f"{PREPARED}/indptr.npy", "dtype": "int64", "shape": [n + 1]},
        "indices": {"file": f"{PREPARED}/indices.npy", "dtype": "int64", "shape": [int(ei.shape[1])]},
    }


def build_typed_csc(
    root: Path, ei: np.ndarray, edge_type: tuple, n_dst: int, bar, edges_per_chunk: int | None = None
) -> dict:
    """One edge type's topology for a heterogeneous node task: ``prepared/indptr__S__R__D.npy``
    (CSC offsets over the ``n_dst`` destinations) and ``prepared/edges__S__R__D.npy`` [2, E], the
    edges stably sorted by destination (row 0 is the CSC indices, row 1 their destinations: the
    record's ``edge_index``, which both backends' samplers read). The same arrays as the record's
    sort in memory. ``ei`` may be a flipped view (a ``rev_`` type: the CSR of the forward type).
    Ids are checked before (:func:`_typed_ids`)."""
    indptr_key, edges_key = csc_keys(edge_type)
    suffix = "__".join(edge_type)
    files = {indptr_key: f"{PREPARED}/indptr__{suffix}.npy", edges_key: f"{PREPARED}/edges__{suffix}.npy"}
    counting_sort(
        root, ei, n_dst, bar, root / files[indptr_key], root / files[edges_key], edges_per_chunk, with_destinations=True
    )
    e = int(ei.shape[1])
    return {
        indptr_key: {"file": files[indptr_key], "dtype": "int64", "shape": [n_dst + 1]},
        edges_key: {"file": files[edges_key], "dtype": "int64", "shape": [2, e]},
    }


def counting_sort(
    root: Path,
    ei: np.ndarray,
    n: int,
    bar,
    indptr_file: Path,
    indices_file: Path,
    edges_per_chunk: int | None = None,
    check: Callable[[np.ndarray], None] | None = None,
    with_destinations: bool = False,
) -> None:
    """Write ``indptr_file`` (CSC offsets over ``n`` destinations) and ``indices_file`` (the sources
    of ``ei`` stably sorted by destination; with ``with_destinations``, a [2, E] array whose second
    row holds their destinations) by a counting sort over chunks of edges into memory-mapped files:
    memory bounded by the chunk, whatever E is. ``check(row)`` sees every chunk of ids first."""
    e = int(ei.shape[1])
    step = edges_per_chunk or max(1, chunk_bytes() // 48)  # a chunk's src, dst, order and positions

    def count(indptr: np.ndarray) -> None:
        indptr[:] = 0
        for start in range(0, e, step):
            src, dst = (np.array(ei[i, start : start + step]) for i in (0, 1))
            if check is not None:
                check(src)
                check(dst)
            ids, counts = np.unique(dst, return_counts=True)
            indptr[ids + 1] += counts
            bar.update(src.nbytes + dst.nbytes)
        carry = 0
        for start in range(1, n + 1, step):
            block = np.cumsum(indptr[start : start + step]) + carry
            indptr[start : start + step] = block
            carry = int(block[-1])

    write_array(indptr_file, np.int64, (n + 1,), count)
    indptr = np.load(indptr_file, mmap_mode="r")

    def place(out: np.ndarray) -> None:
        indices = out[0] if with_destinations else out
        for start, order, at, dst in sorted_positions(ei, indptr, step, indices_file):
            indices[at] = np.array(ei[0, start : start + step])[order]
            if with_destinations:
                out[1, at] = dst
            bar.update(dst.nbytes * 2)

    write_array(indices_file, np.int64, (2, e) if with_destinations else (e,), place)


def sorted_positions(ei: np.ndarray, indptr: np.ndarray, step: int, beside: Path):
    """Per chunk of ``step`` edges of ``ei``: ``(start, order, at, dst)``, the chunk's edges in
    destination order (``order``, stable), their positions in the CSC order that ``indptr`` (the
    offsets of the destinations) lays out, and their destinations. Each destination's next free
    slot is a scratch file beside ``beside``: memory stays bounded by the chunk."""
    n = int(indptr.shape[0]) - 1
    fill_file = partial_name(beside.with_name("fill.npy"))
    try:
        fill = np.lib.format.open_memmap(fill_file, mode="w+", dtype=np.int64, shape=(max(n, 1),))
        for start in range(0, n, step):
            fill[start : start + step] = indptr[start : min(start + step, n)]
        for start in range(0, int(ei.shape[1]), step):
            dst = np.array(ei[1, start : start + step])
            order = np.argsort(dst, kind="stable")
            dst = dst[order]
            ids, first, counts = np.unique(dst, return_index=True, return_counts=True)
            at = fill[dst] + np.arange(dst.shape[0]) - np.repeat(first, counts)  # rank within its destination
            fill[ids] += counts
            yield start, order, at, dst
        del fill
    finally:
        fill_file.unlink(missing_ok=True)


def sorted_rows(root: Path, key: str, rows: np.ndarray, ei: np.ndarray, indptr_file: Path, target: Path, bar) -> None:
    """``target``: the rows of ``rows`` (one per edge of ``ei``, as given; edge features) in the
    CSC order :func:`counting_sort` wrote ``indptr_file`` for, each checked finite as it is copied."""
    indptr = np.load(indptr_file, mmap_mode="r")
    step = max(1, chunk_bytes() // max(48, rows[:1].nbytes * 2))

    def fill(out: np.ndarray) -> None:
        for start, order, at, _ in sorted_positions(ei, indptr, step, target):
            block = np.asarray(rows[start : start + step])
            bad = ~np.isfinite(block).all(axis=1)
            if bad.any():
                raise DataError(
                    f"{root}: {key} holds NaN or inf values (first at edge {start + int(bad.argmax())}); "
                    "clean the edge features first."
                )
            out[at] = block[order]
            bar.update(block.nbytes)

    write_array(target, rows.dtype, rows.shape, fill)


def _labels(root: Path, key: str, y: np.ndarray, bar) -> int:
    """The class count of ``y``, checked a chunk at a time as ``infer_num_classes`` checks it."""
    step = max(1, chunk_bytes() // 16)
    present = np.zeros(0, dtype=np.int64)
    for start in range(0, y.shape[0], step):
        block = np.array(y[start : start + step])
        present = np.union1d(present, np.unique(block))
        bar.update(block.nbytes)
    try:
        return infer_num_classes(torch.from_numpy(present))
    except DataError as exc:
        raise DataError(f"{root}: {exc}".replace(" y ", f" {key} ", 1)) from None


def _splits(root: Path, splits: dict, n: int, unit: str, prefix: str = "") -> None:
    """The checks of :func:`check_disjoint_splits` (same lines) a chunk of ids at a time: which
    split holds each item is a byte per item in a scratch file beside the derived ones, so memory
    stays bounded by the chunk however many items the splits hold."""
    scratch = partial_name(root / PREPARED / "splits.npy")
    try:
        owner = np.lib.format.open_memmap(scratch, mode="w+", dtype=np.uint8, shape=(max(n, 1),))
        _check_split_chunks(splits, owner, n, unit)
        del owner
    except DataError as exc:
        raise DataError(f"{root}: {prefix}{exc}") from None
    finally:
        scratch.unlink(missing_ok=True)


def _check_split_chunks(splits: dict, owner: np.ndarray, n: int, unit: str) -> None:
    step = max(1, chunk_bytes() // 32)
    for number, name in enumerate(("train", "val", "test"), start=1):
        idx = splits[f"{name}_idx"]
        if idx.shape[0] == 0:
            raise DataError(f"The {name} split is empty; every split needs at least one {unit}.")
        for start in range(0, idx.shape[0], step):
            block = np.array(idx[start : start + step])
            check_ids(f"{name}_idx", torch.from_numpy(block), n, unit=unit)
            held = owner[block]
            if ((held != 0) & (held != number)).any():
                raise DataError(f"The {name} split overlaps an earlier split; splits must be disjoint.")
            if (held == number).any() or np.unique(block).shape[0] != block.shape[0]:
                raise DataError(f"The {name} split lists a {unit} twice.")
            owner[block] = number


# --------------------------------------------------------------------------- collections and hetero


def _prepare_collection(root: Path, members: dict) -> dict:
    """Checked as the ``.npz`` loader checks it, whole: a collection is many small graphs, and a
    run loads it whole too."""
    from gnnbridge.core.records.collection import GraphCollection

    a = {k: open_checked(root, k, f, NPZ_ARRAYS[k]) for k, f in members.items()}
    t = {k: torch.from_numpy(np.array(v)) for k, v in a.items()}
    splits = [t[k] for k in SPLITS] if "train_idx" in t else None
    try:
        form = labels_of(a["y"].dtype, a["y"].shape)  # the run's target checks them again
        data = GraphCollection.from_edges(
            t["x"], t["edge_index"], t[NODE_PTR], t["y"], splits, edge_attr=t.get(EDGE_ATTR), labels=form
        )
    except DataError as exc:
        raise DataError(f"{root}: {exc}") from None
    summary = {k: v for k, v in data.summary().items() if k != "name"}
    return {
        "kind": "collection",
        "arrays": {k: _spec(f"{k}.npy", v) for k, v in a.items()},
        "checked": ["everything a run checks (a collection is loaded whole)"],
        "summary": summary,
    }


def _prepare_hetero(root: Path, members: dict, dtype: str, progress: bool) -> dict:
    specs = typed_keys(root, members)
    a = {k: open_checked(root, k, members[k], specs[k]) for k in specs}
    with warnings.catch_warnings():  # read-only maps, never written (see folder.mapped)
        warnings.simplefilter("ignore", UserWarning)
        source = hetero_source(root, {k: torch.from_numpy(v) for k, v in a.items()}, root.name)
    counts = source.num_nodes
    reverse = reverse_types(source.edges)
    sorted_bytes = 2 * sum(int(e.numel()) * 8 for e in source.edges.values()) * (1 + len(reverse) / len(source.edges))
    bar = _bar(progress, sum(v.nbytes for v in a.values()) + int(sorted_bytes), root)
    arrays, checked = {}, ["headers (dtype, shape)"]
    with bar:
        for key, array in a.items():
            kind, *parts = key.split("__")
            if kind == "x":
                arrays[key] = _features(root, key, array, dtype, bar, f"{PREPARED}/{key}.{dtype}.npy")
                continue
            if kind in ("edge_index", "val_edges", "test_edges"):
                _typed_ids(root, key, array, tuple(parts), counts, bar)
            arrays[key] = _spec(f"{key}.npy", array)
        checked.append("x finite")
        checked += [precision_note(k, arrays[k]) for k in arrays if k.startswith("x__") and "precision" in arrays[k]]
        checked.append("edge ids in range per node type")
        for et, forward in {**{et: et for et in source.edges}, **reverse}.items():  # a rev_ type: the flipped edges
            edges = a["edge_index__" + "__".join(forward)]
            arrays.update(build_typed_csc(root, edges if et == forward else edges[::-1], et, counts[et[2]], bar))
            if forward in (source.edge_attr or {}):
                arrays.update(_typed_edge_features(root, a, forward, et, edges if et == forward else edges[::-1], bar))
        checked.append("CSC topology per edge type and per rev_ type")
        if source.edge_attr:
            checked.append("edge features finite")
        if source.edge_y is not None:
            et = "__".join(source.target_edge)
            splits = tuple(f"{k}__{et}" for k in EDGE_SPLITS)
            e = int(source.edges[source.target_edge].shape[1])
            summary_edges = _edge_labels(root, a, f"{EDGE_LABEL}__{et}", splits, e, bar, "edge")
            checked.append("edge labels" + (", edge splits in range, disjoint" if splits[0] in a else ""))
        if source.target_edge is not None and source.held_out is not None:
            _held_out_disjoint(root, a, source.target_edge, counts[source.target_edge[2]])
            checked.append("val and test edges disjoint")
        num_classes = 0
        if source.target_node is not None:
            t = source.target_node
            if a[f"y__{t}"].shape[0] != counts[t]:
                raise DataError(f"{root}: y__{t} has {a[f'y__{t}'].shape[0]} labels for {counts[t]} '{t}' nodes.")
            num_classes = _labels(root, f"y__{t}", a[f"y__{t}"], bar)
            checked.append("labels in [0, C), every class present")
            if source.splits is not None:
                _splits(
                    root, {f"{s}_idx": a[f"{s}_idx__{t}"] for s in ("train", "val", "test")}, counts[t], f"'{t}' node"
                )
                checked.append("splits non-empty, in range, disjoint")
    summary = {
        "num_nodes": sum(counts.values()),
        "node_types": dict(counts),
        "num_classes": num_classes,
        "edge_types": {edge_name(et): int(e.shape[1]) for et, e in source.edges.items()},
        **(summary_edges if source.edge_y is not None else {}),
    }
    return {"kind": "hetero", "arrays": arrays, "checked": checked, "summary": summary}


def _typed_edge_features(root: Path, a: dict, forward: tuple, et: tuple, edges: np.ndarray, bar) -> dict:
    """The features of ``forward``'s edges in the CSC order of message-passing type ``et`` (itself,
    or its ``rev_`` type, whose ``edges`` are the flipped ones): what a node task's batches gather."""
    key, suffix = f"{EDGE_ATTR}__{'__'.join(forward)}", "__".join(et)
    rows, target = a[key], f"{PREPARED}/edge_attr__{suffix}.npy"
    indptr = root / PREPARED / f"indptr__{suffix}.npy"
    sorted_rows(root, key, rows, edges, indptr, root / target, bar)
    return {f"{CSC_EDGE_ATTR}__{suffix}": _spec(target, rows)}


def _held_out_disjoint(root: Path, a: dict, et: tuple, n_dst: int) -> None:
    """What a link task's record refuses (``HeteroGraphData._check_link``), in the same words: an
    edge both in val and in test. (Held-out edges that are also in ``edge_index`` are not an
    error: the link task takes them out of message passing.)"""
    suffix = "__".join(et)
    keys = [
        np.asarray(a[f"{s}_edges__{suffix}"][0]) * n_dst + np.asarray(a[f"{s}_edges__{suffix}"][1])
        for s in ("val", "test")
    ]
    if np.isin(keys[0], keys[1]).any():
        raise DataError(f"{root}: The val and test edges overlap; splits must be disjoint.")


def _typed_ids(root: Path, key: str, ei: np.ndarray, et: tuple, counts: dict, bar) -> None:
    if ei.shape[0] != 2:
        raise DataError(f"{root}: {key} has shape {list(ei.shape)}; expected [2, E].")
    step = max(1, chunk_bytes() // 16)
    for start in range(0, ei.shape[1], step):
        for row, end, t in ((0, "source", et[0]), (1, "destination", et[2])):
            block = np.array(ei[row, start : start + step])
            try:
                check_ids(f"edge_index[{edge_name(et)}] {end}", torch.from_numpy(block), counts[t], unit=f"'{t}' node")
            except DataError as exc:
                raise DataError(f"{root}: {str(exc).replace('edge_index', key.split('__')[0], 1)}") from None
            bar.update(block.nbytes)


# --------------------------------------------------------------------------- writing


def write_array(target: Path, dtype, shape: tuple, fill: Callable[[np.ndarray], None], fortran: bool = False) -> None:
    """``target`` becomes a ``.npy`` of ``dtype`` and ``shape`` that ``fill(array)`` fills through a
    memory map: written under a temporary name (space reserved first) and renamed when whole."""
    out = None
    with replacing(target, hold_signals=False) as tmp:  # a long fill stays interruptible
        try:
            if 0 in shape:  # an empty array cannot be mapped
                with open(tmp, "xb") as f:
                    np.save(f, np.zeros(shape, dtype=dtype))
            else:
                out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape, fortran_order=fortran)
                _reserve(tmp)
                fill(out)
                out.flush()
                del out
            fsync_file(tmp)
        except BaseException:
            out = None  # unmapped now, not when the traceback that holds this frame goes
            raise


def _reserve(file: Path) -> None:
    """Allocate the file's blocks now: a full disk then fails here, as ENOSPC, instead of as a
    SIGBUS when a page of the map is written."""
    with open(file, "rb+") as f:
        try:
            os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without it: written as it goes
                return
            exc.filename = str(file).replace(PARTIAL, "")
            raise


def _bar(progress: bool, total: int, root: Path):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=f"prepare {root.name}",
        disable=not progress,
        file=sys.stderr,
        leave=False,
    )


def describe(result: dict) -> str:
    """One line for the command's output."""
    s = result["summary"]
    what = f"{s.get('num_nodes', '?'):,} nodes" if isinstance(s.get("num_nodes"), int) else result["kind"]
    if result["already"]:
        return f"{result['out']}: already prepared ({result['kind']}, {what}); nothing to do"
    return f"{result['out']}: prepared ({result['kind']}, {what}; checked {', '.join(result['checked'])})"
