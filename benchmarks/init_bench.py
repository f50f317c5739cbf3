"""How the built-in models start: gnnbridge's one shared initialisation against each library's
own (``model.init=shared|library``), over seeds, on node, link and graph tasks, homogeneous and
heterogeneous, on PyG and DGL.

Why: a shared start is what lets one experiment give the same numbers on both libraries
(``docs/compare-and-port.md``), but it replaces what each library's authors chose, and issue 61
measured a heterogeneous link task 0.05 ROC-AUC below the commit before it (seeds 1-3). One seed
moves such a run by more than that, so every setting trains with the same seeds, the runs of a
seed alternate between the settings (a slow phase of a shared machine lands on none alone), and
the table gives the mean, the standard deviation and the paired difference per seed (the same
data and seed, only the start differs).

Tasks (each a ``gnnbridge train`` in a fresh process, the defaults unless named):

* ``node``: ``synthetic`` (homogeneous), ``sage``, test accuracy;
* ``hetero-node``: ``mag-synthetic`` (papers with features, featureless authors and venues),
  ``sage``, test accuracy;
* ``link``: ``synthetic``, ``task=link``, test ROC-AUC;
* ``hetero-link``: the shop graph of issue 61 (``make_shop_graph.py``: 1,500 customers and 800
  products with features, 30 featureless brands), target ``buys``, reverse edges, hidden 64,
  fanouts [10, 5], batch 512, 8 epochs, 2 ranks, test ROC-AUC;
* ``graph``: ``gin-synthetic``, ``gin``, test accuracy.

    python benchmarks/init_bench.py [--seeds 1,2,3,4,5 --tasks node,hetero-node,link,hetero-link,graph
        --backends pyg,dgl --inits shared,library --lr-link 0.001 --out benchmarks/out/init]

Writes ``init.json`` (every run) and ``init.png`` (per task and library, each setting's mean and
each seed), and prints a markdown table.
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

# task -> (dataset argument, metric, ranks, --set values)
TASKS: dict[str, tuple[str, str, int, list[str]]] = {
    "node": ("synthetic", "test_acc", 1, []),
    "hetero-node": ("mag-synthetic", "test_acc", 1, []),
    "link": ("synthetic", "test_roc_auc", 1, ["task=link"]),
    "hetero-link": (
        "SHOP",
        "test_roc_auc",
        2,
        [
            "task=link",
            "link.edge_type=buys",
            "dataset.reverse_edges=true",
            "model.hidden=64",
            "sampler.fanouts=[10,5]",
            "train.batch_size=512",
            "train.epochs=8",
        ],
    ),
    "graph": ("gin-synthetic", "test_acc", 1, ["task=graph", "model.arch=gin"]),
}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--backends", default="pyg,dgl")
    parser.add_argument("--inits", default="shared,library")
    parser.add_argument("--set", action="append", default=[], help="one more --set for every run")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "init")
    return parser.parse_args()


def shop(out: Path) -> Path:
    path = out / "shop-c1500-p800-b30.npz"
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        np.savez(path, **shop_graph(1500, 800, 30))
    return path


def train(task: str, backend: str, init: str, seed: int, args) -> dict:
    dataset, metric, nproc, sets = TASKS[task]
    dataset = str(shop(args.out)) if dataset == "SHOP" else dataset
    run_dir = args.out / "runs" / f"{task}-{backend}-{init}-s{seed}-{time.strftime('%H%M%S')}"
    sets = [*sets, *args.set, f"model.init={init}", f"train.seed={seed}"]
    cmd = [str(Path(sys.executable).parent / "gnnbridge"), "train", "--dataset", dataset, "--backend", backend]
    cmd += ["--nproc", str(nproc), "--quiet", "--out", str(run_dir), *[a for s in sets for a in ("--set", s)]]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        return {"failed": done.stderr.strip().splitlines()[-1:], "returncode": done.returncode}
    results = json.loads((run_dir / "results.json").read_text())
    return {"value": results["metrics"][metric], "last": results["last"]["metrics"].get(metric)}


def summary(runs: list[dict], inits: list[str]) -> dict:
    """Per (task, backend): each init's mean, std and values, and the paired differences to the
    first init (the same seed, only the start differs)."""
    out: dict = {}
    for row in runs:
        if "value" in row:
            cell = out.setdefault(f"{row['task']}/{row['backend']}", {}).setdefault(row["init"], {})
            cell[row["seed"]] = row["value"]
    table = {}
    for key, cells in out.items():
        table[key] = {}
        base = cells.get(inits[0], {})
        for init, by_seed in cells.items():
            values = [by_seed[s] for s in sorted(by_seed)]
            diffs = [by_seed[s] - base[s] for s in sorted(by_seed) if s in base]
            table[key][init] = {
                "mean": statistics.mean(values),
                "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                "values": values,
                "paired_diff_mean": statistics.mean(diffs) if diffs else None,
            }
    return table


def plot(table: dict, inits: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(k.split("/")[0] for k in table))
    backends = list(dict.fromkeys(k.split("/")[1] for k in table))
    fig, axes = plt.subplots(len(backends), len(tasks), figsize=(2.6 * len(tasks), 2.8 * len(backends)), squeeze=False)
    for (row, backend), (col, task) in ((r, c) for r in enumerate(backends) for c in enumerate(tasks)):
        ax, key = axes[row][col], f"{task}/{backend}"
        if key not in table:
            ax.set_visible(False)
            continue
        cells = [table[key].get(i) for i in inits]
        ax.bar(range(len(inits)), [c["mean"] if c else 0 for c in cells], color=["tab:blue", "tab:orange"])
        for i, c in enumerate(cells):
            if c:
                ax.scatter([i] * len(c["values"]), c["values"], color="k", s=8, zorder=3)
        values = [v for c in cells if c for v in c["values"]]
        ax.set_ylim(max(0.0, min(values) - 0.05), min(1.0, max(values) + 0.03))
        ax.set_xticks(range(len(inits)), inits)
        ax.set_title(key, fontsize=9)
    fig.suptitle("test metric per start (bar: mean over seeds; dots: each seed)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    args = parse()
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    inits = args.inits.split(",")
    runs = []
    for task in args.tasks.split(","):
        for backend in args.backends.split(","):
            for i, seed in enumerate(seeds):
                for init in inits[i % len(inits) :] + inits[: i % len(inits)]:
                    row = {"task": task, "backend": backend, "init": init, "seed": seed}
                    row.update(train(task, backend, init, seed, args))
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    table = summary(runs, inits)
    (args.out / "init.json").write_text(json.dumps({"sets": args.set, "runs": runs, "summary": table}, indent=1))
    plot(table, inits, args.out / "init.png")
    print(f"\n| task / library | {' | '.join(inits)} | {inits[-1]} - {inits[0]}, paired |")
    print("| --- |" + " --- |" * (len(inits) + 1))
    for key, cells in table.items():
        shown = [f"{cells[i]['mean']:.3f} ± {cells[i]['std']:.3f}" if i in cells else "-" for i in inits]
        diff = cells.get(inits[-1], {}).get("paired_diff_mean")
        paired = f"{diff:+.3f}" if diff is not None else "-"
        print(f"| {key} | {' | '.join(shown)} | {paired} |")


if __name__ == "__main__":
    main()
