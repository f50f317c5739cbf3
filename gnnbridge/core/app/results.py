"""What a finished run reports: ``results.json`` (the contract in docs/outputs.md) and
``curves.png``.

Rank 0 builds the results from the trainer's outcome and every rank's summary (where it ran,
which training items it got) and draws the curves (before the loggers that keep files take the
folder); the launching process reads them back and returns them to the caller.
"""

from __future__ import annotations

import json
import platform
import resource
import sys
from pathlib import Path

import torch

from gnnbridge.core import files
from gnnbridge.core.app.plan import Plan
from gnnbridge.core.app.rundir import RESULTS, keep_earlier_results
from gnnbridge.core.plugins import library_versions
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.training.trainer import Trainer


def write(run_dir: Path, plan: Plan, ctx: DistContext, trainer: Trainer, outcome: dict, ranks: list[dict]) -> None:
    """Rank 0: ``results.json``; results of an earlier, shorter run stay beside it."""
    config = plan.config
    results = {
        "experiment": config.name,
        "backend": config.backend,
        "task": config.task,
        "kind": config.kind.value,  # what the task runs as (a plugin's family: node, graph, link or edge)
        "world_size": ctx.world_size,
        "num_nodes": ctx.num_nodes,
        "device": config.device.value,
        "dataset": trainer.parts.data.summary(),
        "sampler": type(trainer.parts.sampler).__name__,
        "tables": trainer.table_copies,  # model.embeddings=sparse: one copy per "machine" or per "rank"
        **outcome,
        "resumed_from": plan.resumed_from,
        "restarts": trainer.state.restarts,
        "ranks": ranks,
        "versions": library_versions(config.backend),
    }
    keep_earlier_results(run_dir)
    files.write_json(run_dir / RESULTS, results)
    plot(run_dir, results)  # here, so the curves are in the folder before the loggers take it


def rank_summary(ctx: DistContext, trainer: Trainer) -> dict:
    """Where a rank ran, which training items it got (to check a job's layout afterwards) and
    its peak memory: resident set (shared graph pages it touched included) and, on a GPU, the
    most CUDA memory torch held for it."""
    cuda = torch.cuda.max_memory_allocated(ctx.device) if ctx.device.type == "cuda" else None
    return {
        "rank": ctx.rank,
        "node": ctx.node_rank,
        "local_rank": ctx.local_rank,
        "host": platform.node(),
        "device": str(ctx.device),
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_cuda_bytes": cuda,
        **trainer.shard_fingerprint,
    }


def peak_rss_bytes() -> int:
    """This process's peak resident set size (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def finish(run_dir: Path) -> dict:
    """The results a caller gets back (rank 0 wrote them, and drew them: :func:`write`)."""
    results = json.loads((run_dir / RESULTS).read_text())
    results["run_dir"] = str(run_dir)
    return results


def plot(run_dir: Path, results: dict) -> None:
    """Loss and the monitored validation metric per epoch as ``curves.png`` (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is a dependency, but plotting is optional
        return
    history = results["history"]
    epochs = [h["epoch"] + 1 for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax_loss.plot(epochs, [h["loss"] for h in history], marker="o")
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="Loss")
    monitor = results["best"]["monitor"]  # what picks the best epoch: val_acc, val_rmse, val_mrr ...
    running = "train_" + monitor.removeprefix("val_")  # the target's running figure of it, where it has one
    if all(running in h for h in history):
        ax_acc.plot(epochs, [h[running] for h in history], marker="o", label="train")
    label = "val (sampled)" if results.get("kind", results["task"]) != "graph" else "val"
    ax_acc.plot(epochs, [h.get(monitor) for h in history], marker="o", label=label)
    ax_acc.set(
        xlabel="epoch", ylabel=monitor.removeprefix("val_"), title=f"{results['experiment']} on {results['backend']}"
    )
    for restart in results.get("restarts", []):
        if restart.get("resumed_from_epoch") is not None:  # where a restarted run picked up
            for ax in (ax_loss, ax_acc):
                ax.axvline(restart["resumed_from_epoch"] + 1.5, color="grey", linestyle=":", linewidth=1)
    ax_acc.legend()
    fig.tight_layout()
    path = run_dir / "curves.png"
    try:  # replaced, never drawn over: the old file may be a link to somewhere else
        files.replace(path, lambda f: fig.savefig(f, dpi=100, format="png"))
    except OSError as exc:
        raise files.output_error(path, exc, path.name) from None
    finally:
        plt.close(fig)
