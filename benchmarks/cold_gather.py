"""Gather feature rows from a prepared folder on a cold page cache: rows/s, disk bytes per row,
and the feature cache's hit rate. Run by ``big_graph.py`` in a fresh process per thread count.

Why a process of its own: the thread count of the compiled gather is numba's, fixed when numba
is imported (``NUMBA_NUM_THREADS``), and a fresh process maps the file afresh, so nothing a
previous measurement touched is in its page tables.

What it does, in order:

1. maps the folder as a run does (``open_prepared``); with ``--cache BYTES``, builds the
   feature cache a run would (the highest in-degree rows) from a second mapping that is then
   closed, and attaches it to the run's table;
2. draws ``--rows`` row ids in batches as neighbour sampling draws them (``--draw edges``: the
   distinct sources of ``--batch`` uniformly random edges, so a node is drawn in proportion to
   its in-degree, once per batch like a batch's input nodes) or uniformly (``--draw uniform``,
   the disk's worst case);
3. drops the feature file's pages from the page cache (``fsync``, then
   ``posix_fadvise(POSIX_FADV_DONTNEED)``). That drops clean pages only, and only pages no
   process has mapped in: a file just written must be synced first (done here), and no run may
   be using it. ``fincore`` (util-linux), where installed, says how much of it was still resident;
4. gathers the rows with ``gather_rows`` in batches of ``--batch`` (timed), ``--depth`` reader
   threads (``placement.read_depth``) for the mapped file, ``--threads`` for the rest, counting
   the bytes the process made the disk read (``/proc/self/io``).

    python benchmarks/cold_gather.py FOLDER [--threads 2 --rows 100000 --batch 281600 --cache 0
        --draw edges --madvise auto --depth 32 --seed 0]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# A training batch's neighbour picks at compare.py's fanouts [25, 10] and 1024 seeds
# (1024 x 25 + 25,600 x 10): its distinct sources are the rows one batch gathers.
BATCH = 1024 * 25 + 1024 * 25 * 10


def drop_pages(path: Path) -> None:
    """Evict ``path``'s clean, unmapped pages from the page cache (its dirty ones synced first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_share(path: Path) -> float | None:
    """The share of ``path``'s bytes in the page cache, by ``fincore``; None without it."""
    if not shutil.which("fincore"):
        return None
    out = subprocess.run(
        ["fincore", "--bytes", "--raw", "--noheadings", "--output", "RES,SIZE", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]) / max(1, int(out[1]))


def disk_read_bytes() -> int:
    """Bytes this process (all its threads) has made the storage layer read."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes"))


def draw_batches(record, rows: int, batch: int, how: str, seed: int) -> list:
    """Batches of row ids to gather: the distinct sources of ``batch`` random edges (in-degree
    weighted and deduplicated, as a sampled batch's input nodes are) or ``batch`` uniform ids,
    until ``rows`` rows. Drawn before timing; the topology's pages stay as they are."""
    import torch

    rng = np.random.default_rng(seed)
    n, out, total = int(record.x.shape[0]), [], 0
    indices = record.indices.numpy()
    while total < rows:
        if how == "uniform":
            ids = rng.integers(0, n, min(batch, rows - total))
        else:
            ids = np.unique(indices[np.sort(rng.integers(0, indices.size, batch))])
            ids = ids[rng.permutation(ids.size)][: rows - total]
        out.append(torch.from_numpy(np.asarray(ids, dtype=np.int64)))
        total += ids.size
    return out


def attach_run_cache(folder: Path, record, budget: int):
    """The cache ``placement.feature_cache=budget`` would build, its rows read through a mapping
    of its own that is closed afterwards (pages mapped by this process could not be dropped)."""
    from gnnbridge.core.records.features import attach_cache, build_cache
    from gnnbridge.core.storage.folder import open_prepared

    other = open_prepared(folder)
    cache = build_cache(other.x, other.indptr.diff(), budget)
    if cache is None:
        return None
    del other  # the cache's rows are a copy (build_cache gathers them)
    gc.collect()
    attach_cache(record.x, cache)
    return cache


def measure(
    folder: Path,
    threads: int,
    rows: int,
    batch: int,
    budget: int,
    how: str,
    seed: int,
    advice: str = "auto",
    depth: int = 1,
) -> dict:
    import torch

    from gnnbridge.core.records.features import advise, gather_rows, set_read_depth, warm
    from gnnbridge.core.storage.folder import open_prepared, read_manifest

    torch.set_num_threads(threads)
    set_read_depth(depth)
    record = open_prepared(folder)
    cache = attach_run_cache(folder, record, budget) if budget > 0 else None
    batches = draw_batches(record, rows, batch, how, seed)
    features = folder / read_manifest(folder)["arrays"]["x"]["file"]
    if advice != "auto":  # auto: as the folder's opener advised it
        advise(record.x, advice)
    warm(record.x)  # compiles or loads the kernel (touches one row: one page)
    drop_pages(features)
    resident = resident_share(features)
    if cache is not None:
        cache.reset()
    read0, t0 = disk_read_bytes(), time.perf_counter()
    for ids in batches:
        gather_rows(record.x, ids)
    seconds, read = time.perf_counter() - t0, disk_read_bytes() - read0
    hits = cache.hits if cache is not None else 0
    return {
        "threads": threads,
        "read_depth": depth,
        "rows": rows,
        "batch": batch,
        "draw": how,
        "madvise": advice,
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "missed_rows_per_s": (rows - hits) / seconds,
        "cache_bytes": cache.nbytes if cache is not None else 0,
        "cache_hit_rate": hits / rows,
        "disk_read_bytes": read,
        "disk_bytes_per_missed_row": read / max(1, rows - hits),
        "row_bytes": int(record.x.shape[1] * record.x.element_size()),
        "resident_after_drop": resident,
        "feature_file": str(features),
        "file_bytes": features.stat().st_size,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a prepared folder")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=BATCH, help="edges (or uniform rows) per gather_rows call")
    parser.add_argument("--cache", type=int, default=0, help="feature cache bytes, as placement.feature_cache")
    parser.add_argument("--draw", choices=("edges", "uniform"), default="edges")
    parser.add_argument(
        "--madvise",
        choices=("auto", "normal", "random"),
        default="auto",
        help="auto: as gnnbridge maps it; normal: the kernel's read-around per fault; random: none",
    )
    parser.add_argument("--depth", type=int, default=1, help="placement.read_depth: reader threads for the file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # numba fixes its pool size at import: allow the requested threads before anything imports it
    os.environ["NUMBA_NUM_THREADS"] = str(max(args.threads, os.cpu_count() or 1))
    print(
        json.dumps(
            measure(
                args.folder,
                args.threads,
                args.rows,
                args.batch,
                args.cache,
                args.draw,
                args.seed,
                args.madvise,
                args.depth,
            )
        )
    )


if __name__ == "__main__":
    sys.exit(main())
