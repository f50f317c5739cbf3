"""One GPU at Reddit scale: the measurement docs/performance.md names for ``--device cuda``
(nccl, features and topology placed on the device, bf16, the core sampler on CUDA).

Why a script of its own: a GPU is lent to this project for minutes at a time, on a machine that
reaches nothing outside it and starts bare. So the whole measurement is one command that
generates the graph there (``make_graph.py``'s Reddit preset: 233k nodes, 602 features, 109M
edges), runs each configuration in a child with a deadline, and writes ``gpu.json`` after every
step, so a run cut short still returns what it measured. Steps, most wanted first:

1. ``device-bf16``: ``gnnbridge train --backend pyg --nproc 1 --device cuda`` (nccl) with
   ``placement.features=device placement.topology=device placement.precision=bf16``: the
   whole step on the GPU, the core sampler running its torch path on CUDA;
2. the core sampler alone on the same seed batches, on CUDA and on the CPU (compiled kernel,
   all cores and one thread), as ``sampler_bench.py`` measures it;
3. ``host-fp32``: the default placement (features and topology in host memory, the CPU sampler,
   a batch's rows copied to the GPU each step);
4. ``device-fp32``: step 1 without bf16, to show what bf16 alone buys;
5. ``device-bf16-prefetch``: step 1 with ``placement.prefetch=2``: the sampler's kernels are
   launched from a second thread while the model's are, since both are bound by launches.

Training uses ``compare.py``'s hyperparameters (fanouts [25, 10], batch 1024, hidden 256) on
the whole training split (60%: 137 batches an epoch); an epoch's figure is the median of the
epochs after the first (the first pays CUDA's lazy initialisation and the allocator's growth).

    python benchmarks/gpu_reddit.py [--out benchmarks/out/gpu --epochs 4 --budget 540]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare  # noqa: E402  (benchmarks/ is not a package)

PLACEMENTS = {
    "device-bf16": ["placement.features=device", "placement.topology=device", "placement.precision=bf16"],
    "host-fp32": [],
    "device-fp32": ["placement.features=device", "placement.topology=device"],
    "device-bf16-prefetch": [
        "placement.features=device",
        "placement.topology=device",
        "placement.precision=bf16",
        "placement.prefetch=2",
    ],
}
MARGIN_S = 15  # left of the budget for writing gpu.json after the last step


class Budget:
    """Seconds left of ``--budget``: every child gets at most what is left, so one hang cannot
    take the steps after it (or the report) with it."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic() - MARGIN_S


def environment() -> dict:
    """What ran it: the GPU and the library versions (the device image is not this repo's venv)."""
    import numba
    import torch

    facts = {"python": platform.python_version(), "torch": torch.__version__, "numba": numba.__version__}
    try:
        import torch_geometric

        facts["torch_geometric"] = torch_geometric.__version__
    except ImportError:
        facts["torch_geometric"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts |= {"gpu": props.name, "gpu_memory_bytes": props.total_memory, "cuda": torch.version.cuda}
        facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    facts["cpu_count"] = os.cpu_count()
    return facts


def graph(out: Path, preset: str) -> Path:
    """The preset's graph, generated once into ``out`` (reused while it exists)."""
    params = {**compare.PRESETS[preset], "seed": 0}
    path = out / compare.graph_name(params)
    if not path.exists():
        compare.generate_graph(params, path)
    return path


def train(npz: Path, name: str, args, budget: Budget) -> dict:
    """One ``gnnbridge train`` on the GPU; its figures come from the run's ``results.json``."""
    run_dir = args.out / "runs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = [sys.executable, "-m", "gnnbridge", "train", "--dataset", str(npz), "--backend", "pyg", "--nproc", "1"]
    cmd += ["--device", args.device, "--out", str(run_dir), "--quiet", "--timeout", "300"]
    for override in [*compare.gnnbridge_overrides(args.epochs), *PLACEMENTS[name]]:
        cmd += ["--set", override]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=compare.child_env(), cwd=compare.REPO, timeout=max(budget.left(), 1))
    except subprocess.TimeoutExpired:
        return {"failed": f"not finished when the budget ran out ({time.perf_counter() - start:.0f} s)"}
    if done.returncode != 0:
        return {"failed": f"exit code {done.returncode}"}
    results = json.loads((run_dir / "results.json").read_text())
    (args.out / f"{name}.results.json").write_text(json.dumps(results, indent=2))  # beside gpu.json
    return {**figures(results), "wall_s": time.perf_counter() - start, "set": PLACEMENTS[name]}


def figures(results: dict) -> dict:
    """An epoch's median after the first, its phases, the final evaluation and the GPU's peak."""
    history = results["history"]
    steady = history[1:] or history
    phases = {k: statistics.median(h["phases"].get(k, 0.0) for h in steady) for k in compare.PHASES}
    return {
        "epoch_s": statistics.median(h["epoch_time_s"] for h in steady),
        "epoch_times_s": [h["epoch_time_s"] for h in history],
        "phases_s": phases,
        "final_eval_s": results["final_eval_time_s"],
        "test_acc": results["metrics"]["test_acc"],
        "peak_cuda_bytes": results["ranks"][0].get("peak_cuda_bytes"),
        "peak_rss_bytes": results["ranks"][0].get("peak_rss_bytes"),
    }


def sampler(npz: Path, out: Path, device: str, threads: int, budget: Budget) -> dict:
    """``sampler_bench.py`` for the core sampler on ``device`` in a fresh process."""
    cmd = [sys.executable, str(HERE / "sampler_bench.py"), "--npz", str(npz), "--cache", str(out)]
    cmd += ["--sampler", "core", "--device", device, "--threads", str(threads), "--batches", "60"]
    cmd += ["--batch-size", str(compare.HYPER["batch_size"])]
    cmd += ["--fanouts", ",".join(str(f) for f in compare.HYPER["fanouts"])]
    try:
        done = subprocess.run(
            cmd, env=compare.child_env(), capture_output=True, text=True, timeout=max(budget.left(), 1)
        )
    except subprocess.TimeoutExpired:
        return {"failed": "not finished when the budget ran out"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"failed": f"exit code {done.returncode}: {done.stderr.strip()[-2000:]}"}
    return json.loads(lines[-1])


def steps(args, budget: Budget):
    """``(key, thunk)`` in the order they run; later ones are skipped once the budget is spent."""
    holder: dict = {}
    yield "environment", environment
    yield "graph", lambda: {"path": str(holder.setdefault("npz", graph(args.out, args.preset)))}
    yield "device-bf16", lambda: train(holder["npz"], "device-bf16", args, budget)
    yield f"sampler-{args.device}", lambda: sampler(holder["npz"], args.out, args.device, 1, budget)
    yield f"sampler-cpu-{os.cpu_count()}", lambda: sampler(holder["npz"], args.out, "cpu", os.cpu_count(), budget)
    yield "sampler-cpu-1", lambda: sampler(holder["npz"], args.out, "cpu", 1, budget)
    yield "host-fp32", lambda: train(holder["npz"], "host-fp32", args, budget)
    yield "device-fp32", lambda: train(holder["npz"], "device-fp32", args, budget)
    yield "device-bf16-prefetch", lambda: train(holder["npz"], "device-bf16-prefetch", args, budget)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "out" / "gpu", help="graph, runs and gpu.json")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of each training run")
    parser.add_argument("--budget", type=float, default=540, help="seconds for everything")
    parser.add_argument("--preset", choices=sorted(compare.PRESETS), default="reddit", help="graph size")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a rehearsal without a GPU")
    parser.add_argument("--only", nargs="*", default=[], help="steps to run (prefixes of their names); default all")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    budget, report = Budget(args.budget), {}
    for key, thunk in steps(args, budget):
        if args.only and key not in ("environment", "graph") and not any(key.startswith(o) for o in args.only):
            continue
        if budget.left() <= 0:
            report[key] = {"skipped": "budget spent"}
            continue
        start = time.perf_counter()
        try:
            report[key] = thunk()
        except Exception as exc:  # noqa: BLE001 - one step's failure is reported, the next still runs
            report[key] = {"failed": f"{type(exc).__name__}: {exc}"}
        print(f"--- {key} ({time.perf_counter() - start:.1f} s): {json.dumps(report[key])}", flush=True)
        (args.out / "gpu.json").write_text(json.dumps(report, indent=2))
        if key == "graph" and "failed" in report[key]:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
