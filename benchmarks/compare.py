"""Performance runner: gnnbridge (PyG and DGL backends) against hand-written DDP scripts.

Why: gnnbridge claims that one config trains the same model on either library with the
accuracy and speed of code written directly against that library. This script checks that
claim on a graph that gnnbridge did not generate (``make_graph.py``), of a size given on the
command line up to Reddit scale, with one set of hyperparameters handed to every runner:

* ``handwritten-dgl`` (the reference) and ``handwritten-pyg``: the tutorial-style scripts beside
  this file;
* ``gnnbridge-dgl`` and ``gnnbridge-pyg``: the ``gnnbridge train`` command line.

Every runner is one child process tree (a launcher and the ranks it spawns), so nothing one
runner imports, caches or leaks can reach another, and its memory can be measured as a whole.
With ``--repeats R`` each repeat runs every runner once, the order rotated by one each repeat,
so slow phases of a shared machine do not all land on the same runner.

It reports, and writes to ``compare.json`` and ``compare.png`` in ``--out``:

* accuracy (exact full-neighbour inference) and the accuracy criterion, as before;
* the median over repeats of each runner's mean training time per epoch, and of its final
  evaluation time (exact layer-wise inference over all nodes), each as a ratio to the reference;
* peak memory (summed PSS of the process tree, ``peakmem.py``) of N ranks, with ``--memory``
  also of one rank, and N ranks against the dataset's size on disk;
* sampled edges per second of each neighbour sampler on the same batches (``sampler_bench.py``);
* gnnbridge's per-phase time per epoch (sample, gather, host-to-device, forward, backward with
  all-reduce, step, evaluation), rank 0 and the slowest rank, for both backends;
* the goals of the performance criterion, each with its measured value and PASS or MISS (or
  ``not judged``: a memory goal on a graph smaller than Reddit).

    python benchmarks/compare.py [--preset default|100k|reddit] [--nodes N --features F
        --avg-degree D --classes C] [--epochs 10 --nproc 2 --repeats 1 --memory
        --no-sampler-bench --npz GRAPH.npz --out benchmarks/out]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import peakmem  # noqa: E402  (benchmarks/ is not a package: its modules are found through sys.path)
import report  # noqa: E402

REFERENCE = "handwritten-dgl"
RUNNERS = (REFERENCE, "gnnbridge-dgl", "gnnbridge-pyg", "handwritten-pyg")
# The one set of hyperparameters every runner gets (the epochs and ranks come from the flags).
HYPER = {"fanouts": [25, 10], "batch_size": 1024, "hidden": 256, "lr": 0.01, "dropout": 0.5, "seed": 0}
# Graph sizes by name. avg_degree is the generator's target before duplicates are merged.
PRESETS = {
    "default": {"nodes": 20_000, "features": 64, "avg_degree": 16.0, "classes": 16},
    "100k": {"nodes": 100_000, "features": 128, "avg_degree": 20.0, "classes": 16},
    "reddit": {"nodes": 232_965, "features": 602, "avg_degree": 480.0, "classes": 41},
}
PHASES = ("sample", "gather", "h2d", "forward", "backward", "step")  # inside epoch_time_s
SAMPLERS = ("core", "core-torch", "dgl", "pyg")


# --------------------------------------------------------------------------- graph


def graph_params(args) -> dict:
    """The preset's size, with any of ``--nodes --features --avg-degree --classes`` replacing it."""
    params = dict(PRESETS[args.preset])
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is not None:
            params[key] = type(value)(getattr(args, key))
    return {**params, "seed": args.graph_seed}


def graph_name(params: dict) -> str:
    """A file name that encodes every generator parameter, so a cached file is never the wrong one."""
    return (
        f"graph-n{params['nodes']}-f{params['features']}-d{params['avg_degree']:g}"
        f"-c{params['classes']}-s{params['seed']}.npz"
    )


def generate_graph(params: dict, path: Path) -> dict:
    """``make_graph.py`` in a child process (its memory is freed on exit and measured), written
    under a temporary name and renamed, so an interrupted run leaves no half file to reuse."""
    tmp = path.with_name(path.stem + ".partial.npz")
    cmd = [
        sys.executable,
        str(HERE / "make_graph.py"),
        str(tmp),
        "--nodes",
        str(params["nodes"]),
        "--features",
        str(params["features"]),
        "--avg-degree",
        str(params["avg_degree"]),
        "--classes",
        str(params["classes"]),
        "--seed",
        str(params["seed"]),
    ]
    print(f"--- generating {path.name}", flush=True)
    done = peakmem.run_monitored(cmd)
    if done.returncode != 0:
        raise RuntimeError(f"make_graph.py failed with exit code {done.returncode}")
    os.replace(tmp, path)
    return {"cached": False, "seconds": done.wall_s, "peak_memory_bytes": done.peak_bytes}


def npz_shapes(path: Path) -> dict[str, list[int]]:
    """Each array's shape from the ``.npy`` headers inside the ``.npz``, without reading the data
    (at Reddit scale the edges alone are 1.8 GB)."""
    from gnnbridge.core.storage.npy import read_header

    shapes = {}
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            with archive.open(name) as f:
                shapes[name.removesuffix(".npy")] = list(read_header(f)[0])
    return shapes


def prepare_graph(args) -> tuple[Path, dict]:
    """The graph every runner reads (``--npz``, or the cached or freshly made preset file) and its
    description: size on disk, shapes, classes, the parameters that made it and how."""
    if args.npz is not None:
        npz, params, made = args.npz.resolve(), None, {"given": True}
    else:
        params = graph_params(args)
        npz = args.out.resolve() / graph_name(params)
        made = {"cached": True} if npz.exists() else generate_graph(params, npz)
    shapes = npz_shapes(npz)
    preset = next((name for name, p in PRESETS.items() if params and {**p, "seed": 0} == params), "custom")
    return npz, {
        "path": str(npz),
        "preset": preset if params else "file",
        "params": params,
        "nodes": shapes["x"][0],
        "edges": shapes["edge_index"][1],
        "features": shapes["x"][1],
        "classes": int(np.load(npz)["y"].max()) + 1,
        "disk_bytes": npz.stat().st_size,
        "generation": made,
    }


# --------------------------------------------------------------------------- runners


def gnnbridge_overrides(epochs: int) -> list[str]:
    """``--set`` style overrides that give gnnbridge exactly :data:`HYPER`."""
    fanouts = ",".join(str(f) for f in HYPER["fanouts"])
    return [
        f"sampler.fanouts=[{fanouts}]",
        f"train.batch_size={HYPER['batch_size']}",
        f"model.hidden={HYPER['hidden']}",
        f"train.lr={HYPER['lr']}",
        f"train.epochs={epochs}",
        f"model.layers={len(HYPER['fanouts'])}",
        f"model.dropout={HYPER['dropout']}",
        f"train.seed={HYPER['seed']}",
        "eval.mode=layerwise",
    ]


def child_env() -> dict:
    """The environment of every child: gnnbridge from this checkout first."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }


def gnnbridge_run(backend: str, npz: Path, args, nproc: int, run_dir: Path) -> peakmem.Monitored:
    """``gnnbridge train`` (as ``python -m gnnbridge``, the same entry point) under the memory sampler."""
    cmd = [
        sys.executable,
        "-m",
        "gnnbridge",
        "train",
        "--dataset",
        str(npz),
        "--backend",
        backend,
        "--nproc",
        str(nproc),
        "--out",
        str(run_dir),
        "--quiet",
        "--timeout",
        str(args.timeout),
    ]
    for override in gnnbridge_overrides(args.epochs):
        cmd += ["--set", override]
    return peakmem.run_monitored(cmd, env=child_env(), cwd=REPO)


def gnnbridge_row(results: dict) -> dict:
    """The numbers of one gnnbridge run from its ``results.json``."""
    history = results["history"]
    epoch_times = [h["epoch_time_s"] for h in history]
    return {
        "test_acc": results["metrics"]["test_acc"],
        "val_acc": results["metrics"]["val_acc"],
        "mean_epoch_time_s": statistics.fmean(epoch_times),
        "epoch_times_s": epoch_times,
        "eval_time_s": results["final_eval_time_s"],
        "sampler": results["sampler"],
        "phases": [h["phases"] for h in history],
        "phases_slowest_rank": [h["phases_slowest_rank"] for h in history],
    }


def run_gnnbridge(name: str, npz: Path, args, nproc: int, tag: str) -> dict:
    """One gnnbridge run in a new folder under ``out/runs``; its metrics come from results.json."""
    run_dir = args.out.resolve() / "runs" / f"{name}-{tag}-{time.strftime('%Y%m%d-%H%M%S')}"
    done = gnnbridge_run(name.split("-", 1)[1], npz, args, nproc, run_dir)
    if done.returncode != 0:
        return {"failed": f"exit code {done.returncode} (see its output above; run folder {run_dir})"}
    results = json.loads((run_dir / "results.json").read_text())
    return {**gnnbridge_row(results), "run_dir": str(run_dir), **monitored_fields(done)}


def script_args(npz: Path, epochs: int, nproc: int) -> list[str]:
    """The hand-written scripts' command-line flags for :data:`HYPER`."""
    return [
        "--npz",
        str(npz),
        "--nproc",
        str(nproc),
        "--epochs",
        str(epochs),
        "--fanouts",
        ",".join(str(f) for f in HYPER["fanouts"]),
        "--batch-size",
        str(HYPER["batch_size"]),
        "--hidden",
        str(HYPER["hidden"]),
        "--lr",
        str(HYPER["lr"]),
        "--dropout",
        str(HYPER["dropout"]),
        "--seed",
        str(HYPER["seed"]),
    ]


def run_script(name: str, npz: Path, args, nproc: int, tag: str) -> dict:
    """A hand-written script as a child process tree; its last stdout line is its JSON result.
    Its own ``wall_time_s`` (from argument parsing) is kept as ``script_wall_time_s``."""
    cmd = [sys.executable, str(HERE / f"{name.replace('-', '_')}.py"), *script_args(npz, args.epochs, nproc)]
    done = peakmem.run_monitored(cmd, capture=True, env=child_env())
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"failed": f"exit code {done.returncode}; stdout: {done.stdout[-2000:]}"}
    row = json.loads(lines[-1])
    row.pop("runner", None)
    if "skipped" in row:
        return row
    row["script_wall_time_s"] = row.pop("wall_time_s")
    return {**row, **monitored_fields(done)}


def monitored_fields(done: peakmem.Monitored) -> dict:
    """Wall time and peak memory of the whole process tree, as every runner's row carries them."""
    return {
        "wall_time_s": done.wall_s,
        "peak_memory_bytes": done.peak_bytes,
        "memory_kind": done.memory_kind,
        "memory_samples": done.samples,
        "other_cpu_share": done.other_cpu_share,
    }


def run_one(name: str, npz: Path, args, nproc: int, tag: str) -> dict:
    """One run of one runner, tagged with its repeat (or ``1rank``)."""
    print(f"--- {name} ({nproc} rank{'s' if nproc > 1 else ''}, {tag})", flush=True)
    run = run_gnnbridge if name.startswith("gnnbridge-") else run_script
    return {"runner": name, "nproc": nproc, "tag": tag, **run(name, npz, args, nproc, tag)}


def schedule(names: list[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, runner) in running order: every runner once per repeat, the order rotated by one
    each repeat, so each runner takes each position in turn."""
    order = []
    for rep in range(repeats):
        shift = rep % len(names)
        order += [(rep, name) for name in names[shift:] + names[:shift]]
    return order


def timed_runs(npz: Path, args, names: list[str], partial: Path) -> list[dict]:
    """All repeats at ``--nproc`` ranks. A runner that reports ``skipped`` (its library cannot
    run here) is not started again; the raw runs so far are saved after each one."""
    runs, skipped = [], set()
    for rep, name in schedule(names, args.repeats):
        if name in skipped:
            continue
        run = {"repeat": rep, **run_one(name, npz, args, args.nproc, f"r{rep + 1}")}
        skipped |= {name} if "skipped" in run else set()
        runs.append(run)
        partial.write_text(json.dumps(runs, indent=1) + "\n")
    return runs


def one_rank_runs(npz: Path, args, names: list[str], runs: list[dict]) -> list[dict]:
    """``--memory``: every runner that ran once more with one rank, for peak(N) / peak(1)."""
    if args.nproc == 1:
        return []  # the timed runs are the one-rank runs
    ran = [n for n in names if any(r["runner"] == n and "skipped" not in r for r in runs)]
    return [run_one(name, npz, args, 1, "1rank") for name in ran]


# --------------------------------------------------------------------------- sampler throughput


def sampler_child(npz: Path, args, sampler: str, threads: int) -> dict:
    """One sampler at one thread count in a fresh process (clean thread pools)."""
    env = {k: v for k, v in child_env().items() if k != "GNNBRIDGE_SAMPLER_KERNEL"}
    if sampler == "core-torch":
        env["GNNBRIDGE_SAMPLER_KERNEL"] = "torch"
    cmd = [
        sys.executable,
        str(HERE / "sampler_bench.py"),
        "--npz",
        str(npz),
        "--cache",
        str(args.out.resolve()),
        "--sampler",
        sampler,
        "--threads",
        str(threads),
        "--batches",
        str(args.sampler_batches),
        "--warmup",
        str(args.sampler_warmup),
        "--batch-size",
        str(HYPER["batch_size"]),
        "--fanouts",
        ",".join(str(f) for f in HYPER["fanouts"]),
    ]
    done = peakmem.run_monitored(cmd, capture=True, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"sampler": sampler, "threads": threads, "failed": f"exit code {done.returncode}"}
    return {**json.loads(lines[-1]), "other_cpu_share": done.other_cpu_share}


def thread_counts() -> list[int]:
    """One thread and all cores (one entry on a one-core machine)."""
    return sorted({1, os.cpu_count() or 1})


def sampler_bench(npz: Path, args) -> dict:
    """Edges/s of every sampler at every thread count, and each against DGL's at the same count."""
    print(
        f"--- sampler throughput ({args.sampler_batches} batches of {HYPER['batch_size']} seeds, "
        f"threads {thread_counts()})",
        flush=True,
    )
    results, unavailable = [], {}
    for threads in thread_counts():
        for sampler in SAMPLERS:
            if sampler in unavailable:
                results.append({"sampler": sampler, "threads": threads, "skipped": unavailable[sampler]})
                continue
            result = sampler_child(npz, args, sampler, threads)
            if "skipped" in result:
                unavailable[sampler] = result["skipped"]
            results.append(result)
    rate = {(r["sampler"], r["threads"]): r.get("edges_per_s") for r in results}
    vs_dgl = {
        s: {str(t): (rate[s, t] / rate["dgl", t] if rate[s, t] and rate["dgl", t] else None) for t in thread_counts()}
        for s in SAMPLERS
    }
    return {
        "fanouts": HYPER["fanouts"],
        "batch_size": HYPER["batch_size"],
        "batches": args.sampler_batches,
        "warmup": args.sampler_warmup,
        "threads": thread_counts(),
        "results": results,
        "vs_dgl": vs_dgl,
    }


# --------------------------------------------------------------------------- summary


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def runner_row(name: str, runs: list[dict], single: dict | None, disk_bytes: int) -> dict:
    """One runner over its repeats: medians of accuracy, epoch and eval time, wall time; the
    largest N-rank peak memory (the conservative choice), the one-rank peak, and the ratios."""
    done = [r for r in runs if "skipped" not in r and "failed" not in r]
    if not done:
        why = next((r.get("skipped") or r.get("failed") for r in runs), "not run")
        return {"runner": name, ("skipped" if any("skipped" in r for r in runs) else "failed"): why}
    peak = max(r["peak_memory_bytes"] for r in done)
    one = single.get("peak_memory_bytes") if single else None
    row = {
        "runner": name,
        "repeats": len(done),
        "test_acc": median_of(done, "test_acc"),
        "val_acc": median_of(done, "val_acc"),
        "epoch_time_s": median_of(done, "mean_epoch_time_s"),
        "epoch_time_s_per_repeat": [r["mean_epoch_time_s"] for r in done],
        "eval_time_s": median_of(done, "eval_time_s"),
        "eval_time_s_per_repeat": [r["eval_time_s"] for r in done],
        "wall_time_s": median_of(done, "wall_time_s"),
        "peak_memory_bytes": peak,
        "peak_memory_1rank_bytes": one,
        "memory_kind": done[0]["memory_kind"],
        "memory_n_vs_1": peak / one if one else None,
        "memory_vs_disk": peak / disk_bytes,
    }
    if single is not None:
        row["one_rank_epoch_time_s"] = single.get("mean_epoch_time_s")
    return {**row, **({"sampler": done[0]["sampler"]} if "sampler" in done[0] else {})}


def add_ratios(rows: list[dict]) -> None:
    """Each row's median epoch and eval time as a multiple of the reference's (None if missing)."""
    ref = next((r for r in rows if r["runner"] == REFERENCE and "epoch_time_s" in r), None)
    for row in rows:
        for key in ("epoch_time_s", "eval_time_s"):
            ok = ref is not None and row.get(key) is not None and ref.get(key)
            row[key[:-2] + "_vs_reference"] = row[key] / ref[key] if ok else None


def summarize(names: list[str], runs: list[dict], singles: list[dict], disk_bytes: int) -> list[dict]:
    """Per-runner rows with ratios to the reference; one-rank runs (``--memory``) attached."""
    rows = []
    for name in names:
        mine = [r for r in runs if r["runner"] == name]
        single = next((r for r in singles if r["runner"] == name and "failed" not in r), None)
        rows.append(runner_row(name, mine, single, disk_bytes))
    add_ratios(rows)
    return rows


def phase_medians(entries: list[dict], epoch_times: list[float], keys: tuple[str, ...]) -> dict:
    """Median over epochs of each phase's seconds, of the epoch, and of what the phases leave out."""
    out = {k: statistics.median(e.get(k, 0.0) for e in entries) for k in keys}
    out["other"] = statistics.median(t - sum(e.get(k, 0.0) for k in PHASES) for e, t in zip(entries, epoch_times))
    out["epoch"] = statistics.median(epoch_times)
    return out


def phase_breakdown(runs: list[dict]) -> dict:
    """For each gnnbridge backend: per-phase medians over all epochs of all its timed runs, on
    rank 0 (with the per-epoch validation ``eval``) and on the slowest rank, and the median
    final evaluation."""
    out = {}
    for name in ("gnnbridge-pyg", "gnnbridge-dgl"):
        done = [r for r in runs if r["runner"] == name and "phases" in r]
        if not done:
            continue
        rank0 = [p for r in done for p in r["phases"]]
        slow = [p for r in done for p in r["phases_slowest_rank"]]
        out[name] = {
            "rank0": phase_medians(rank0, [t for r in done for t in r["epoch_times_s"]], PHASES + ("eval",)),
            "slowest_rank": phase_medians(slow, [p["epoch_time_s"] for p in slow], PHASES),
            "final_eval": median_of(done, "eval_time_s"),
            "epochs": len(rank0),
        }
    return out


def verdict(rows: list[dict], tolerance: float) -> dict:
    """The team's criterion: both gnnbridge backends within ``tolerance`` (accuracy points, as a
    fraction) of the reference's test accuracy, and of each other."""
    acc = {r["runner"]: r["test_acc"] for r in rows if r.get("test_acc") is not None}
    needed = [REFERENCE, "gnnbridge-pyg", "gnnbridge-dgl"]
    if any(name not in acc for name in needed):
        return {"passed": False, "reason": f"missing results for {[n for n in needed if n not in acc]}"}
    gaps = {
        f"gnnbridge-pyg vs {REFERENCE}": acc["gnnbridge-pyg"] - acc[REFERENCE],
        f"gnnbridge-dgl vs {REFERENCE}": acc["gnnbridge-dgl"] - acc[REFERENCE],
        "gnnbridge-pyg vs gnnbridge-dgl": acc["gnnbridge-pyg"] - acc["gnnbridge-dgl"],
    }
    # Falling short is what matters against the reference; between backends, either direction.
    short = [k for k, g in gaps.items() if (g < -tolerance if REFERENCE in k else abs(g) > tolerance)]
    return {"passed": not short, "tolerance": tolerance, "test_acc_gaps": gaps, "failed": short}


def goal(
    text: str, scales: str, value: float | None, limit: float, at_most: bool, unit: str = "x", judged: bool = True
) -> dict:
    """One goal of the performance criterion: PASS, MISS, not measured (value None), or not judged
    (a goal set for another scale: the value is shown, but a MISS there would mislead)."""
    status = (
        "not measured" if value is None else ("PASS" if (value <= limit if at_most else value >= limit) else "MISS")
    )
    if not judged and value is not None:
        status = "not judged"
    return {
        "goal": text,
        "judged_at": scales,
        "value": value,
        "limit": limit,
        "at_most": at_most,
        "unit": unit,
        "status": status,
    }


def reddit_scale(graph: dict) -> bool:
    """Whether the memory goals apply: a graph the size of Reddit (233k nodes; the preset's graph
    has 109M edges after deduplication, Reddit itself 115M)."""
    return graph["preset"] == "reddit" or (graph["nodes"] >= 200_000 and graph["edges"] >= 50_000_000)


def goals(rows: list[dict], sampler: dict | None, nproc: int, at_reddit_scale: bool) -> list[dict]:
    """The done criterion, goal by goal, with this run's measured values."""
    by = {r["runner"]: r for r in rows}
    out = []
    for what, key in (
        ("training epoch time", "epoch_time_vs_reference"),
        ("final evaluation time", "eval_time_vs_reference"),
    ):
        for b in ("pyg", "dgl"):
            out.append(
                goal(
                    f"gnnbridge-{b} {what} <= 1.0x {REFERENCE}",
                    "100k, reddit",
                    by.get(f"gnnbridge-{b}", {}).get(key),
                    1.0,
                    True,
                )
            )
    for threads in (sampler or {}).get("threads", []):
        out.append(
            goal(
                f"core sampler edges/s >= 1.0x DGL's sampler ({threads} thread{'s' * (threads > 1)})",
                "100k, reddit",
                sampler["vs_dgl"]["core"][str(threads)],
                1.0,
                False,
            )
        )
    for b in ("pyg", "dgl"):
        row = by.get(f"gnnbridge-{b}", {})
        out.append(
            goal(
                f"gnnbridge-{b} peak memory: {nproc} ranks <= 1.3x 1 rank",
                "reddit",
                row.get("memory_n_vs_1"),
                1.3,
                True,
                judged=at_reddit_scale,
            )
        )
        out.append(
            goal(
                f"gnnbridge-{b} peak memory: {nproc} ranks <= 2x the dataset on disk",
                "reddit",
                row.get("memory_vs_disk"),
                2.0,
                True,
                judged=at_reddit_scale,
            )
        )
    return out


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Compare gnnbridge with hand-written PyG / DGL DDP scripts.")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="default", help="graph size (see PRESETS)")
    parser.add_argument("--nodes", type=int, help="replaces the preset's node count")
    parser.add_argument("--features", type=int, help="replaces the preset's feature count")
    parser.add_argument("--avg-degree", type=float, help="replaces the preset's average degree (before dedup)")
    parser.add_argument("--classes", type=int, help="replaces the preset's class count")
    parser.add_argument("--graph-seed", type=int, default=0, help="make_graph.py's seed")
    parser.add_argument("--npz", type=Path, help="an existing graph instead of a generated one")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs of every runner")
    parser.add_argument("--memory", action="store_true", help="also run every runner once with 1 rank")
    parser.add_argument(
        "--sampler-bench",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure each sampler's edges/s (default: on)",
    )
    parser.add_argument("--sampler-batches", type=int, default=30, help="timed batches per sampler")
    parser.add_argument("--sampler-warmup", type=int, default=3, help="untimed batches first")
    parser.add_argument("--runners", default=",".join(RUNNERS), help="comma-separated subset of " + ", ".join(RUNNERS))
    parser.add_argument("--timeout", type=float, default=1800, help="gnnbridge's --timeout (gloo's default wait)")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="folder for the graph, runs and report")
    parser.add_argument("--tolerance", type=float, default=0.02, help="allowed test-accuracy gap (0.02 = 2 points)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the accuracy criterion fails")
    args = parser.parse_args(argv)
    args.runner_names = [n for n in args.runners.split(",") if n]
    unknown = [n for n in args.runner_names if n not in RUNNERS]
    if unknown or args.repeats < 1:
        parser.error(f"unknown runners {unknown}" if unknown else "--repeats must be at least 1")
    return args


def cpu_model() -> str:
    """The CPU's model name (Linux), else whatever the platform says."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.processor())


def machine() -> dict:
    """What the numbers were measured on (library versions read without importing them)."""
    import psutil

    versions = {}
    for pkg in ("torch", "dgl", "torch_geometric", "numba", "numpy", "pyg_lib", "torch_sparse"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "memory_bytes": psutil.virtual_memory().total,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    if "GNNBRIDGE_LOAD_PLUGINS" in os.environ:
        sys.exit("GNNBRIDGE_LOAD_PLUGINS is set; unset it so gnnbridge loads its own backends and datasets.")
    args.out.mkdir(parents=True, exist_ok=True)
    npz, graph = prepare_graph(args)
    print(report.graph_line(graph), flush=True)
    sampler = sampler_bench(npz, args) if args.sampler_bench else None
    runs = timed_runs(npz, args, args.runner_names, args.out / "compare.partial.json")
    singles = one_rank_runs(npz, args, args.runner_names, runs) if args.memory else []
    rows = summarize(args.runner_names, runs, singles, graph["disk_bytes"])
    result = {
        "graph": graph,
        "machine": machine(),
        "hyperparameters": HYPER,
        "epochs": args.epochs,
        "nproc": args.nproc,
        "repeats": args.repeats,
        "order": [f"r{r['repeat'] + 1}:{r['runner']}" for r in runs],
        "rows": rows,
        "phases": phase_breakdown(runs),
        "sampler": sampler,
        "runs": runs,
        "one_rank_runs": singles,
        "verdict": verdict(rows, args.tolerance),
        "goals": goals(rows, sampler, args.nproc, reddit_scale(graph)),
    }
    (args.out / "compare.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "compare.partial.json").unlink(missing_ok=True)
    report.plot(result, args.out / "compare.png")
    print()
    print(report.text(result))
    print(f"wrote {args.out / 'compare.json'} and {args.out / 'compare.png'}")
    failed = [r["runner"] for r in runs + singles if "failed" in r]
    return 1 if failed or (args.strict and not result["verdict"]["passed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
