"""Checkpoints: what a run saves so it can be resumed, evaluated or served later.

A checkpoint is one ``torch.save`` zip holding only tensors and plain values (dicts, lists,
numbers, strings), so it loads with ``torch.load(weights_only=True)``: a file that carries
pickled code is refused and the code never runs. Rank 0 writes it (DDP keeps every rank's
model and optimizer identical) to a temporary file in the same folder, fsyncs it and renames it
over the old one (:mod:`gnnbridge.core.files`): a crash mid-write leaves the previous checkpoint
whole, and a Ctrl-C waits for the write to end.

A run folder keeps two: ``checkpoints/latest.pt`` (every ``train.checkpoint_every`` epochs and
after the last one, and every ``train.checkpoint_every_batches`` batches inside an epoch) and
``checkpoints/best.pt`` (whenever the monitored validation metric improves). Both hold the full
training state, so either can be resumed. A mid-epoch ``latest.pt`` also holds ``mid_epoch``:
how many batches of the next epoch every rank trained, and each rank's running sums and
generator states there (its ``epoch`` is the last finished one, -1 inside the first).

Random state: every random stream (dropout, samplers, shuffling) is reseeded at the start of
each epoch from (seed, epoch, rank), which is what makes a resumed run equal to an
uninterrupted one, on any number of ranks. The RNG states recorded here are rank 0's at save
time, kept so a checkpoint fully describes the process that wrote it; a mid-epoch checkpoint's
``mid_epoch`` keeps every rank's, which its resume puts back (on the same number of ranks).
"""

from __future__ import annotations

import os
import random
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnbridge.core import files
from gnnbridge.core.errors import CheckpointError, DataFileNotFoundError, OutputPathError
from gnnbridge.core.records.hetero import HOMOGENEOUS_EDGE, edge_name

FORMAT = "gnnbridge-checkpoint"
VERSION = 1
FOLDER = "checkpoints"
LATEST = "latest"
BEST = "best"
KINDS = (BEST, LATEST)
REQUIRED = ("format", "version", "epoch", "model", "optimizer", "config", "monitor", "history", "versions")


def path_in(run_dir: str | os.PathLike, kind: str) -> Path:
    return Path(run_dir) / FOLDER / f"{kind}.pt"


def has_checkpoint(run_dir: str | os.PathLike) -> bool:
    return any(path_in(run_dir, kind).is_file() for kind in KINDS)


def find(target: str | os.PathLike, kind: str = BEST) -> Path:
    """The checkpoint file for ``target``: a run folder (its ``kind`` checkpoint) or a file."""
    path = Path(target)
    if "\0" in str(path):
        raise DataFileNotFoundError(f"{str(path)!r} holds a NUL byte; give a run folder or a checkpoint file.")
    if path.is_file():
        return path
    if not path.is_dir():
        raise DataFileNotFoundError(f"'{path}' is neither a run folder nor a checkpoint file.")
    found = path_in(path, kind)
    if not found.is_file():
        if not (path / FOLDER).is_dir():
            raise DataFileNotFoundError(
                f"Run folder '{path}' has no {FOLDER}/ (runs made before checkpoints existed, or a folder that "
                "is not a gnnbridge run); train it again."
            )
        raise DataFileNotFoundError(f"Run folder '{path}' has no {kind} checkpoint ({found}).")
    return found


# --------------------------------------------------------------------------- writing


def save(path: Path, payload: dict) -> None:
    """Write ``payload`` to ``path`` atomically: the old file stays whole until the new one is
    (:func:`gnnbridge.core.files.replace`; a Ctrl-C meanwhile waits for the write to end). A disk
    that fills up (or any other write error) is one line, and the old file stays."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.replace(path, lambda f: torch.save(payload, f))
    except OSError as exc:
        raise _write_error(path, exc) from None
    except RuntimeError as exc:  # torch.save reports a failed write as "PytorchStreamWriter failed writing file"
        if "writ" not in str(exc).lower():
            raise
        raise _write_error(path, OSError(None, "the write failed (is the disk full?)")) from None


def copy(src: Path, dst: Path) -> None:
    """``dst`` becomes the same checkpoint as ``src``: a hard link (no second write) where the
    file system has them, else a copy; atomic either way."""
    try:
        files.replace_with_copy(dst, src)
    except OSError as exc:
        raise _write_error(dst, exc) from None


def _write_error(path: Path, exc: OSError) -> OutputPathError:
    reason = "no space left on the device" if exc.errno == 28 else (exc.strerror or str(exc))
    return OutputPathError(
        f"Cannot write checkpoint '{path}': {reason}; the previous checkpoint (if any) is kept "
        "whole. Free some space or fix the folder, then continue the run."
    )


def remove_partial(run_dir: str | os.PathLike) -> None:
    """Remove what writes killed midway left in a run folder (its files themselves are whole)."""
    files.remove_partial(Path(run_dir))
    files.remove_partial(Path(run_dir) / FOLDER)


def rng_states() -> dict[str, Any]:
    """This process's generator states, as tensors and plain values (weights_only-loadable)."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": _plain(random.getstate())}
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states["numpy"] = {
        "kind": kind,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "gauss": float(gauss),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Put this process's generators where :func:`rng_states` found them (a mid-epoch resume:
    dropout and anything else drawing from them continue as if never stopped)."""
    torch.set_rng_state(states["torch"])
    random.setstate(_tuples(states["python"]))
    numpy = states["numpy"]
    np.random.set_state(
        (numpy["kind"], numpy["keys"].numpy().astype(np.uint32), numpy["pos"], numpy["has_gauss"], numpy["gauss"])
    )
    if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])  # (a job that sees other GPUs keeps its own)


def _tuples(obj: Any) -> Any:
    """``random.setstate`` wants the tuples :func:`_plain` turned into lists (for weights_only)."""
    return tuple(_tuples(v) for v in obj) if isinstance(obj, list) else obj


def _plain(obj: Any) -> Any:
    return [_plain(v) for v in obj] if isinstance(obj, (tuple, list)) else obj


# --------------------------------------------------------------------------- reading


def load(path: str | os.PathLike) -> dict:
    """Read and check a checkpoint; every way it can be wrong is one :class:`CheckpointError` line."""
    path = Path(path)
    if not path.is_file():
        raise DataFileNotFoundError(f"Checkpoint '{path}' does not exist.")
    if not os.access(path, os.R_OK):
        raise DataFileNotFoundError(f"Checkpoint '{path}' cannot be read (permission denied).")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"Checkpoint '{path}' is corrupt or not a PyTorch zip file (truncated by a crash or a copy?); "
            f"use the other checkpoint of the run ({', '.join(KINDS)}) or train again."
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several types; all mean "unusable file"
        raise _load_error(path, exc) from None
    return _check_format(path, state)


def _load_error(path: Path, exc: Exception) -> CheckpointError:
    code = re.search(r"GLOBAL (\S+)", str(exc))
    if code:
        return CheckpointError(
            f"Checkpoint '{path}' carries pickled code ({code.group(1)}) and was refused; gnnbridge loads only "
            "tensors and plain values (torch.load weights_only=True). Use a checkpoint written by gnnbridge."
        )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CheckpointError(
        f"Checkpoint '{path}' is corrupt: {first[:160]}; use the run's other checkpoint or train again."
    )


def _check_format(path: Path, state: Any) -> dict:
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"'{path}' is a PyTorch file but not a gnnbridge checkpoint (no format '{FORMAT}'); give a run folder "
            f"or a file from its {FOLDER}/."
        )
    if not isinstance(state.get("version"), int) or state["version"] > VERSION:
        raise CheckpointError(
            f"Checkpoint '{path}' has format version {state.get('version')!r}; this gnnbridge reads up to {VERSION}. "
            "Upgrade gnnbridge to read it."
        )
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"Checkpoint '{path}' is incomplete: it lacks {', '.join(missing)}.")
    problem = _field_problem(state)
    if problem:
        raise CheckpointError(
            f"Checkpoint '{path}' is corrupt or was not written by gnnbridge: {problem}; use the "
            f"run's other checkpoint ({', '.join(KINDS)}) or train again."
        )
    return state


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _field_problem(state: dict) -> str | None:
    """What is wrong with a checkpoint whose fields have the right names: every field is read
    later (the epoch counts, the history is plotted, the monitor decides "best"), so each is
    checked here, where the message can still name the file."""
    epoch, monitor, history, mid = state["epoch"], state["monitor"], state["history"], state.get("mid_epoch")
    checks = [
        (
            _is_int(epoch) and (0 <= epoch < 2**62 or (epoch == -1 and mid is not None)),
            f"epoch is {_short(epoch)}, not an epoch number",
        ),
        (mid is None or _mid_epoch_ok(mid, epoch), "mid_epoch is not a position inside the epoch after its epoch"),
        (
            isinstance(state["model"], dict)
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state["model"].items()),
            "model is not a set of weights",
        ),
        (
            isinstance(state["optimizer"], dict)
            and isinstance(state["optimizer"].get("state"), dict)
            and isinstance(state["optimizer"].get("param_groups"), list),
            "optimizer is not an optimizer state",
        ),
        (isinstance(state["config"], dict), "config is not a mapping"),
        (isinstance(state["versions"], dict), "versions is not a mapping"),
        (
            isinstance(monitor, dict)
            and (monitor.get("best") is None or _is_number(monitor.get("best")))
            and (monitor.get("best_epoch") is None or _is_int(monitor.get("best_epoch")))
            and _is_int(monitor.get("bad_epochs")),
            "monitor is not a monitor state",
        ),
        (
            isinstance(history, list) and (history or epoch == -1) and all(_history_entry_ok(h) for h in history),
            "history is not a list of epochs",
        ),
        (
            not isinstance(history, list)
            or not history
            or not isinstance(history[-1], dict)
            or history[-1].get("epoch") == epoch,
            "its history does not end at its epoch",
        ),
        (
            isinstance(state.get("restarts", []), list) and all(isinstance(r, dict) for r in state.get("restarts", [])),
            "restarts is not a list of restarts",
        ),
        (state.get("world_size") is None or _is_int(state.get("world_size")), "world_size is not a number"),
        (isinstance(state.get("data", {}), dict), "data is not a mapping"),
    ]
    return next((problem for ok, problem in checks if not ok), None)


def _mid_epoch_ok(mid: Any, epoch: Any) -> bool:
    """A mid-epoch checkpoint's position: the epoch after the last finished one, the batches
    of it each rank trained, and each rank's sums and generators there."""
    return (
        isinstance(mid, dict)
        and mid.get("epoch") == (epoch + 1 if _is_int(epoch) else None)
        and _is_int(mid.get("batches"))
        and mid["batches"] > 0
        and isinstance(mid.get("ranks"), list)
        and all(isinstance(r, dict) and RANK_POSITION <= r.keys() and RANK_SUMS & r.keys() for r in mid["ranks"])
    )


RANK_POSITION = {"of", "rng", "loss_sum", "first_bad", "elapsed", "phases"}  # midepoch.capture's keys, and
RANK_SUMS = {"running", "counts"}  # the target's running sums (a checkpoint from before targets: "counts")


def _history_entry_ok(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and _is_int(entry.get("epoch"))
        and all(entry.get(k) is None or _is_number(entry.get(k)) for k in ("loss", "train_acc", "val_acc"))
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def model_revision(model: torch.nn.Module) -> int:
    """The revision of what ``model`` computes (a model's ``revision`` attribute; 1 if none)."""
    inner = getattr(model, "module", model)  # DDP's wrapper
    return int(getattr(inner, "revision", 1))


def parameter_count(state: dict) -> int:
    """The values a checkpoint's weights hold (its ``model`` state: parameters and buffers), read
    from the loaded state: nothing is built."""
    return sum(t.numel() for t in state["model"].values())


def load_model_state(model: torch.nn.Module, state: dict, label: str | os.PathLike, data: Any = None) -> None:
    """Put a checkpoint's weights into ``model``; a different model is refused by name and shape
    (``load_state_dict`` would otherwise fail with a page of tensor names, or half-load), and so
    are weights of another revision of the same model (the same names, another function).
    ``data``: the graph ``model`` was built for; where its edge features are not those the run
    trained on, that is what the line names (the shapes differ because of them)."""
    have, want = state.get("model_revision", 1), model_revision(model)
    if have != want:
        raise CheckpointError(
            f"Checkpoint '{label}' holds revision {have} of its model; this gnnbridge computes revision "
            f"{want} ({type(getattr(model, 'module', model)).__name__}: heterogeneous models now add every "
            "relation's root term even where a batch drew none of its edges), so it would not reproduce its "
            "own numbers; train the run again."
        )
    theirs: dict = state["model"]
    mine = model.state_dict()
    missing = [k for k in mine if k not in theirs]
    extra = [k for k in theirs if k not in mine]
    where = _model_summary(state)
    detail = None
    if missing or extra:
        detail = f"it lacks {missing[0]}" if missing else f"it has {extra[0]}, which this model does not"
    for key, tensor in mine.items():
        other = theirs.get(key)
        if detail is None and (not isinstance(other, torch.Tensor) or other.shape != tensor.shape):
            shape = list(other.shape) if isinstance(other, torch.Tensor) else type(other).__name__
            detail = f"{key} is {shape} there but {list(tensor.shape)} here"
    if detail is not None:
        raise _other_edges(label, state, data) or CheckpointError(
            f"Checkpoint '{label}' was made by a different model ({where}): {detail}."
        )
    model.load_state_dict(theirs)


def _other_edges(label: str | os.PathLike, state: dict, data: Any) -> CheckpointError | None:
    """The line for a model whose weights do not fit because the graph's edge features are not
    those it was trained on (their width, or having some at all), as ``num_features`` is for nodes."""
    trained = (state.get("data") or {}).get("edge_features")
    now = data.summary().get("edge_features") if data is not None else None
    if trained is None or now is None or trained == now:
        return None
    if isinstance(now, dict):  # per edge type: the first that differs
        et = next(t for t in sorted({*trained, *now}) if trained.get(t, 0) != now.get(t, 0))
        trained, now = trained.get(et, 0), now.get(et, 0)
        edges = "edges" if et == edge_name(HOMOGENEOUS_EDGE) else f"({et}) edges"  # (a homogeneous graph's one type)
    else:
        edges = "edges"
    return CheckpointError(
        f"The model in '{label}' was trained on {_edge_rows(edges, trained)}, but the dataset's {edges} have "
        f"{f'{now} each' if now else 'none'}; its weights are shaped by them, so give data of the same kind "
        "(--set dataset.path=...)."
    )


def _edge_rows(edges: str, width: int) -> str:
    return f"{edges} with {width} features each (edge_attr)" if width else f"{edges} without features (no edge_attr)"


def _model_summary(state: dict) -> str:
    config = state.get("config", {})
    model = config.get("model", {})
    return (
        f"backend {config.get('backend', '?')}, model {model.get('arch', '?')} hidden={model.get('hidden', '?')} "
        f"layers={model.get('layers', '?')}"
    )
