"""``gnnbridge tune`` against the defaults (issue 65, part 6): does a 12-trial search beat the
default run on a graph where the defaults are poor, and does the median pruner save wall time?

Why this graph: the built-in synthetic graph with its class signal mostly hidden from the
features (``feature_signal`` 0.05 against unit noise) and carried by the edges (``homophily``
0.7, ``avg_degree`` 10): a node's class is read from many neighbours, so the default settings
(lr 0.01, hidden 64, dropout 0.5, fanouts [10, 10], batch 256, 8 epochs) learn it slowly (val_acc
about 0.59 where lr 0.03, hidden 128, dropout 0.1, fanouts [25, 25] reach about 0.73). Nothing
else is changed.

Three runs, each an ordinary run of the same experiment in this process (so imports are paid
once), one after another:

1. the default run (``gnnbridge train`` with only the graph's options);
2. a 12-trial TPE search (seed 0) with ``--pruner median``;
3. the same 12-trial search (same seed, same space) with ``--pruner none``.

Prints, for the default run and for each search's best trial, the monitor (the best epoch's
sampled ``val_acc``, what the search maximises) and the run's final ``val_acc`` / ``test_acc``
(layer-wise evaluation of ``best.pt``, from its ``results.json``), and each search's wall time
and trial states; writes ``--json`` (default ``tune_search.json``) with every number.

    python benchmarks/tune_search.py              # a few minutes on 2 cores
    python benchmarks/tune_search.py --nodes 2000 --trials 6

The space has five keys. ``model.layers`` is not one of them: a trial's ``model.layers`` must
match its ``sampler.fanouts`` (one fanout per layer), and the space is checked one key at a time
against the experiment, so a range of layers beside fixed-length fanouts is refused up front;
``train.batch_size`` is the fifth key instead.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

SPACE = {
    "train.lr": {"log": [1e-3, 1e-1]},
    "model.hidden": [32, 64, 128],
    "model.dropout": {"uniform": [0.0, 0.6]},
    "sampler.fanouts": [[5, 5], [10, 10], [25, 10], [25, 25]],
    "train.batch_size": [64, 128, 256, 512],
}


def graph(nodes: int) -> list[str]:
    return [
        f"dataset.options.num_nodes={nodes}",
        "dataset.options.feature_signal=0.05",
        "dataset.options.homophily=0.7",
        "dataset.options.avg_degree=10",
    ]


def figures(results: dict) -> dict:
    m = results["metrics"]
    return {"monitor": results["best"]["value"], "val_acc": m.get("val_acc"), "test_acc": m.get("test_acc")}


def search(root: Path, name: str, pruner: str, trials: int, overrides: list[str]) -> dict:
    from gnnbridge.core.app import tune

    began = time.perf_counter()
    summary = tune.tune(
        None, space=SPACE, trials=trials, out=root / name, pruner=pruner, seed=0, overrides=overrides,
        say=lambda line: print(f"  [{name}] {line}", flush=True),
    )  # fmt: skip
    seconds = time.perf_counter() - began
    best = summary["best"]
    results = json.loads((Path(best["run_dir"]) / "results.json").read_text())
    states: dict[str, int] = {}
    for row in summary["trials"]:
        states[row["state"]] = states.get(row["state"], 0) + 1
    epochs = sum(row["epochs"] or 0 for row in summary["trials"])
    return {"seconds": seconds, "states": states, "epochs": epochs, "best_trial": best["trial"],
            "best_params": best["params"], **figures(results)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--json", default="tune_search.json")
    args = parser.parse_args()
    from gnnbridge.core.app import train

    overrides = graph(args.nodes)
    out: dict = {"nodes": args.nodes, "trials": args.trials, "space": SPACE, "graph": overrides}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        default = train.run(None, overrides=overrides, out=root / "default")
        out["default"] = {"seconds": time.perf_counter() - began, **figures(default)}
        print(f"default: {out['default']}", flush=True)
        for name, pruner in (("median", "median"), ("none", "none")):
            out[name] = search(root, name, pruner, args.trials, overrides)
            print(f"{name}: {out[name]}", flush=True)
    print()
    print(f"{'run':<22} {'monitor':>8} {'val_acc':>8} {'test_acc':>8} {'wall s':>8} {'epochs':>7}  trials")
    rows = [("default run", out["default"], "-", "-")]
    rows += [(f"search, pruner {n}", out[n], out[n]["epochs"], out[n]["states"]) for n in ("median", "none")]
    for label, r, epochs, states in rows:
        print(f"{label:<22} {r['monitor']:>8.4f} {r['val_acc']:>8.4f} {r['test_acc']:>8.4f} {r['seconds']:>8.1f} "
              f"{epochs!s:>7}  {states}")  # fmt: skip
    Path(args.json).write_text(json.dumps(out, indent=2))
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
