"""Where layer-wise inference keeps each layer's ``[N, width]`` output (``eval.layer_store``).

In memory, every rank all-gathers the whole layer: simple and fast, but each rank of a machine
then holds two full layers (the input and the output), which a graph with 100M nodes cannot.
On disk, the layer is one memory-mapped file that the ranks of a machine share: each rank writes
its own rows into it, a barrier makes them visible (one page cache), and the next layer reads
only the rows its batches need; nothing is gathered whole. The files live in a fresh folder in
``$TMPDIR`` that is removed when the pass ends, fails or is interrupted; where ``$TMPDIR`` is in
RAM (tmpfs, as ``/tmp`` is on some distributions) the files would take the memory they were
meant to spare, so rank 0 says so in one warning line. Ranks on several
machines cannot share such a file (their temp folders differ), so there the layers are
all-gathered as in memory whatever the setting.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from gnnbridge.core.errors import ResourceError
from gnnbridge.core.host import available_memory, format_bytes
from gnnbridge.core.records.features import advise
from gnnbridge.core.runtime.context import DistContext

# auto: on disk when the in-memory layers of a machine's ranks would take more than this share
# of the memory still free (the rest is for the batches, the model and the page cache).
MEMORY_SHARE = 0.5


class LayerStore:
    """One layer-wise pass's layer outputs; a context manager that removes its files on exit."""

    def __init__(self, ctx: DistContext, num_nodes: int, mode: str = "auto"):
        self.ctx, self.num_nodes, self.mode = ctx, num_nodes, mode
        self.folder: Path | None = None
        self._previous: Path | None = None

    def __enter__(self) -> LayerStore:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.ctx.barrier()  # every rank has read the last layer before its file goes
        # On a failure each rank removes it: the one that failed may be the only one left.
        self.remove()

    def remove(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def on_disk(self, row: torch.Tensor) -> bool:
        """Whether this layer (rows like ``row``) goes to disk; the same answer on every rank."""
        if self.mode == "memory" or self.ctx.num_nodes > 1:
            return False
        if self.mode == "disk":
            return True
        # Each rank holds the gathered input and output layers, and a machine runs local_world_size ranks.
        need = 2 * self.num_nodes * row.numel() * row.element_size() * self.ctx.local_world_size
        return any(self.ctx.gather_objects(need > MEMORY_SHARE * available_memory()))

    def layer_file(self, layer: int, row: torch.Tensor) -> torch.Tensor:
        """``[N, *row.shape]`` rows of ``row``'s dtype, mapped from a file every rank of the machine
        shares (zeros until written); the previous layer's file is removed (all ranks are past it)."""
        if self.folder is None:
            made = tempfile.mkdtemp(prefix="gnnbridge-layers-") if self.ctx.is_main else None
            if made is not None and ram_backed(made):
                print(
                    f"Warning: layer-wise inference writes its layers to {made}, which is in RAM (tmpfs); set "
                    "TMPDIR to a folder on disk when the layers do not fit in memory.",
                    file=sys.stderr,
                )
            self.folder = Path(self.ctx.gather_objects(made)[0])
            self.ctx.on_abort(self.remove)
        path = self.folder / f"layer{layer}.bin"
        shape = (self.num_nodes, *row.shape)
        dtype = torch.int16 if row.dtype == torch.bfloat16 else row.dtype  # numpy has no bfloat16
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        self._allocate(path, int(np.prod(shape)) * np_dtype.itemsize)
        if self._previous is not None and self.ctx.is_main:
            self._previous.unlink(missing_ok=True)  # mapped ranks keep their pages until they let go
        self._previous = path
        table = torch.from_numpy(np.memmap(path, dtype=np_dtype, mode="r+", shape=shape))
        advise(table, "random")  # a layer on disk is one too large to cache: read rows, not read-around
        return table.view(torch.bfloat16) if row.dtype == torch.bfloat16 else table

    def _allocate(self, path: Path, size: int) -> None:
        """The file's blocks, reserved now (every rank alike: the same size is a no-op), so a full
        disk is this one line and not a SIGBUS when a mapped page is first written."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError as exc:
            raise ResourceError(
                f"Layer-wise inference needs {format_bytes(size)} for a layer's output in '{path.parent}' "
                f"({exc.strerror}); point TMPDIR at a folder with that much free space, or keep layers in "
                "memory with --set eval.layer_store=memory (or eval.mode=sampled)."
            ) from None

    def finish(self) -> None:
        """This rank's rows are written: after the barrier every rank's are visible to all (one
        shared mapping of one file per machine; no flush needed)."""
        self.ctx.barrier()


def output_table(store: LayerStore, layer: int, out: torch.Tensor, shard: torch.Tensor, width: int):
    """Where a rank writes layer ``layer``'s rows (like ``out``'s), the node id of its first row,
    and whether it is the store's file of all nodes (True) or a ``width``-row all-gather buffer."""
    if store.on_disk(out[0]):
        return store.layer_file(layer, out[0]), 0, True
    first = int(shard[0]) if shard.numel() else 0
    return torch.zeros((width, *out.shape[1:]), dtype=out.dtype), first, False


def every_rank_rows(ctx: DistContext, store: LayerStore, mine: torch.Tensor, shared: bool, sizes: list[int]):
    """Every item's rows on every rank, once each rank has written its own into ``mine`` (the
    store's shared file: a barrier makes them visible; else an all-gather buffer)."""
    if shared:
        store.finish()
        return mine
    return ctx.all_gather_rows(mine, sizes)


def ram_backed(path: str | os.PathLike) -> bool:
    """Whether ``path`` lies on a RAM file system (tmpfs, ramfs), from the longest mount point
    of ``/proc/mounts`` that holds it; False where that file cannot be read."""
    real, best, kind = os.path.realpath(path), "", ""
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except (OSError, IndexError):
        return False
    return kind in ("tmpfs", "ramfs")
