"""One experiment on several libraries: the code behind ``gnnbridge compare``.

Two questions, two modes:

* **Side by side** (:func:`compare`): does the experiment give the same results, and at what
  cost, on each library? Each backend trains the experiment as ``gnnbridge train`` would, in
  its own process (so its peak memory is its own, and one library's failure is one row), in a
  folder of the comparison. The table, ``compare.json`` and ``compare.png`` (the curves side by
  side) are written beside the runs.
* **Same batches** (:func:`same_batches`): do the libraries compute the same function? Both get
  the very same mini-batches (core's sampler, one seed) and the same initial weights (moved by
  neutral name from the first), dropout off, and train in lockstep in one process; every step's
  loss is compared, and at the first step apart by more than the tolerance, each layer's output
  is, to name where the two part. Then the final logits of every item are compared.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from gnnbridge.core import config as cfgmod
from gnnbridge.core import files
from gnnbridge.core.app.objects import as_dataset
from gnnbridge.core.app.plots import plot
from gnnbridge.core.app.preflight import load_dataset, preflight
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.app.rundir import discard, make_run_dir, new_run_dir, slug
from gnnbridge.core.config import ExperimentConfig, Task
from gnnbridge.core.contracts.interfaces import GNNModel
from gnnbridge.core.errors import ConfigError, RunInterrupted, signal_name
from gnnbridge.core.models.gin import GIN
from gnnbridge.core.models.hetero import HeteroModel
from gnnbridge.core.models.neutral import from_neutral, to_neutral
from gnnbridge.core.plugins import backends as backend_registry
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.runtime.launcher import interrupt_on_sigterm, launch
from gnnbridge.core.training.trainer import Trainer

TOLERANCE = 1e-4
SAME_BATCHES = ["sampler.kind=core", "model.dropout=0"]


def available_backends(names: list[str] | tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """(backends to run, {backend left out: why}): those named, else every installed one."""
    entries = {e.name: e.value for e in backend_registry.entries()}
    if names:
        unknown = [n for n in names if n not in entries]
        if unknown:
            raise ConfigError(f"--backend {unknown[0]} is not a backend; choose from: {', '.join(sorted(entries))}.")
        for name in names:
            entries[name].require()
        return list(dict.fromkeys(names)), {}
    why = {name: b.availability() for name, b in entries.items()}
    usable = [name for name, reason in why.items() if reason is None]
    return usable, {name: reason for name, reason in why.items() if reason is not None}


def _need_two(names: list[str], skipped: dict[str, str]) -> None:
    if len(names) < 2:
        missing = "; ".join(f"{n}: {why}" for n, why in skipped.items()) or "name two with --backend"
        raise ConfigError(
            f"compare needs two backends, but only {', '.join(names) or 'none'} can run here ({missing})."
        )


# ---------------------------------------------------------------------------- side by side


def compare(
    experiment=None,
    *,
    backends: list[str] | tuple[str, ...] = (),
    nproc: int = 1,
    device: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    out: str | os.PathLike | None = None,
    progress: bool = True,
    dataset: str | os.PathLike | None = None,
) -> dict:
    """Train ``experiment`` on each backend, one after the other, with the same config.

    :param experiment: as :func:`~gnnbridge.core.app.train.run` takes it; ``None``: the default.
    :param backends: which backends; empty: every installed one that can run here.
    :param nproc: ranks for each run.
    :param device: ``cpu``, ``cuda`` or ``auto``.
    :param overrides: ``KEY=VALUE`` strings, as ``--set`` takes them, for every run.
    :param out: the comparison's folder (must not exist, or be empty); default
        ``runs/compare-<experiment>-<time>``.
    :param progress: show each run's progress.
    :param dataset: as ``run``'s (a name, a ``.npz``, a prepared folder or a graph held in memory).
    :returns: what ``compare.json`` holds: ``experiment``, ``task``, ``nproc``, ``folder``,
        ``skipped`` (``{backend: why it cannot run here}``), ``plot`` (``compare.png``'s path, or
        ``None`` when no run finished) and ``rows``, one per backend: ``backend``, ``run_dir``,
        ``sampler``, ``metrics`` (the test split's), ``median_epoch_s``, ``peak_rss_bytes``,
        ``world_size``; or, for a run that failed, ``backend`` and ``error`` (its last line)."""
    dataset = as_dataset(dataset, experiment, overrides)
    config = resolve_config(experiment, overrides=overrides, nproc=nproc, device=device, dataset=dataset)
    names, skipped = available_backends(backends)
    _need_two(names, skipped)
    for name in names:  # every backend's config is checked before anything runs
        preflight(resolve_config(config.to_dict(), backend=name))
    folder, created = _claim(config, out, "compare")
    try:
        files.write_text(folder / "experiment.yaml", cfgmod.dump_yaml(config))
        with interrupt_on_sigterm():
            rows = [_train_one(folder, name, progress) for name in names]
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the running child was stopped
        signum = getattr(exc, "signum", signal.SIGINT)
        if not any(p.is_dir() for p in folder.iterdir()):  # no run was kept: take back what we wrote
            (folder / "experiment.yaml").unlink(missing_ok=True)
            discard(folder, created)
            raise RunInterrupted(signum) from None
        raise RunInterrupted(
            signum,
            f"Stopped by {signal_name(signum)}: the comparison in {folder} is incomplete; "
            "the runs it holds are kept (each resumable with gnnbridge train --resume).",
        ) from None
    finally:
        files.release_run_folder(folder)
    finished = [r for r in rows if r.get("run_dir")]
    report = {
        "experiment": config.name,
        "task": config.task,
        "nproc": nproc,
        "folder": str(folder),
        "rows": rows,
        "skipped": skipped,
        "plot": str(folder / "compare.png") if finished else None,
    }
    files.write_json(folder / "compare.json", report)
    if finished:
        plot([r["run_dir"] for r in finished], folder / "compare.png", labels=[r["backend"] for r in finished])
    return report


def _claim(config: ExperimentConfig, out, kind: str) -> tuple[Path, Path | None]:
    """The comparison's folder, created, and the top-most folder that creating it made (to undo)."""
    path = (
        new_run_dir(config, out)
        if out is not None
        else Path("runs") / f"{kind}-{slug(config.name)[:64]}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    return make_run_dir(path, exclusive=out is None)


def _train_one(folder: Path, backend: str, progress: bool) -> dict:
    """``gnnbridge train`` for one backend in a child process: a row of the table."""
    run_dir = folder / backend
    cmd = [
        sys.executable,
        "-m",
        "gnnbridge",
        "train",
        str(folder / "experiment.yaml"),
        "--backend",
        backend,
        "--out",
        str(run_dir),
        *([] if progress else ["--quiet"]),
    ]
    code, last_line = _run_teed(cmd, echo=progress)
    if code != 0:
        return {"backend": backend, "error": last_line.removeprefix("Error: ") or f"exit code {code}"}
    return summarize(backend, json.loads((run_dir / "results.json").read_text()), run_dir)


def _run_teed(cmd: list[str], echo: bool) -> tuple[int, str]:
    """Run ``cmd``; its stderr is passed through as it comes (progress bars redraw in place) when
    ``echo``, and its last line kept for the table. Interrupted, the child is stopped (SIGTERM,
    which a gnnbridge run answers by keeping its checkpoint) before the interruption goes on."""
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tail = b""
    try:
        while chunk := os.read(child.stderr.fileno(), 65536):
            tail = (tail + chunk)[-8192:]
            if echo:
                sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.flush()
        return child.wait(), _last_line(tail)
    except BaseException:
        child.terminate()
        child.wait()
        raise
    finally:
        child.stderr.close()


def _last_line(raw: bytes) -> str:
    lines = [line.strip() for line in raw.decode(errors="replace").replace("\r", "\n").splitlines()]
    return next((line for line in reversed(lines) if line), "")


def summarize(backend: str, results: dict, run_dir: Path) -> dict:
    """The table's row for one run's ``results.json``."""
    epochs = [h["epoch_time_s"] for h in results["history"] if h.get("epoch_time_s") is not None]
    peaks = [r.get("peak_rss_bytes") for r in results.get("ranks", []) if r.get("peak_rss_bytes")]
    return {
        "backend": backend,
        "run_dir": str(run_dir),
        "sampler": results.get("sampler"),
        "metrics": {k: v for k, v in results["metrics"].items() if k.startswith("test_")},
        "median_epoch_s": statistics.median(epochs) if epochs else None,
        "peak_rss_bytes": max(peaks) if peaks else None,
        "world_size": results.get("world_size"),
    }


# ---------------------------------------------------------------------------- same batches


def same_batches(
    experiment=None,
    *,
    backends: list[str] | tuple[str, ...] = (),
    epochs: int | None = None,
    device: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    tolerance: float = TOLERANCE,
    dataset: str | os.PathLike | None = None,
) -> dict:
    """Train the first backend and each other in lockstep on identical batches from identical
    weights; report the largest loss gap per step, the final logits' gap, and the first step and
    layer where they part (None when they never do). One process; nothing is written.

    :param experiment: as :func:`~gnnbridge.core.app.train.run` takes it; ``None``: the default.
    :param backends: the reference first, then the others; empty: every installed one.
    :param epochs: how many epochs (default the experiment's ``train.epochs``).
    :param device: ``cpu``, ``cuda`` or ``auto``.
    :param overrides: ``KEY=VALUE`` strings, as ``--set`` takes them.
    :param tolerance: the largest loss or logit gap that still counts as the same.
    :param dataset: as ``run``'s.
    :returns: ``experiment``, ``task``, ``epochs``, ``tolerance``, ``reference`` (the first
        backend), ``skipped`` (``{backend: why}``), ``agree`` (every pair agrees) and ``pairs``, one
        per other backend: ``backends``, ``steps``, ``max_loss_gap``, ``loss_gaps`` (one per step),
        ``max_logit_gap``, ``agree``, ``first_divergence`` (``None``, or ``epoch``, ``step``,
        ``loss_gap``, ``layer`` (the first layer whose outputs part, or ``None``),
        ``both_diverged``, ``layer_gaps``)."""
    if not (isinstance(tolerance, (int, float)) and tolerance > 0):
        raise ConfigError(f"--tolerance {tolerance!r} must be a positive number, e.g. 1e-4.")
    names, skipped = available_backends(backends)
    _need_two(names, skipped)
    graph = as_dataset(dataset, experiment, overrides)
    extra = [*overrides, *SAME_BATCHES, *([f"train.epochs={epochs}"] if epochs is not None else [])]
    configs = [
        preflight(resolve_config(experiment, backend=name, overrides=extra, nproc=1, device=device, dataset=graph))
        for name in names
    ]
    data = load_dataset(configs[0])
    with interrupt_on_sigterm():
        pairs = launch(
            _lockstep_worker, 1, configs[0].device.value, (configs, data, tolerance), timeout_s=configs[0].timeout
        )
    return {
        "experiment": configs[0].name,
        "task": configs[0].task,
        "kind": configs[0].kind.value,
        "epochs": configs[0].train.epochs,
        "tolerance": tolerance,
        "reference": names[0],
        "pairs": pairs,
        "skipped": skipped,
        "agree": all(p["agree"] for p in pairs),
    }


def _lockstep_worker(ctx: DistContext, configs: list[ExperimentConfig], data, tolerance: float) -> list[dict]:
    trainers = [Trainer(cfg, data, ctx, show_progress=False) for cfg in configs]
    reference = trainers[0]
    origin = reference.parts.call.origin
    neutral = to_neutral(reference.parts.model, reference.parts.model.state_dict(), origin)
    for other in trainers[1:]:
        other.parts.model.load_state_dict(from_neutral(other.parts.model, neutral, origin))
    gaps = [_Gaps(reference.config.backend, t.config.backend) for t in trainers[1:]]
    for epoch in range(configs[0].train.epochs):
        loaders = [iter(t.epoch_loader(epoch)) for t in trainers]
        for t in trainers:
            t.parts.model.train()
        for step, batches in enumerate(zip(*loaders)):
            losses, layers = [], []
            for trainer, mb in zip(trainers, batches):
                with layer_probe(trainer.parts.model) as outputs:
                    loss_sum, terms, _, _ = trainer.train_step(mb)
                losses.append(float(loss_sum) / max(1, int(terms)))
                layers.append(outputs)
            for gap, loss, outputs in zip(gaps, losses[1:], layers[1:]):
                gap.step(epoch, step, losses[0], loss, layers[0], outputs, tolerance)
    finals = [_final_outputs(t) for t in trainers]
    return [gap.result(_max_gap(finals[0], final), tolerance) for gap, final in zip(gaps, finals[1:])]


class _Gaps:
    """The loss gaps between the reference backend and one other, and where they first part."""

    def __init__(self, reference: str, other: str):
        self.backends = [reference, other]
        self.loss_gaps: list[float] = []
        self.first: dict | None = None

    def step(
        self, epoch: int, step: int, ref_loss: float, loss: float, ref_layers: dict, layers: dict, tolerance: float
    ) -> None:
        gap = abs(ref_loss - loss)
        self.loss_gaps.append(gap)
        if self.first is not None or gap <= tolerance:
            return
        both = not (math.isfinite(ref_loss) or math.isfinite(loss))  # the experiment diverged, on both
        layer_gaps = {i: _max_gap(ref_layers[i], layers[i]) for i in sorted(ref_layers) if i in layers}
        apart = None if both else next((i for i, g in layer_gaps.items() if not g <= tolerance), None)
        self.first = {
            "epoch": epoch,
            "step": step,
            "loss_gap": gap,
            "layer": apart,
            "both_diverged": both,
            "layer_gaps": [layer_gaps[i] for i in sorted(layer_gaps)],
        }

    def result(self, logit_gap: float, tolerance: float) -> dict:
        return {
            "backends": self.backends,
            "steps": len(self.loss_gaps),
            "max_loss_gap": _nan_max(self.loss_gaps),
            "loss_gaps": self.loss_gaps,
            "max_logit_gap": logit_gap,
            "first_divergence": self.first,
            "agree": self.first is None and logit_gap <= tolerance,
        }


def _nan_max(values: list[float]) -> float:
    """The largest value, NaN if any is NaN (``max`` would skip a NaN after the first item)."""
    return float("nan") if any(math.isnan(v) for v in values) else max(values, default=0.0)


def _final_outputs(trainer: Trainer) -> torch.Tensor:
    """Every item's logits (node and graph tasks), or the scores of the test pairs (link tasks)."""
    if trainer.config.kind is Task.LINK:
        trainer.parts.model.eval()
        edges, _ = trainer.parts.data.held_out("test")
        return trainer.parts.link_scorer().score_pairs(trainer.parts.model, edges[0], edges[1]).float()
    return trainer.parts.predict().float()


def _max_gap(a, b) -> float:
    """Largest absolute difference over the rows both hold (a DGL block computes only its
    destination nodes, a PyG layer may compute more; both put them first)."""
    if isinstance(a, dict):
        return max((_max_gap(a[k], b[k]) for k in a.keys() & b.keys()), default=0.0)
    rows = min(a.shape[0], b.shape[0])
    if rows == 0:
        return 0.0
    return float((a[:rows].float() - b[:rows].float()).abs().max())


def _detached(value):
    return {k: v.detach() for k, v in value.items()} if isinstance(value, dict) else value.detach()


@contextmanager
def layer_probe(model: torch.nn.Module) -> Iterator[dict[int, torch.Tensor]]:
    """``{layer index: its output}`` of the forward passes run inside, for the built-in models
    (a model of another kind yields nothing to localise with, and the loss gap stands alone).

    The hooks sit on core's own code, which both libraries' models call: ``GNNModel.activate``
    (every layer's output, before its activation), GIN's per-layer BatchNorm, and
    ``HeteroModel.conv`` (every heterogeneous model's layers)."""
    outputs: dict[int, torch.Tensor] = {}
    if isinstance(model, (GNNModel, HeteroModel)):
        name = "activate" if isinstance(model, GNNModel) else "conv"
        original = getattr(model, name)

        def probe(index, *args):
            out = original(index, *args)
            outputs[index] = _detached(args[-1] if name == "activate" else out)
            return out

        setattr(model, name, probe)
        try:
            yield outputs
        finally:
            delattr(model, name)
        return
    handles = []
    if isinstance(model, GIN):
        handles = [
            norm.register_forward_hook(lambda _m, _i, out, k=k: outputs.__setitem__(k, out.detach()))
            for k, norm in enumerate(model.norms)
        ]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


# ---------------------------------------------------------------------------- what is printed


def table(report: dict) -> list[str]:
    """The side-by-side comparison as aligned text lines."""
    metrics = sorted({k for row in report["rows"] for k in row.get("metrics", {})})
    head = ["backend", "sampler", *metrics, "epoch_s", "peak_rss", "run"]
    lines = [head]
    for row in report["rows"]:
        if "error" in row:
            lines.append([row["backend"], f"failed: {row['error']}"])
            continue
        lines.append(
            [
                row["backend"],
                row["sampler"] or "-",
                *(_num(row["metrics"].get(m)) for m in metrics),
                _num(row["median_epoch_s"], 3),
                _bytes(row["peak_rss_bytes"]),
                row["run_dir"],
            ]
        )
    widths = [max(len(line[i]) for line in lines if i < len(line) and len(line) > 2) for i in range(len(head))]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() if len(line) > 2 else "  ".join(line)
        for line in lines
    ]
    out += [f"{name}: not run ({why})" for name, why in report["skipped"].items()]
    return out


def verdicts(report: dict) -> list[str]:
    """The same-batches comparison: one line per pair of backends."""
    lines = [
        f"{report['experiment']}: {report['epochs']} epoch(s) on identical batches (core sampler) from identical "
        f"weights, dropout off; tolerance {report['tolerance']:.0e}"
    ]
    for pair in report["pairs"]:
        a, b = pair["backends"]
        gaps = (
            f"largest loss gap {pair['max_loss_gap']:.1e} over {pair['steps']} steps, final "
            f"{'scores' if report.get('kind', report['task']) == 'link' else 'logits'} {pair['max_logit_gap']:.1e}"
        )
        first = pair["first_divergence"]
        if pair["agree"]:
            lines.append(f"{a} vs {b}: agree ({gaps})")
        elif first is None:
            lines.append(f"{a} vs {b}: the losses agree but the final outputs do not ({gaps})")
        elif first.get("both_diverged"):
            lines.append(
                f"{a} vs {b}: the loss became NaN or infinite on both at epoch {first['epoch'] + 1} step "
                f"{first['step'] + 1}: the experiment diverges (try a smaller train.lr); nothing to compare "
                "after it"
            )
        else:
            where = f"layer {first['layer']}" if first["layer"] is not None else "after the last layer (head or loss)"
            layer_gaps = ", ".join(f"{g:.1e}" for g in first["layer_gaps"]) or "not probed"
            lines.append(
                f"{a} vs {b}: apart from epoch {first['epoch'] + 1} step {first['step'] + 1}, in {where} "
                f"(loss gap {first['loss_gap']:.1e}; layer output gaps {layer_gaps}); {gaps}"
            )
    return lines


def as_json(report: dict) -> str:
    """The report as strict JSON: a NaN or infinite gap (a diverged loss) is written as a string."""

    def plain(value):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return json.dumps(plain(report), indent=2, allow_nan=False)


def _num(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _bytes(value) -> str:
    if value is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit in ("B", "K") else f"{value:.1f}{unit}"
        value /= 1024
    return "-"
