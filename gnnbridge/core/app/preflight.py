"""Everything that can be checked before any output exists: backend, task, model, device, ranks,
and the dataset itself.

The "bad input writes nothing" contract rests on the order: :func:`preflight` (no data) and
:func:`load_dataset` (data loaded and validated) both run before a run folder is made, in the
launching process (or on every rank of a job, where the answer is the same everywhere).
:func:`check_before_start` is the whole list in that order: ``train`` runs it, and so do
``doctor`` and ``config show``, so that what they pass is what ``train`` starts.

``evaluate`` and ``predict`` score a checkpoint: they run :func:`inference_preflight` and
:func:`load_for_inference`, the checks scoring needs (the backend, task, model and sampler, the
dataset, the device, and the memory the weights, evaluation batches and layers take) and none
that only training needs: no loggers (inference logs nothing), no model built on the meta device
to weigh gradients, optimizer state and training batches, no room for checkpoints, no check of
the monitored metric.
"""

from __future__ import annotations

import copy
import functools
import os

import torch

from gnnbridge.core.app.objects import made_from, reading_for
from gnnbridge.core.config import DeviceChoice, EvalMode, ExperimentConfig, SamplerKind, Task
from gnnbridge.core.config.values import parse_size
from gnnbridge.core.contracts.loading import LoaderConfig
from gnnbridge.core.contracts.targets import Target
from gnnbridge.core.errors import BackendUnavailableError, ConfigError, DataError, ResourceError
from gnnbridge.core.host import available_memory, format_bytes, free_disk
from gnnbridge.core.models.build import build_model, check_heterogeneous, count_parameters, injected_reads, model_dims
from gnnbridge.core.models.build import resolve as resolve_model
from gnnbridge.core.plugins import PluginError, backends, blame, datasets, families, get_target, warn
from gnnbridge.core.records.collection import GraphCollection
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.dataset import Dataset
from gnnbridge.core.records.hetero import HeteroGraphData, HeteroSource, edge_name, find_edge_type
from gnnbridge.core.records.labels import settled
from gnnbridge.core.records.reading import Reading
from gnnbridge.core.sampling.build import BACKEND_KINDS, check_hetero_kind, check_kind
from gnnbridge.core.sampling.hetero import typed_fanouts
from gnnbridge.core.storage.intent import refuse_unknown_labels
from gnnbridge.core.storage.linkcache import link_record
from gnnbridge.core.storage.linkparts import link_settings, open_link_part
from gnnbridge.core.tasks import LinkSettings, for_edge_task, for_node_task, no_edge_labels
from gnnbridge.core.training.loggers import check_loggers

GRAPH_KINDS = tuple(k.value for k in SamplerKind)

# Bytes per parameter while training: the weights, their gradients, Adam's two moments and the
# best epoch's copy. A checkpoint holds the weights and both moments.
TRAIN_BYTES_PER_PARAM = 4 * 5
CHECKPOINT_BYTES_PER_PARAM = 4 * 3


def check_before_start(
    config: ExperimentConfig,
    folder: str | os.PathLike = "runs",
) -> tuple[ExperimentConfig, GraphData | GraphCollection]:
    """Everything ``train`` checks on this machine before it makes a run folder: the config
    (:func:`preflight`), the dataset loaded and validated against the task and the model
    (:func:`load_dataset`, which also weighs the model against memory), and room for the
    checkpoints in ``folder``. Returns the config (device resolved) and the loaded data."""
    config = preflight(config)
    data = load_dataset(config)
    check_disk(config, data, folder)
    return config, data


def preflight(config: ExperimentConfig, count_gpus: bool = True) -> ExperimentConfig:
    """Check everything training can check without data; returns the config with device resolved.

    ``count_gpus``: whether ``nproc`` ranks will run on this machine (not so in a multi-node job)."""
    backend = _check_components(config)
    check_loggers(config)
    return _check_device(config, backend, count_gpus)


def inference_preflight(config: ExperimentConfig) -> ExperimentConfig:
    """What ``evaluate`` and ``predict`` check before the data: the backend serves the task, the
    model and the sampler (evaluation samples with it), the dataset plugin exists, the device is
    usable; returns the config with device resolved. Not the loggers: nothing is logged."""
    return _check_device(config, _check_components(config), count_gpus=True)


def _check_components(config: ExperimentConfig):
    """The backend (available), its task, model and sampler, and the dataset plugin."""
    backend = backends.get(config.backend).require()
    _check_task(config, backend)
    _check_sampler(config, backend)
    datasets.get(config.dataset.name)
    _check_dataset_keys(config)
    return backend


def _check_dataset_keys(config: ExperimentConfig) -> None:
    """``dataset.splits`` and ``dataset.digest`` concern a graph read from arrays (a ``.npz``, a
    graph object, a library's class): set for another dataset, they are refused, not ignored."""
    name = config.dataset.name
    if config.dataset.splits == "drawn" and not (name == "npz" or ":" in name):
        raise ConfigError(
            f"dataset.splits=drawn leaves out the splits a graph's arrays hold (a .npz, a graph object, a "
            f"library's class such as pyg:KarateClub); dataset '{name}' keeps its own: leave dataset.splits=given."
        )
    if config.dataset.digest is not None and ":" not in name:
        raise ConfigError(
            f"dataset.digest={config.dataset.digest} pins what a library's class (LIBRARY:CLASS) gave a run; dataset "
            f"'{name}' is not one: clear it (--set dataset.digest=)."
        )


def _check_device(config: ExperimentConfig, backend, count_gpus: bool) -> ExperimentConfig:
    device = _resolve_device(config)
    backend.check_device(torch.device(device))
    if count_gpus and device == "cuda" and config.nproc > torch.cuda.device_count():
        raise ConfigError(
            f"nproc={config.nproc} but this machine has {torch.cuda.device_count()} CUDA device(s); "
            f"use --nproc {torch.cuda.device_count()} or fewer."
        )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if count_gpus and device == "cpu" and config.nproc > cores:
        raise ConfigError(
            f"nproc={config.nproc} but this process may use {cores} CPU core(s); use --nproc {cores} or fewer "
            "(each CPU rank needs a core of its own, more only slows every rank down)."
        )
    config.device = DeviceChoice(device)
    return config


def _check_task(config: ExperimentConfig, backend) -> None:
    """The task family is registered (a plugin's is checked against the rest of the config here,
    a built-in one was when the config was made), takes the target, and its kind the backend runs."""
    family = families.get(config.task)
    config.check_task()
    if family.targets and config.target not in family.targets:
        raise ConfigError(
            f"target={config.target} does not apply to task={config.task}; it takes: {', '.join(family.targets)}."
        )
    kind = config.kind
    if kind not in backend.tasks():
        raise ConfigError(
            f"Backend '{backend.name}' cannot train task={config.task}; it trains "
            f"{', '.join(t.value for t in backend.tasks()) or 'nothing (it declares no TASKS)'}."
        )
    choice = resolve_model(config.model, backend.name, kind)
    if kind in (Task.LINK, Task.EDGE):
        check_heterogeneous(choice, f"task={config.task} scores edges on a heterogeneous view of the graph")


def _check_sampler(config: ExperimentConfig, backend) -> None:
    kind = config.sampler.kind
    if config.kind in (Task.LINK, Task.EDGE):
        return check_hetero_kind(kind, backend)
    if config.kind is Task.GRAPH:  # whole graphs through the library's plain loader: nothing to install
        if kind not in GRAPH_KINDS:
            raise ConfigError(
                f"sampler.kind={kind!r} samples neighbourhoods, but task=graph batches whole graphs; "
                f"use one of: {', '.join(GRAPH_KINDS)}."
            )
        return
    check_kind(kind, backend)
    reason = backend.sampler_unavailable(SamplerKind(kind)) if kind in BACKEND_KINDS else None
    if reason is not None:
        raise BackendUnavailableError(f"Backend '{config.backend}': {reason}.")


def _resolve_device(config: ExperimentConfig) -> str:
    if config.device is DeviceChoice.AUTO:
        if torch.cuda.is_available():
            try:
                backends.get(config.backend).check_device(torch.device("cuda", 0))
                return "cuda"
            except BackendUnavailableError:
                return "cpu"
        return "cpu"
    if config.device is DeviceChoice.CUDA and not torch.cuda.is_available():
        raise ConfigError("device=cuda but PyTorch sees no CUDA device here; use --device cpu or auto.")
    return config.device.value


def load_dataset(config: ExperimentConfig, ranks_here: int | None = None) -> GraphData | GraphCollection:
    """Load and validate the dataset for training; it must suit the task, every split must give
    each rank at least one node (or graph), the monitored metric must be able to name a best epoch,
    and the model must fit the ``ranks_here`` ranks of this machine (default: all ``nproc``)."""
    if config.dataset.name == "folder" and config.dataset.path:
        refuse_unknown_labels(config.dataset.path, "train")
    data = open_dataset(config).record
    # a machine's part holds a share of each split, whose labels say nothing of the whole split's
    if config.kind is not Task.LINK and data.partition is None:
        _check_labelled(config, data)
        target_of(config).check(data, config.train.monitor)
    _check_splits(config, data)
    check_model(config, data, config.nproc if ranks_here is None else ranks_here)
    remote = parse_size(config.placement.remote_cache)
    if remote and isinstance(data, HeteroGraphData) and data.partition is not None:
        raise ConfigError(
            f"placement.remote_cache={config.placement.remote_cache} caches a homogeneous graph's remote rows for a "
            "node task; a heterogeneous graph's part, or a link task's, fetches every remote row from its owner (leave "
            "placement.remote_cache unset)."
        )
    if remote and data.partition is None:
        raise ConfigError(
            f"placement.remote_cache={config.placement.remote_cache} caches other machines' rows of a partitioned "
            "graph (dataset.partitions); this one is whole on each machine: use placement.feature_cache."
        )
    return data


def load_for_inference(
    config: ExperimentConfig, params: int, reading: Reading | None = None
) -> GraphData | GraphCollection:
    """Load and validate the dataset for scoring a checkpoint of ``params`` parameters, read as
    ``reading`` says (None: as the run's task reads it; predict's lets labels be absent): it must
    suit the task, every split must hold a node (or graph), and scoring must fit in memory
    (:func:`check_inference_memory`). Nothing about training (its memory, its monitor)."""
    data = open_dataset(config, reading).record
    if getattr(data, "labelled", True):  # a graph handed to predict without labels has no splits
        _check_splits(config, data)
    check_inference_memory(config, data, params)
    return data


def target_of(config: ExperimentConfig) -> Target:
    """The config's target, with its monitor and loss checked (a built-in target's monitor the
    config checked already; a plugin's is known once the plugins are loaded): one line each."""
    target = get_target(config.target)
    train = config.train
    if not train.monitor and config.kind is not Task.LINK:
        train.monitor = target.monitors[0] if target.monitors else ""
    if config.kind is not Task.LINK and train.monitor not in target.monitors:
        raise ConfigError(
            f"train.monitor={train.monitor or '(none)'} is not a metric of target={target.name}; choose one of: "
            f"{', '.join(target.monitors) or 'none (the target declares no monitors)'}."
        )
    if train.loss and train.loss not in target.losses:
        raise ConfigError(
            f"train.loss={train.loss} does not apply to target={target.name}; choose one of: "
            f"{', '.join(target.losses)} (or leave it empty for {target.losses[0]})."
        )
    return target


def task_record(config: ExperimentConfig):
    """The dataset as the config's task trains on it (its record), checked to suit the task."""
    return open_dataset(config).record


def open_dataset(config: ExperimentConfig, reading: Reading | None = None) -> Dataset:
    """The config's dataset opened for its task, read as ``reading`` says (None: as the task
    reads it, :func:`~gnnbridge.core.app.objects.reading_for`): the record
    (:func:`_load_for_task`) with the task family, the target, the reading and the machine's part
    as declared fields."""
    reading = reading or reading_for(config)
    record = _load_for_task(config, reading)
    return Dataset(record, config.task, config.target, reading, record.partition)


def _load_for_task(config: ExperimentConfig, reading: Reading) -> GraphData | GraphCollection:
    """The dataset, loaded and turned into the task's record, checked to suit the task (and by
    the task family's own check); it is read as ``reading`` says (labels in the family's or the
    target's form)."""
    target_of(config)
    if config.dataset.partitions and config.dataset.name != "folder":
        raise ConfigError(
            f"dataset.partitions={config.dataset.partitions} opens a machine's part of a folder that gnnbridge "
            f"partition cut; dataset '{config.dataset.name}' is not one: give --dataset DIR (a partitioned folder)."
        )
    if config.dataset.partitions and config.kind not in (Task.NODE, Task.LINK):
        raise ConfigError(
            f"dataset.partitions={config.dataset.partitions}: a graph partitioned across machines trains node "
            f"and link tasks so far, not task={config.task}; train the folder whole (dataset.partitions=0)."
        )
    data = for_task(config, _call_loader(config, reading), reading)
    _check_data_task(config, data)
    with blame(families.origin(config.task), "check(data, config)"):
        families.get(config.task).check(data, config)
    if isinstance(data, HeteroGraphData):
        _check_hetero(config, data)
    elif config.sampler.edge_fanouts:
        raise ConfigError(
            f"sampler.edge_fanouts sets fanouts per edge type, but dataset '{data.name}' has one edge "
            "type; use sampler.fanouts."
        )
    return data


def _check_splits(config: ExperimentConfig, data: GraphData | GraphCollection) -> None:
    part = data.partition
    # a partitioned graph's ranks run as many batches, some empty: a split needs one item somewhere
    need = 1 if part is not None else config.nproc
    for split in ("train", "val", "test"):
        size = sum(part.split_counts[split]) if part is not None else data.split(split).numel()
        if size < need and part is not None:
            raise ConfigError(f"The {split} split has no {data.item_name} on any machine; give it one or more.")
        if size < need:
            raise ConfigError(
                f"The {split} split has {size} {data.item_name}(s), fewer than nproc={config.nproc}; "
                f"use --nproc {size} or fewer, or a larger {split} split."
            )


def _check_labelled(config: ExperimentConfig, data) -> None:
    """Every split needs a labelled entry: a train split of missing labels (NaN) trains nothing
    (a loss of 0 every step, a checkpoint of the untrained weights), and a val or test split of
    them has no figure to report or to pick a best epoch by. Refused with every split's counts."""
    target = get_target(config.target)
    counts, sizes = {}, {}
    for split in ("train", "val", "test"):
        items = data.split(split)
        y = data.y[items]
        sizes[split], counts[split] = int(items.numel()), (target.labelled(y) if items.numel() else 0, y.numel())
    empty = [split for split, (labelled, _) in counts.items() if sizes[split] and not labelled]
    if empty:
        size = sizes[empty[0]]
        each = ", ".join(f"{split} {labelled} of {entries}" for split, (labelled, entries) in counts.items())
        why = "nothing would be learned" if empty[0] == "train" else "it would have no figure to report"
        raise DataError(
            f"target={target.name}: the {empty[0]} split's {size} {data.item_name}(s) have no label (every value NaN; "
            f"labelled entries per split: {each}), so {why}; label some {data.item_name}s of every split, or give "
            f"splits over labelled {data.item_name}s."
        )


def model_parameters(config: ExperimentConfig, data: GraphData | GraphCollection) -> int:
    """The model's parameter count: exact (built on the meta device), or estimated from its width
    and depth when the builder cannot run there."""
    exact = count_parameters(config.model, config.backend, config.kind, *model_dims(data), data)
    return exact if exact is not None else _estimate(config, data)


def _estimate(config: ExperimentConfig, data) -> int:
    in_dim, out_dim = model_dims(data)
    if isinstance(in_dim, dict):  # heterogeneous: input layers per type, then the layers per relation
        spec = config.model
        inputs = sum((w + 1) * spec.hidden if w else data.num_nodes[t] * spec.hidden for t, w in in_dim.items())
        return inputs + len(data.edge_types) * spec.parameter_estimate(spec.hidden, spec.hidden)
    return config.model.parameter_estimate(in_dim, out_dim)


def check_model(config: ExperimentConfig, data: GraphData | GraphCollection, ranks_here: int) -> None:
    """The model fits this machine and its builder accepts the config: on the meta device when it
    can be built there, else (once it is known to fit) for real, on CPU, and thrown away. A
    builder's error is one line naming the model, before any rank starts or anything is written."""
    exact = count_parameters(config.model, config.backend, config.kind, *model_dims(data), data)
    check_memory(config, data, ranks_here, exact if exact is not None else _estimate(config, data))
    if exact is None:
        build_model(config.model, config.backend, config.kind, *model_dims(data), data)


def check_memory(
    config: ExperimentConfig, data: GraphData | GraphCollection, ranks_here: int, params: int | None = None
) -> None:
    """Refuse a model, a label space or a batch this machine cannot hold, before any rank allocates
    it: ``model.hidden=10**7`` or ``link.negatives=10**6`` would otherwise grow until the kernel
    kills the job. ``params``: the model's parameter count (counted here when not given)."""
    params = model_parameters(config, data) if params is None else params
    ranks = ranks_here if config.device is DeviceChoice.CPU else 1  # GPU ranks hold weights on their device
    dense = params * TRAIN_BYTES_PER_PARAM - 4 * _sparse_table_parameters(config, data)  # a table has no dense gradient
    model = ranks * (dense + 2 * 8 * data.num_classes**2)  # + confusion matrices
    batch, batch_what, batch_fix = largest_batch(config, data)
    layers = layers_in_memory(config, data, ranks_here)
    need, free = model + ranks * batch + layers, available_memory()
    if need > free and layers > max(model, ranks * batch):
        raise ResourceError(
            f"Layer-wise evaluation with eval.layer_store=memory holds every node's layer input and "
            f"output on each of {ranks_here} rank(s) ({data.num_nodes:,} nodes x "
            f"{_layer_width(config, data):,} values): about {format_bytes(need)} of memory with the "
            f"model and batches, but {format_bytes(free)} is free; use --set eval.layer_store=auto "
            "(layers go to a temp file when they do not fit) or eval.layer_store=disk."
        )
    if need > free and ranks * batch > model:
        raise ResourceError(
            f"{batch_what}: training on {ranks} rank(s) needs about {format_bytes(need)} of memory "
            f"but {format_bytes(free)} is free; {batch_fix}."
        )
    if need > free:
        raise ResourceError(
            f"{_model_text(config, data)} makes a model of about {params:,} parameters; training it on "
            f"{ranks} rank(s) needs about {format_bytes(need)} of memory but {format_bytes(free)} is "
            f"free; {_smaller_model(config, data, params)}."
        )
    if config.device is DeviceChoice.CUDA:
        total = torch.cuda.get_device_properties(0).total_memory
        if params * TRAIN_BYTES_PER_PARAM > total:
            raise ResourceError(
                f"{_model_text(config, data)} makes a model of about {params:,} parameters, which needs about "
                f"{format_bytes(params * TRAIN_BYTES_PER_PARAM)} to train, more than the GPU's "
                f"{format_bytes(total)}; {_smaller_model(config, data, params)}."
            )


def check_inference_memory(config: ExperimentConfig, data: GraphData | GraphCollection, params: int) -> None:
    """Refuse scoring a checkpoint of ``params`` parameters that this machine cannot hold, before
    it starts: the model's weights (once: the checkpoint's copy is already in memory), the largest
    evaluation batch (:func:`largest_batch` without training's) and, with
    ``eval.layer_store=memory``, every node's layer input and output (:func:`layers_in_memory`).
    Training's gradients, optimizer state, best copy and training batches are not counted."""
    model = 4 * params
    batch, batch_what, batch_fix = largest_batch(config, data, training=False)
    layers = layers_in_memory(config, data, 1)
    need, free = model + batch + layers, available_memory()
    if need > free and layers > max(model, batch):
        raise ResourceError(
            f"Layer-wise evaluation with eval.layer_store=memory holds every node's layer input and "
            f"output ({data.num_nodes:,} nodes x {_layer_width(config, data):,} values): about "
            f"{format_bytes(need)} of memory with the model and batches, but {format_bytes(free)} is free; use "
            "--set eval.layer_store=auto (layers go to a temp file when they do not fit) or eval.layer_store=disk."
        )
    if need > free and batch > model:
        raise ResourceError(
            f"{batch_what}: scoring needs about {format_bytes(need)} of memory but {format_bytes(free)} is "
            f"free; {batch_fix}."
        )
    if need > free:
        raise ResourceError(
            f"The checkpoint's model has {params:,} parameters; scoring it needs about {format_bytes(need)} of "
            f"memory but {format_bytes(free)} is free; free some memory, or score on a machine with more."
        )
    if config.device is DeviceChoice.CUDA:
        total = torch.cuda.get_device_properties(0).total_memory
        if model > total:
            raise ResourceError(
                f"The checkpoint's model has {params:,} parameters, {format_bytes(model)}, more than the "
                f"GPU's {format_bytes(total)}; use --device cpu."
            )


def _sparse_table_parameters(config: ExperimentConfig, data) -> int:
    """The parameters of the featureless types' tables when they get sparse gradients
    (``model.embeddings=sparse``): a step holds the gradient of a batch's rows, not the table's."""
    if config.model.embeddings != "sparse" or not isinstance(data, HeteroGraphData):
        return 0
    return sum(data.num_nodes[t] * config.model.hidden for t, width in data.feature_dims().items() if not width)


def layers_in_memory(config: ExperimentConfig, data, ranks_here: int) -> int:
    """Bytes of the final layer-wise evaluation's layers in memory: each rank all-gathers every
    node's layer input and output. Only with ``eval.layer_store=memory``: ``auto`` writes them to a
    temp file when they would not fit, ``disk`` always does (core/inference/layerstore.py), and the
    other evaluations (full, sampled, whole graphs, links, heterogeneous graphs) hold batches only."""
    if (
        config.eval.layer_store != "memory"
        or config.eval.mode is not EvalMode.LAYERWISE
        or config.kind is not Task.NODE
        or not isinstance(data, GraphData)
    ):
        return 0
    return ranks_here * 2 * 4 * data.num_nodes * _layer_width(config, data)


def _layer_width(config: ExperimentConfig, data) -> int:
    return max(config.model.hidden, data.num_classes)


def largest_batch(config: ExperimentConfig, data, training: bool = True) -> tuple[int, str, str]:
    """(bytes, what, fix) of the largest sampled batch a rank holds: its seeds (a link batch: both
    ends of every positive and negative pair) and their neighbourhood, whose size the fanouts
    multiply (capped by the graph), each node with one layer's input and output. A lower bound,
    like the model's: it refuses what cannot fit, never what might. Node tasks evaluate layer by
    layer (:func:`layers_in_memory`); link tasks sample held-out batches too. ``training=False``:
    the evaluation batches alone (scoring a checkpoint)."""
    if config.kind is Task.GRAPH:
        return 0, "", ""
    nodes = _node_count(data)
    batches = [(config.train.batch_size, "train.batch_size", "train")] if training else []
    if config.kind is Task.LINK:
        batches.append((config.eval.batch_size, "eval.batch_size", "val"))
    if not batches:
        return 0, "", ""
    out = []
    for asked, key, split in batches:
        size = min(asked, data.split(split).numel())  # a batch never holds more than its split
        if config.kind is Task.LINK:
            k = config.link.negatives if key.startswith("train") else int(data.val_negatives.shape[1])
            option = "link.negatives" if key.startswith("train") else "link.eval_negatives"
            pairs = size * (1 + k)
            seeds, what = min(2 * pairs, nodes), f"{key}={asked} with {option}={k} makes {pairs:,} pairs per batch"
            fix = f"use a smaller {key} or {option}"
        else:  # an edge task's batch seeds both ends of each edge
            ends = 2 if config.kind is Task.EDGE else 1
            seeds, what, fix = min(ends * size, nodes), f"{key}={asked}", f"use a smaller {key}"
            pairs = 0
        reached, frontier = seeds, seeds
        for fanout in config.sampler.fanouts:
            frontier = nodes if fanout < 0 else min(frontier * fanout, nodes)
            reached = min(reached + frontier, nodes)
        width = max(config.model.hidden, 1)  # an attention model splits hidden over its heads
        state = reached * (8 * 4 + 4 * width * 2)
        # A pair: its two ids, their batch-local ids and label, and both ends' states gathered to score it.
        out.append(
            (state + pairs * (8 * 6 + 4 * width * 2), f"{what} and sampler.fanouts={config.sampler.fanouts}", fix)
        )
    return max(out, key=lambda t: t[0])


def _model_text(config: ExperimentConfig, data) -> str:
    """The model, what sizes it that it reads, and the data it is built for."""
    choice = resolve_model(config.model, config.backend, config.kind)
    read = [f"model.{n}={getattr(config.model, n)}" for n in ("hidden", "layers") if n in injected_reads(choice)]
    if isinstance(data, HeteroGraphData):
        dims = data.feature_dims()
        featureless = [t for t, w in dims.items() if not w]
        inputs = f"{len(dims)} node types of {data.total_nodes:,} nodes" + (
            f" (featureless {', '.join(featureless)}: a learned row per node)" if featureless else ""
        )
    else:
        inputs = f"{data.num_features} features"
    return f"{choice.origin}{' with ' + ', '.join(read) if read else ''} on {inputs} and {data.num_classes} classes"


def _smaller_model(config: ExperimentConfig, data, params: int) -> str:
    """The fix: the size settings the model reads; the node count where featureless types' learned
    rows (one per node, of ``model.hidden`` values) are most of the model."""
    choice = resolve_model(config.model, config.backend, config.kind)
    read = [f"model.{n}" for n in ("hidden", "layers") if n in injected_reads(choice)]
    if isinstance(data, HeteroGraphData) and "model.hidden" in read:
        rows = {t: data.num_nodes[t] for t, w in data.feature_dims().items() if not w}
        if rows and 2 * sum(rows.values()) * config.model.hidden > params:
            t = max(rows, key=rows.get)
            return (
                f"most of it is a learned row per '{t}' node ({rows[t]:,} of them, as num_nodes__{t} says): check "
                f"that count, give '{t}' features (x__{t}), or use a smaller model.hidden"
            )
    if read:
        return f"use a smaller {' or '.join(read)}"
    return (
        f"{choice.origin} does not read model.hidden or model.layers, so make it smaller through its own "
        "model.options, or use another model.arch"
    )


def check_disk(config: ExperimentConfig, data: GraphData | GraphCollection, folder) -> None:
    """Two checkpoints must fit where the run writes them (the new one is written beside the old
    one before it replaces it): found now, not after the first epoch."""
    params = model_parameters(config, data)
    need = 2 * params * CHECKPOINT_BYTES_PER_PARAM
    free = free_disk(folder)
    if need > free:
        raise ResourceError(
            f"The run's checkpoints need about {format_bytes(need)} (a model of about "
            f"{params:,} parameters) but '{folder}' has {format_bytes(free)} free; free "
            "some space, choose another --out, or use a smaller model."
        )


def _call_loader(config: ExperimentConfig, reading: Reading):
    """The dataset plugin's loader, called with the run's dataset section told ``reading`` (a
    :class:`LoaderConfig`): what it raises or returns wrongly names it. A record it built without
    a form (``labels=``) is read in the run's (:func:`~gnnbridge.core.records.labels.settled`)."""
    name = config.dataset.name
    origin = datasets.origin(name)
    told = LoaderConfig.of(config.dataset, reading)
    with blame(origin, "loader(config.dataset, seed)"):
        data = datasets.get(name)(told, config.train.seed)
    told.settle(config.dataset)
    if not isinstance(data, (GraphData, GraphCollection, HeteroSource, HeteroGraphData)):
        raise PluginError(
            f"{origin} returned a {type(data).__name__} from its loader; expected a GraphData, "
            "GraphCollection or HeteroSource (gnnbridge.core.records), e.g. GraphData(...)."
        )
    if not isinstance(data, HeteroSource):
        settled(data, reading.form, data.item_name)
    return data


def for_task(config: ExperimentConfig, data, reading: Reading | None = None):
    """The record the task trains on: a heterogeneous source gets its task's splits (and reverse
    edges when asked for), and a homogeneous graph becomes a one-type heterogeneous graph for
    link prediction.

    A task record derived from a memory-mapped one holds the source's mapped features and mapped
    topology: a node task's is the CSC files prepare wrote; a link task's (which holds edges out
    by seed) is built through the disk into the folder by the first process that needs it and
    mapped by every other (:mod:`gnnbridge.core.storage.linkcache`). It travels to the ranks as
    "reopen the source, derive again with this config" (deterministic given the seed), so
    nothing mapped is copied. Topology built in memory (a source that is not a prepared folder,
    or a link task of a read-only folder that lacks its cache) is each rank's own copy."""
    derived = _family_record(config, _for_task(config, data, reading or reading_for(config)))
    if derived is not data and data.is_mapped:
        derived.mapped_from = (rederive, (copy.deepcopy(config), data.mapped_from))
    return derived


def _family_record(config: ExperimentConfig, data):
    """The family's own record made from its kind's (a plugin's code: what it raises or returns
    wrongly names it)."""
    family = families.get(config.task)
    with blame(families.origin(config.task), "record(data, config)"):
        record = family.record(data, config)
    if not isinstance(record, type(data)):
        raise PluginError(
            f"{families.origin(config.task)} returned a {type(record).__name__} from record(data, config); "
            f"expected the {type(data).__name__} it was given or a new one."
        )
    return record


def rederive(config: ExperimentConfig, mapped_from: tuple):
    """A rank's copy of a task record derived from a memory-mapped source (see :func:`for_task`)."""
    opener, args = mapped_from
    return for_task(config, opener(*args))


def _for_task(config: ExperimentConfig, data, reading: Reading):
    if config.kind is Task.LINK and isinstance(data, (GraphData, HeteroSource)):
        return _link_record(config, data)
    reverse = config.dataset.reverse_edges
    if config.kind is Task.EDGE:
        _check_edge_source(config, data)
    if not isinstance(data, HeteroSource):
        return data
    if config.kind is Task.GRAPH:
        raise ConfigError(
            f"Dataset '{data.name}' is one heterogeneous graph, but task=graph classifies whole graphs; "
            "use task=node or task=link."
        )
    check_source_fits(config, data, reverse)
    try:
        if config.kind is Task.NODE:
            return for_node_task(data, reverse, config.train.seed, reading.form)
        return for_edge_task(data, reverse, config.train.seed, reading)
    except DataError as exc:  # name the file (or dataset) the bad array came from
        raise DataError(f"{_source(config)}: {exc}") from None


def _link_record(config: ExperimentConfig, data) -> HeteroGraphData:
    """A link task's record: a machine's share of the task cut into a partitioned folder, or the
    one builder's (:func:`~gnnbridge.core.storage.linkcache.link_record`: through the disk for a
    prepared folder, in memory otherwise)."""
    if data.partition is not None:  # cut by gnnbridge partition --task link
        return _check_negatives(config, open_link_part(data, link_settings(config)))
    if _has_edge_features(data):  # (link prediction rebuilds its edges from pairs)
        label = made_from(config.dataset.path) or f"Dataset '{data.name}'"
        warn(f"{label} has edge features, which link prediction does not read yet; trained without.")
    try:
        record = link_record(data, LinkSettings.of(config), functools.partial(check_source_fits, config))
    except DataError as exc:  # name the file (or dataset) the bad array came from
        raise DataError(f"{_source(config)}: {exc}") from None
    return _check_negatives(config, record)


def _has_edge_features(data: GraphData | HeteroSource) -> bool:
    """Whether the graph brings edge features: a homogeneous one's ``edge_attr``, a typed one's
    per edge type (from an ``.npz``, an object, or a prepared folder's topology)."""
    if isinstance(data, HeteroSource):
        return bool(data.edge_attr) or bool(data.topology_edge_attr)
    return data.edge_attr is not None


def _check_edge_source(config: ExperimentConfig, data) -> None:
    """task=edge reads edge labels (from an ``.npz``, a prepared folder or arrays in memory): one
    line for a graph without them."""
    if not isinstance(data, HeteroSource) or data.edge_y is None or data.target_edge is None:
        given = made_from(config.dataset.path) or f"Dataset '{config.dataset.path or config.dataset.name}'"
        raise no_edge_labels(given)


# Bytes per node of a type while its task record is built and sampled: CSC offsets per edge type
# ending there (and the temporary counts they come from), the sampler's id map, a spare copy.
BYTES_PER_NODE, BYTES_PER_EDGE = 8 * 3, 8 * 2 * 4  # an edge: two ids, sorted, split, mirrored


def check_source_fits(config: ExperimentConfig, source: HeteroSource, reverse: bool) -> None:
    """Refuse a heterogeneous graph whose task record this machine cannot hold, before it is built.
    Its sizes come from values, not from arrays: a featureless type's ``num_nodes__TYPE`` is one
    number in a file, and ``link.eval_negatives`` fixes that many ids per held-out edge."""
    # A task on a prepared folder maps its topology (CSC offsets and edges) instead of building it
    # (a link task's is built through the disk, see linkcache; in memory only from a read-only folder).
    mapped = source.mapped_topology(reverse) is not None and (config.kind is Task.NODE or source.folder is not None)
    into = {
        t: 0 if mapped else sum((et[2] == t) + (reverse and et[0] == t) for et in source.edges)
        for t in source.num_nodes
    }
    parts = {
        f"num_nodes__{t}={n:,}": (
            n * (BYTES_PER_NODE + 8 * into[t]),
            f"check that count of '{t}' nodes (num_nodes__{t} in a .npz)",
        )
        for t, n in source.num_nodes.items()
    }
    edges = sum(int(e.shape[1]) for e in source.edges.values())
    if not mapped:
        parts[f"{edges:,} edges"] = (edges * BYTES_PER_EDGE, "use a smaller graph")
    if config.kind is Task.LINK:
        held = _held_out_rows(config, source)
        if held and config.link.protocol == "shared":  # two splits' pairs, and the draw's rounds
            parts[f"link.eval_negatives={config.link.eval_negatives} shared negative pairs per split"] = (
                2 * config.link.eval_negatives * 8 * 2 * 4,
                "use a smaller link.eval_negatives",
            )
        elif held:
            rows, n_dst = held
            k = min(config.link.eval_negatives, n_dst - 1)
            parts[f"link.eval_negatives={config.link.eval_negatives} for {rows:,} held-out edges"] = (
                rows * k * 8 * (3 if 2 * k >= n_dst - 1 else 1),
                "use a smaller link.eval_negatives",
            )
    need, free = sum(b for b, _ in parts.values()), available_memory()
    if need > free:
        what, (_, fix) = max(parts.items(), key=lambda kv: kv[1][0])
        label = made_from(config.dataset.path) or f"Dataset '{config.dataset.path or source.name}'"
        raise ResourceError(
            f"{label}: {what} makes its records need about "
            f"{format_bytes(need)} of memory but {format_bytes(free)} is free; {fix}."
        )


def _held_out_rows(config: ExperimentConfig, source: HeteroSource) -> tuple[int, int] | None:
    """(held-out edges, destination nodes) of the link target, or None where it is not yet known
    (the record then refuses it in its own words)."""
    try:
        target = (
            find_edge_type(list(source.edges), config.link.edge_type)
            if config.link.edge_type
            else tuple(source.target_edge)
            if source.target_edge is not None
            else next(iter(source.edges))
            if len(source.edges) == 1
            else None
        )
    except ConfigError:
        return None
    if target is None or target not in source.edges or target[2] not in source.num_nodes:
        return None
    if source.held_out is not None and target == tuple(source.target_edge or ()):
        rows = sum(e.numel() // 2 for e in source.held_out)
    else:
        rows = int(source.edges[target].shape[1] * (config.link.val_fraction + config.link.test_fraction)) + 2
    return rows, source.num_nodes[target[2]]


def _check_negatives(config: ExperimentConfig, data: HeteroGraphData) -> HeteroGraphData:
    """Each edge has ``n - 1`` possible negatives (every other destination). Training negatives
    beyond that are refused: they are the user's choice of loss balance (the default, 1, always
    fits), and a silent clamp would change it. Evaluation negatives are clamped, saying so: the
    default (100) exceeds a small graph's candidates, and ranking each edge among *all* other
    destinations, each once, is the exact metric that the sampled one approximates."""
    link, target = config.link, data.target_edge
    candidates = data.num_nodes[target[2]] - 1
    where = (
        f"({edge_name(target)}) has {candidates + 1} '{target[2]}' nodes, so {candidates} possible negative(s) per edge"
    )
    if link.negatives > candidates:
        raise ConfigError(f"link.negatives={link.negatives} but {where}; use link.negatives={candidates} or fewer.")
    if link.protocol == "per-edge" and link.eval_negatives > candidates:
        if max(link.ks) > candidates + 1:
            raise ConfigError(
                f"link.hits_at={link.hits_at} but {where}: each held-out edge is ranked among "
                f"{candidates + 1} candidates; keep link.hits_at at {candidates + 1} or fewer."
            )
        warn(
            f"link.eval_negatives={link.eval_negatives} but {where}; each held-out edge is ranked among all "
            f"{candidates} of them once (link.eval_negatives={candidates})."
        )
    return data


def _check_hetero(config: ExperimentConfig, data: HeteroGraphData) -> None:
    backend = backends.get(config.backend)
    if not backend.supports_hetero():
        raise BackendUnavailableError(
            f"Backend '{backend.name}' does not support heterogeneous graphs; dataset '{data.name}' is one."
        )
    check_heterogeneous(
        resolve_model(config.model, backend.name, config.kind), f"dataset '{data.name}' is heterogeneous"
    )
    check_hetero_kind(config.sampler.kind, backend)
    typed_fanouts(data, config.sampler.fanouts, config.sampler.edge_fanouts)  # names every edge type it gives


def _source(config: ExperimentConfig) -> str:
    """Where a dataset's bad array came from: the object the user handed over (not the file it
    was kept in), the file, or the dataset's name."""
    return made_from(config.dataset.path) or config.dataset.path or config.dataset.name


def _node_count(data) -> int:
    return data.total_nodes if isinstance(data, HeteroGraphData) else data.num_nodes


def _check_data_task(config: ExperimentConfig, data: GraphData | GraphCollection) -> None:
    label = made_from(config.dataset.path) or f"Dataset '{config.dataset.path or config.dataset.name}'"
    if isinstance(data, GraphCollection) and config.kind is not Task.GRAPH:
        raise ConfigError(
            f"{label} is a collection of {data.num_graphs} graphs (one label per graph) but "
            f"task={config.task}; add --set task=graph --set model.arch=gin."
        )
    if isinstance(data, HeteroGraphData):
        return
    if isinstance(data, GraphData) and config.kind is not Task.NODE:
        raise ConfigError(
            f"{label} is one graph with a label per node but task={config.task}; use "
            "a graph collection (gin-synthetic, imdb-binary, proteins, mutag, or a .npz with node_ptr) "
            "or --set task=node."
        )
