"""Heterogeneous link prediction: core's typed sampler (what every PyG user trains on) against
DGL's own sampler, for quality and speed, on a shop graph gnnbridge's generators did not make
(``make_shop_graph.py``: two relations between customers and products, featureless brands).

Why: issue 29 measured core's sampler 0.05-0.075 ROC-AUC below DGL's on such a graph from one
seed each. One seed says little here (a run's AUC moves by several hundredths with the seed), so
every runner trains with the same seeds and the table gives mean, standard deviation and every
value; the runs alternate runner by runner within a seed so a slow phase of a shared machine
does not land on one runner.

Runners (all ``gnnbridge train --nproc 2`` with the same config): ``dgl-native`` (DGL's
``NeighborSampler`` + ``as_edge_prediction_sampler``), ``dgl-core`` and ``pyg-core`` (core's
typed sampler, per-hop trimmed batches). Sampler speed is timed in this process on the same
training batches: core's typed sampler against DGL's, each with its conversion to the library's
batch.

    python benchmarks/hetero_link.py [--seeds 0,1,2 --epochs 8 --customers 6000 --products 3000
        --runners dgl-native,dgl-core,pyg-core --sampler-batches 40 --out benchmarks/out/hetero]

Writes ``hetero-link.json`` (every run's metrics and epoch times) and ``hetero-link.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_shop_graph import shop_graph  # noqa: E402  (benchmarks/ is not a package)

RUNNERS = {"dgl-native": ("dgl", "native"), "dgl-core": ("dgl", "core"), "pyg-core": ("pyg", "core")}
CONFIG = [
    "task=link",
    "link.edge_type=buys",
    "model.hidden=64",
    "sampler.fanouts=[10,5]",
    "dataset.reverse_edges=true",
]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--customers", type=int, default=6000)
    parser.add_argument("--products", type=int, default=3000)
    parser.add_argument("--runners", default=",".join(RUNNERS))
    parser.add_argument("--sampler-batches", type=int, default=40)
    parser.add_argument("--sampler-only", action="store_true", help="only the sampler speed (a quiet machine)")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "hetero")
    return parser.parse_args()


def graph(args) -> Path:
    path = args.out / f"shop-c{args.customers}-p{args.products}.npz"
    if not path.exists():
        args.out.mkdir(parents=True, exist_ok=True)
        np.savez(path, **shop_graph(args.customers, args.products))
    return path


def train(runner: str, npz: Path, seed: int, args) -> dict:
    backend, kind = RUNNERS[runner]
    run_dir = args.out / "runs" / f"{runner}-s{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    sets = [*CONFIG, f"sampler.kind={kind}", f"train.seed={seed}", f"train.epochs={args.epochs}"]
    cmd = [str(Path(sys.executable).parent / "gnnbridge"), "train", "--dataset", str(npz), "--backend", backend]
    cmd += ["--nproc", "2", "--quiet", "--out", str(run_dir), *[a for s in sets for a in ("--set", s)]]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        return {"failed": done.stderr.strip().splitlines()[-1:]}
    results = json.loads((run_dir / "results.json").read_text())
    final = results["metrics"]
    epochs = [e["epoch_time_s"] for e in results["history"]]
    return {
        "test_roc_auc": final.get("test_roc_auc"),
        "test_mrr": final.get("test_mrr"),
        "epoch_s": statistics.median(epochs[1:] or epochs),
        "run_dir": str(run_dir),
    }


def sampler_speed(npz: Path, args) -> dict:
    """Milliseconds per training batch (sample + convert) of core's sampler and DGL's."""
    from gnnbridge.core.config import DatasetConfig
    from gnnbridge.core.plugins import get_backend
    from gnnbridge.core.sampling.build import make_hetero_sampler
    from gnnbridge.core.tasks import for_link_task
    from gnnbridge.plugins.datasets import load_npz

    source = load_npz(DatasetConfig(name="npz", path=str(npz)), 0)
    data = for_link_task(source, "buys", True, seed=0, val_fraction=0.1, test_fraction=0.1, eval_negatives=100)
    batches = list(data.split("train").split(512))[: args.sampler_batches]
    out = {}
    for name, (backend, kind) in RUNNERS.items():
        sampler = make_hetero_sampler(get_backend(backend), data, [10, 5], {}, kind, negatives=1)
        sampler.reseed(0, 0, 0)
        next(iter(sampler.loader(batches[:1])))  # warm-up (compilation, first allocations)
        start = time.perf_counter()
        edges = sum(drawn_edges(mb.graph, kind) for mb in sampler.loader(batches))
        out[name] = {"ms_per_batch": 1000 * (time.perf_counter() - start) / len(batches), "edges": edges}
    return out


def drawn_edges(graph, kind: str) -> int:
    """Edges the sampler drew for a batch: DGL draws each block anew; core's blocks (or PyG's
    layer bounds) are prefixes of one sample, whose input layer holds every drawn edge."""
    if kind == "native":
        return sum(int(block.num_edges()) for block in graph)
    if isinstance(graph, list):
        return int(graph[0].num_edges())
    return int(sum(graph.bounds[0][2].values()))


def summary(rows: dict) -> dict:
    out = {}
    for runner, runs in rows.items():
        ok = [r for r in runs if "failed" not in r]
        aucs = [r["test_roc_auc"] for r in ok]
        out[runner] = {
            "auc_mean": statistics.mean(aucs) if aucs else None,
            "auc_std": statistics.stdev(aucs) if len(aucs) > 1 else 0.0,
            "aucs": aucs,
            "mrr_mean": statistics.mean(r["test_mrr"] for r in ok) if ok else None,
            "epoch_s": statistics.median(r["epoch_s"] for r in ok) if ok else None,
            "failed": len(runs) - len(ok),
        }
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = {n: s for n, s in result["summary"].items() if s["aucs"]}  # a runner that failed every seed: no bar
    speed = result["sampler"]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 4))
    names = list(summ)
    a.bar(names, [summ[n]["auc_mean"] for n in names], yerr=[summ[n]["auc_std"] for n in names], capsize=4)
    for i, n in enumerate(names):
        a.scatter([i] * len(summ[n]["aucs"]), summ[n]["aucs"], color="k", s=10, zorder=3)
    a.set_ylim(min(min(s["aucs"]) for s in summ.values()) - 0.03, 1.0)
    a.set_title("test ROC-AUC (mean, std, each seed)")
    b.bar(names, [summ[n]["epoch_s"] for n in names])
    b.set_title("epoch time, 2 ranks (s, median)")
    c.bar(list(speed), [speed[n]["ms_per_batch"] for n in speed])
    c.set_title("sampler: ms per batch of 512 edges")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    args = parse()
    npz = graph(args)
    if args.sampler_only:
        for name, row in sampler_speed(npz, args).items():
            print(f"sampler {name:11s} {row['ms_per_batch']:.1f} ms/batch, {row['edges']} edges")
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    runners = args.runners.split(",")
    rows: dict[str, list] = {r: [] for r in runners}
    for i, seed in enumerate(seeds):
        for runner in runners[i % len(runners) :] + runners[: i % len(runners)]:
            rows[runner].append({"seed": seed, **train(runner, npz, seed, args)})
            print(runner, rows[runner][-1], flush=True)
    result = {"graph": str(npz), "config": CONFIG, "epochs": args.epochs, "runs": rows, "summary": summary(rows)}
    result["sampler"] = sampler_speed(npz, args)
    (args.out / "hetero-link.json").write_text(json.dumps(result, indent=1))
    plot(result, args.out / "hetero-link.png")
    for runner, s in result["summary"].items():
        if s["auc_mean"] is None:
            print(f"{runner:11s} every run failed (see runs/)")
            continue
        print(f"{runner:11s} AUC {s['auc_mean']:.4f} ± {s['auc_std']:.4f} {s['aucs']}  epoch {s['epoch_s']:.2f} s")
    for name, s in result["sampler"].items():
        print(f"sampler {name:11s} {s['ms_per_batch']:.1f} ms/batch, {s['edges']} edges")


if __name__ == "__main__":
    main()
