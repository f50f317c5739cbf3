"""Folder datasets: ``--dataset DIR`` (dataset ``folder``) and what ``gnnbridge prepare`` reads.

A folder of ``.npy`` files in the ``.npz`` format's names (``x.npy``, ``edge_index.npy``, ...)
is a dataset once ``gnnbridge prepare DIR`` has checked it and derived what training needs
(:mod:`gnnbridge.core.storage.prepare`); a run then maps its files instead of reading them
(:func:`gnnbridge.core.storage.folder.open_prepared`). ``prepare`` also takes an ``.npz`` file
(streamed member by member into a folder, each header checked before its data is read) or a
dataset name (loaded, then written as a folder). The three are registered as dataset sources
(:mod:`gnnbridge.core.plugins.sources`), the catch-alls every other source is asked before.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

from gnnbridge.core import files
from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.core.contracts.loading import reading_of
from gnnbridge.core.contracts.sources import DatasetSource
from gnnbridge.core.errors import (
    ConfigError,
    DataError,
    DataFileNotFoundError,
    ResourceError,
)
from gnnbridge.core.interfaces import GraphCollection, GraphData, HeteroSource, LoaderConfig
from gnnbridge.core.runtime.launcher import undone_on_stop
from gnnbridge.core.storage.folder import PREPARED, open_prepared, stat_input
from gnnbridge.core.storage.formats import NPZ_ARRAYS, check_member_header, is_hetero, is_label_key, typed_keys
from gnnbridge.core.storage.npy import read_header
from gnnbridge.core.storage.parts import open_machine_part
from gnnbridge.core.storage.prepare import labels_of, prepare_folder, write_array
from gnnbridge.plugins.npz import DEFLATE_MAX_RATIO, READ_CHUNK, ZIP_ERRORS, check_file, not_an_npz
from gnnbridge.plugins.options import options


@hookimpl
def register_datasets(register):
    register(
        "folder",
        load_folder,
        "Your own graph as a folder of .npy files, prepared with gnnbridge prepare DIR: "
        "--dataset DIR (features memory-mapped, never read whole)",
    )


def load_folder(config: LoaderConfig, seed: int):
    options(config, {})
    if not config.path:
        raise ConfigError("Dataset 'folder' needs a folder: --dataset DIR (or dataset.path in the config).")
    if config.partitions:
        return open_machine_part(config.path, config.partitions, seed, reading_of(config))
    return open_prepared(config.path, seed, reading_of(config))


@hookimpl
def register_dataset_sources(register):
    """A folder of ``.npy`` arrays, an ``.npz`` file and a registered dataset name: catch-alls
    (any folder, any path, any name), tried after every other source."""
    register(
        DatasetSource(
            "folder", _is_folder, "a folder of .npy files", _section("folder"), _prepare_folder, fallback=True
        )
    )
    register(DatasetSource("npz", _is_npz, "an .npz file", _section("npz"), _prepare_npz, fallback=True))
    register(
        DatasetSource(
            "name", lambda text: True, "a dataset name", lambda text: {"name": text}, _prepare_named, fallback=True
        )
    )


def _is_folder(text: str) -> bool:
    """A folder, but ``./NAME`` given as ``NAME`` when NAME is a registered dataset (the name wins:
    ``gnnbridge prepare NAME`` writes that folder; ``./NAME`` is the folder)."""
    from gnnbridge.core.plugins import datasets

    return Path(text).is_dir() and not text.endswith(".npz") and (os.sep in text or text not in datasets.names())


def _is_npz(text: str) -> bool:
    return text.endswith(".npz") or os.sep in text or Path(text).is_file()


def _section(name: str):
    return lambda text: {"name": name, "path": text}


def prepare(source: str, out: str | os.PathLike | None = None, dtype: str = "float32", progress: bool = True) -> dict:
    """Kept for callers of this module: :func:`gnnbridge.core.app.prepare.prepare`, which picks
    the source through the registry of dataset sources."""
    from gnnbridge.core.app.prepare import prepare as core_prepare

    return core_prepare(source, out, dtype, progress)


def partition_command(
    path: str, parts: int, method: str = "auto", seed: int = 0, progress: bool = True, reuse: bool = False
) -> dict:
    """Kept for callers of this module: :func:`gnnbridge.core.app.prepare.partition`."""
    from gnnbridge.core.app.prepare import partition

    return partition(path, parts, method, seed, progress, reuse=reuse)


def _undone(source: str):
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP) undoes what this prepare wrote, and says so."""
    return undone_on_stop("the derived files of this prepare were removed", f"gnnbridge prepare {source}")


def _prepare_folder(source: str, out, dtype: str, progress: bool) -> dict:
    with _undone(source):
        return prepare_folder(Path(source), out, dtype, progress)


def _prepare_npz(source: str, out, dtype: str, progress: bool) -> dict:
    """Into the folder beside it, its name without ``.npz`` (or ``out``), member by member."""
    path = Path(source)
    with _undone(source):
        if path.is_dir():  # a folder named *.npz is a folder
            return prepare_folder(path, out, dtype, progress)
        if not path.exists():
            raise DataFileNotFoundError(
                f"'{source}' does not exist; give a folder of .npy files, an .npz file or a "
                "dataset name (gnnbridge prepare --help)."
            )
        check_file(path)
        target = Path(out) if out is not None else path.with_suffix("")
        return _into_new(target, dtype, progress, lambda folder: _stream_npz(path, folder), path)


def _prepare_named(source: str, out, dtype: str, progress: bool) -> dict:
    """Loaded, then written into ``./NAME`` (or ``out``); a folder ``./NAME`` (an earlier
    prepare's) is prepared where it is."""
    from gnnbridge.core.errors import unknown_name
    from gnnbridge.core.plugins import datasets

    with _undone(source):
        if Path(source).is_dir():
            return prepare_folder(Path(source), out, dtype, progress)
        if source not in datasets.names():  # one line listing the known names, with prepare's own fix
            raise unknown_name(
                "dataset",
                source,
                datasets.names(),
                "Or give a folder of .npy files or an .npz file (gnnbridge prepare --help).",
            )
        loader = datasets.get(source)
        target = Path(out) if out is not None else Path(source)
        return _into_new(target, dtype, progress, lambda folder: _write_named(source, loader, folder), source)


def _into_new(target: Path, dtype: str, progress: bool, fill, source) -> dict:
    """Prepare ``target`` after ``fill`` writes the source files into it; a folder this call made
    is removed again when it fails (bad data, a full disk, Ctrl-C): nothing half-made is left. A
    refusal names the source (the folder is gone), not the folder."""
    made = not target.exists()
    try:
        return prepare_folder(target, target, dtype, progress, fill=fill)
    except DataError as exc:
        if made:
            shutil.rmtree(target, ignore_errors=True)
        text = str(exc)
        raise DataError(
            f"{source}: {text[len(str(target)) + 2 :]}" if text.startswith(f"{target}: ") else text
        ) from None
    except BaseException:
        if made:
            shutil.rmtree(target, ignore_errors=True)
        raise


def _claim(folder: Path, source: str) -> None:
    """Files are streamed only into a folder that holds no dataset files, or holds what an
    earlier prepare of this same source left (it was stopped midway)."""
    marker = folder / PREPARED / "source"
    mine = marker.is_file() and marker.read_text() == source
    if not mine and any(folder.glob("*.npy")):
        raise ConfigError(
            f"{folder} already holds .npy files that are not from {source}; give an empty folder as "
            "--out DIR (or remove it)."
        )
    files.replace(marker, source)


# --------------------------------------------------------------------------- .npz, member by member


def _stream_npz(path: Path, folder: Path) -> dict:
    """The ``.npz``'s members into ``folder``; the manifest then records the ``.npz``'s size and
    modification time (``source``), so a prepare after the ``.npz`` changed streams it again.
    (The members' order does not matter: a heterogeneous record sorts its types.)"""
    _claim(folder, str(path.resolve()))
    source = {"source": {"file": str(path.resolve()), **stat_input(path)}}
    try:
        with zipfile.ZipFile(path) as archive:
            members = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}
            if is_hetero(members):
                wanted = typed_keys(path, members)
            else:
                wanted = {k: spec for k, spec in NPZ_ARRAYS.items() if k in members}
            for key, spec in wanted.items():  # every header first: a bad one is refused before any copy
                with archive.open(members[key]) as f:
                    _header(path, f, members[key], key, spec)
            for key, spec in wanted.items():
                _copy_member(path, archive, members[key], key, spec, folder / f"{key}.npy")
        return source
    except (DataError, ResourceError, ConfigError):
        raise
    except OSError:
        raise  # a full disk is reported by prepare_folder
    except ZIP_ERRORS as exc:
        raise not_an_npz(path, exc) from None


def _copy_member(
    path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, spec: tuple, target: Path
) -> None:
    """One member into ``target``, its header checked first, its data copied a chunk at a time."""
    with archive.open(info) as f:
        shape, fortran, found = _header(path, f, info, key, spec)
        nbytes = int(np.prod(shape)) * found.itemsize

        def fill(array: np.ndarray) -> None:
            raw = (array.T if fortran else array).reshape(-1).view(np.uint8)  # the file's byte order
            pos = 0
            while pos < nbytes:
                chunk = f.read(min(READ_CHUNK, nbytes - pos))
                if not chunk:
                    raise DataError(f"{path}: {key} ends early: the file is truncated or corrupt; write it again.")
                raw[pos : pos + len(chunk)] = np.frombuffer(chunk, np.uint8)
                pos += len(chunk)

        write_array(target, found, tuple(shape), fill, fortran=fortran)


def _header(path: Path, f, info: zipfile.ZipInfo, key: str, spec: tuple) -> tuple:
    """(shape, fortran order, dtype) of a member, checked as the .npz loader checks it."""
    try:
        shape, fortran, found = read_header(f)
    except ValueError as exc:
        raise DataError(
            f"{path}: {key} is not a numpy array ({str(exc)[:100]}); save arrays with numpy.savez."
        ) from None
    if is_label_key(key):  # classes or rows of targets, as prepare checks a folder's (labels_of)
        check_member_header(path, key, found, shape, *spec, labels_of(found, shape))
    else:
        check_member_header(path, key, found, shape, *spec, "class")
    nbytes = int(np.prod(shape)) * found.itemsize
    if nbytes > info.file_size - f.tell() or nbytes > info.compress_size * DEFLATE_MAX_RATIO + 4096:
        raise DataError(
            f"{path}: {key} claims shape {list(shape)} but the file holds less: it is truncated or "
            "corrupt; write it again."
        )
    return shape, fortran, found


# --------------------------------------------------------------------------- a named dataset


def _write_named(name: str, loader, folder: Path) -> dict:
    """The dataset's arrays as files; for the manifest, its default link target (which no array
    names)."""
    _claim(folder, f"dataset:{name}")
    data = loader(LoaderConfig(name=name), 0)  # read as classes, the form a prepared folder holds
    arrays = _arrays(name, data)
    for key, value in arrays.items():
        array = np.ascontiguousarray(value.numpy() if hasattr(value, "numpy") else value)
        write_array(folder / f"{key}.npy", array.dtype, array.shape, lambda out, a=array: out.__setitem__(..., a))
    target = getattr(data, "target_edge", None)
    return {"target_edge": list(target)} if isinstance(data, HeteroSource) and target is not None else {}


def _arrays(name: str, data) -> dict:
    """A loaded dataset as the format's arrays (its splits, drawn with seed 0, included)."""
    splits = (
        {"train_idx": data.train_idx, "val_idx": data.val_idx, "test_idx": data.test_idx}
        if isinstance(data, (GraphData, GraphCollection))
        else {}
    )
    # (a graph's and a collection's edge features are in their edge_index's order, as written)
    features = {"edge_attr": data.edge_attr} if getattr(data, "edge_attr", None) is not None else {}
    if isinstance(data, GraphData):
        return {"x": data.x.float(), "edge_index": data.edge_index, "y": data.y, **splits, **features}
    if isinstance(data, GraphCollection):
        return {
            "x": data.x.float(), "edge_index": data.edge_index, "node_ptr": data.node_ptr, "y": data.y, **splits,
            **features,
        }  # fmt: skip
    if isinstance(data, HeteroSource):
        out = {f"num_nodes__{t}": np.array([n], dtype=np.int64) for t, n in data.num_nodes.items()}
        out.update({f"x__{t}": x.float() for t, x in data.x.items()})
        out.update({"edge_index__" + "__".join(et): e for et, e in data.edges.items()})
        if data.target_node is not None:
            out[f"y__{data.target_node}"] = data.y
            for s, idx in zip(("train", "val", "test"), data.splits or ()):
                out[f"{s}_idx__{data.target_node}"] = idx
        if data.held_out is not None:
            for s, e in zip(("val_edges", "test_edges"), data.held_out):
                out[f"{s}__" + "__".join(data.target_edge)] = e
        out.update({"edge_attr__" + "__".join(et): rows for et, rows in (data.edge_attr or {}).items()})
        if data.edge_y is not None:  # an edge task's labels and splits, of its edges as given
            suffix = "__".join(data.target_edge)
            out[f"edge_label__{suffix}"] = data.edge_y
            for s, idx in zip(("train", "val", "test"), data.edge_splits or ()):
                out[f"edge_{s}_idx__{suffix}"] = idx
        return out
    raise DataError(f"Dataset '{name}' loads as a {type(data).__name__}, which prepare cannot write as a folder.")
