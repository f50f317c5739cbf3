"""A graph partitioned across K "machines": accuracy against the graph trained whole, what each
machine holds and claims, what crosses machines each epoch, and how that grows with K.

On one host, each machine is a torchrun agent (``--nnodes K``, one rank, ``OMP_NUM_THREADS=1``)
in a folder of its own holding a copy of its part alone (``partition.json`` and ``part-M/``), as
a cluster's machines would. Measured, per K (default 2 and 4):

* ``gnnbridge partition`` (METIS by default): wall time, balance, edge cut;
* per machine: bytes of graph held (its folder) and the peak RssAnon of its process tree
  (agent and rank, sampled every 0.2 s: anonymous memory, not the mapped part's pages);
* per epoch (the job's totals from ``results.json``): rows fetched and of those from other
  machines, frontier nodes sampled by their owners, bytes exchanged, a rank's seconds in the
  hops' exchanges and in fetching rows, sample / forward / backward time, the epoch's time;
* test accuracy (exact layer-wise evaluation across machines) against the same graph trained
  whole on one machine with K ranks (the same global batch and steps per epoch), and whole on
  one rank (what one machine's memory costs).

Then, on paper, 8-64 machines: each epoch fetches about the same rows in all (the seeds and
fanouts set them), of which a share crosses machines. That share is measured at each K; beyond
it is bounded by a random split's (K - 1) / K and estimated for METIS by extending the measured
shares' growth per doubling of K. Bytes per machine per epoch = all rows x share x (row bytes +
8 bytes of its id, asked) / K. A bound, not a measurement: METIS' cut on a real graph of
that size is what to measure on a cluster.

    python benchmarks/partitions.py [--preset default|100k] [--parts 2,4] [--method metis|stream]
        [--epochs 3] [--backend pyg|dgl] [--typed PAPERS] [--link USERS] [--out benchmarks/out]

``--typed PAPERS``: a heterogeneous graph instead (``mag-synthetic`` of that many papers, half
as many featureless authors, venues), its node task on the papers. ``--link USERS``: link
prediction instead, on ``rec-synthetic`` of that many featureless users and half as many items
(the task cut into the parts by ``gnnbridge partition --task link``); its metric is the test MRR.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare  # noqa: E402
import peakmem  # noqa: E402


def gnnbridge(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gnnbridge", *args], cwd=cwd, env=compare.child_env(), capture_output=True, text=True
    )


LINK = [  # rec-synthetic's own experiment: what learns its links
    "task=link", "link.edge_type=buys", "dataset.reverse_edges=true", "sampler.fanouts=[10,5]", "train.batch_size=512",
    "model.hidden=64", "model.layers=2", "model.dropout=0.0", "train.lr=0.01", "train.seed=0", "link.negatives=1",
]  # fmt: skip


def overrides(epochs: int, link: bool = False) -> list[str]:
    if link:
        return [*LINK, f"train.epochs={epochs}", "eval.mode=layerwise"]
    sets = [s for s in compare.gnnbridge_overrides(epochs) if not s.startswith("eval.mode=")]
    return [*sets, "eval.mode=layerwise"]


def metric(args) -> str:
    return "test_mrr" if args.link else "test_acc"


def folder_of(npz: Path, out: Path) -> Path:
    """The graph as a prepared folder (made once)."""
    folder = out / "partitioned" / npz.stem
    if not (folder / "prepared" / "manifest.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        done = gnnbridge("prepare", str(npz), "--out", str(folder), "--quiet")
        if done.returncode:
            raise RuntimeError(done.stderr)
    return folder


def typed_folder(papers: int, out: Path) -> tuple[Path, dict]:
    """A heterogeneous graph (``mag-synthetic`` of ``papers`` papers: papers with features and
    topics, featureless authors, venues) as a prepared folder (made once), and its description."""
    from gnnbridge.plugins.hetero_datasets import MAG_DEFAULTS, mag_graph

    opts = {**MAG_DEFAULTS, "num_papers": papers, "num_authors": papers // 2, "num_venues": max(30, papers // 100)}
    name = f"mag-synthetic ({papers:,} papers)"
    return source_folder(mag_graph(**opts, seed=0), out / "partitioned" / f"mag-{papers}", name, opts["num_features"])


def rec_folder(users: int, out: Path) -> tuple[Path, dict]:
    """A recommendation graph (``rec-synthetic`` of ``users`` users, half as many items) as a
    prepared folder without node labels (made once), and its description."""
    from gnnbridge.plugins.hetero_datasets import REC_DEFAULTS, rec_graph

    opts = {**REC_DEFAULTS, "num_users": users, "num_items": users // 2}
    name = f"rec-synthetic ({users:,} users)"
    return source_folder(rec_graph(**opts, seed=0), out / "partitioned" / f"rec-{users}", name, opts["num_features"])


def source_folder(source, folder: Path, name: str, features: int) -> tuple[Path, dict]:
    """A heterogeneous source as a prepared folder (made once; its labels where it has them), and
    its description."""
    import numpy as np

    graph = {
        "name": name,
        "nodes": sum(source.num_nodes.values()),
        "edges": sum(int(e.shape[1]) for e in source.edges.values()),
        "features": features,
    }
    if (folder / "prepared" / "manifest.json").is_file():
        return folder, graph
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {f"num_nodes__{t}": np.array([n]) for t, n in source.num_nodes.items() if t not in source.x}
    arrays.update({f"x__{t}": x.numpy() for t, x in source.x.items()})
    if source.y is not None:
        arrays[f"y__{source.target_node}"] = source.y.numpy()
    arrays.update({f"edge_index__{'__'.join(et)}": e.numpy() for et, e in source.edges.items()})
    for key, value in arrays.items():
        np.save(folder / f"{key}.npy", value)
    done = gnnbridge("prepare", str(folder), "--quiet")
    if done.returncode:
        raise RuntimeError(done.stderr)
    return folder, graph


def whole(folder: Path, args, ranks: int) -> dict:
    """The graph trained whole on one machine of ``ranks`` ranks: the same steps per epoch and
    the same global batch as ``ranks`` machines of one rank each."""
    run_dir = args.out / "partitioned" / "runs" / f"whole-{ranks}-{time.strftime('%Y%m%d-%H%M%S')}"
    # a torchrun job, as the machines are (--nproc refuses more ranks than this host has cores)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    cmd += ["-m", "gnnbridge", "train", "--dataset", str(folder), "--backend", args.backend]
    cmd += ["--out", str(run_dir), "--quiet"]
    for setting in overrides(args.epochs, args.link):
        cmd += ["--set", setting]
    print(f"--- whole graph, one machine of {ranks} rank(s)", flush=True)
    done = peakmem.run_status(cmd, env={**compare.child_env(), "OMP_NUM_THREADS": "1"})
    results = json.loads((run_dir / "results.json").read_text())
    return {
        "test": results["metrics"][metric(args)],
        "epoch_time_s": [h["epoch_time_s"] for h in results["history"]],
        "peak_rssanon_bytes": done["peak_rssanon_bytes"],
        "held_bytes": sum(f.stat().st_size for f in folder.rglob("*.npy") if "partitions" not in f.parts),
    }


def cut(folder: Path, k: int, method: str, args) -> dict:
    shutil.rmtree(folder / "partitions" / str(k), ignore_errors=True)
    start = time.perf_counter()
    task = ["--task", "link", *(f"--set={s}" for s in overrides(args.epochs, True))] if args.link else []
    done = gnnbridge("partition", str(folder), "--parts", str(k), "--method", method, "--quiet", *task)
    if done.returncode:
        raise RuntimeError(done.stderr)
    description = json.loads((folder / "partitions" / str(k) / "partition.json").read_text())
    return {
        "seconds": time.perf_counter() - start,
        "balance": description["balance"],
        "edge_cut": description["edge_cut"],
        "nodes": [p["nodes"] for p in description["per_part"]],
    }


def machines(folder: Path, k: int, args) -> dict:
    """The K-machine job, each machine's tree sampled for its peak RssAnon."""
    where = args.out / "partitioned" / f"machines-{k}"
    shutil.rmtree(where, ignore_errors=True)
    held = []
    for m in range(k):
        data = where / f"machine{m}" / "data" / "partitions" / str(k)
        data.mkdir(parents=True)
        shutil.copy(folder / "partitions" / str(k) / "partition.json", data)
        shutil.copytree(folder / "partitions" / str(k) / f"part-{m}", data / f"part-{m}")
        for link in (folder / "partitions" / str(k)).glob("link-*"):  # a link task's share of machine m
            (data / link.name).mkdir()
            shutil.copy(link / "link.json", data / link.name)
            shutil.copytree(link / f"part-{m}", data / link.name / f"part-{m}")
        held.append(sum(f.stat().st_size for f in data.rglob("*") if f.is_file()))
    port = 29000 + os.getpid() % 1000
    env = {**compare.child_env(), "OMP_NUM_THREADS": "1"}
    procs, samplers = [], []
    for m in reversed(range(k)):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(k), "--nproc-per-node", "1"]
        cmd += ["--node-rank", str(m), "--master-addr", "127.0.0.1", "--master-port", str(port)]
        cmd += ["-m", "gnnbridge", "train", "--dataset", "data", "--backend", args.backend, "--out", "out", "--quiet"]
        cmd += ["--set", f"dataset.partitions={k}", "--set", f"placement.remote_cache={args.remote_cache}"]
        cmd += ["--timeout", "600"]
        for setting in overrides(args.epochs, args.link):
            cmd += ["--set", setting]
        proc = subprocess.Popen(cmd, cwd=where / f"machine{m}", env=env, stderr=subprocess.PIPE, text=True)
        sampler = peakmem.StatusSampler(proc.pid)
        sampler.__enter__()
        procs.append(proc)
        samplers.append(sampler)
    print(f"--- {k} machines", flush=True)
    errors = [p.communicate()[1] for p in procs]
    for sampler in samplers:
        sampler.__exit__(None, None, None)
    if any(p.returncode for p in procs):
        raise RuntimeError("\n".join(e[-800:] for e in errors))
    results = json.loads((where / "machine0" / "out" / "results.json").read_text())
    epochs = results["history"][1:] or results["history"]  # the first epoch also compiles kernels
    keys = ("fetched_rows", "remote_rows", "remote_cache_hits", "remote_nodes", "exchanged_bytes")
    keys += ("hop_exchange_s", "fetch_s")
    return {
        "test": results["metrics"][metric(args)],
        "held_bytes": held,
        "peak_rssanon_bytes": [s.peak_kib["RssAnon"] * 1024 for s in reversed(samplers)],
        "per_epoch": {key: sum(e[key] for e in epochs) / len(epochs) for key in keys},
        "phases": {p: sum(e["phases"][p] for e in epochs) / len(epochs) for p in ("sample", "forward", "backward")},
        "epoch_time_s": sum(e["epoch_time_s"] for e in epochs) / len(epochs),
    }


def projection(runs: dict, row_bytes: int) -> list[dict]:
    """Bytes per machine per epoch at 8-64 machines (see the module): METIS' remote share grown
    by its measured growth per doubling, capped by a random split's (K - 1) / K."""
    ks = sorted(runs)
    shares = {k: runs[k]["per_epoch"]["remote_rows"] / runs[k]["per_epoch"]["fetched_rows"] for k in ks}
    rows = runs[ks[-1]]["per_epoch"]["fetched_rows"]
    growth = (shares[ks[-1]] - shares[ks[0]]) / max(1.0, math.log2(ks[-1] / ks[0])) if len(ks) > 1 else 0.0
    out = []
    for k in (8, 16, 32, 64):
        random_share = (k - 1) / k
        metis_share = min(random_share, shares[ks[-1]] + growth * math.log2(k / ks[-1]))
        per_machine = rows * (row_bytes + 8) / k  # a remote row: its id asked (8 bytes), its row back
        out.append(
            {
                "machines": k,
                "remote_share_metis": metis_share,
                "remote_share_random": random_share,
                "bytes_per_machine_metis": per_machine * metis_share,
                "bytes_per_machine_random": per_machine * random_share,
            }
        )
    return out


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def report(result: dict) -> str:
    whole_run, runs = result["whole"], result["machines"]
    lines = [
        f"graph: {result['graph'].get('name', 'synthetic')}, {result['graph']['nodes']:,} nodes, "
        f"{result['graph']['edges']:,} edges, "
        f"{result['graph']['features']} features; {result['backend']}, {result['epochs']} epochs, "
        f"remote_cache={result['remote_cache']}",
    ]
    if whole_run is not None:
        lines.append(
            f"whole, 1 machine: {result['metric']} {whole_run['test']:.4f}, holds {mib(whole_run['held_bytes'])}, "
            f"peak RssAnon {mib(whole_run['peak_rssanon_bytes'])}"
        )
    lines += [
        "",
        f"| K | partition | edge cut | {result['metric']} (whole, K ranks) | held per machine "
        "| peak RssAnon per machine | rows fetched / epoch | of which remote (cache hits) | bytes exchanged / epoch "
        "| hop exchanges s | fetch s | sample s | forward s | backward s |",
        "|" + " --- |" * 14,
    ]
    for k, run in sorted(runs.items()):
        e, p, c = run["per_epoch"], run["phases"], result["partitions"][k]
        lines.append(
            f"| {k} | {c['seconds']:.1f} s | {100 * c['edge_cut']:.1f}% | {run['test']:.4f} "
            f"({result['whole_k'][k]['test'] if result['whole_k'][k] else float('nan'):.4f}) | "
            f"{' / '.join(mib(b) for b in run['held_bytes'])} | "
            f"{' / '.join(mib(b) for b in run['peak_rssanon_bytes'])} | {e['fetched_rows']:,.0f} | "
            f"{100 * e['remote_rows'] / e['fetched_rows']:.1f}% "
            f"({100 * e['remote_cache_hits'] / e['fetched_rows']:.1f}%) | "
            f"{mib(e['exchanged_bytes'])} | "
            f"{e['hop_exchange_s']:.2f} | {e['fetch_s']:.2f} | {p['sample']:.2f} | {p['forward']:.2f} | "
            f"{p['backward']:.2f} |"
        )
    lines += [
        "",
        "| machines | remote share (METIS, extended) | (random split) | bytes / machine / epoch (METIS) | (random) |",
    ]
    lines.append("|" + " --- |" * 5)
    for row in result["projection"]:
        lines.append(
            f"| {row['machines']} | {100 * row['remote_share_metis']:.0f}% | {100 * row['remote_share_random']:.0f}% | "
            f"{mib(row['bytes_per_machine_metis'])} | {mib(row['bytes_per_machine_random'])} |"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(compare.PRESETS), default="default")
    for key in ("nodes", "features", "avg_degree", "classes"):
        parser.add_argument(f"--{key.replace('_', '-')}", dest=key, default=None)
    parser.add_argument("--graph-seed", type=int, default=0)
    parser.add_argument("--npz", type=Path, default=None)
    parser.add_argument(
        "--typed", type=int, default=0, help="a heterogeneous graph instead: mag-synthetic of this many papers"
    )
    parser.add_argument("--link", type=int, default=0, help="link prediction instead: rec-synthetic of this many users")
    parser.add_argument("--parts", default="2,4")
    parser.add_argument("--method", choices=("metis", "stream"), default="metis")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--remote-cache", default="0", help="placement.remote_cache of every machine (e.g. 16MB)")
    parser.add_argument("--no-whole", action="store_true", help="skip the runs of the graph whole")
    parser.add_argument("--backend", choices=("pyg", "dgl"), default="pyg")
    parser.add_argument("--out", type=Path, default=HERE / "out")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.link:
        folder, graph = rec_folder(args.link, args.out)
    elif args.typed:
        folder, graph = typed_folder(args.typed, args.out)
    else:
        npz, graph = compare.prepare_graph(args)
        folder = folder_of(npz, args.out)
    result = {"graph": graph, "backend": args.backend, "epochs": args.epochs, "method": args.method}
    result["metric"] = metric(args)
    result["remote_cache"] = args.remote_cache
    result["whole"] = None if args.no_whole else whole(folder, args, 1)
    result["partitions"], result["machines"], result["whole_k"] = {}, {}, {}
    for k in (int(v) for v in args.parts.split(",")):
        result["partitions"][k] = cut(folder, k, args.method, args)
        result["machines"][k] = machines(folder, k, args)
        result["whole_k"][k] = None if args.no_whole else whole(folder, args, k)
    result["projection"] = projection(result["machines"], 4 * graph["features"])
    (args.out / "partitions.json").write_text(json.dumps(result, indent=1))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
