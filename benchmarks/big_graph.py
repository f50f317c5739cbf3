"""Graphs larger than memory, measured (issue 27, part 7): one generated graph as a folder.

Why: gnnbridge says a graph whose features do not fit in RAM trains from a folder of ``.npy``
files that the OS pages in, with bounded memory, at a speed the disk allows; and that a graph
that does fit trains from its folder as fast as from its ``.npz``. This script measures each
claim on this machine and prints one table (``big_graph.json`` holds every number):

1. **generate** the graph as a folder, chunk by chunk (``make_big_graph.py``: x is never in
   memory), its time and the generator's peak RssAnon;
2. **prepare** it (``gnnbridge prepare DIR``): time, and peak RssAnon / RssFile of the process;
3. **the disk**: random 4 KiB direct reads/s at queue depth 1 and 64 (``disk_rate.py``: fio
   where installed, else a Python fallback; the table says which);
4. **a cold gather** (``cold_gather.py``, a fresh process per case): the feature file's pages
   dropped, rows gathered with ``gather_rows`` at several thread counts, rows/s, the disk bytes
   read per row, and the hit rate of the feature cache a run would build;
5. **train** one epoch (``--epochs``) under DDP with ``--nproc`` ranks on each backend from the
   folder, the folder's pages dropped first (cold): epoch time, test accuracy against chance
   (the majority class's share of the test nodes), the process tree's peak RssAnon (summed over
   the launcher and ranks, sampled every 0.2 s: anonymous memory only, not the mapped file's
   pages, which the kernel can always drop), and the feature cache's hit rate from
   ``results.json``;
6. **in memory**: a graph that fits (the same graph, or ``--compare-*`` sizes) trained from its
   ``.npz`` and from its folder, page cache warm, alternating, on each backend: the folder's
   epoch time over the ``.npz``'s (goal: at most 1.05x).

The data goes to ``--data-root`` (default: the system's temporary folder, outside the
repository) and is deleted at the end unless ``--keep``; a kept folder with the same
parameters is reused (its ``prepared/`` is removed first, so prepare is timed again).

    python benchmarks/big_graph.py                       # 200k nodes x 64, 2M edges: about a minute or two
    python benchmarks/big_graph.py --nodes 10000000 --features 768 --edges 100000000 \\
        --compare-nodes 1000000 --compare-features 128 --compare-edges 10000000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cold_gather  # noqa: E402
import compare  # noqa: E402  (the house's hyperparameters, environment and machine description)
import disk_rate  # noqa: E402
import peakmem  # noqa: E402

BACKENDS = ("pyg", "dgl")
RSS_ANON_GOAL = 8 << 30
FOLDER_VS_NPZ_GOAL = 1.05
COLD_GATHER_GOAL = 0.70  # of the disk's depth-64 random reads/s
GRAPH_KEYS = ("nodes", "features", "edges", "classes", "dtype", "train_nodes", "eval_nodes", "seed")


# --------------------------------------------------------------------------- the data


def graph_dir(root: Path, params: dict) -> Path:
    """A folder named after every generator parameter, so a kept folder is never the wrong one."""
    return root / ("gnnbridge-big-" + "-".join(f"{params[k]}" for k in GRAPH_KEYS))


def generate(params: dict, folder: Path) -> dict:
    """``make_big_graph.py`` in a child (its peak RssAnon shows x was never in memory); a
    complete kept folder (``made.json`` present) is reused instead."""
    if (folder / "made.json").exists():
        shutil.rmtree(folder / "prepared", ignore_errors=True)
        return {"cached": True, **json.loads((folder / "made.json").read_text())}
    shutil.rmtree(folder, ignore_errors=True)
    cmd = [sys.executable, str(HERE / "make_big_graph.py"), str(folder)]
    for key in GRAPH_KEYS:
        cmd += [f"--{key.replace('_', '-')}", str(params[key])]
    print(f"--- generating {folder}", flush=True)
    done = peakmem.run_status(cmd, stdout=subprocess.DEVNULL)
    if done["returncode"] != 0:
        raise RuntimeError(f"make_big_graph.py failed with exit code {done['returncode']}")
    return {"cached": False, **json.loads((folder / "made.json").read_text()), "run": done}


def prepare(folder: Path, dtype: str | None, timeout: float) -> dict:
    """``gnnbridge prepare DIR`` as a user runs it, under the tree sampler."""
    print(f"--- gnnbridge prepare {folder}", flush=True)
    cmd = [sys.executable, "-m", "gnnbridge", "prepare", str(folder), "--quiet"]
    cmd += ["--dtype", dtype] if dtype else []
    done = peakmem.run_status(cmd, env=compare.child_env(), cwd=compare.REPO)
    if done["returncode"] != 0:
        raise RuntimeError(f"gnnbridge prepare failed with exit code {done['returncode']}")
    return done


def data_files(folder: Path) -> list[Path]:
    return sorted([*folder.glob("*.npy"), *folder.glob("prepared/*.npy")])


def drop_folder(folder: Path) -> None:
    """Every data file's pages out of the page cache (synced first: dirty pages would stay)."""
    for file in data_files(folder):
        cold_gather.drop_pages(file)


def warm_files(files: list[Path]) -> None:
    """Read every file once, so its pages are in the page cache (the 'warm' comparison)."""
    for file in files:
        with open(file, "rb") as f:
            while f.read(64 << 20):
                pass


def chance(folder: Path) -> float:
    """Accuracy of always answering the test nodes' most common class."""
    y = np.load(folder / "y.npy", mmap_mode="r")
    test = np.load(folder / "test_idx.npy")
    return float(np.bincount(y[test]).max() / max(1, test.size))


def features_bytes(params: dict) -> int:
    return params["nodes"] * params["features"] * np.dtype(params["dtype"]).itemsize


# --------------------------------------------------------------------------- measurements


def cache_budget(spec: str, params: dict) -> int:
    """``placement.feature_cache`` in bytes per machine: ``5%`` of the features, or a byte count."""
    if spec.endswith("%"):
        return int(features_bytes(params) * float(spec[:-1]) / 100)
    return int(spec)


def cold_gathers(folder: Path, args, budget: int) -> list[dict]:
    """Each read depth (``placement.read_depth``: faults in flight) with the run's cache and rows
    drawn as the sampler draws them, on a rank's share of the cores; then, at the deepest,
    uniform rows without a cache (the disk alone), as gnnbridge maps the file and with the
    kernel's read-around forced back on (``MADV_NORMAL``), to show what it costs."""
    threads, deepest = max(1, (os.cpu_count() or 1) // args.nproc), max(args.read_depths)
    cases = [(d, "edges", budget, "auto") for d in args.read_depths]
    cases += [(deepest, "uniform", 0, "auto"), (deepest, "uniform", 0, "normal")]
    results = []
    for depth, draw, cache, advice in cases:
        print(f"--- cold gather: depth {depth}, {draw} rows, cache {cache} B, madvise {advice}", flush=True)
        cmd = [
            sys.executable,
            str(HERE / "cold_gather.py"),
            str(folder),
            "--threads",
            str(threads),
            "--depth",
            str(depth),
            "--rows",
            str(args.gather_rows),
            "--cache",
            str(cache),
            "--draw",
            draw,
            "--madvise",
            advice,
        ]
        results.append(json_child(cmd))
    return results


def json_child(cmd: list[str]) -> dict:
    """A child that prints one JSON line last; its failure is recorded, not raised."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=compare.child_env())
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"failed": f"exit code {done.returncode}: {done.stderr.strip()[-500:]}"}
    return json.loads(lines[-1])


def overrides(epochs: int, budget: int) -> list[str]:
    """compare.py's hyperparameters, sampled evaluation (layer-wise inference over every node
    would read all features once per layer: another benchmark) and the feature cache."""
    sets = [s for s in compare.gnnbridge_overrides(epochs) if not s.startswith("eval.mode=")]
    return [*sets, "eval.mode=sampled", f"placement.feature_cache={budget}"]


def train(dataset: Path, backend: str, args, epochs: int, budget: int, tag: str) -> dict:
    """One ``gnnbridge train`` under the tree sampler; its figures from ``results.json``."""
    run_dir = args.out.resolve() / "runs" / f"big-{tag}-{backend}-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = [
        sys.executable,
        "-m",
        "gnnbridge",
        "train",
        "--dataset",
        str(dataset),
        "--backend",
        backend,
        "--nproc",
        str(args.nproc),
        "--out",
        str(run_dir),
        "--quiet",
        "--timeout",
        str(args.timeout),
    ]
    for setting in overrides(epochs, budget):
        cmd += ["--set", setting]
    print(f"--- train {backend} from {dataset.name} ({tag})", flush=True)
    done = peakmem.run_status(cmd, env=compare.child_env(), cwd=compare.REPO)
    if done["returncode"] != 0:
        return {"backend": backend, "failed": f"exit code {done['returncode']} (run folder {run_dir})", **done}
    results = json.loads((run_dir / "results.json").read_text())
    times = [h["epoch_time_s"] for h in results["history"]]
    gather = [h["phases"].get("gather", 0.0) for h in results["history"]]
    slowest = [h["phases_slowest_rank"].get("gather", 0.0) for h in results["history"]]
    return {
        "backend": backend,
        "epoch_time_s": statistics.fmean(times),
        "epoch_times_s": times,
        "gather_s": statistics.fmean(gather),
        "gather_s_slowest_rank": statistics.fmean(slowest),
        "test_acc": results["metrics"]["test_acc"],
        "val_acc": results["metrics"]["val_acc"],
        "feature_cache": results.get("feature_cache"),
        "run_dir": str(run_dir),
        **done,
    }


def cold_training(folder: Path, args, budget: int) -> list[dict]:
    """Each backend from the folder, every data file's pages dropped first."""
    runs = []
    for backend in args.backends:
        drop_folder(folder)
        runs.append(train(folder, backend, args, args.epochs, budget, "cold"))
    return runs


def write_npz(folder: Path, npz: Path) -> None:
    """The folder's arrays as one ``.npz`` (the comparison graph fits in memory by construction)."""
    arrays = {f.stem: np.load(f) for f in folder.glob("*.npy")}
    np.savez(npz, **arrays)


def in_memory(folder: Path, args) -> dict:
    """Epoch time from the ``.npz`` and from the folder, warm, alternating, ``--repeats`` each."""
    npz = folder.with_suffix(".npz")
    write_npz(folder, npz)
    warm_files([*data_files(folder), npz])
    runs = []
    for rep in range(args.repeats):
        for backend in args.backends:
            pair = [("npz", npz), ("folder", folder)]
            for kind, dataset in pair if rep % 2 == 0 else pair[::-1]:
                runs.append(
                    {
                        "kind": kind,
                        "repeat": rep,
                        **train(dataset, backend, args, args.compare_epochs, 0, f"warm-{kind}"),
                    }
                )
    return {"npz_bytes": npz.stat().st_size, "runs": runs, "ratios": folder_ratios(runs, args.backends)}


def folder_ratios(runs: list[dict], backends) -> dict:
    """Per backend: median epoch time from the folder over the median from the ``.npz``."""
    out = {}
    for backend in backends:
        med = {
            kind: [
                r["epoch_time_s"] for r in runs if r["backend"] == backend and r["kind"] == kind and "epoch_time_s" in r
            ]
            for kind in ("npz", "folder")
        }
        both = med["npz"] and med["folder"]
        out[backend] = {
            "npz_s": statistics.median(med["npz"]) if med["npz"] else None,
            "folder_s": statistics.median(med["folder"]) if med["folder"] else None,
            "ratio": statistics.median(med["folder"]) / statistics.median(med["npz"]) if both else None,
        }
    return out


# --------------------------------------------------------------------------- the report


def goal(text: str, value: float | None, limit: float, at_most: bool, judged: bool = True) -> dict:
    """One goal: PASS, MISS, not measured, or not judged (shown, but set for the full scale)."""
    status = (
        "not measured" if value is None else ("PASS" if (value <= limit if at_most else value >= limit) else "MISS")
    )
    return {
        "goal": text,
        "value": value,
        "limit": limit,
        "at_most": at_most,
        "status": "not judged" if value is not None and not judged else status,
    }


def goals(result: dict) -> list[dict]:
    """Part 7's criteria with this run's values. The memory and cold-gather goals are judged only
    when the features are larger than RAM (a smaller file is read whole by read-around, and its
    pages fit anyway)."""
    big = result["graph"]["features_bytes"] > result["machine"]["memory_bytes"]
    out = []
    for run in result.get("train", []):
        out.append(
            goal(
                f"{run['backend']}: test accuracy above chance ({result['graph']['chance']:.3f})",
                run.get("test_acc"),
                result["graph"]["chance"],
                False,
            )
        )
        out.append(
            goal(
                f"{run['backend']}: peak RssAnon of the tree <= 8 GiB",
                run.get("peak_rssanon_bytes"),
                RSS_ANON_GOAL,
                True,
                judged=big,
            )
        )
    disk = result.get("disk", {}).get("reads_per_s", {}).get("64")
    plain = [g for g in result.get("gather", []) if g.get("draw") == "uniform" and g.get("madvise") == "auto"]
    rate = page_reads_per_s(plain[0]) / disk if plain and disk and "rows_per_s" in plain[0] else None
    depth = plain[0].get("read_depth", "?") if plain else "?"
    out.append(
        goal(
            f"cold gather (depth {depth}, uniform rows, no cache): its 4 KiB page reads/s >= 70% of the "
            "disk's depth-64 reads/s",
            rate,
            COLD_GATHER_GOAL,
            False,
            judged=big,
        )
    )
    for backend, r in result.get("in_memory", {}).get("ratios", {}).items():
        out.append(
            goal(
                f"{backend}: epoch from the folder <= 1.05x from the .npz (warm)", r["ratio"], FOLDER_VS_NPZ_GOAL, True
            )
        )
    return out


def gib(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def page_reads_per_s(g: dict) -> float:
    """The 4 KiB reads/s a gather made the disk do: a row that straddles a page boundary (a
    3 KiB row does three times in four) costs two, so rows/s alone understates the disk's work."""
    return g["disk_read_bytes"] / 4096 / g["seconds"]


def gather_row(g: dict, disk: dict) -> tuple[str, str]:
    if "failed" in g:
        return f"cold gather depth {g.get('read_depth', '?')}", "FAILED " + g["failed"]
    d64 = disk.get("reads_per_s", {}).get("64")
    label = (
        f"cold gather, depth {g['read_depth']}, {g['draw']} rows"
        + (", read-around on (MADV_NORMAL)" if g["madvise"] == "normal" else "")
        + (f", cache {gib(g['cache_bytes'])}" if g["cache_bytes"] else "")
    )
    pages = page_reads_per_s(g)
    value = (
        f"{g['rows_per_s']:,.0f} rows/s, {pages:,.0f} page reads/s"
        + (f" ({pages / d64:.0%} of depth 64)" if d64 else "")
        + (f", hit {g['cache_hit_rate']:.1%}" if g["cache_bytes"] else "")
    )
    stayed = g.get("resident_after_drop")
    warn = f", WARNING: {stayed:.0%} of the file stayed cached" if stayed and stayed > 0.01 else ""
    return label, value + f", {g['disk_bytes_per_missed_row'] / 1024:,.1f} KiB read/missed row" + warn


def train_row(run: dict, chance: float) -> tuple[str, str]:
    label = f"train {run['backend']} (cold, {run.get('nproc', 2)} ranks)"
    if "failed" in run:
        return label, "FAILED " + run["failed"]
    hit = (run.get("feature_cache") or {}).get("hit_rate")
    return label, (
        f"epoch {run['epoch_time_s']:.1f} s (gather {run['gather_s']:.2f} s, slowest rank "
        f"{run['gather_s_slowest_rank']:.2f} s), test acc {run['test_acc']:.3f} (chance {chance:.3f}), "
        f"peak RssAnon {gib(run['peak_rssanon_bytes'])} (RssFile {gib(run['peak_rssfile_bytes'])}, RssShmem "
        f"{gib(run['peak_rssshmem_bytes'])} summed over ranks: the shared cache once per rank), "
        f"cache hit {'-' if hit is None else f'{hit:.1%}'}, disk read {gib(run['disk_read_bytes'])}"
    )


def table(result: dict) -> str:
    """The one table: every figure of part 7, then the goals."""
    g, disk = result["graph"], result.get("disk", {})
    rows = [
        (
            "graph",
            f"{g['nodes']:,} nodes x {g['features']} {g['dtype']} features "
            f"({gib(g['features_bytes'])}), {g['edges']:,} edges, {g['classes']} classes; "
            f"{gib(g['folder_bytes'])} on disk; RAM {gib(result['machine']['memory_bytes'])}",
        )
    ]
    if "generate" in result:
        gen = result["generate"]
        rows.append(
            (
                "generate",
                "reused (--keep)"
                if gen["cached"]
                else f"{gen['seconds']:.1f} s, peak RssAnon {gib(gen['run']['peak_rssanon_bytes'])}",
            )
        )
    if "prepare" in result:
        p = result["prepare"]
        rows.append(
            (
                "gnnbridge prepare",
                f"{p['wall_s']:.1f} s, peak RssAnon {gib(p['peak_rssanon_bytes'])} "
                f"(RssFile {gib(p['peak_rssfile_bytes'])})",
            )
        )
    if disk:
        rates = disk["reads_per_s"]
        rows.append(
            (
                f"disk random 4 KiB reads/s ({disk['method']})",
                f"depth 1: {rates['1']:,.0f}, depth 64: {rates['64']:,.0f}",
            )
        )
    rows += [gather_row(x, disk) for x in result.get("gather", [])]
    rows += [train_row(run, g["chance"]) for run in result.get("train", [])]
    for backend, r in result.get("in_memory", {}).get("ratios", {}).items():
        rows.append(
            (
                f"in memory, {backend}: epoch npz / folder",
                "-" if r["ratio"] is None else f"{r['npz_s']:.3f} s / {r['folder_s']:.3f} s = {r['ratio']:.3f}x",
            )
        )
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{label:<{width}}{value}" for label, value in rows]
    lines += ["", "goals (memory and cold gather judged only when the features exceed RAM):"]
    lines += [
        f"  {x['status']:<13}{'-' if x['value'] is None else format_value(x):>12}  {x['goal']}" for x in result["goals"]
    ]
    return "\n".join(lines)


def format_value(x: dict) -> str:
    v = x["value"]
    return gib(v) if x["limit"] == RSS_ANON_GOAL else f"{v:.3f}"


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Measure training from a folder dataset (issue 27, part 7).")
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--edges", type=int, default=2_000_000, help="directed edges")
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="x.npy's dtype")
    parser.add_argument(
        "--prepare-dtype",
        choices=("float32", "float16", "bfloat16"),
        help="gnnbridge prepare --dtype (default: keep x.npy's)",
    )
    parser.add_argument("--train-nodes", type=int, default=20480, help="training nodes (sets an epoch's length)")
    parser.add_argument("--eval-nodes", type=int, default=10240, help="validation and test nodes, each")
    parser.add_argument("--seed", type=int, default=0, help="the generator's seed")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1, help="epochs of the cold run")
    parser.add_argument("--backends", default="pyg,dgl")
    parser.add_argument("--feature-cache", default="5%", help="per machine: a share of the features (5%%) or bytes")
    parser.add_argument(
        "--read-depths", default="1,32,64", help="comma-separated placement.read_depth values for the cold gathers"
    )
    parser.add_argument("--gather-rows", type=int, default=100_000, help="rows per cold gather")
    parser.add_argument("--disk-seconds", type=float, default=5.0, help="per queue depth")
    parser.add_argument("--compare-nodes", type=int, help="the in-memory graph (default: the graph above)")
    parser.add_argument("--compare-features", type=int)
    parser.add_argument("--compare-edges", type=int)
    parser.add_argument("--compare-epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="of each in-memory run (.npz and folder alternate)")
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out: disk,gather,train,compare")
    parser.add_argument("--timeout", type=float, default=3600, help="gnnbridge train --timeout")
    parser.add_argument(
        "--data-root",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the generated folders go (not the repository)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated data (reused by the next run)")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="big_graph.json and the run folders")
    args = parser.parse_args(argv)
    args.read_depths = sorted({int(d) for d in args.read_depths.split(",") if d})
    args.backends = [b for b in args.backends.split(",") if b]
    args.skip = set(filter(None, args.skip.split(",")))
    return args


def graph_params(args, prefix: str = "") -> dict:
    """The generator's parameters; ``prefix="compare_"`` gives the in-memory graph's (each size
    defaulting to the main graph's)."""
    params = {k: getattr(args, k) for k in GRAPH_KEYS}
    for key in ("nodes", "features", "edges"):
        params[key] = getattr(args, prefix + key, None) or params[key]
    return params


def made_graph(root: Path, params: dict, args, created: list[Path]) -> tuple[Path, dict, dict]:
    """(folder, generation, prepare) for one graph; the folder is listed for deletion."""
    folder = graph_dir(root, params)
    created.append(folder)
    made = generate(params, folder)
    return folder, made, prepare(folder, args.prepare_dtype, args.timeout)


def graph_summary(folder: Path, params: dict) -> dict:
    return {
        **params,
        "folder": str(folder),
        "features_bytes": features_bytes(params),
        "folder_bytes": sum(f.stat().st_size for f in data_files(folder)),
        "chance": chance(folder),
    }


def measure_all(args, result: dict, created: list[Path], save) -> None:
    """Every step in order, the result saved after each (a long run keeps what it measured)."""
    params = graph_params(args)
    folder, result["generate"], result["prepare"] = made_graph(args.data_root, params, args, created)
    result["graph"] = graph_summary(folder, params)
    budget = cache_budget(args.feature_cache, params)
    save()
    if "disk" not in args.skip:
        print("--- disk random reads", flush=True)
        result["disk"] = disk_rate.disk_rates(str(folder / "x.npy"), (1, 64), args.disk_seconds)
        save()
    if "gather" not in args.skip:
        result["gather"] = cold_gathers(folder, args, budget)
        save()
    if "train" not in args.skip:
        result["train"] = [{**r, "nproc": args.nproc} for r in cold_training(folder, args, budget)]
        save()
    if "compare" not in args.skip:
        cparams = graph_params(args, "compare_")
        cfolder = folder if cparams == params else made_graph(args.data_root, cparams, args, created)[0]
        result["in_memory"] = {"graph": graph_summary(cfolder, cparams), **in_memory(cfolder, args)}
        created.append(cfolder.with_suffix(".npz"))


def fits_in_memory(args) -> None:
    """The in-memory graph must fit: the ``.npz`` run holds it in shared memory and each rank's
    arrays besides; a quarter of RAM leaves room for that."""
    import psutil

    cparams = graph_params(args, "compare_")
    if "compare" not in args.skip and features_bytes(cparams) > psutil.virtual_memory().total // 4:
        sys.exit(
            f"the in-memory comparison graph's features ({gib(features_bytes(cparams))}) exceed a quarter "
            "of RAM; give smaller --compare-nodes/--compare-features, or --skip compare"
        )


def main(argv=None) -> int:
    args = parse_args(argv)
    if "GNNBRIDGE_LOAD_PLUGINS" in os.environ:
        sys.exit("GNNBRIDGE_LOAD_PLUGINS is set; unset it so gnnbridge loads its own backends and datasets.")
    fits_in_memory(args)
    args.out.mkdir(parents=True, exist_ok=True)
    args.data_root.mkdir(parents=True, exist_ok=True)
    result, created = (
        {
            "machine": compare.machine(),
            "args": {
                k: sorted(v) if isinstance(v, set) else str(v) if isinstance(v, Path) else v
                for k, v in vars(args).items()
            },
        },
        [],
    )
    partial = args.out / "big_graph.partial.json"
    try:
        measure_all(args, result, created, lambda: partial.write_text(json.dumps(result, indent=1) + "\n"))
    finally:
        for path in created if not args.keep else []:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    result["goals"] = goals(result)
    (args.out / "big_graph.json").write_text(json.dumps(result, indent=2) + "\n")
    partial.unlink(missing_ok=True)
    print()
    print(table(result))
    print(f"wrote {args.out / 'big_graph.json'}" + ("" if args.keep else "; the generated data is deleted"))
    failed = [r for r in result.get("train", []) + result.get("in_memory", {}).get("runs", []) if "failed" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
