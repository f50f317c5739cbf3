"""``gnnbridge doctor``: what this machine offers a long job, checked before it starts.

Each check is a :class:`Finding`: ``ok``, ``warn`` (the job runs, slower or with less than it
could) or ``fail`` (a job of this kind would stop), with the fix. The checks are the ones a
failed multi-GPU job most often traces back to: a CPU build of torch on a GPU machine, NCCL
missing, a library's native part missing, ``/dev/shm`` smaller than the dataset (ranks share the
graph there), no free port for the rendezvous, or more threads than cores.
"""

from __future__ import annotations

import copy
import os
import platform
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import torch

from gnnbridge.core.app.preflight import check_before_start
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import DataError, GnnBridgeError
from gnnbridge.core.host import available_memory, format_bytes, free_disk
from gnnbridge.core.plugins import backends as backend_registry
from gnnbridge.core.runtime.sharing import shm_dir
from gnnbridge.core.sampling import kernels
from gnnbridge.core.storage.folder import prepared_bytes


@dataclass
class Finding:
    status: str  # ok | warn | fail
    what: str
    detail: str
    fix: str = ""


def diagnose(config: ExperimentConfig | None = None) -> list[Finding]:
    """Every check; ``config`` (an experiment) adds the checks that depend on it: everything
    ``train`` checks before it starts, and its dataset and ranks against this machine."""
    findings = [_python(), _torch(), *_gpus(), _collectives(), *_backends(), _sampler()]
    if config is not None:
        findings.append(_experiment(config))
    size = _dataset_bytes(config) if config is not None else None
    ranks = config.nproc if config is not None else None
    if config is not None and config.dataset.name == "folder":  # mapped from its files: no /dev/shm copy
        folder = f"a {format_bytes(size)} folder dataset" if size else "a folder dataset"
        findings += [
            _threads(config),
            _port(),
            Finding(
                "ok",
                "shared memory",
                f"not used: {folder} is mapped from disk, its pages shared through the page cache",
            ),
            _memory(None),
            _disk(),
        ]
        return findings
    findings += [_threads(config), _port(), _shm(size, ranks), _memory(size), _disk()]
    return findings


def _experiment(config: ExperimentConfig) -> Finding:
    """The checks ``train`` makes before any work: names, backend, task, sampler, device, and the
    dataset loaded and checked against the task and the model (one function serves both)."""
    try:
        check_before_start(copy.deepcopy(config))
    except GnnBridgeError as exc:
        return Finding("fail", "experiment", str(exc))
    return Finding(
        "ok",
        "experiment",
        f"{config.name}: {config.task} task, model {config.model.arch} on {config.backend}, {config.nproc} rank(s)",
    )


def _python() -> Finding:
    return Finding("ok", "python", f"{platform.python_version()} on {platform.system()} {platform.machine()}")


def _torch() -> Finding:
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    return Finding("ok", "torch", f"{torch.__version__} ({build})")


def _gpus() -> list[Finding]:
    if not torch.cuda.is_available():
        if torch.version.cuda:
            return [
                Finding(
                    "warn",
                    "gpu",
                    "this torch is built for CUDA but sees no GPU",
                    "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES",
                )
            ]
        return [Finding("ok", "gpu", "none used (a CPU build of torch): --device cpu")]
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        out.append(
            Finding(
                "ok",
                f"gpu {i}",
                f"{props.name}, {format_bytes(props.total_memory)}, compute capability {props.major}.{props.minor}",
            )
        )
    return out


def _collectives() -> Finding:
    dist = torch.distributed
    if not dist.is_available():
        return Finding("fail", "collectives", "this torch has no torch.distributed", "install a standard torch build")
    nccl, gloo = dist.is_nccl_available(), dist.is_gloo_available()
    have = ", ".join(name for name, ok in (("nccl", nccl), ("gloo", gloo)) if ok) or "none"
    if torch.cuda.is_available() and not nccl:
        return Finding(
            "fail", "collectives", f"{have}: no NCCL for the GPUs", "install a CUDA build of torch (it ships NCCL)"
        )
    if not gloo:
        return Finding("fail", "collectives", f"{have}: no gloo, which CPU runs need", "install a standard torch build")
    version = ".".join(map(str, torch.cuda.nccl.version())) if nccl and torch.cuda.is_available() else None
    return Finding("ok", "collectives", have + (f" (NCCL {version})" if version else ""))


def _backends() -> list[Finding]:
    out = []
    for entry in backend_registry.entries():
        backend = entry.value
        reason = backend.availability()
        if reason is not None:
            out.append(Finding("warn", f"backend {entry.name}", f"unavailable: {reason}"))
            continue
        versions = ", ".join(f"{k} {v}" for k, v in backend.versions().items() if k != "note")
        out.append(Finding("ok", f"backend {entry.name}", versions or "available"))
        for part, missing in backend.native_parts().items():
            out.append(
                Finding(
                    "ok" if missing is None else "warn",
                    f"  {entry.name}: {part}",
                    "present" if missing is None else missing,
                )
            )
    return out


def _sampler() -> Finding:
    if kernels.available():
        return Finding("ok", "core sampler", "compiled CPU kernels (numba)")
    return Finding(
        "warn",
        "core sampler",
        "the vectorised torch path on CPU (about 4x slower)",
        "pip install numba (and unset GNNBRIDGE_SAMPLER_KERNEL)",
    )


def _threads(config: ExperimentConfig | None) -> Finding:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ranks = config.nproc if config is not None else 1
    omp = os.environ.get("OMP_NUM_THREADS")
    detail = f"{cores} core(s) usable, OMP_NUM_THREADS={omp or 'unset'}"
    on_cpu = config is None or config.device.value == "cpu" or not torch.cuda.is_available()
    if ranks > cores and on_cpu:
        return Finding("fail", "threads", f"{detail}; nproc={ranks}", f"use --nproc {cores} or fewer on the CPU")
    if omp and omp.isdigit() and int(omp) * ranks > cores:
        return Finding(
            "warn",
            "threads",
            detail,
            f"{ranks} rank(s) x {omp} threads oversubscribe {cores} cores: set "
            f"OMP_NUM_THREADS={max(1, cores // ranks)}",
        )
    return Finding("ok", "threads", detail + (f"; {ranks} rank(s) get {cores // ranks} each" if config else ""))


def _port() -> Finding:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    except OSError as exc:
        return Finding(
            "fail",
            "network",
            f"cannot listen on a local port ({exc})",
            "the rendezvous needs one: check the firewall or sandbox",
        )
    master = os.environ.get("MASTER_ADDR")
    return Finding(
        "ok", "network", f"a free port ({port}) for the rendezvous" + (f"; MASTER_ADDR={master}" if master else "")
    )


def _dataset_bytes(config: ExperimentConfig) -> int | None:
    """The dataset's size on disk when it is one file (a .npz), or a prepared folder's from its
    manifest (nothing is read); None when unknown."""
    path = config.dataset.path
    if path and Path(path).is_file():
        return Path(path).stat().st_size
    if path and Path(path).is_dir():
        try:
            return prepared_bytes(path)
        except DataError:
            return None  # the dataset check says why
    return None


def _shm(size: int | None, ranks: int | None) -> Finding:
    """Where ranks on one machine share the graph (``$GNNBRIDGE_SHM_DIR`` or /dev/shm); a single
    rank keeps it in its own memory and needs none."""
    folder = shm_dir()
    what = "shared memory"
    if ranks == 1:
        return Finding("ok", what, f"not used: one rank keeps the graph in its own memory ({folder})")
    free = shutil.disk_usage(folder).free
    detail = f"{folder}: {format_bytes(free)} free" + (f" for a {format_bytes(size)} dataset" if size else "")
    if size and free < 1.1 * size:
        return Finding(
            "fail",
            what,
            detail,
            "ranks share the graph there: enlarge it (docker run --shm-size, "
            "mount -o remount,size=... /dev/shm) or set GNNBRIDGE_SHM_DIR to a larger "
            "RAM-backed folder",
        )
    if free < 1 << 30:
        return Finding("warn", what, detail, "under 1 GB: large graphs will not fit; enlarge it")
    return Finding("ok", what, detail)


def _memory(size: int | None) -> Finding:
    free = available_memory()
    detail = f"{format_bytes(free)} available" + (f" for a {format_bytes(size)} dataset" if size else "")
    if size and free < 2 * size:
        return Finding("warn", "memory", detail, "a run needs about 2x the dataset; use a larger machine")
    return Finding("ok", "memory", detail)


def _disk() -> Finding:
    free = free_disk("runs")
    detail = f"{format_bytes(free)} free for run folders here"
    if free < 1 << 30:
        return Finding("warn", "disk", detail, "checkpoints need room; use --out on a larger disk")
    return Finding("ok", "disk", detail)
