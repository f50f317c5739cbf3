"""Side-by-side benchmark: gnnbridge (PyG and DGL backends) against hand-written DDP scripts.

Why: gnnbridge claims that one config trains the same model on either library with the
accuracy and speed of code written directly against that library. This script checks that
claim on one graph that gnnbridge did not generate (``make_graph.py``), with one set of
hyperparameters handed to every runner:

* ``gnnbridge-pyg`` and ``gnnbridge-dgl``: ``gnnbridge.run(...)`` in this process (it spawns
  its own ranks);
* ``handwritten-dgl`` (the reference) and ``handwritten-pyg``: the tutorial-style scripts
  beside this file, run as child processes with the same Python.

It prints a table (test and val accuracy, mean training-pass time per epoch, and that time as a
multiple of the hand-written DGL script's), writes ``compare.json`` and ``compare.png`` into
the output folder, and states whether gnnbridge's accuracy is within ``--tolerance`` of the
reference and of itself across backends.

    python benchmarks/compare.py [--epochs 10 --nproc 2 --npz GRAPH.npz --out benchmarks/out]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # gnnbridge from this checkout, like the scripts use

REFERENCE = "handwritten-dgl"
# The one set of hyperparameters every runner gets (the epochs and ranks come from the flags).
HYPER = {"fanouts": [25, 10], "batch_size": 1024, "hidden": 256, "lr": 0.01, "dropout": 0.5, "seed": 0}


# --------------------------------------------------------------------------- runners


def gnnbridge_overrides(epochs: int) -> list[str]:
    """``--set`` style overrides that give gnnbridge exactly :data:`HYPER`."""
    fanouts = ",".join(str(f) for f in HYPER["fanouts"])
    return [f"sampler.fanouts=[{fanouts}]", f"train.batch_size={HYPER['batch_size']}",
            f"model.hidden={HYPER['hidden']}", f"train.lr={HYPER['lr']}", f"train.epochs={epochs}",
            f"model.layers={len(HYPER['fanouts'])}", f"model.dropout={HYPER['dropout']}",
            f"train.seed={HYPER['seed']}", "eval.mode=layerwise"]


def run_gnnbridge(backend: str, npz: Path, epochs: int, nproc: int, out_root: Path) -> dict:
    """One gnnbridge run in this process; its run folder is new under ``out_root/runs``."""
    import gnnbridge

    out = out_root / "runs" / f"gnnbridge-{backend}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    start = time.perf_counter()
    results = gnnbridge.run(None, dataset=str(npz), backend=backend, nproc=nproc,
                            overrides=gnnbridge_overrides(epochs), out=out, progress=False)
    wall = time.perf_counter() - start
    epoch_times = [h["epoch_time_s"] for h in results["history"]]
    return {"runner": f"gnnbridge-{backend}", "test_acc": results["metrics"]["test_acc"],
            "val_acc": results["metrics"]["val_acc"], "mean_epoch_time_s": sum(epoch_times) / len(epoch_times),
            "epoch_times_s": epoch_times, "wall_time_s": wall, "sampler": results["sampler"],
            "run_dir": results["run_dir"]}


def script_args(npz: Path, epochs: int, nproc: int) -> list[str]:
    """The hand-written scripts' command-line flags for :data:`HYPER`."""
    return ["--npz", str(npz), "--nproc", str(nproc), "--epochs", str(epochs),
            "--fanouts", ",".join(str(f) for f in HYPER["fanouts"]),
            "--batch-size", str(HYPER["batch_size"]), "--hidden", str(HYPER["hidden"]),
            "--lr", str(HYPER["lr"]), "--dropout", str(HYPER["dropout"]), "--seed", str(HYPER["seed"])]


def run_script(name: str, npz: Path, epochs: int, nproc: int) -> dict:
    """A hand-written script as a child process; its last stdout line is its JSON result.

    Its stderr (per-epoch progress) goes straight to ours, so a long run shows it is alive.
    """
    cmd = [sys.executable, str(HERE / f"{name.replace('-', '_')}.py"), *script_args(npz, epochs, nproc)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed with exit code {proc.returncode}; stdout:\n{proc.stdout}")
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- report


def add_ratios(rows: list[dict]) -> None:
    """Each row's epoch time as a multiple of the reference's (None if either is missing)."""
    ref = next((r for r in rows if r["runner"] == REFERENCE and "skipped" not in r), None)
    for row in rows:
        ok = ref is not None and "skipped" not in row
        row["epoch_time_vs_reference"] = row["mean_epoch_time_s"] / ref["mean_epoch_time_s"] if ok else None


def verdict(rows: list[dict], tolerance: float) -> dict:
    """The team's criterion: both gnnbridge backends within ``tolerance`` (accuracy points, as a
    fraction) of the reference's test accuracy, and of each other."""
    acc = {r["runner"]: r["test_acc"] for r in rows if "skipped" not in r}
    needed = [REFERENCE, "gnnbridge-pyg", "gnnbridge-dgl"]
    if any(name not in acc for name in needed):
        return {"passed": False, "reason": f"missing results for {[n for n in needed if n not in acc]}"}
    gaps = {f"gnnbridge-pyg vs {REFERENCE}": acc["gnnbridge-pyg"] - acc[REFERENCE],
            f"gnnbridge-dgl vs {REFERENCE}": acc["gnnbridge-dgl"] - acc[REFERENCE],
            "gnnbridge-pyg vs gnnbridge-dgl": acc["gnnbridge-pyg"] - acc["gnnbridge-dgl"]}
    # Falling short is what matters against the reference; between backends, either direction.
    short = [k for k, g in gaps.items() if (g < -tolerance if REFERENCE in k else abs(g) > tolerance)]
    return {"passed": not short, "tolerance": tolerance, "test_acc_gaps": gaps, "failed": short}


def table(rows: list[dict]) -> str:
    head = f"{'runner':<17}{'test_acc':>10}{'val_acc':>10}{'epoch_s':>10}{'vs ref':>9}{'wall_s':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "skipped" in r:
            lines.append(f"{r['runner']:<17}  skipped: {r['skipped']}")
            continue
        ratio = f"{r['epoch_time_vs_reference']:.2f}x" if r["epoch_time_vs_reference"] else "-"
        lines.append(f"{r['runner']:<17}{r['test_acc']:>10.4f}{r['val_acc']:>10.4f}"
                     f"{r['mean_epoch_time_s']:>10.3f}{ratio:>9}{r['wall_time_s']:>9.1f}")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Accuracy and epoch time per runner, as two bar charts in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if "skipped" not in r]
    # gnnbridge's sampler (which depends on what is installed) explains much of its speed.
    names = [r["runner"] + (f"\n({r['sampler']})" if r.get("sampler") else "") for r in done]
    pos = range(len(done))
    fig, (ax_acc, ax_time) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    ax_acc.bar([p - width / 2 for p in pos], [r["test_acc"] for r in done], width, label="test")
    ax_acc.bar([p + width / 2 for p in pos], [r["val_acc"] for r in done], width, label="val")
    low = min(min(r["test_acc"], r["val_acc"]) for r in done)
    ax_acc.set(xticks=list(pos), ylabel="accuracy", title="Accuracy (full-neighbour inference)",
               ylim=(max(0.0, low - 0.1), 1.0))
    ax_acc.set_xticklabels(names)
    ax_acc.legend(loc="lower right")
    ax_time.bar(list(pos), [r["mean_epoch_time_s"] for r in done], color="tab:gray")
    ax_time.set(xticks=list(pos), ylabel="seconds", title="Mean training pass per epoch")
    ax_time.set_xticklabels(names)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Compare gnnbridge with hand-written PyG / DGL DDP scripts.")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--npz", type=Path, help="an existing graph (default: make one with make_graph.py)")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="folder for the graph, runs and report")
    parser.add_argument("--tolerance", type=float, default=0.02, help="allowed test-accuracy gap (0.02 = 2 points)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the accuracy criterion fails")
    return parser.parse_args(argv)


def graph_path(args) -> Path:
    """The graph every runner reads: ``--npz``, or a fresh one from ``make_graph.py``."""
    if args.npz is not None:
        return args.npz.resolve()
    sys.path.insert(0, str(HERE))
    import make_graph

    path = args.out.resolve() / "graph.npz"
    make_graph.main([str(path)])
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    if "GNNBRIDGE_LOAD_PLUGINS" in os.environ:
        sys.exit("GNNBRIDGE_LOAD_PLUGINS is set; unset it so gnnbridge loads its own backends and datasets.")
    args.out.mkdir(parents=True, exist_ok=True)
    npz = graph_path(args)
    rows = []
    for name in (REFERENCE, "gnnbridge-dgl", "gnnbridge-pyg", "handwritten-pyg"):
        print(f"--- {name}", flush=True)
        if name.startswith("gnnbridge-"):
            rows.append(run_gnnbridge(name.split("-", 1)[1], npz, args.epochs, args.nproc, args.out))
        else:
            rows.append(run_script(name, npz, args.epochs, args.nproc))
    add_ratios(rows)
    check = verdict(rows, args.tolerance)
    report = {"graph": str(npz), "epochs": args.epochs, "nproc": args.nproc, "hyperparameters": HYPER,
              "machine": {"cpus": os.cpu_count(), "platform": sys.platform}, "rows": rows, "verdict": check}
    (args.out / "compare.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(rows, args.out / "compare.png")
    print()
    print(table(rows))
    print(f"\naccuracy criterion (within {args.tolerance:.0%} test accuracy): "
          f"{'PASS' if check['passed'] else 'FAIL ' + str(check.get('failed', check.get('reason')))}")
    print(f"wrote {args.out / 'compare.json'} and {args.out / 'compare.png'}")
    return 1 if args.strict and not check["passed"] else 0


if __name__ == "__main__":
    sys.exit(main())
