"""One copy of the dataset per machine, for ranks that no gnnbridge process started.

With ``--nproc`` the launching process loads the dataset and hands it to the ranks the elastic
agent starts, as arguments pickled by ``torch.multiprocessing`` (shared memory, no copy). Under
torchrun or SLURM there is no common parent: the ranks of a node are strangers. So the node's
first rank loads and validates the dataset, writes each tensor into a file in ``/dev/shm``
(RAM, not disk), and publishes a manifest (shapes, dtypes, file names) on the job's store;
every rank of the node, the first included, maps those files
(``torch.from_file(shared=True)``), and once all have mapped them the files are unlinked. The
pages live as long as a rank maps them, nobody can open them by name afterwards, and a second
job on the same host cannot collide with them: names carry the job's run id (drawn by rank 0 at
the rendezvous) and the node rank. :func:`machine_shared` is that load as the machine's (a
partitioned folder's part), compared across the machines. :func:`node_tensors` shares other
tensors a node's ranks all read the same way (``placement.feature_cache``'s rows: one copy per
machine).

A memory-mapped record (one opened from a folder, ``mapped_from`` set) is not exported: the
manifest says how to open it, and every rank maps the folder's files itself, so the ranks of a
machine share its pages through the page cache and each machine of a job maps its own (shared
file system or own copy; the opener refuses a copy that differs).

Space is reserved with ``posix_fallocate`` before writing: a full ``/dev/shm`` (Docker gives 64
MB by default) is an error message here, not a SIGBUS in the middle of a copy.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import json
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from gnnbridge.core.errors import DataError
from gnnbridge.core.host import format_bytes
from gnnbridge.core.records.data import LabelledRecord
from gnnbridge.core.records.hetero import HeteroGraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.storage.parts import PartError, disagreement, identity, on_machine


def node_shared(ctx: DistContext, load: Callable[[], LabelledRecord]) -> LabelledRecord:
    """``load()`` once per node; every rank of the node gets the same shared-memory record, or,
    for a memory-mapped record, opens its files itself (the node's pages, in the page cache).

    Ends with a job-wide wait without deadline, so a node that downloads for an hour does not
    make the others' first collective time out."""
    if ctx.local_world_size == 1:
        record = load()
    else:
        key, folder, prefix = node_files(ctx, "data")
        loaded = None
        if ctx.is_local_main:
            loaded = load()
            ctx.store.set(key, json.dumps(publish(loaded, folder, prefix)))
        manifest = json.loads(ctx.wait_key(key))
        if "reopen" in manifest:  # memory-mapped: each rank maps the files itself, nothing in /dev/shm
            record = loaded if loaded is not None else pickle.loads(base64.b64decode(manifest["reopen"]))
        else:
            del loaded  # the ranks map the exported copy, the first one included
            record = mapped_by_all(ctx, manifest, attach)
    ctx.store_barrier("data")
    return record


def machine_shared(ctx: DistContext, load: Callable[[], LabelledRecord]) -> LabelledRecord:
    """:func:`node_shared` of ``load()`` as this machine's (a partitioned folder opens this
    machine's part), then refused on every rank at once unless every machine opened a part of
    the same cut, or none did (:func:`~gnnbridge.core.storage.parts.disagreement`): each machine
    checks its own part against its own ``partition.json``, and only the job sees two machines
    given two partitionings, each whole. One gather of a few bytes per rank."""
    with on_machine(ctx.node_rank, ctx.num_nodes):
        data = node_shared(ctx, load)
    if ctx.distributed:
        refused = disagreement(ctx.gather_objects((ctx.node_rank, identity(data))))
        if refused is not None:
            raise PartError(refused)
    return data


def node_tensors(
    ctx: DistContext, name: str, make: Callable[[], dict[str, torch.Tensor]], what: str, lower: str | None = None
) -> dict[str, torch.Tensor]:
    """``make()`` on the node's first rank only; every rank of the node (that one included) gets
    its tensors mapped from the same RAM-backed files: one copy per machine, however many ranks.
    ``name`` tells this sharing from the node's others (unique within the job); ``what`` names
    it, and ``lower`` the setting that makes it smaller, in the one line a full ``/dev/shm`` gives."""
    key, folder, prefix = node_files(ctx, name)
    if ctx.is_local_main:
        made = make()
        manifest = {"tensors": export_tensors(list(made.items()), folder, prefix, what, lower=lower)}
        del made  # the ranks map the exported copy, the first one included
        ctx.store.set(key, json.dumps(manifest))
    manifest = json.loads(ctx.wait_key(key))
    return mapped_by_all(ctx, manifest, lambda m: {spec["key"]: map_file(spec) for spec in m["tensors"]})


def node_files(ctx: DistContext, name: str) -> tuple[str, Path, str]:
    """The store key and the folder and file prefix of the node's shared ``name``. Any rank of
    the node removes the node's files of it if the job fails, even half-written ones of a first
    rank that was killed mid-export: the names are known from the prefix."""
    folder, prefix = shm_dir(), f"gnnbridge-{ctx.run_id}-node{ctx.node_rank}-{name}"
    ctx.on_abort(lambda: _unlink(list(folder.glob(f"{prefix}-*"))))
    return f"{name}/{ctx.node_rank}", folder, prefix


def mapped_by_all(ctx: DistContext, manifest: dict, attach_files: Callable[[dict], object]):
    """``attach_files(manifest)`` on every rank of the node; once all have mapped the files, the
    first rank unlinks them: the pages live while a rank maps them, and nothing is left in
    ``/dev/shm`` even if the job is killed later."""
    mapped = attach_files(manifest)
    ctx.local_barrier()
    if ctx.is_local_main:
        _unlink([Path(t["path"]) for t in manifest["tensors"]])
    return mapped


def publish(record: LabelledRecord, folder: Path, prefix: str) -> dict:
    """What the node's other ranks need to get ``record``: for a memory-mapped record, its pickle
    (a few hundred bytes: "call this opener", see :mod:`gnnbridge.core.records.mapped`), which
    each rank unpickles to map the same files (one copy in the page cache per machine);
    otherwise its tensors exported to ``folder``."""
    if record.is_mapped:
        return {"reopen": base64.b64encode(pickle.dumps(record)).decode("ascii")}
    return export(record, folder, prefix)


def shm_dir() -> Path:
    """``$GNNBRIDGE_SHM_DIR``, else ``/dev/shm`` (RAM-backed on Linux), else the temp folder."""
    chosen = os.environ.get("GNNBRIDGE_SHM_DIR")
    if chosen:
        return Path(chosen)
    return Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())


def export(record: LabelledRecord, folder: Path, prefix: str, written: list[Path] | None = None) -> dict:
    """Write ``record``'s tensors (fields, and tensors inside dict fields, as a heterogeneous
    graph keeps them per type) to files ``folder/prefix-<n>`` and return the manifest (the
    files are added to ``written``, see :func:`export_tensors`)."""
    manifest: dict = {"type": type(record).__name__, "tensors": [], "values": {}}
    items = []
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        tensors = _tensor_items(value)
        if tensors is None:
            manifest["values"][f.name] = value
        items += [((f.name, key), tensor) for key, tensor in tensors or []]
    specs = export_tensors(items, folder, prefix, "the dataset", written)
    manifest["tensors"] = [{**spec, "field": spec["key"][0], "key": spec["key"][1]} for spec in specs]
    return manifest


def export_tensors(
    items: list[tuple],
    folder: Path,
    prefix: str,
    what: str,
    written: list[Path] | None = None,
    lower: str | None = None,
) -> list[dict]:
    """Write each ``(key, tensor)`` to a file ``folder/prefix-<n>``; return their specs (key,
    path, dtype, shape) for :func:`map_file`. Each file is added to ``written`` before it is
    filled; on an error they are all removed, so nothing partial is left."""
    written, specs = [] if written is None else written, []
    try:
        for key, tensor in items:
            path = folder / f"{prefix}-{len(specs)}"
            written.append(path)
            _write(path, tensor.contiguous(), what, lower)
            specs.append(
                {
                    "key": key,
                    "path": str(path),
                    "dtype": str(tensor.dtype).removeprefix("torch."),
                    "shape": list(tensor.shape),
                }
            )
    except BaseException:
        _unlink(written)
        raise
    return specs


def _tensor_items(value) -> list[tuple] | None:
    """``[(key, tensor)]`` of a tensor field (key None) or a non-empty dict of tensors (keys are
    names or edge-type tuples, kept as JSON lists); None for anything else."""
    if isinstance(value, torch.Tensor):
        return [(None, value)]
    if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        return [(list(k) if isinstance(k, tuple) else k, v) for k, v in value.items()]
    return None


def attach(manifest: dict) -> LabelledRecord:
    """Map the files of a manifest into a record; the record was validated by its loader."""
    cls = _record_types()[manifest["type"]]
    record = cls.__new__(cls)  # no __post_init__: validating again would read every page
    for spec in manifest["tensors"]:
        tensor, key = map_file(spec), spec["key"]
        if key is None:
            setattr(record, spec["field"], tensor)
        else:
            vars(record).setdefault(spec["field"], {})[tuple(key) if isinstance(key, list) else key] = tensor
    for name, value in manifest["values"].items():
        # JSON turned tuples (an edge type) into lists; no record keeps a list value.
        setattr(record, name, tuple(value) if isinstance(value, list) else value)
    return record


def map_file(spec: dict) -> torch.Tensor:
    """The tensor an :func:`export_tensors` spec describes, mapped shared from its file."""
    dtype, shape = getattr(torch, spec["dtype"]), spec["shape"]
    numel = int(torch.Size(shape).numel())
    return (
        torch.from_file(spec["path"], shared=True, size=numel, dtype=dtype) if numel else torch.empty(0, dtype=dtype)
    ).view(shape)


def _write(path: Path, tensor: torch.Tensor, what: str, lower: str | None) -> None:
    """``tensor`` into a new file, its space reserved first: a full folder is one line naming
    ``what`` and the fixes (``lower``: a setting that asks for less), not a SIGBUS mid-copy."""
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EFBIG):
            fixes = (
                f"enlarge it (docker --shm-size){', ' if lower else ' or '}point GNNBRIDGE_SHM_DIR at a larger "
                f"RAM-backed folder{f', or lower {lower}' if lower else ''}"
            )
            raise DataError(
                f"Not enough room in {path.parent} to share {what} between this node's ranks "
                f"({format_bytes(nbytes)} more needed); {fixes}."
            ) from None
        raise
    finally:
        os.close(fd)
    torch.from_file(str(path), shared=True, size=tensor.numel(), dtype=tensor.dtype).copy_(tensor.flatten())


def _unlink(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _record_types() -> dict[str, type]:
    found, todo = {HeteroGraphData.__name__: HeteroGraphData}, [LabelledRecord]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found
