"""Using a trained model: the code behind ``gnnbridge evaluate`` and ``gnnbridge predict``.

The model is rebuilt from the checkpoint's own config, on the backend it was trained with, so
its shapes always fit; the dataset is loaded from that config too (``--set dataset.path=...``
points at data that moved, and is checked to have the feature and class counts the model was
trained with). Everything is checked before any output exists; ``predict`` writes its file
atomically and never over an existing one, a chunk of rows at a time (a layer-wise pass's logits
stay on disk when they would not fit in memory). One process: inference is a fraction of training.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnbridge.core import files
from gnnbridge.core.app import keyed
from gnnbridge.core.app.keyed import TABLE_SUFFIXES
from gnnbridge.core.app.objects import as_dataset, made_from, reading_for
from gnnbridge.core.app.plan import inside
from gnnbridge.core.app.preflight import inference_preflight, load_for_inference
from gnnbridge.core.app.resolve import check_frozen, resolve_config
from gnnbridge.core.config import EvalMode, ExperimentConfig, Task
from gnnbridge.core.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    GnnBridgeError,
    OutputExistsError,
    ResourceError,
    TrainingDivergedError,
)
from gnnbridge.core.host import available_memory, format_bytes
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.inference.assembly import HOMOGENEOUS_EMBEDDINGS
from gnnbridge.core.inference.scorer import Scorer
from gnnbridge.core.models.build import build_model, model_dims
from gnnbridge.core.plugins import dataset_sources, get_target, no_code, no_downloads
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData, check_ids
from gnnbridge.core.records.hetero import HOMOGENEOUS_EDGE, HeteroGraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.runtime.jobs import detect_job
from gnnbridge.core.runtime.launcher import interrupt_on_sigterm, launch
from gnnbridge.core.runtime.sharing import machine_shared
from gnnbridge.core.storage.intent import refuse_unknown_labels
from gnnbridge.core.storage.parts import read_partition
from gnnbridge.core.tasks import retrieval
from gnnbridge.core.tasks.retrieval import import_faiss

# What a checkpoint's weights are tied to: neither can change when they are used.
INFERENCE_FROZEN = ("task", "backend", "model")


def evaluate(
    target: str | os.PathLike,
    *,
    kind: str = checkpoint.BEST,
    device: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    trust_code: bool = False,
    dataset: Any = None,
) -> dict:
    """Metrics of ``target``'s model on every split, computed as training's final evaluation is
    (``eval.mode``).

    :param target: a run folder, or a checkpoint file.
    :param kind: which of a run folder's checkpoints: ``best`` or ``latest``.
    :param device: where to compute (``cpu``, ``cuda``, ``auto``); default the CPU.
    :param overrides: ``KEY=VALUE`` data keys (``dataset.path=NEW.npz`` for data that moved; never
        the model's).
    :param trust_code: import the model class the checkpoint names by import path (importing runs
        that module's code).
    :param dataset: score another labelled graph of the same kind (as :func:`predict` takes it).
    :returns: ``metrics`` (``{split}_{metric}``, as in ``results.json``), ``eval`` (how they were
        computed), ``checkpoint`` (its path), ``epoch`` (the checkpoint's), ``inside`` (only for a
        checkpoint written inside an epoch: ``{"epoch", "batches"}``), ``experiment``,
        ``backend``, ``task``, ``device``."""
    path, state, config = prepared_config(target, kind, device, overrides, "evaluate", trust_code, dataset)
    if config.dataset.name == "folder":
        refuse_unknown_labels(config.dataset.path, "evaluate")
    if config.dataset.partitions:  # a job of the partitioned graph's machines scores it together
        scored = _on_machines(path, state, config, trust_code, None)
        return None if scored is None else {**_describe(path, state, config), **scored}
    data = inference_data(path, state, config, "evaluate", trust_code)
    try:
        with interrupt_on_sigterm():
            scored = launch(_evaluate_worker, 1, config.device.value, (config, data, state), timeout_s=config.timeout)
    except TrainingDivergedError as exc:
        raise _nonfinite(path, str(exc)) from None
    return {**_describe(path, state, config), **scored}


def predict(
    target: str | os.PathLike,
    out: str | os.PathLike | None = None,
    *,
    kind: str = checkpoint.BEST,
    dataset: Any = None,
    device: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    trust_code: bool = False,
    pairs: str | os.PathLike | None = None,
    top_k: int | None = None,
    embeddings: bool = False,
    index: str = "exact",
) -> dict:
    """Write ``out`` (.npz), or return its arrays. Node and graph tasks: ``logits`` and ``probs`` [items, classes]
    float32, ``pred`` and ``y`` int64 [items], and the ``train_idx`` / ``val_idx`` / ``test_idx``
    the run used. Link tasks: with ``pairs`` (a .npz holding int64 ``src`` and ``dst``), their
    ``scores`` and ``probs``; otherwise the ``top_k`` (default 10) best destinations of every
    source node (``top_dst``, ``top_scores`` [sources, k]), leaving out the edges it was trained on,
    and ``counts`` [sources], how many of a row's slots are filled (the others hold
    :data:`~gnnbridge.core.tasks.retrieval.NO_SLOT`, an id no index accepts, and score ``-inf``);
    a ``top_k`` larger than any source's candidates is refused before any work.
    ``index``: ``exact`` top-k lists, or ``hnsw`` (FAISS's approximate index; dot decoder, layer-wise
    evaluation). ``embeddings``: also every node type's final states, ``embedding__<type>`` [N, hidden] float32
    (heterogeneous graphs and link tasks; the same pass serves the top-k lists).

    :param target: a run folder, or a checkpoint file.
    :param out: the ``.npz`` to write (must not exist); ``None``: nothing is written and the
        arrays the file would hold are returned.
    :param kind: which of a run folder's checkpoints: ``best`` or ``latest``.
    :param dataset: predict on another graph than the run's (a path, a name, or a graph held in
        memory, as ``run`` takes it) with the features the model was trained on; a homogeneous
        graph may come without labels and splits (only ``logits``, ``probs`` and ``pred`` then).
    :param device: where to compute (``cpu``, ``cuda``, ``auto``); default the CPU.
    :param overrides: ``KEY=VALUE`` data keys (``dataset.path=NEW.npz``; never the model's).
    :param trust_code: import the model class the checkpoint names by import path.
    :param pairs: link tasks: a ``.npz`` of the pairs to score (int64 ``src``, ``dst``), or, on a
        dataset prepared from tables, a ``.csv`` / ``.parquet`` of both ends' key columns (an
        ``out`` ending in ``.csv`` / ``.parquet`` writes any prediction by those keys).
    :param top_k: link tasks without ``pairs``: how many destinations per source (default 10).
    :param embeddings: also return every node type's final states (``embedding__<type>``).
    :param index: ``exact`` or ``hnsw``, for the top-k lists.
    :returns: ``{name: numpy array}``, the arrays above (also when ``out`` is given)."""
    out = _check_out(out) if out is not None else None
    path, state, config = prepared_config(target, kind, device, overrides, "predict", trust_code, dataset)
    if config.dataset.partitions:  # each machine of the partitioned graph writes its own rows
        if out is None:
            raise ConfigError(
                "predict of a partitioned graph has each machine write its own nodes' rows: give out= "
                "(each machine writes OUT.part-M.npz)."
            )
        request = _machines_request(config, pairs, top_k, index, embeddings)
        written = _on_machines(path, state, config, trust_code, out, request)
        return None if written is None else {**_describe(path, state, config), **written}
    keyed_pairs = _keyed_pairs(config, state, pairs)  # the user's keys: refused before the graph loads
    data = inference_data(path, state, config, "predict", trust_code)
    request = _link_request(config, data, keyed_pairs or pairs, top_k)
    if index != "exact":
        request = {**(request or {}), "index": check_index(config, request, index)}
    if embeddings:
        check_embeddings(data)
        request = {**(request or {}), "embeddings": True}
    keys = _keyed_output(config, data, out, request)
    if out is None or keys is not None:
        with interrupt_on_sigterm():
            arrays = launch(
                _predict_worker, 1, config.device.value, (config, data, state, request), timeout_s=config.timeout
            )
        if not _finite(arrays):
            raise _nonfinite(path, "the model's outputs are NaN or infinite")
        arrays = {key: _numpy(value) for key, value in arrays.items()}
        if keys is None:
            return arrays
        tables = keys.make(arrays)
        keyed.write_tables(keys.paths, tables)
        return {**_describe(path, state, config), **_tables_written(keys.paths, tables)}
    with files.reserved(out) as tmp, interrupt_on_sigterm():  # a folder we cannot write fails now, not after inference
        arrays = launch(
            _predict_worker, 1, config.device.value, (config, data, state, request), timeout_s=config.timeout
        )
        if not _finite(arrays):
            raise _nonfinite(path, "the model's outputs are NaN or infinite")
        # Written beside ``out`` and linked into place: a crash leaves no half file, and a file that
        # appeared meanwhile is not replaced. ``arrays`` holds tensors (a layer-wise pass's logits
        # may be mapped from disk) or Derived rows, written chunk by chunk.
        files.publish(out, tmp, lambda f: write_npz_stream(f, arrays), "predicting")
    shape = arrays["logits" if "logits" in arrays else "scores" if "scores" in arrays else "top_dst"].shape
    return {**_describe(path, state, config), "out": str(out), "arrays": sorted(arrays), "shape": list(shape)}


def load(
    target: str | os.PathLike,
    *,
    kind: str = checkpoint.BEST,
    device: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    trust_code: bool = False,
) -> torch.nn.Module:
    """The trained model of ``target`` (a run folder's ``kind`` checkpoint, or a checkpoint file):
    the ``torch.nn.Module`` training built (a built-in model on its run's backend, or the class
    ``model.arch`` names), with the checkpoint's weights, in eval mode, on ``device`` (default:
    the CPU). The run's dataset is opened, as ``evaluate`` opens it: a model's shapes (and a
    heterogeneous model's node and edge types) come from it.

    :param target: a run folder, or a checkpoint file.
    :param kind: which of a run folder's checkpoints: ``best`` or ``latest``.
    :param device: where the model's weights go (default the CPU).
    :param overrides: ``KEY=VALUE`` data keys (``dataset.path=NEW.npz`` for data that moved).
    :param trust_code: import the model class the checkpoint names by import path.
    :returns: the model, a ``torch.nn.Module`` in eval mode: a model instance you trained is
        your own class, not gnnbridge's wrapper around it. A regression model that learnt
        standardised values (``train.target_scaling=standard``) answers in the labels' units, as
        ``predict`` does: a forward hook puts its outputs back in them; the hook is the model's
        ``target_units`` attribute (:class:`InUnits`, its ``scale`` the mean and std per column),
        and ``model.target_units.remove()`` leaves the outputs in standard units."""
    path, state, config, data = _prepare(target, kind, device or "cpu", overrides, "load", trust_code)
    model, _ = build_model(config.model, config.backend, config.kind, *model_dims(data), data)
    checkpoint.load_model_state(model, state, path, data)
    model = getattr(model, "user_model", model)  # a model the user handed over comes back as their class
    fitted = get_target(config.target).restored(state.get("target"))
    if fitted.state() is not None:
        model.target_units = InUnits(model, fitted)
    return model.to(config.device.value).eval()


class InUnits:
    """A forward hook that puts a model's outputs in the labels' units (``target.units``: a fitted
    regression's ``z * std + mean``); picklable, so ``torch.save(model)`` keeps it."""

    def __init__(self, model: torch.nn.Module, target):
        self.target = target
        self.scale = getattr(target, "scale", None)
        self.handle = model.register_forward_hook(self)

    def __call__(self, module, args, output):
        return self.target.units(output) if isinstance(output, torch.Tensor) else output

    def remove(self) -> None:
        """The model's outputs in standard units again (what it learnt)."""
        self.handle.remove()


def _dataset_overrides(dataset: Any, state: dict, action: str) -> list[str]:
    """``dataset.*`` overrides pointing the config of a run's checkpoint (``state``) at another
    graph (its other settings kept: reverse edges, the model's view of the data, the target its
    labels are read as; for predict, labels it may lack)."""
    if dataset is None:
        return []
    path = as_dataset(dataset, state["config"], unlabelled=_unlabelled(state, action))
    path = os.fspath(path) if isinstance(path, os.PathLike) else path  # a pathlib.Path as its text
    # a prepared folder (such as prepare NEW --like DIR) or an .npz, as the dataset sources tell them
    section = dataset_sources.section(path) if isinstance(path, str) else {}
    if section.get("name") not in PREDICTED_SOURCES or "path" not in section:
        raise ConfigError(
            f"dataset={path!r}: predict on another graph takes a .npz path, a prepared folder or a graph held "
            "in memory (a PyG Data, a DGLGraph, ...)."
        )
    path = os.path.abspath(section["path"])
    return [f"dataset.name={section['name']}", f"dataset.path={path}", "dataset.options={}", "dataset.digest="]


# The datasets predict reads another graph from: files, whose path the run's config then names.
PREDICTED_SOURCES = ("folder", "npz")


def _numpy(value) -> np.ndarray:
    if isinstance(value, Derived):
        parts = [part.numpy() for part in value.chunks()]
        return np.concatenate(parts) if value.shape[0] else torch.empty(value.shape, dtype=value.dtype).numpy()
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


DEFAULT_TOP_K = 10  # destinations per source when --top-k is not given

# Rows of an output written (and checked) at a time: bounded memory for any number of items.
CHUNK_BYTES = 16 * 1024**2


def _chunks(value: torch.Tensor):
    """``value`` in row slices of about :data:`CHUNK_BYTES` (views: nothing copied)."""
    step = max(1, CHUNK_BYTES // max(value[:1].numel() * value.element_size(), 1))
    for start in range(0, max(value.shape[0], 1), step):
        yield value[start : start + step]


def _finite(arrays: dict) -> bool:
    """The model's outputs are finite, checked a chunk at a time (a top-k list's slots past its
    ``counts`` are unfilled and score ``-inf``: only the filled ones count)."""
    for key in ("logits", "scores"):
        value = arrays.get(key)  # a fitted regression's logits: Derived (its values in the labels' units)
        for part in () if value is None else value.chunks() if isinstance(value, Derived) else _chunks(value):
            if not bool(part.isfinite().all()):
                return False
    scores, start = arrays.get("top_scores"), 0
    for part in _chunks(scores) if scores is not None else ():
        counts = arrays["counts"][start : start + part.shape[0]]
        start += part.shape[0]
        mine = torch.arange(part.shape[1]) < counts.unsqueeze(1)
        if not bool((part.isfinite() | ~mine).all()):
            return False
    return True


def _link_request(config: ExperimentConfig, data, pairs, top_k) -> dict | None:
    """What a link prediction should score (checked before any work), or None for other tasks."""
    if config.kind is not Task.LINK:
        if pairs is not None or top_k is not None:
            raise ConfigError(f"--pairs and --top-k score edges, but this run's task is {config.task}.")
        return None
    if pairs is not None and top_k is not None:
        raise ConfigError(PAIRS_OR_LISTS)
    if top_k is not None and not (isinstance(top_k, int) and top_k > 0):
        raise ConfigError(f"--top-k {top_k!r} must be a positive number of destinations per source, e.g. 10.")
    if pairs is None:
        check_top_k(config, data, top_k or DEFAULT_TOP_K, given=top_k is not None)
        return {"top_k": top_k or DEFAULT_TOP_K}
    if isinstance(pairs, tuple):  # read already, by the user's keys
        return {"pairs": pairs}
    if Path(pairs).suffix in TABLE_SUFFIXES:  # the user's keys (a dataset prepared from tables)
        return {"pairs": keyed.read_key_pairs(Path(pairs), config, data.target_edge)}
    return {"pairs": read_pairs(Path(pairs), data)}


def _keyed_pairs(config: ExperimentConfig, state: dict, pairs) -> tuple | None:
    """A link task's pairs table (.csv, .parquet) read by the user's keys from the key maps of the
    edge type the checkpoint scored, before the graph is loaded; None otherwise."""
    target = state.get("data", {}).get("target_edge")
    if config.kind is not Task.LINK or pairs is None or Path(pairs).suffix not in TABLE_SUFFIXES or not target:
        return None
    return keyed.read_key_pairs(Path(pairs), config, target)


INDEXES = ("exact", "hnsw")


def check_index(config: ExperimentConfig, request: dict | None, index: str) -> str:
    """``--index hnsw`` ranks destinations through FAISS from the layer-wise pass's states with a
    dot-product decoder; anything else is refused here, before any work."""
    if index not in INDEXES:
        raise ConfigError(f"--index {index!r} is not an index; choose one of: {', '.join(INDEXES)}.")
    if request is None or "top_k" not in request:
        raise ConfigError(f"--index {index} ranks destinations for --top-k; this prediction has no top-k lists.")
    decoder = config.model.options.get("decoder", "dot")
    if config.eval.mode.value != "layerwise" or decoder != "dot":
        raise ConfigError(
            f"--index {index} searches the final states with an inner product: it needs eval.mode=layerwise "
            f"(this run: {config.eval.mode.value}) and model.options.decoder=dot (this run: {decoder})."
        )
    import_faiss()
    return index


def check_embeddings(data) -> None:
    """``--embeddings`` asks for each node type's final states: a heterogeneous graph's (or a link
    task's, which runs on a heterogeneous view); refused before any work otherwise."""
    if not isinstance(data, HeteroGraphData):
        raise ConfigError(HOMOGENEOUS_EMBEDDINGS)


def check_top_k(config: ExperimentConfig, data, k: int, given: bool = True) -> None:
    """``k`` must not exceed the destinations some source can be given (:func:`check_candidates`),
    and every source's ``k`` best destinations and one chunk's scores must fit, before any is
    computed: from layer-wise states, a chunk of sources against every destination within
    :data:`~gnnbridge.core.tasks.retrieval.CHUNK_BYTES`, with both types' states
    (:meth:`TypedLayerwiseLinks.top_k`); otherwise about ``64 x eval.batch_size`` sampled pairs at
    a time (:meth:`LinkEvaluator.top_k`)."""
    check_candidates(data, k, given)
    n_src, n_dst = (data.num_nodes[t] for t in (data.target_edge[0], data.target_edge[2]))
    width = max(config.model.hidden * config.model.heads, 1)
    lists = n_src * k * 12
    if config.eval.mode.value == "layerwise":
        need = lists + retrieval.CHUNK_BYTES + 4 * width * (n_src + n_dst)
        chunk, smaller = f"{format_bytes(retrieval.CHUNK_BYTES)} of scores", "use a smaller --top-k"
    else:
        pairs = min(max(64 * config.eval.batch_size, n_dst), n_src * n_dst)
        need, chunk = lists + pairs * (8 * 6 + 4 * width * 2), f"{pairs:,} sampled pairs"
        smaller = "use a smaller --top-k or --set eval.batch_size=N"
    free = available_memory()
    if need > free:
        raise ResourceError(
            f"--top-k {k} for {n_src:,} sources over {n_dst:,} destinations, {chunk} at a time "
            f"(eval.mode={config.eval.mode.value}, eval.batch_size={config.eval.batch_size}), needs about "
            f"{format_bytes(need)} of memory but {format_bytes(free)} is free; {smaller}."
        )


def check_candidates(data, k: int, given: bool = True) -> None:
    """Refuse a ``--top-k`` larger than the destinations any source can be given (every node of
    the destination type, less the pairs a list leaves out: its training edges, and itself when
    both ends are one type): no list could be full. A source with fewer candidates than ``k``
    where others have enough is answered, its list ending in unfilled slots (``counts``).
    ``given``: the user asked for ``k`` (else it is the default, and the line says so)."""
    s_type, _, d_type = data.target_edge
    n_src, n_dst = data.num_nodes[s_type], data.num_nodes[d_type]
    # A bound first, from the train edges in place (what known_pairs() leaves out, duplicates
    # counted): the pairs themselves ([2, E] or more) are gathered only when K comes near.
    train = data.edge_index[data.target_edge]
    left_out = torch.bincount(train[0], minlength=n_src) + (s_type == d_type)
    if data.undirected:
        left_out += torch.bincount(train[1], minlength=n_src)
    if not n_src or int((n_dst - left_out).max()) >= k:
        return
    most = int(retrieval.fillable(data.known_pairs(), n_src, n_dst, k).max())
    if most >= k:
        return
    left_out = "its training edges" + (" and itself" if s_type == d_type else "")
    fix = f"use --top-k {most} or less" if most else "there is nothing left to rank"
    raise ConfigError(
        f"--top-k {k}{'' if given else ' (the default)'} is more than the candidates any '{s_type}' node has: "
        f"'{d_type}' has {n_dst:,} node(s), and leaving out {left_out}, the most any '{s_type}' node can be "
        f"given is {most:,}; {fix}."
    )


# What reading a file that is not a .npz of arrays raises (TypeError: a .npy; BadZipFile: one cut short).
UNREADABLE = (OSError, ValueError, KeyError, EOFError, TypeError, AttributeError, zipfile.BadZipFile)


def read_pairs(path: Path, data) -> tuple[torch.Tensor, torch.Tensor]:
    """``src`` and ``dst`` of a pairs file, checked against the run's target edge type."""
    s_type, _, d_type = data.target_edge
    try:
        with np.load(path, allow_pickle=False) as f:
            src, dst = (torch.from_numpy(np.asarray(f[k])) for k in ("src", "dst"))
    except UNREADABLE as exc:
        raise DataError(
            f"--pairs {path}: cannot be read as a .npz with int64 arrays src and dst "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}); write it with "
            "numpy.savez(path, src=..., dst=...)."
        ) from None
    for name, ids, t in (("src", src, s_type), ("dst", dst, d_type)):
        if ids.dtype != torch.int64 or ids.dim() != 1:
            raise DataError(f"--pairs {path}: {name} must be int64 [P] ('{t}' ids), got {ids.dtype} {list(ids.shape)}.")
        check_ids(f"--pairs {path}: {name}", ids, data.num_nodes[t], unit=f"'{t}' node")
    if src.numel() != dst.numel():
        raise DataError(f"--pairs {path}: src has {src.numel()} ids but dst has {dst.numel()}; give one per pair.")
    return src, dst


def _pairs_every_machine_read(
    ctx: DistContext, path: Path, data, config: ExperimentConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs file of a partitioned ``predict --pairs``, which every machine reads from its
    own copy: refused on every rank at once where a machine could not read it, or read other
    pairs than machine 0 (one machine failing alone would leave the others waiting in the job's
    first exchange, and machines scoring different files would write nonsense)."""
    try:
        keyed_file = path.suffix in TABLE_SUFFIXES  # by the user's keys, through this machine's key maps
        src, dst = keyed.read_key_pairs(path, config, data.target_edge) if keyed_file else read_pairs(path, data)
        digest = hashlib.sha256(src.numpy())
        digest.update(dst.numpy())
        seen = (None, digest.hexdigest())
    except Exception as exc:  # whatever it is, every rank must reach the gather below
        src = dst = None
        seen = (str(exc) if isinstance(exc, GnnBridgeError) else f"--pairs {path}: {type(exc).__name__}: {exc}", None)
    everyone = ctx.gather_objects((ctx.node_rank, *seen))
    for machine, error, _ in everyone:
        if error is not None:
            raise DataError(f"machine {machine}: {error}" if ctx.num_nodes > 1 else error)
    differ = sorted({machine for machine, _, digest in everyone if digest != everyone[0][2]})
    if differ:
        raise DataError(
            f"--pairs {path}: machine {differ[0]} read other pairs than machine 0 (each machine reads its own copy of "
            "the file); give every machine the same file."
        )
    return src, dst


def _nonfinite(path: Path, what: str) -> TrainingDivergedError:
    return TrainingDivergedError(
        f"{what[0].upper()}{what[1:]} with the weights in '{path}' (they diverged); nothing "
        "was scored or written. Use the run's other checkpoint, or train again with a smaller "
        "train.lr."
    )


def _prepare(target, kind: str, device: str | None, overrides, action: str, trust_code: bool, dataset=None):
    path, state, config = prepared_config(target, kind, device, overrides, action, trust_code, dataset)
    data = inference_data(path, state, config, action, trust_code)
    return path, state, config, data


def loaded_checkpoint(target, kind: str) -> tuple[Path, dict]:
    """The checkpoint ``target`` names (a run folder's ``kind``, or a file) and its state."""
    if not isinstance(target, (str, os.PathLike)):
        raise ConfigError(f"target={target!r} must be a run folder or a checkpoint file (a str or a pathlib.Path).")
    path = checkpoint.find(target, kind)
    return path, {**checkpoint.load(path), "path": str(path)}


def prepared_config(
    target, kind: str, device: str | None, overrides, action: str, trust_code: bool, dataset=None, loaded=None
):
    """The checkpoint's path, its state and the config it is scored with (checked, the data not
    yet loaded). ``loaded``: :func:`loaded_checkpoint`'s answer, where the caller has read it."""
    path, state = loaded or loaded_checkpoint(target, kind)
    with _switches(trust_code):
        overrides = [*overrides, *_dataset_overrides(dataset, state, action)]
        config = resolve_config(state["config"], overrides=overrides, device=device, nproc=1)
        check_frozen(state["config"], config.to_dict(), INFERENCE_FROZEN, action)
        config = inference_preflight(config)
    return path, state, config


def inference_data(path: Path, state: dict, config: ExperimentConfig, action: str, trust_code: bool):
    """The dataset ``config`` names, loaded for scoring the checkpoint ``state`` (at ``path``)."""
    reading = reading_for(config).unlabelled(*_unlabelled(state, action))
    with _switches(trust_code):
        data = load_for_inference(config, checkpoint.parameter_count(state), reading)
    _check_fits(path, state, data, made_from(config.dataset.path))
    return data


def _unlabelled(state: dict, action: str) -> tuple[int | None, str | None]:
    """What a checkpoint's graph may lack for ``action``: predict (and export, which compares
    with it) scores a graph without labels too, with the model's class count and (an edge
    task's) edge type; evaluation needs labels."""
    trained = state.get("data", {})
    if action not in ("predict", "export"):
        return None, None
    return trained.get("num_classes"), trained.get("target_edge")


@contextlib.contextmanager
def _switches(trust_code: bool):
    """The checkpoint names the data and the model, and never makes us fetch or create a dataset,
    nor import code unless the user says they trust it. Only what scoring needs is checked
    (preflight.inference_preflight): nothing of training's loggers, memory or disk."""
    with no_downloads(), contextlib.nullcontext() if trust_code else no_code():
        yield


def _check_fits(path: Path, state: dict, data: GraphData | GraphCollection, handed: str | None) -> None:
    """The data has the feature and class counts the model was trained with (``handed``: the
    graph object the user gave, which the line then names)."""
    trained = state.get("data", {})
    now = data.summary()
    fix = "point dataset.path at data of the same kind (--set dataset.path=...)"
    fix = "give a graph of the same kind" if handed else fix
    for key in ("num_features", "num_classes"):
        if key in trained and trained[key] != now[key]:
            raise CheckpointError(
                f"{handed or 'The dataset'} has {key}={_shown(now[key])} but the model in '{path}' was trained "
                f"with {_shown(trained[key])}; {fix}."
            )


def _shown(value):
    """A count as a user of a homogeneous graph knows it: the one node type of its link or edge
    task's record (``{'node': 6}``) is just the graph's (6)."""
    if isinstance(value, dict) and list(value) == [HOMOGENEOUS_EDGE[0]]:
        return value[HOMOGENEOUS_EDGE[0]]
    return value


def _keyed_output(config: ExperimentConfig, data, out: Path | None, request: dict | None):
    """The tables by the user's keys that ``out`` (a .csv or .parquet) asks for, every file they
    go to checked new before any work; None for an ``out`` of arrays."""
    if out is None or out.suffix not in TABLE_SUFFIXES:
        return None
    keys = keyed.table_maker(config, data, out, request)
    for extra in keys.paths[1:]:  # (``out`` itself is checked already)
        _check_out(extra)
    return keys


def _tables_written(paths: list[Path], tables: list, rows: int | None = None) -> dict:
    """What ``predict`` reports of the tables it wrote: the first (the predictions) by its columns
    and shape (``rows``: all machines' together), every file by its path."""
    first = tables[0]
    shape = [first.num_rows if rows is None else rows, first.num_columns]
    return {"out": str(paths[0]), "files": [str(p) for p in paths], "arrays": first.column_names, "shape": shape}


def _check_out(out) -> Path:
    if not isinstance(out, (str, os.PathLike)):
        raise ConfigError(f"out={out!r} must be a path ending in .npz (a str or a pathlib.Path).")
    out = Path(out)
    if out.suffix not in (".npz", *TABLE_SUFFIXES):
        raise ConfigError(
            f"--out {out} must end in .npz (numpy.load reads it), e.g. --out preds.npz, or in .csv or .parquet "
            "(a table by the user's keys, for a dataset prepared from tables)."
        )
    if out.exists() or out.is_symlink():
        raise OutputExistsError(f"'{out}' already exists; choose a new --out (gnnbridge never overwrites a file).")
    return out


class Derived:
    """Rows computed from ``source``'s rows a chunk at a time (probabilities, predictions)."""

    def __init__(self, source: torch.Tensor, fn, dtype: torch.dtype, shape: tuple[int, ...]):
        self.source, self.fn, self.dtype, self.shape = source, fn, dtype, shape

    def chunks(self):
        for part in _chunks(self.source):
            yield self.fn(part)


def write_npz_stream(f, arrays: dict) -> None:
    """``numpy.savez(f, **arrays)`` (uncompressed, zip64 members, header version 1.0 or 2.0 as
    ``numpy.lib.format`` picks it) with each member written a chunk of rows at a time."""
    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, value in arrays.items():
            parts = value.chunks() if isinstance(value, Derived) else _chunks(value)
            dtype = value.dtype if isinstance(value, Derived) else value.dtype
            header = {
                "descr": np.lib.format.dtype_to_descr(torch.empty(0, dtype=dtype).numpy().dtype),
                "fortran_order": False,
                "shape": tuple(value.shape),
            }
            with zf.open(key + ".npy", "w", force_zip64=True) as member:
                try:
                    np.lib.format.write_array_header_1_0(member, header)
                except ValueError:  # a header too long for version 1.0, as numpy.save decides
                    np.lib.format.write_array_header_2_0(member, header)
                for part in parts:
                    member.write(np.ascontiguousarray(part.numpy()).tobytes())


def _describe(path: Path, state: dict, config: ExperimentConfig) -> dict:
    return {
        "checkpoint": str(path),
        "epoch": state["epoch"],
        **inside(state),  # a checkpoint written inside an epoch: {"inside": {"epoch", "batches"}}
        "experiment": config.name,
        "backend": config.backend,
        "task": config.task,
        "device": config.device.value,
    }


PAIRS_OR_LISTS = "Give --pairs (score these pairs) or --top-k (best destinations per source), not both."


def _machines_request(config: ExperimentConfig, pairs, top_k, index: str, embeddings: bool) -> dict | None:
    """What each machine of a partitioned graph's ``predict`` writes: a link task's top-k lists of
    its own sources (exact, or through ``index``), or the given pairs whose destination it owns
    (and its nodes' final states with ``embeddings``); the options are checked here, before any
    machine loads, the pairs file by every machine once loaded (:func:`_pairs_every_machine_read`)."""
    if config.kind is not Task.LINK:
        if top_k is not None or pairs is not None:
            raise ConfigError("--top-k and --pairs score a link task's pairs; this run classifies nodes.")
        if index != "exact":
            check_index(config, None, index)  # (refused: a node task has no top-k lists)
        folder = config.dataset.path if config.dataset.name == "folder" else None  # (others are refused on loading)
        if embeddings and folder and read_partition(folder, config.dataset.partitions).get("kind") != "hetero":
            raise ConfigError(HOMOGENEOUS_EMBEDDINGS)
        return {"embeddings": True} if embeddings else None
    if pairs is not None:
        if top_k is not None:
            raise ConfigError(PAIRS_OR_LISTS)
        request = {"pairs": Path(pairs), "embeddings": bool(embeddings)}
    else:
        if top_k is not None and not (isinstance(top_k, int) and top_k > 0):
            raise ConfigError(f"--top-k {top_k!r} must be a positive number of destinations per source, e.g. 10.")
        request = {"top_k": top_k or DEFAULT_TOP_K, "embeddings": bool(embeddings)}
    return request if index == "exact" else {**request, "index": check_index(config, request, index)}


def _on_machines(
    path: Path, state: dict, config: ExperimentConfig, trust_code: bool, out: Path | None, request: dict | None = None
):
    """Score a partitioned graph's checkpoint as a rank of the job of its machines (torchrun or
    SLURM; one machine alone is refused when its part loads): ``evaluate`` (``out`` None) or
    ``predict`` (each machine writes ``OUT.part-M.npz``, with ``node_ids``: the dataset's ids of
    its rows). Rank 0's result; None on the other ranks."""
    job = detect_job()
    world = job.world_size if job is not None else 1
    try:
        with interrupt_on_sigterm() if job is None else contextlib.nullcontext():
            args = (path, state, config, trust_code, out, request)
            return launch(_job_worker, world, config.device.value, args, config.timeout, job=job)
    except TrainingDivergedError as exc:
        raise _nonfinite(path, str(exc)) from None


def machine_file(out: Path, machine: int) -> Path:
    """Where machine ``machine`` of a partitioned graph writes its rows of ``--out``."""
    return out.with_name(f"{out.stem}.part-{machine}{out.suffix}")


def _job_worker(
    ctx: DistContext, path: Path, state: dict, config: ExperimentConfig, trust_code: bool, out, request=None
):
    """One rank of an evaluate (``out`` None) or predict job: every rank loads its machine's data
    (a partitioned graph's part) and scores with the others; rank 0 returns the result."""
    mine = machine_file(out, ctx.node_rank) if out is not None else None
    if mine is not None and ctx.local_rank == 0:
        _check_out(mine)  # before any work, on the rank that writes it
    data = machine_shared(
        ctx, lambda: inference_data(path, state, config, "predict" if out else "evaluate", trust_code)
    )
    scorer = Scorer(config, data, ctx, state)
    if out is None:
        scored = scorer.evaluate()
        return scored if ctx.is_main else None
    keys = None
    if mine.suffix in TABLE_SUFFIXES:  # by the user's keys, from this machine's copy of the key maps
        keys = _every_machine(ctx, lambda: _keyed_output(config, data, mine, request))
    arrays, shape = _machine_arrays(ctx, scorer, data, request)
    if not _finite(arrays):
        raise _nonfinite(path, "the model's outputs are NaN or infinite")
    if keys is not None:
        return _machine_tables(ctx, out, arrays, keys)
    if ctx.local_rank == 0:
        with files.reserved(mine) as tmp:
            files.publish(mine, tmp, lambda f: write_npz_stream(f, arrays), "predicting")
    ctx.barrier()  # every machine's file is whole before rank 0 says where they are
    if not ctx.is_main:
        return None
    files_out = [str(machine_file(out, m)) for m in range(ctx.num_nodes)]
    return {
        "out": str(out),
        "files": files_out,
        "machines": ctx.num_nodes,
        "arrays": sorted(arrays),
        "shape": shape,
    }


def _machine_arrays(ctx: DistContext, scorer: Scorer, data, request: dict | None) -> tuple[dict, list[int]]:
    """What this machine of a partitioned ``predict`` writes, and the shape of all machines' together."""
    if scorer.parts.config.kind is Task.LINK:  # this machine's sources' lists, or its share of the pairs
        return _machine_lists(ctx, scorer, data, request)
    arrays = _machine_outputs(scorer, data, bool(request and request["embeddings"]))
    return arrays, [data.partition.num_nodes, arrays["logits"].shape[1]]


def _machine_tables(ctx: DistContext, out: Path, arrays: dict, keys) -> dict | None:
    """A machine's rows of a partitioned ``predict`` as tables by the user's keys (``keys``: where
    they go and how), written by its first rank; rank 0 reports every machine's files, the rows
    counted over the job."""
    mine = ([], 0)
    if ctx.local_rank == 0:
        tables = keys.make({key: _numpy(value) for key, value in arrays.items()})
        keyed.write_tables(keys.paths, tables)
        mine = ([str(p) for p in keys.paths], tables[0].num_rows)
    everyone = ctx.gather_objects(mine)  # every machine's tables are whole before rank 0 says where they are
    if not ctx.is_main:
        return None
    written = [Path(p) for paths, _ in everyone for p in paths]
    rows = sum(rows for _, rows in everyone)
    return {**_tables_written(written, tables, rows), "out": str(out), "machines": ctx.num_nodes}


def _every_machine(ctx: DistContext, check):
    """``check()`` on every rank, refused on every rank at once where it failed on any (one rank
    failing alone would leave the others waiting in the job's next exchange): its result."""
    try:
        result, error = check(), None
    except Exception as exc:  # whatever it is, every rank must reach the gather below
        result, error = None, str(exc) if isinstance(exc, GnnBridgeError) else f"{type(exc).__name__}: {exc}"
    for machine, failed in ctx.gather_objects((ctx.node_rank, error)):
        if failed is not None:
            raise ConfigError(f"machine {machine}: {failed}" if ctx.num_nodes > 1 else failed)
    return result


def _machine_outputs(scorer: Scorer, data, embeddings: bool) -> dict:
    """A node task's outputs of this machine's nodes, named by their ids in the dataset; with
    ``embeddings``, its final states of every type (``embedding__T``, ids ``node_ids__T``)."""
    arrays = _class_arrays(scorer, data)
    part = data.partition
    arrays.update(
        node_ids=part.node_ids, **{f"{s}_idx": part.node_ids[data.split(s)] for s in ("train", "val", "test")}
    )
    if embeddings:
        with contextlib.ExitStack() as stack:  # (a machine's states are in memory: nothing to unmap)
            states = scorer.embeddings(stack)
        for t, h in states.items():
            arrays.update({f"embedding__{t}": h, f"node_ids__{t}": part.types[t].node_ids})
    return arrays


def _machine_lists(ctx: DistContext, scorer: Scorer, data, request: dict) -> tuple[dict, list[int]]:
    """A link task's top-k lists of this machine's sources (see ``machine_predictions``), or its
    share of the given pairs (``machine_pairs``); and the shape of all machines' together."""
    links = scorer.link_scorer()
    if not hasattr(links, "machine_predictions"):
        why = (
            f"this run evaluates with eval.mode={scorer.parts.config.eval.mode.value} (use --set eval.mode=layerwise)"
            if scorer.parts.config.eval.mode is not EvalMode.LAYERWISE
            else f"{scorer.parts.call.origin} has no typed layer-wise inference"
        )
        raise ConfigError(
            f"predict of a partitioned link task scores from layer-wise states, but {why}; or predict with the "
            "folder whole: --set dataset.partitions=0."
        )
    if "pairs" in request:
        src, dst = _pairs_every_machine_read(ctx, request["pairs"], data, scorer.parts.config)
        return links.machine_pairs(scorer.model, src, dst, request["embeddings"]), [src.numel()]
    arrays = links.machine_predictions(
        scorer.model, request["top_k"], request["embeddings"], request.get("index", "exact")
    )
    return arrays, [data.partition.types[data.target_edge[0]].num_nodes, request["top_k"]]


def _evaluate_worker(ctx: DistContext, config: ExperimentConfig, data, state: dict) -> dict:
    """``{"metrics", "eval"}``: the scores, and how they were computed (as in ``results.json``)."""
    return Scorer(config, data, ctx, state).evaluate()


def _predict_worker(ctx: DistContext, config: ExperimentConfig, data, state: dict, request: dict | None) -> dict:
    scorer = Scorer(config, data, ctx, state)
    request = request or {}
    with contextlib.ExitStack() as stack:  # mapped states outlive it: their files are unlinked, not unmapped
        states = scorer.embeddings(stack) if request.get("embeddings") else None
        arrays = {f"embedding__{t}": h for t, h in (states or {}).items()}
        if config.kind is not Task.LINK:
            return arrays | _class_arrays(scorer, data)
        links = scorer.link_scorer()
        if "pairs" in request:
            src, dst = request["pairs"]
            scores = links.score_pairs(scorer.model, src, dst).float()
            return arrays | {"src": src, "dst": dst, "scores": scores, "probs": torch.sigmoid(scores)}
        known, index = data.known_pairs(), request.get("index", "exact")
        if hasattr(links, "layerwise"):  # typed layer-wise: one pass for the lists and the states
            top, scores = links.top_k(scorer.model, request["top_k"], known, states, index)
        elif index != "exact":  # the model has no typed pass: eval fell back to full
            raise ConfigError(
                f"--index {request['index']} searches layer-wise states, but {scorer.parts.call.origin} has no "
                "typed layer-wise inference (its evaluation falls back to full neighbourhoods); use --index exact."
            )
        else:
            top, scores = links.top_k(scorer.model, request["top_k"], known)
        # Exact lists: every candidate is scored, so a row's count is its candidates (up to k), and a
        # counted slot scoring -inf is the model's doing (refused); approximate: what the search found.
        n_src, n_dst = (data.num_nodes[t] for t in (data.target_edge[0], data.target_edge[2]))
        counts = (
            retrieval.fillable(known, n_src, n_dst, request["top_k"]) if index == "exact" else retrieval.filled(top)
        )
        lists = {"top_dst": top, "top_scores": scores.float(), "counts": counts}
        return arrays | {"src": torch.arange(top.shape[0]), **lists}


def _class_arrays(scorer: Scorer, data) -> dict:
    """The outputs of every item (``logits``: raw, whatever the target, but a fitted regression's,
    which are its values in the labels' units) and what the target derives from them (a class's
    probabilities and prediction ...); with the labels and splits of a graph that has them."""
    logits = scorer.predict().float()  # float32 already (maybe mapped from disk): not copied
    n, width = logits.shape
    derived = scorer.parts.target.derived(n, width)
    scores = {"logits": logits} | {name: Derived(logits, *how) for name, how in derived.items()}
    if not getattr(data, "labelled", True):  # a graph handed to predict without labels
        return scores
    if getattr(data, "is_edge", False):  # an edge task's rows in the order its edge_index gave the edges
        splits = {f"{name}_idx": data.given_split(name) for name in ("train", "val", "test")}
        return scores | {"y": data.given_rows(data.y)} | splits
    return scores | {"y": data.y, "train_idx": data.train_idx, "val_idx": data.val_idx, "test_idx": data.test_idx}
