"""Top-k retrieval from final node states at recommendation scale: exact chunked scoring against
FAISS's approximate HNSW index, each in a fresh process, for time, peak memory and recall.

Why here and not in a training run: ``predict --top-k`` spends its time in this step once the
typed layer-wise pass has the states, and the step's cost depends only on the two tables' sizes,
``k`` and the pairs left out. The states are synthetic (clustered, so that nearest neighbours
mean something and recall is a fair measure), 64 wide as ``model.hidden`` is by default, with
``--exclude`` training pairs per source that must never be returned.

    python benchmarks/top_k.py [--sources 200000 --destinations 200000 --dim 64 --k 20 --exclude 10
        --methods exact,hnsw --out benchmarks/out/topk]

Writes ``top-k.json``. Peak memory is the child's peak resident set minus what it held before
the step (its inputs included in neither).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=200_000)
    parser.add_argument("--destinations", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--exclude", type=int, default=10)
    parser.add_argument("--methods", default="exact,hnsw")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "topk")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def states(args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    centres = torch.randn(1000, args.dim, generator=gen)

    def pick(n: int) -> torch.Tensor:
        return centres[torch.randint(0, 1000, (n,), generator=gen)] + 0.5 * torch.randn(n, args.dim, generator=gen)

    src, dst = pick(args.sources), pick(args.destinations)
    exclude = torch.stack(
        [
            torch.arange(args.sources).repeat_interleave(args.exclude),
            torch.randint(0, args.destinations, (args.sources * args.exclude,), generator=gen),
        ]
    )
    return src, dst, exclude


def child(args) -> None:
    from gnnbridge.core.tasks.retrieval import approximate_top_k, chunked_top_k

    src, dst, exclude = states(args)

    class Dot:
        decoder = "dot"

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    if args.child == "exact":
        top, _ = chunked_top_k(Dot(), src, dst, args.k, exclude)
    else:
        top, _ = approximate_top_k(src, dst, args.k, exclude)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    torch.save(top, args.out / f"{args.child}.pt")
    print(json.dumps({"method": args.child, "seconds": seconds, "peak_bytes": peak}))


def main() -> None:
    args = parse()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        return child(args)
    rows = []
    for method in args.methods.split(","):
        cmd = [sys.executable, __file__, "--child", method, *sys.argv[1:]]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    if {"exact", "hnsw"} <= {r["method"] for r in rows}:
        exact, approx = (torch.load(args.out / f"{m}.pt") for m in ("exact", "hnsw"))
        found = (approx.unsqueeze(2) == exact.unsqueeze(1)).any(2).float().mean().item()
        rows.append({"hnsw_recall_at_k": found})
        print(f"HNSW recall@{args.k} against the exact lists: {found:.4f}")
    (args.out / "top-k.json").write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
