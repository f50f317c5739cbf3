"""The experiment schema: one dataclass per section, each checking its own values.

A section's ``__post_init__`` refuses an impossible value in one line naming the key, the value
and what is allowed; :class:`ExperimentConfig` checks what spans sections (fanouts per layer,
the monitor per task). Building one from a dict (types, unknown keys) is :mod:`.coerce`'s job;
reading YAML and ``--set`` is :mod:`.loading`'s; each key's help is in :mod:`.help`.
Dataset-specific knobs live under ``dataset.options`` and are checked by the dataset itself.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from typing import Any

from gnnbridge.core.config.values import choice, parse_size, plain, positive, show
from gnnbridge.core.errors import ConfigError, did_you_mean


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
LINK_MONITORS = ("val_roc_auc", "val_mrr", "val_hits", "val_hits@K")  # val_hits: Hits@ link.hits_at's first K
MONITORS = (*NODE_MONITORS, *LINK_MONITORS[1:])
LINK_PROTOCOLS = ("per-edge", "shared")  # see LinkConfig.protocol
HITS_MONITOR = re.compile(r"val_hits@[1-9][0-9]{0,8}")  # val_hits@50: Hits@50, a K of link.hits_at
DEFAULT_MONITOR = {"node": "val_acc", "graph": "val_acc", "link": "val_roc_auc"}
DECODERS = ("dot", "mlp")
POOLINGS = ("sum", "mean")  # graph readouts (GIN's paper and DGL's tutorial use sum)
EMBEDDINGS = ("dense", "sparse")  # featureless node types' tables (see core/training/sparse.py)

# Seconds a rank may wait on its peers (rendezvous, a collective, a silent heartbeat) before the
# whole job is stopped: long enough for a slow step on a big graph, short enough that a dead
# rank does not hold a cluster allocation for long.
DEFAULT_TIMEOUT_S = 180
MAX_TIMEOUT_S = 7 * 24 * 3600  # beyond a week no step is slow, it is stuck (and timedelta/thread waits overflow)


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
    embeddings: str = "dense"  # featureless node types' tables: dense | sparse gradients (core/training/sparse.py)
    options: dict = field(default_factory=dict)  # keyword arguments of the model's builder

    def __post_init__(self) -> None:
        positive("model.hidden", self.hidden)
        positive("model.layers", self.layers)
        positive("model.heads", self.heads)
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
        if self.embeddings not in EMBEDDINGS:
            raise ConfigError(
                f"model.embeddings={show(self.embeddings)} is not supported"
                f"{did_you_mean(self.embeddings, EMBEDDINGS)}. "
                f"Choose one of: {', '.join(EMBEDDINGS)} (sparse: each step updates the rows its batch looked up)."
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
    # each rank's training batches between checkpoints/latest.pt within an epoch (an epoch of hours
    # resumes where it stopped, exactly); 0: only at the end of an epoch
    checkpoint_every_batches: int = 0
    patience: int = 0  # stop after this many epochs without a better monitor value; 0: never
    max_batches: int = 0  # each rank's batches per epoch, at most (the first of its shuffled share); 0: all
    monitor: str = ""  # the validation metric that picks "best" and drives early stopping; "": the task's default

    def __post_init__(self) -> None:
        positive("train.epochs", self.epochs)
        positive("train.batch_size", self.batch_size)
        for key in ("checkpoint_every", "checkpoint_every_batches", "patience", "max_batches"):
            if getattr(self, key) < 0:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be >= 0 (0 turns it off).")
        if self.monitor and self.monitor not in MONITORS and not HITS_MONITOR.fullmatch(self.monitor):
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
        choice("train.optimizer", self.optimizer, OPTIMIZERS, "an optimizer")
        if self.momentum < 0 or self.momentum >= 1:
            raise ConfigError(f"train.momentum={self.momentum} is out of range; expected 0 <= momentum < 1, e.g. 0.9.")
        if self.momentum and self.optimizer != "sgd":
            raise ConfigError(
                f"train.momentum={self.momentum} applies to train.optimizer=sgd only, but it is "
                f"{show(self.optimizer)}; drop train.momentum or set train.optimizer=sgd."
            )

    def _check_schedule(self) -> None:
        choice("train.schedule", self.schedule, SCHEDULES, "a learning-rate schedule")
        if self.warmup_epochs < 0:
            raise ConfigError(f"train.warmup_epochs={self.warmup_epochs} must be >= 0 (0: no warm-up).")
        if self.warmup_epochs >= self.epochs and self.warmup_epochs:
            raise ConfigError(
                f"train.warmup_epochs={self.warmup_epochs} must be less than train.epochs={self.epochs}, "
                "or the warm-up never ends."
            )
        positive("train.step_size", self.step_size)
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
        positive("eval.batch_size", self.batch_size)
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
TABLE_COPIES = ("machine", "rank")


@dataclass
class PlacementConfig:
    """Where data lives and work runs on each rank (see docs/performance.md, "Placement and precision")."""

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
    # model.embeddings=sparse: one copy of the tables per machine, shared by its ranks (each
    # updates its part), or one per rank (core/training/shared_tables.py says when "machine" applies)
    tables: str = "machine"

    def __post_init__(self) -> None:
        if self.tables not in TABLE_COPIES:
            raise ConfigError(
                f"placement.tables={show(self.tables)} is not supported{did_you_mean(self.tables, TABLE_COPIES)}; "
                f"choose one of: {', '.join(TABLE_COPIES)}."
            )
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
    # per-edge (ogbl-citation2): eval_negatives fixed destinations per val/test edge, MRR and Hits@K;
    # shared (ogbl-collab, -ppa, -ddi): eval_negatives (src, dst) pairs per split, shared by its edges, Hits@K
    protocol: str = "per-edge"
    eval_negatives: int = 100  # per-edge: per val/test edge; shared: per split (the same for every run)
    hits_at: int | list[int] = 10  # K of Hits@K, or several: [20, 50, 100]
    val_fraction: float = 0.1  # of the target edges, when the dataset does not split them itself
    test_fraction: float = 0.1

    def __post_init__(self) -> None:
        for key in ("negatives", "eval_negatives"):
            positive(f"link.{key}", getattr(self, key))
        for key in ("val_fraction", "test_fraction"):
            if not 0 < getattr(self, key) < 0.5:
                raise ConfigError(f"link.{key}={getattr(self, key)} must be in (0, 0.5), e.g. 0.1.")
        choice("link.protocol", self.protocol, LINK_PROTOCOLS, "an evaluation protocol")
        self._check_hits()

    @property
    def ks(self) -> list[int]:
        """Every K of Hits@K, in the order given (``hits_at`` may be one int)."""
        return [self.hits_at] if isinstance(self.hits_at, int) else list(self.hits_at)

    def _check_hits(self) -> None:
        ks = self.ks
        if not ks or len(set(ks)) != len(ks) or any(type(k) is not int or k <= 0 for k in ks):
            raise ConfigError(
                f"link.hits_at={show(self.hits_at)} must be a positive integer or a list of distinct "
                "ones, e.g. link.hits_at=10 or link.hits_at=[20,50,100]."
            )
        candidates = self.eval_negatives + (self.protocol == "per-edge")
        if max(ks) > candidates:
            what = (
                "candidates each evaluation edge is ranked among (link.eval_negatives + 1)"
                if self.protocol == "per-edge"
                else "shared negatives each split is scored against (link.eval_negatives)"
            )
            raise ConfigError(f"link.hits_at={show(self.hits_at)} exceeds the {candidates} {what}.")

    def monitors(self) -> tuple[str, ...]:
        """The validation metrics this protocol reports, each a valid ``train.monitor``."""
        mrr = ("val_mrr",) if self.protocol == "per-edge" else ()
        return ("val_roc_auc", *mrr, "val_hits", *(f"val_hits@{k}" for k in self.ks))


@dataclass
class ExperimentConfig:
    name: str = "custom"
    description: str = ""
    task: Task = Task.NODE
    backend: str = ""  # empty: the default backend the package registered (core.plugins)
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
        positive("nproc", self.nproc)
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
        valid = self.link.monitors() if self.task is Task.LINK else NODE_MONITORS
        if train.monitor not in valid:
            scored = f"task={self.task.value}" + (
                f" with link.protocol={self.link.protocol}" if self.task is Task.LINK else ""
            )
            raise ConfigError(
                f"train.monitor={train.monitor} does not score {scored}; choose one of: {', '.join(valid)}."
            )

    def to_dict(self) -> dict:
        return plain(dataclasses.asdict(self))
