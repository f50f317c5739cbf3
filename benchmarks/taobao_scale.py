"""Link prediction at recommendation scale, on each backend (issue 29, part 6): a
Taobao-shaped graph (``make_taobao_graph.py``: 1M users, 4M items, 100M clicks, featureless
users and items, items in 10k categories) trained as a user would, ``gnnbridge train --nproc 2``
on the prepared folder, with sparse embedding tables (``model.embeddings=sparse``).

Why a script: the figures the issue asks for are an epoch's time, where it goes (the trainer's
phases), and the peak memory of the whole run (launcher and ranks), which only a sampler of the
process tree sees: peak anonymous memory (heap and tensors: what must fit in RAM) apart from the
mapped graph files' pages (the page cache, which the kernel can drop), as ``peakmem.py`` keeps
them. A whole epoch (98M training edges) takes hours on a 2-core machine, so by default each rank
runs ``--max-batches`` batches (``train.max_batches``) and the epoch's time is projected from
them (the whole epoch: ``--max-batches 0``, with ``--checkpoint-every-batches 1000`` so that a
stopped run continues inside the epoch with ``--resume``; its time and peaks are added up over
the segments, kept in ``BACKEND.segments.json``). The held-out fractions are 0.1% each (100k edges, 20
negatives each), so that evaluation stays a small part of the run; the final evaluation is the
exact typed layer-wise pass over all 5M nodes.

    python benchmarks/make_taobao_graph.py DATA/taobao && gnnbridge prepare DATA/taobao
    python benchmarks/taobao_scale.py DATA/taobao [--backends pyg,dgl --batch-size 4096
        --fanouts 10,5 --max-batches 100 --out benchmarks/out/taobao]

Writes ``BACKEND.json`` per backend (the run's results.json figures, the tree's peaks, the
command) and prints one line per backend; a run folder is kept under ``OUT/runs/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare  # noqa: E402  (benchmarks/ is not a package)
import peakmem  # noqa: E402

GB = 1e9


def command(folder: Path, backend: str, args, run_dir: Path) -> list[str]:
    sets = {
        "task": "link",
        "link.edge_type": "clicks",
        "dataset.reverse_edges": "true",  # users receive messages from the items they clicked
        "link.val_fraction": args.held_out,
        "link.test_fraction": args.held_out,
        "link.eval_negatives": args.eval_negatives,
        "model.embeddings": "sparse",
        "train.epochs": 1,
        "train.max_batches": args.max_batches,
        "train.batch_size": args.batch_size,
        "eval.batch_size": args.eval_batch_size,
        "sampler.fanouts": f"[{args.fanouts}]",
        "train.checkpoint_every_batches": args.checkpoint_every_batches,
    }
    cmd = [sys.executable, "-m", "gnnbridge", "train", "--dataset", str(folder), "--backend", backend]
    cmd += ["--nproc", str(args.nproc), "--out", str(run_dir), "--quiet"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


def run(folder: Path, backend: str, args) -> dict:
    run_dir, record = args.out / "runs" / backend, args.out / f"{backend}.segments.json"
    resumed = args.resume and (run_dir / "checkpoints" / "latest.pt").is_file()
    if resumed:  # continue where a stopped run's last checkpoint (inside the epoch, too) left it
        cmd = [sys.executable, "-m", "gnnbridge", "train", "--resume", str(run_dir), "--quiet"]
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = command(folder, backend, args, run_dir)
    print(f"--- {backend}: {' '.join(cmd[1:])}", flush=True)
    done = peakmem.run_status(cmd, env=compare.child_env(), cwd=compare.REPO)
    segments = [*(json.loads(record.read_text()) if resumed else []), {"resumed": resumed, **done}]
    record.write_text(json.dumps(segments, indent=1))
    if done["returncode"] != 0:
        raise SystemExit(
            f"{backend}: gnnbridge train stopped with exit code {done['returncode']}; its checkpoint is kept "
            "(continue with --resume)"
        )
    results = json.loads((run_dir / "results.json").read_text())
    epoch = results["history"][0]
    # Every rank's share of the training edges, in batches: what a whole epoch would run.
    epoch_batches = -(-results["dataset"]["train"] // (args.nproc * args.batch_size))
    return {
        "backend": backend,
        "command": cmd[1:],
        "epoch_time_s": epoch["epoch_time_s"],
        "batches_per_rank": epoch["batches"],
        "epoch_batches_per_rank": epoch_batches,
        "projected_epoch_s": epoch["epoch_time_s"] * epoch_batches / epoch["batches"],
        "phases_s": epoch["phases"],
        "eval_time_s": epoch["eval_time_s"],
        "final_eval_time_s": results.get("final_eval_time_s"),
        "metrics": results["metrics"],
        "run": whole(segments),
        "segments": segments,
    }


def whole(segments: list[dict]) -> dict:
    """A run stopped and resumed, as one: its segments' wall times and disk bytes added, the
    highest of their peaks."""
    out = dict(segments[-1])
    for key in out:
        values = [s[key] for s in segments if isinstance(s.get(key), int | float)]
        if key.startswith("peak_") and values:
            out[key] = max(values)
        elif key in ("wall_s", "disk_read_bytes", "disk_write_bytes", "samples") and values:
            out[key] = sum(values)
    return out


def line(r: dict) -> str:
    run, phases = r["run"], ", ".join(f"{k} {v:.0f} s" for k, v in r["phases_s"].items())
    return (
        f"{r['backend']}: {r['epoch_time_s']:.0f} s for {r['batches_per_rank']} batches a rank ({phases}), "
        f"so {r['projected_epoch_s'] / 3600:.1f} h for an epoch's {r['epoch_batches_per_rank']}; "
        f"validation {r['eval_time_s']:.0f} s; test ROC-AUC {r['metrics'].get('test_roc_auc', float('nan')):.3f}; "
        f"whole run {run['wall_s']:.0f} s, peak anonymous memory {run['peak_rssanon_bytes'] / GB:.1f} GB, "
        f"mapped files {run['peak_rssfile_bytes'] / GB:.1f} GB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a prepared make_taobao_graph.py folder")
    parser.add_argument("--backends", default="pyg,dgl")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--eval-batch-size", type=int, default=1024)
    parser.add_argument("--fanouts", default="10,5")
    parser.add_argument("--max-batches", type=int, default=100, help="train.max_batches (0: the whole epoch)")
    parser.add_argument("--held-out", type=float, default=0.001, help="link.val_fraction and test_fraction")
    parser.add_argument("--eval-negatives", type=int, default=20)
    parser.add_argument("--out", type=Path, default=HERE / "out" / "taobao")
    parser.add_argument(
        "--checkpoint-every-batches", type=int, default=0, help="train.checkpoint_every_batches (a whole epoch: 1000)"
    )
    parser.add_argument("--resume", action="store_true", help="continue OUT/runs/BACKEND from its latest checkpoint")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for backend in args.backends.split(","):
        result = run(args.folder.resolve(), backend, args)
        (args.out / f"{backend}.json").write_text(json.dumps(result, indent=1))
        print(line(result), flush=True)


if __name__ == "__main__":
    main()
