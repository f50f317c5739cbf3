"""Experiment configuration: typed sections, YAML in and out, ``--set`` overrides, validation.

A config is built in layers: the built-in defaults, then an experiment (a YAML file or a
registered name), then ``--set KEY=VALUE`` overrides (VALUE parsed as YAML), then CLI flags.
The merged dict is validated once, here, so every later stage can trust it: unknown keys get a
"did you mean", wrong types and impossible values name the key, the value and what is allowed.
Dataset-specific knobs live under ``dataset.options`` and are checked by the dataset itself.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gnnbridge.core.errors import ConfigError, DataFileNotFoundError, did_you_mean


class Task(str, enum.Enum):
    NODE = "node"  # one label per node of one graph (GraphData)
    GRAPH = "graph"  # one label per graph of a collection (GraphCollection)
    LINK = "link"  # whether an edge of one type exists (HeteroGraphData; a GraphData is converted)


class SamplerKind(str, enum.Enum):
    """The kinds every backend answers itself; ``sampler.kind`` may also name a plugin's sampler."""

    AUTO = "auto"  # the backend's own sampler when it can run, else the core sampler
    NATIVE = "native"  # the library's sampler, or an error saying why it cannot run
    CORE = "core"  # gnnbridge's framework-neutral vectorised sampler


class EvalMode(str, enum.Enum):
    LAYERWISE = "layerwise"  # exact full-neighbour inference, one layer at a time (needs layer_forward)
    FULL = "full"  # exact: mini-batches of every seed's whole L-hop neighbourhood, any model
    SAMPLED = "sampled"  # mini-batches with the training fanouts


class DeviceChoice(str, enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"
    AUTO = "auto"


AGGREGATIONS = ("mean",)
NODE_MONITORS = ("val_acc", "val_macro_f1", "val_roc_auc")  # higher is better for each
LINK_MONITORS = ("val_roc_auc", "val_mrr", "val_hits")  # val_hits: Hits@link.hits_at
MONITORS = (*NODE_MONITORS, *LINK_MONITORS[1:])
DEFAULT_MONITOR = {"node": "val_acc", "graph": "val_acc", "link": "val_roc_auc"}
DECODERS = ("dot", "mlp")
POOLINGS = ("sum", "mean")  # graph readouts (GIN's paper and DGL's tutorial use sum)

# Seconds a rank may wait on its peers (rendezvous, a collective, a silent heartbeat) before the
# whole job is stopped: long enough for a slow step on a big graph, short enough that a dead
# rank does not hold a cluster allocation for long.
DEFAULT_TIMEOUT_S = 180
MAX_TIMEOUT_S = 7 * 24 * 3600  # beyond a week no step is slow, it is stuck (and timedelta/thread waits overflow)

# Bounds on what a config may be, checked before anything prints, copies or recurses into it: an
# experiment is a few dozen values three levels deep, so these refuse only what is not a config
# (a YAML alias bomb, a list nested thousands deep, a multi-megabyte file), in one line.
MAX_DEPTH = 32
MAX_VALUES = 100_000  # counted with every alias expanded
MAX_TEXT_BYTES = 1_000_000
MAX_INT = 2**63 - 1  # what torch and numpy can hold


@dataclass
class DatasetConfig:
    name: str = "synthetic"
    path: str | None = None  # a file (``.npz``) for file-backed datasets
    root: str | None = None  # download / cache folder for named real datasets
    options: dict = field(default_factory=dict)  # checked by the dataset plugin
    reverse_edges: bool = False  # heterogeneous graphs: add (dst, rev_<relation>, src) for every edge type


@dataclass
class ModelSpec:
    """Backend-neutral model description: the same spec builds the same shapes on every backend.

    ``arch`` names a registered model (``gnnbridge models``) or a class by import path
    (``my_lab.models:DeepSAGE``); ``options`` are further keyword arguments of its builder. Which
    of the other fields a model reads is the model's business (``heads`` is GAT's)."""

    arch: str = "sage"
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    aggr: str = "mean"  # GraphSAGE neighbour aggregation
    heads: int = 4  # attention heads (hidden is the per-layer output width, split over heads)
    pooling: str = "sum"  # graph readout for graph-level models (GIN)
    options: dict = field(default_factory=dict)  # keyword arguments of the model's builder

    def __post_init__(self) -> None:
        _positive("model.hidden", self.hidden)
        _positive("model.layers", self.layers)
        _positive("model.heads", self.heads)
        if not self.arch.strip():
            raise ConfigError(
                "model.arch is empty; name a model (gnnbridge models lists them) or a class as module:Class."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout} is out of range; expected 0 <= dropout < 1.")
        if self.aggr not in AGGREGATIONS:
            raise ConfigError(
                f"model.aggr={show(self.aggr)} is not supported{did_you_mean(self.aggr, AGGREGATIONS)}. "
                f"Choose one of: {', '.join(AGGREGATIONS)} (the aggregations both libraries compute alike)."
            )
        if self.pooling not in POOLINGS:
            raise ConfigError(
                f"model.pooling={show(self.pooling)} is not supported{did_you_mean(self.pooling, POOLINGS)}. "
                f"Choose one of: {', '.join(POOLINGS)}."
            )
        bad = [k for k in self.options if not isinstance(k, str) or not k.isidentifier()]
        if bad:
            raise ConfigError(
                f"model.options has the key {show(bad[0])}; keys are keyword argument names, e.g. model.options.jk=cat."
            )

    def parameter_estimate(self, in_dim: int, out_dim: int) -> int:
        """About the parameters of a message-passing model of this width and depth (two input
        projections and one hidden-to-hidden map per layer covers SAGE, GCN, GAT and GIN's MLPs),
        computed without building anything; used when a model cannot be built on the meta device
        to be counted exactly."""
        total = 0
        for i in range(self.layers):
            d_in = in_dim if i == 0 else self.hidden
            width = out_dim if i == self.layers - 1 else self.hidden
            total += 2 * (d_in + 1) * width + (width + 1) * width
        return total


@dataclass
class SamplerConfig:
    kind: str = "auto"  # auto, native, core, or a plugin's sampler (gnnbridge samplers)
    fanouts: list[int] = field(default_factory=lambda: [10, 10])
    # Heterogeneous graphs: fanouts per relation name (or "src,relation,dst"), overriding ``fanouts``.
    edge_fanouts: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rel, fanouts in self.edge_fanouts.items():
            if (
                not isinstance(fanouts, list)
                or len(fanouts) != len(self.fanouts)
                or any(type(f) is not int or (f <= 0 and f != -1) for f in fanouts)
            ):
                raise ConfigError(
                    f"sampler.edge_fanouts.{rel}={show(fanouts)} must be a list of {len(self.fanouts)} "
                    "fanouts (one per layer, like sampler.fanouts; -1 for all neighbours)."
                )
        if not self.kind.strip():
            raise ConfigError(
                "sampler.kind is empty; use auto, native, core or a plugin's sampler (gnnbridge samplers lists them)."
            )
        if not self.fanouts:
            raise ConfigError("sampler.fanouts is empty; give one fanout per layer, e.g. [25, 10].")
        bad = [f for f in self.fanouts if f <= 0 and f != -1]
        if bad:
            raise ConfigError(
                f"sampler.fanouts={self.fanouts} has {bad[0]}; each fanout must be a positive "
                "number of neighbours, or -1 for all neighbours."
            )


@dataclass
class TrainConfig:
    epochs: int = 10
    batch_size: int = 512
    lr: float = 0.01
    weight_decay: float = 0.0
    optimizer: str = "adam"  # adam | adamw | sgd (see core/training/optim.py)
    momentum: float = 0.0  # sgd only
    schedule: str = "none"  # the learning rate per epoch: none | cosine | step
    warmup_epochs: int = 0  # epochs of linear warm-up to train.lr before the schedule (any schedule)
    step_size: int = 10  # step: epochs between decays
    gamma: float = 0.1  # step: the factor of each decay
    min_lr: float = 0.0  # cosine: the learning rate it anneals to
    seed: int = 0
    checkpoint_every: int = 1  # epochs between checkpoints/latest.pt; 0: only after the last epoch
    patience: int = 0  # stop after this many epochs without a better monitor value; 0: never
    monitor: str = ""  # the validation metric that picks "best" and drives early stopping; "": the task's default

    def __post_init__(self) -> None:
        _positive("train.epochs", self.epochs)
        _positive("train.batch_size", self.batch_size)
        for key in ("checkpoint_every", "patience"):
            if getattr(self, key) < 0:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be >= 0 (0 turns it off).")
        if self.monitor and self.monitor not in MONITORS:
            raise ConfigError(
                f"train.monitor={show(self.monitor)} is not a validation metric{did_you_mean(self.monitor, MONITORS)}. "
                f"Choose one of: {', '.join(MONITORS)} (val_roc_auc for two classes only)."
            )
        if not 0 <= self.seed < 2**63:
            raise ConfigError(f"train.seed={self.seed} is out of range; use an integer in [0, 2**63).")
        if not self.lr > 0:
            raise ConfigError(f"train.lr={self.lr} must be > 0, e.g. 0.01.")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay={self.weight_decay} must be >= 0.")
        self._check_optimizer()
        self._check_schedule()

    def _check_optimizer(self) -> None:
        _choice("train.optimizer", self.optimizer, OPTIMIZERS, "an optimizer")
        if self.momentum < 0 or self.momentum >= 1:
            raise ConfigError(f"train.momentum={self.momentum} is out of range; expected 0 <= momentum < 1, e.g. 0.9.")
        if self.momentum and self.optimizer != "sgd":
            raise ConfigError(
                f"train.momentum={self.momentum} applies to train.optimizer=sgd only, but it is "
                f"{show(self.optimizer)}; drop train.momentum or set train.optimizer=sgd."
            )

    def _check_schedule(self) -> None:
        _choice("train.schedule", self.schedule, SCHEDULES, "a learning-rate schedule")
        if self.warmup_epochs < 0:
            raise ConfigError(f"train.warmup_epochs={self.warmup_epochs} must be >= 0 (0: no warm-up).")
        if self.warmup_epochs >= self.epochs and self.warmup_epochs:
            raise ConfigError(
                f"train.warmup_epochs={self.warmup_epochs} must be less than train.epochs={self.epochs}, "
                "or the warm-up never ends."
            )
        _positive("train.step_size", self.step_size)
        if not 0 < self.gamma <= 1:
            raise ConfigError(f"train.gamma={self.gamma} is out of range; expected 0 < gamma <= 1, e.g. 0.1.")
        if not 0 <= self.min_lr < self.lr:
            raise ConfigError(f"train.min_lr={self.min_lr} is out of range; expected 0 <= min_lr < train.lr={self.lr}.")


@dataclass
class EvalConfig:
    mode: EvalMode = EvalMode.LAYERWISE
    batch_size: int = 4096  # seeds per inference batch
    layer_store: str = "auto"  # where each layer-wise layer, and predict's logits, live: auto | memory | disk

    def __post_init__(self) -> None:
        _positive("eval.batch_size", self.batch_size)
        if self.layer_store not in LAYER_STORES:
            raise ConfigError(
                f"eval.layer_store={show(self.layer_store)} is not a place for layer outputs"
                f"{did_you_mean(self.layer_store, LAYER_STORES)}; choose one of: "
                f"{', '.join(LAYER_STORES)}."
            )


@dataclass
class LogConfig:
    """Where each epoch's numbers go besides ``results.json``: logger plugins by name
    (``gnnbridge loggers`` lists them; built in: ``csv``, ``tensorboard``). Rank 0 writes."""

    to: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(set(self.to)) != len(self.to) or not all(isinstance(n, str) and n.strip() for n in self.to):
            raise ConfigError(
                f"log.to={show(self.to)} must be a list of distinct logger names, e.g. "
                "log.to=[tensorboard,csv] (gnnbridge loggers lists them)."
            )


PLACES = ("host", "device")
LAYER_STORES = ("auto", "memory", "disk")  # see core/training/layerstore.py
OPTIMIZERS = ("adam", "adamw", "sgd")  # see core/training/optim.py
SCHEDULES = ("none", "cosine", "step")
PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass
class PlacementConfig:
    """Where data lives and work runs on each rank (see the README's "Placement and precision")."""

    features: str = "host"  # device: x and y copied once to the rank's device; batches gather there
    topology: str = "host"  # device: the CSC arrays on the device, so the core sampler samples there
    prefetch: int = 0  # batches sampled ahead in a background thread while the current one computes
    precision: str = "fp32"  # bf16 / fp16: forward and loss under torch.autocast (fp16 with loss scaling)
    # bytes (or "512MB", "2GB") of RAM per machine (shared by its ranks, in /dev/shm) for the rows
    # of the highest in-degree nodes; 0: off
    feature_cache: Any = 0
    # threads gathering rows of a feature table mapped from a folder: page faults in flight (the
    # disk's queue depth on a cold page cache; a blocked thread costs no CPU)
    read_depth: int = 32

    def __post_init__(self) -> None:
        if parse_size(self.feature_cache) is None:
            raise ConfigError(
                f"placement.feature_cache={show(self.feature_cache)} is not a size; give bytes "
                "(e.g. 1048576) or a number with a unit: 512MB, 2GB (0: off)."
            )
        for key in ("features", "topology"):
            if getattr(self, key) not in PLACES:
                raise ConfigError(
                    f"placement.{key}={show(getattr(self, key))} is not a place; choose one of: {', '.join(PLACES)}."
                )
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"placement.precision={show(self.precision)} is not supported"
                f"{did_you_mean(self.precision, PRECISIONS)}; choose one of: {', '.join(PRECISIONS)}."
            )
        if type(self.read_depth) is not int or not 1 <= self.read_depth <= 256:
            raise ConfigError(
                f"placement.read_depth={show(self.read_depth)} must be an integer from 1 to 256 (reads "
                "in flight per rank on a folder's feature file)."
            )
        if type(self.prefetch) is not int or not 0 <= self.prefetch <= 16:
            raise ConfigError(f"placement.prefetch={show(self.prefetch)} must be an integer from 0 (off) to 16.")


@dataclass
class LinkConfig:
    """Link prediction: which edges are predicted, how they are split, and how scored."""

    edge_type: str = ""  # the relation name (or "src,relation,dst") to predict; "": the dataset's own target
    negatives: int = 1  # training negatives per positive edge (uniform over destination nodes)
    eval_negatives: int = 100  # fixed negatives per val/test edge (MRR, Hits@K; the same for every run)
    hits_at: int = 10  # K of Hits@K
    val_fraction: float = 0.1  # of the target edges, when the dataset does not split them itself
    test_fraction: float = 0.1

    def __post_init__(self) -> None:
        for key in ("negatives", "eval_negatives", "hits_at"):
            _positive(f"link.{key}", getattr(self, key))
        for key in ("val_fraction", "test_fraction"):
            if not 0 < getattr(self, key) < 0.5:
                raise ConfigError(f"link.{key}={getattr(self, key)} must be in (0, 0.5), e.g. 0.1.")
        if self.hits_at > self.eval_negatives + 1:
            raise ConfigError(
                f"link.hits_at={self.hits_at} exceeds the {self.eval_negatives + 1} candidates each "
                f"evaluation edge is ranked among (link.eval_negatives + 1)."
            )


@dataclass
class ExperimentConfig:
    name: str = "custom"
    description: str = ""
    task: Task = Task.NODE
    backend: str = ""  # empty: the default backend the package registered (contracts.plugins)
    nproc: int = 1
    device: DeviceChoice = DeviceChoice.CPU
    timeout: float = DEFAULT_TIMEOUT_S  # seconds; see DEFAULT_TIMEOUT_S
    max_restarts: int = 0  # times the launcher restarts every rank after a failure (each resumes the run)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelSpec = field(default_factory=ModelSpec)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        _positive("nproc", self.nproc)
        self._check_monitor()
        if self.max_restarts < 0:
            raise ConfigError(f"max_restarts={self.max_restarts} must be >= 0 (0: a failure ends the run).")
        if not 0 < self.timeout <= MAX_TIMEOUT_S:
            raise ConfigError(
                f"timeout={self.timeout} must be a positive number of seconds up to {MAX_TIMEOUT_S} "
                "(a week), e.g. --timeout 120."
            )
        if self.placement.precision == "fp16" and self.device is DeviceChoice.CPU:
            raise ConfigError(
                "placement.precision=fp16 needs --device cuda (DGL's CPU kernels and most CPUs have no "
                "fp16 arithmetic); use placement.precision=bf16 on the CPU."
            )
        # Graph tasks read whole graphs: fanouts do not apply to them.
        if self.task is not Task.GRAPH and len(self.sampler.fanouts) != self.model.layers:
            raise ConfigError(
                f"sampler.fanouts={self.sampler.fanouts} has {len(self.sampler.fanouts)} entries "
                f"but model.layers={self.model.layers}; give one fanout per layer."
            )

    def _check_monitor(self) -> None:
        train = self.train
        if not train.monitor:
            train.monitor = DEFAULT_MONITOR[self.task.value]
        valid = LINK_MONITORS if self.task is Task.LINK else NODE_MONITORS
        if train.monitor not in valid:
            raise ConfigError(
                f"train.monitor={train.monitor} does not score task={self.task.value}; choose one of: "
                f"{', '.join(valid)}."
            )

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))


def _choice(key: str, value: Any, choices: tuple[str, ...], what: str) -> None:
    if value not in choices:
        raise ConfigError(
            f"{key}={show(value)} is not {what}{did_you_mean(value, choices)}; choose one of: {', '.join(choices)}."
        )


def _positive(key: str, value: int) -> None:
    if value <= 0:
        raise ConfigError(f"{key}={value} must be a positive integer.")


def _plain(obj: Any) -> Any:
    """Enums to their values, recursively, so the dict dumps as plain YAML / JSON."""
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


# --------------------------------------------------------------------------- building from dicts

_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def from_dict(data: dict) -> ExperimentConfig:
    """Validate a nested dict into an :class:`ExperimentConfig` (raises :class:`ConfigError`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"A config must be a mapping of sections, got {type(data).__name__}.")
    check_plain(data, "The config")
    return _build(ExperimentConfig, data, prefix="")


def check_plain(value: Any, where: str) -> None:
    """Refuse a value nested deeper than :data:`MAX_DEPTH` or holding more than
    :data:`MAX_VALUES` values once shared references (YAML aliases, pickle memo) are expanded.

    Iterative and stopped at the bound, so it costs at most ``MAX_VALUES`` steps whatever it is
    given (a cycle or a billion-laughs value included); everything after it (printing the value
    in a message, copying it, flattening it) may then recurse and expand freely."""
    stack, seen = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError(
                f"{where} expands to more than {MAX_VALUES:,} values (a YAML alias bomb or a "
                "self-referencing value?); an experiment holds a few dozen."
            )
        if isinstance(item, (dict, list, tuple, set)):
            if depth > MAX_DEPTH:
                raise ConfigError(
                    f"{where} is nested more than {MAX_DEPTH} levels deep; an experiment has "
                    "sections, keys and at most a short list."
                )
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _build(cls: type, data: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if key not in names:
            valid = ", ".join(f"{prefix}{n}" for n in names)
            raise ConfigError(
                f"Unknown config key {show(str(full))}{did_you_mean(str(key)[:100], names)}. Valid keys here: {valid}."
            )
        kwargs[key] = _coerce(full, value, hints[key])
    try:
        return cls(**kwargs)
    except TypeError as exc:  # pragma: no cover - all fields have defaults
        raise ConfigError(f"Invalid section '{prefix.rstrip('.') or 'top level'}': {exc}") from None


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """Check ``value`` against the annotation ``hint``; convert where the YAML form differs."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(key, value, args[0])
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"Config key '{key}' must be a section (mapping), got {show(value)}.")
        return _build(hint, value, prefix=f"{key}.")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        choices = [m.value for m in hint]
        if value not in choices:
            raise ConfigError(
                f"{key}={show(value)} is not valid{did_you_mean(str(value)[:100], choices)}. "
                f"Choose one of: {', '.join(choices)}."
            )
        return hint(value)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            example = "[tensorboard,csv]" if item is str else "[25,10]"
            raise ConfigError(f"{key}={show(value)} must be a list, e.g. {key}={example}.")
        return [_coerce(f"{key}[{i}]", v, item) for i, v in enumerate(value)]
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}={show(value)} must be a mapping, e.g. {key}={{num_nodes: 1000}}.")
        return dict(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        value = _float(key, value)
    if hint is float and isinstance(value, str) and _EXPONENT.fullmatch(value.strip()):
        value = _float(key, value)  # YAML 1.1 reads 1e-3 (no dot) as a string; every user means the number
    if hint in (int, float, str, bool) and (type(value) is not hint):
        raise ConfigError(
            f"{key}={show(value)} has the wrong type: expected {hint.__name__}, got {type(value).__name__}."
        )
    if hint is float:
        check_finite(key, value)
    if hint is int and abs(value) > MAX_INT:
        raise ConfigError(f"{key}={show(value)} is too large; it must fit in 64 bits (at most {MAX_INT}).")
    return value


def _float(key: str, value: int | str) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(f"{key}={show(value)} is too large for a float; give a finite number.") from None


def check_finite(key: str, value: float) -> None:
    """Refuse NaN and infinity: they pass every ``>`` check one writes (``inf > 0``) and then
    train to NaN, or wait forever."""
    if not math.isfinite(value):
        raise ConfigError(f"{key}={value} is not a finite number; give a real number (NaN and infinity are refused).")


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib|tb|tib)?\s*", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}


def parse_size(value) -> int | None:
    """Bytes of a size given as an integer or text like ``512MB``/``2GB`` (powers of 1024; KiB..
    accepted too); None when ``value`` is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if not isinstance(value, str) or len(value) > 40:
        return None
    match = _SIZE.fullmatch(value)
    if match is None:
        return None
    unit = (match.group(2) or "b").lower().replace("i", "")
    return int(float(match.group(1)) * _UNITS[unit])


def show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: a message names the value, it does not dump it."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


# --------------------------------------------------------------------------- files and overrides


def safe_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` that refuses, in one line, what is not a config: text over
    :data:`MAX_TEXT_BYTES`, nesting deeper than :data:`MAX_DEPTH` (PyYAML builds nested values
    recursively and would end in a RecursionError) and values that expand past
    :data:`MAX_VALUES` (an alias bomb loads in microseconds but never finishes printing).
    Raises ``yaml.YAMLError`` for text that is not YAML."""
    if len(text) > MAX_TEXT_BYTES:
        raise ConfigError(
            f"{where} is {len(text):,} characters long; an experiment is a few lines (at most {MAX_TEXT_BYTES:,})."
        )
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):  # the parser is a state machine: no recursion
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigError(
                    f"{where} is nested more than {MAX_DEPTH} levels deep; an experiment has "
                    "sections, keys and at most a short list."
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    data = yaml.safe_load(text)
    check_plain(data, where)
    return data


def load_yaml(path: str | Path) -> dict:
    """Read an experiment YAML file into a dict, with one-line errors for every failure."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise DataFileNotFoundError(
            f"Config file '{path}' is not a regular file (a folder, device or pipe); give the experiment's .yaml file."
        )
    if not path.is_file():
        raise DataFileNotFoundError(f"Config file '{path}' does not exist.")
    try:
        data = safe_yaml(path.read_text(), f"Config file '{path}'")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileNotFoundError(f"Config file '{path}' cannot be read: {exc}.") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = f": {exc.problem}" if getattr(exc, "problem", None) else ""
        raise ConfigError(f"Config file '{path}' is not valid YAML{line}{problem}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"Config file '{path}' must hold a mapping of sections, got {type(data).__name__}.")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``'model.hidden=128'`` -> ``(['model', 'hidden'], 128)``; VALUE is read as YAML."""
    if not isinstance(text, str):
        raise ConfigError(f"An override must be a 'KEY=VALUE' string, got {show(text)} ({type(text).__name__}).")
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {show(text)} is not KEY=VALUE, e.g. --set model.hidden=128.")
    try:
        value = safe_yaml(raw, f"--set {key.strip()[:80]}") if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(
            f"--set {show(text)}: the value {show(raw)} is not valid YAML "
            "(quote a string, e.g. --set name='\"my run\"')."
        ) from None
    return key.strip().split("."), value


def check_overrides(overrides: Any) -> list[str]:
    """``overrides`` as a list of strings; a bare string is refused (iterating it would apply one
    override per character)."""
    if isinstance(overrides, (str, bytes)):
        raise ConfigError(
            f"overrides={show(overrides)} is a string; pass a list of 'KEY=VALUE' strings, "
            f"e.g. overrides=[{show(overrides)}]."
        )
    try:
        items = list(overrides or ())
    except TypeError:
        raise ConfigError(
            f"overrides={show(overrides)} is not a list of 'KEY=VALUE' strings, e.g. overrides=['train.epochs=5']."
        ) from None
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(
                f"overrides holds {show(item)} ({type(item).__name__}); each must be a 'KEY=VALUE' "
                "string, e.g. 'train.epochs=5'."
            )
    return items


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Return a copy of ``data`` with every ``KEY=VALUE`` override applied."""
    data = copy.deepcopy(data)
    for text in check_overrides(overrides):
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set '{text}': '{part}' is a value, not a section.")
        node[path[-1]] = value
    return data


def dump_yaml(config: ExperimentConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


# --------------------------------------------------------------------------- explaining a config

# One line per key, shown by ``gnnbridge config show``; a test keeps it complete.
KEY_HELP = {
    "name": "the experiment's name (run folders are named after it)",
    "description": "one line about the experiment",
    "task": "node (a label per node) | graph (a label per graph) | link (edges of one type)",
    "backend": "pyg | dgl | any installed backend plugin (gnnbridge backends)",
    "nproc": "ranks on this machine (a torchrun / SLURM job sets it to its size)",
    "device": "cpu | cuda | auto (cuda when available and the backend can use it)",
    "timeout": "seconds any rank may wait on its peers before the job stops",
    "max_restarts": "restarts of every rank after a failure, each continuing from latest.pt",
    "dataset": "what to train on (gnnbridge experiments; README: Datasets)",
    "dataset.name": "synthetic, karate, gin-synthetic, rec-synthetic, npz, reddit, ... (a dataset plugin)",
    "dataset.path": "npz: the file; folder: the prepared folder",
    "dataset.root": "downloaded datasets: where they live",
    "dataset.options": "dataset-specific options, e.g. {num_nodes: 20000} for synthetic",
    "dataset.reverse_edges": "heterogeneous graphs: add (dst, rev_<relation>, src) for every edge type",
    "model": "the network, the same on every backend for the built-in architectures",
    "model.arch": "sage | gcn | gat (node), gin (graph), a zoo or plugin model (gnnbridge models), or module:Class",
    "model.hidden": "width of every hidden layer",
    "model.layers": "message-passing layers (one fanout per layer)",
    "model.dropout": "dropout between layers, 0 <= p < 1",
    "model.aggr": "GraphSAGE neighbour aggregation",
    "model.heads": "GAT attention heads (hidden must divide by heads)",
    "model.pooling": "graph readout (GIN): sum | mean",
    "model.options": "further keyword arguments of the model's builder, e.g. {jk: cat}",
    "sampler": "which neighbours feed each seed (README: Samplers)",
    "sampler.kind": "auto | native (the library's own) | core | a plugin's sampler (gnnbridge samplers)",
    "sampler.fanouts": "neighbours per layer, counted from the seeds; -1: all of them",
    "sampler.edge_fanouts": "heterogeneous graphs: {relation: [per layer]} overriding fanouts",
    "train": "the optimisation (Adam unless train.optimizer says otherwise)",
    "train.epochs": "passes over the training seeds",
    "train.batch_size": "seeds (nodes, graphs or edges) per batch per rank, at most",
    "train.lr": "the learning rate (the peak, with a schedule)",
    "train.weight_decay": "L2 penalty (adam, sgd); decoupled weight decay (adamw)",
    "train.optimizer": "adam | adamw | sgd (torch.optim's)",
    "train.momentum": "sgd's momentum (0: plain SGD)",
    "train.schedule": "the learning rate per epoch: none | cosine (to train.min_lr) | step (x gamma every step_size)",
    "train.warmup_epochs": "epochs rising linearly to train.lr before the schedule (0: none)",
    "train.step_size": "step schedule: epochs between decays",
    "train.gamma": "step schedule: the factor of each decay",
    "train.min_lr": "cosine schedule: the learning rate of the end",
    "train.seed": "every random stream is derived from it, per epoch and rank",
    "train.checkpoint_every": "epochs between checkpoints/latest.pt (0: only after the last epoch)",
    "train.patience": "early stopping: epochs without a better monitor value (0: off)",
    "train.monitor": "the validation metric that picks best.pt (empty: val_acc, or val_roc_auc for links)",
    "eval": "how the final scores are computed",
    "eval.mode": "node tasks: layerwise (exact) | full (every neighbour) | sampled",
    "eval.batch_size": "seeds per inference batch",
    "eval.layer_store": "layer outputs, predict's logits: auto (on disk when they would not fit) | memory | disk",
    "link": "link prediction (task: link)",
    "link.edge_type": "the relation (or src,relation,dst) to predict; empty: the dataset's own",
    "link.negatives": "training negatives per positive edge",
    "link.eval_negatives": "fixed negatives per val/test edge, for MRR and Hits@K",
    "link.hits_at": "K of Hits@K",
    "link.val_fraction": "of the target edges held out for validation (when the dataset does not)",
    "link.test_fraction": "of the target edges held out for testing (when the dataset does not)",
    "placement": "where data lives and work runs on each rank (README: Placement and precision)",
    "placement.features": "host | device: features and labels copied once to the rank's GPU",
    "placement.topology": "host | device: the graph on the GPU, so the core sampler samples there",
    "placement.prefetch": "batches sampled ahead in a background thread (0: off)",
    "placement.precision": "fp32 | bf16 | fp16 (fp16 needs cuda)",
    "placement.read_depth": "reads in flight per rank gathering a folder's mapped features (1-256)",
    "placement.feature_cache": "RAM per machine (its ranks share it, in /dev/shm) for the most-sampled rows: "
    "512MB, 2GB (0: off)",
    "log": "where each epoch's numbers go besides results.json",
    "log.to": "logger plugins, e.g. [tensorboard, csv] (gnnbridge loggers)",
}


def annotated_yaml(config: ExperimentConfig) -> str:
    """``config`` as YAML with each key's line from :data:`KEY_HELP` as a comment."""
    lines: list[str] = []
    _annotate(config.to_dict(), "", 0, lines)
    width = min(max(len(text) for text, _ in lines), 32)  # a long value does not push every comment right
    return "\n".join(f"{text.ljust(width)}  # {note}" if note else text for text, note in lines) + "\n"


def _annotate(data: dict, prefix: str, depth: int, lines: list) -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        note = KEY_HELP.get(dotted, "")
        indent = "  " * depth
        if isinstance(value, dict) and value and dotted.count(".") == 0 and dotted in _SECTIONS:
            lines.append((f"{indent}{key}:", note))
            _annotate(value, dotted + ".", depth + 1, lines)
        else:
            text = yaml.safe_dump({key: value}, default_flow_style=True, width=10**6).strip()
            lines.append((f"{indent}{text.removeprefix('{').removesuffix('}')}", note))


_SECTIONS = {f.name for f in dataclasses.fields(ExperimentConfig) if f.default_factory is not dataclasses.MISSING}
