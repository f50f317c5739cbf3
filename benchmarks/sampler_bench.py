"""Neighbour-sampler throughput: sampled edges per second on one graph, the same batches for every
sampler.

Why separately from the training runs: an epoch mixes sampling with gathering, the model and
DDP, so a slow sampler can hide behind the rest (or the rest behind it). Here each sampler
draws the same 2-hop neighbourhoods of the same seed batches and nothing else is timed.

Samplers (``--sampler``):

* ``core``: gnnbridge's ``NeighborSampler`` on CPU tensors, i.e. its compiled (numba) path;
* ``core-torch``: the same with ``GNNBRIDGE_SAMPLER_KERNEL=torch``, the vectorised torch path
  that CUDA runs (set by the caller in this process's environment);
* ``dgl``: DGL's ``dataloading.NeighborSampler(...).sample_blocks`` on a CSC-only DGLGraph;
* ``pyg``: PyG's ``sampler.NeighborSampler.sample_from_nodes`` (what ``NeighborLoader`` calls per
  batch), only where pyg-lib or torch-sparse is installed; otherwise it reports ``skipped``.

Each sampler counts its own output edges. DGL's first block also samples the seeds' own
neighbours again (the seeds are destinations of every block), so it returns more edges for the
same seeds than the core sampler, which samples hop 2 only for the nodes hop 1 reached; the
seconds per batch are reported beside edges/s for that reason.

One sampler at one thread count per process (``compare.py`` starts a fresh one for each), so
thread settings and caches never carry over:

    python benchmarks/sampler_bench.py --npz GRAPH.npz --cache DIR --sampler core --threads 1
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # gnnbridge from this checkout
SAMPLERS = ("core", "core-torch", "dgl", "pyg")


# --------------------------------------------------------------------------- data


def csc_paths(npz: Path, cache: Path) -> tuple[Path, Path]:
    """Where the graph's CSC arrays are cached (beside the other outputs, named after the graph)."""
    return cache / f"{npz.stem}.csc-indptr.npy", cache / f"{npz.stem}.csc-indices.npy"


def build_csc(npz: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` int64: in-edges sorted by (destination, source). At Reddit scale the
    sort takes ~20 s, hence the cache."""
    arrays = np.load(npz)
    n = int(arrays["y"].shape[0])  # not x: reading it would cost a pass over the features
    src, dst = arrays["edge_index"]
    order = np.argsort(dst * n + src, kind="stable")
    indices = src[order]
    del order
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, indices


def load_csc(npz: Path, cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """The cached CSC arrays, built (and written atomically) when missing or older than the graph."""
    paths = csc_paths(npz, cache)
    if all(p.exists() and p.stat().st_mtime >= npz.stat().st_mtime for p in paths):
        return tuple(np.load(p) for p in paths)
    arrays = build_csc(npz)
    cache.mkdir(parents=True, exist_ok=True)
    for path, array in zip(paths, arrays):
        tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
        np.save(tmp, array)
        os.replace(tmp, path)
    return arrays


def seed_batches(npz: Path, count: int, size: int, seed: int) -> list[np.ndarray]:
    """``count`` batches of ``size`` distinct training nodes; the same for every sampler."""
    train = np.load(npz)["train_idx"]
    rng = np.random.default_rng(seed)
    return [rng.choice(train, min(size, train.size), replace=False) for _ in range(count)]


# --------------------------------------------------------------------------- samplers


def core_sampler(indptr, indices, fanouts, device="cpu"):
    """gnnbridge's sampler; ``GNNBRIDGE_SAMPLER_KERNEL`` in the environment picks its CPU path.
    On ``cuda`` the graph's arrays live on the GPU (``placement.topology=device``) and each
    batch is waited for, so the seconds are the GPU's."""
    import torch

    from gnnbridge.core.sampling.neighbors import NeighborSampler

    sampler = NeighborSampler(torch.from_numpy(indptr).to(device), torch.from_numpy(indices).to(device), fanouts)
    generator = torch.Generator().manual_seed(0)
    if device == "cpu":
        return lambda seeds: sampler.sample(seeds, generator).row.numel()

    def sample(seeds):
        edges = sampler.sample(seeds.to(device), generator).row.numel()
        torch.cuda.synchronize()
        return edges

    return sample


def dgl_sampler(indptr, indices, fanouts):
    """DGL's sampler on its in-edge (CSC) format, the one it samples from."""
    import torch

    from gnnbridge.backends.dgl.compat import import_dgl

    dgl = import_dgl()
    csc = (torch.from_numpy(indptr), torch.from_numpy(indices), torch.empty(0, dtype=torch.int64))
    g = dgl.graph(("csc", csc), num_nodes=indptr.size - 1)
    sampler = dgl.dataloading.NeighborSampler(list(reversed(fanouts)))  # DGL: input layer first
    return lambda seeds: sum(b.num_edges() for b in sampler.sample_blocks(g, seeds)[2])


def pyg_sampler(indptr, indices, fanouts):
    """PyG's sampler (pyg-lib / torch-sparse); raises ``LookupError`` when neither is installed."""
    import torch
    import torch_geometric.typing as pyg_typing

    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        raise LookupError("PyG's NeighborLoader needs pyg-lib or torch-sparse, and neither is installed")
    from torch_geometric.data import Data
    from torch_geometric.sampler import NeighborSampler, NodeSamplerInput

    dst = torch.repeat_interleave(torch.arange(indptr.size - 1), torch.from_numpy(np.diff(indptr)))
    data = Data(edge_index=torch.stack([torch.from_numpy(indices), dst]), num_nodes=indptr.size - 1)
    sampler = NeighborSampler(data, fanouts)
    return lambda seeds: sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds)).row.numel()


def set_threads(threads: int) -> None:
    """torch's intra-op pool (which the core sampler's numba pool follows) and DGL's OpenMP pool."""
    import torch

    torch.set_num_threads(threads)
    try:
        from gnnbridge.backends.dgl.compat import import_dgl

        import_dgl().utils.set_num_threads(threads)
    except ImportError:
        pass


WARM_SECONDS = 1.0


def measure(sample, batches: list, warmup: int) -> dict:
    """Edges and seconds over the batches after ``warmup`` (compilation, caches, first touches)."""
    import torch

    seeds = [torch.from_numpy(b) for b in batches]
    for b in seeds[:warmup]:
        sample(b)
    # Then at least a second more: on this shared VM a process's first ~0.5 s run at a fraction
    # of the speed of the rest (measured: the same sampler 13.6M edges/s first, 21.3M later).
    start = time.perf_counter()
    while time.perf_counter() - start < WARM_SECONDS:
        for b in seeds[:warmup]:
            sample(b)
    edges, start = 0, time.perf_counter()
    for b in seeds[warmup:]:
        edges += sample(b)
    seconds = time.perf_counter() - start
    timed = len(seeds) - warmup
    return {
        "edges": edges,
        "seconds": seconds,
        "batches": timed,
        "edges_per_s": edges / seconds,
        "ms_per_batch": 1e3 * seconds / timed,
        "edges_per_batch": edges / timed,
    }


def bench(args) -> dict:
    """One sampler at one thread count; ``{"skipped": why}`` when the sampler cannot run here."""
    if args.sampler == "core-torch" and os.environ.get("GNNBRIDGE_SAMPLER_KERNEL") != "torch":
        raise SystemExit("core-torch needs GNNBRIDGE_SAMPLER_KERNEL=torch in the environment")
    indptr, indices = load_csc(args.npz, args.cache)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    core = functools.partial(core_sampler, device=args.device)
    make = {"core": core, "core-torch": core, "dgl": dgl_sampler, "pyg": pyg_sampler}
    if args.device != "cpu" and args.sampler not in ("core", "core-torch"):
        raise SystemExit(f"--device {args.device} is for the core sampler; --sampler {args.sampler} runs on the CPU")
    set_threads(args.threads)
    try:
        sample = make[args.sampler](indptr, indices, fanouts)
    except LookupError as exc:
        return {"skipped": str(exc)}
    batches = seed_batches(args.npz, args.warmup + args.batches, args.batch_size, args.seed)
    return measure(sample, batches, args.warmup)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--npz", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="folder for the cached CSC arrays")
    parser.add_argument("--sampler", choices=SAMPLERS, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the core sampler runs")
    parser.add_argument("--fanouts", default="25,10", help="neighbours per hop, counted from the seeds")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=30, help="timed batches")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    args.npz, args.cache = args.npz.resolve(), args.cache.resolve()
    result = {"sampler": args.sampler, "device": args.device, "threads": args.threads, **bench(args)}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
