"""The experiment schema: one dataclass per section, each checking its own values.

A key's valid values (ranges, choices, list items) are declared once on its field
(``bounded(default, bound)``, :mod:`.bounds`): the section's ``__post_init__`` refuses a value
outside them in one line naming the key, the value, what is valid and an example, and
``gnnbridge config schema`` writes the same bounds as JSON Schema. What a bound cannot say is code
below, marked "not in the JSON Schema": rules between keys, and :data:`READ_ONLY_BY`, the keys
only some modes read (one set under another mode is refused, not ignored).
:class:`ExperimentConfig` checks what spans sections (fanouts per layer, the monitor per task).
Building one from a dict (types, unknown keys) is :mod:`.coerce`'s job; reading YAML and
``--set`` is :mod:`.loading`'s; each key's help is in :mod:`.help`. Dataset-specific knobs live
under ``dataset.options`` and are checked by the dataset itself.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gnnbridge.core.config.bounds import Bound, as_set, bounded, check_fields, integer, list_of, number, one_of
from gnnbridge.core.config.values import MAX_INT, SIZE_PATTERN, plain, show
from gnnbridge.core.errors import ConfigError, did_you_mean, scrubbed


class Task(str, enum.Enum):
    """The built-in task families, which are also the *kinds* every family runs as: the shape of
    its records, models and batches (a plugin's family names one, see ``ExperimentConfig.kind``)."""

    NODE = "node"  # one label per node of one graph (GraphData)
    GRAPH = "graph"  # one label per graph of a collection (GraphCollection)
    LINK = "link"  # whether an edge of one type exists (HeteroGraphData; a GraphData is converted)
    EDGE = "edge"  # a label (class, labels or values) per given edge of one type (HeteroGraphData)


# How a plugin's task family name becomes its kind. The config layer sits below the plugins, so
# the family registry (core/plugins/registries.py) appends its lookup here when it is imported;
# each returns the kind, or None for a name it does not hold.
TASK_KINDS: list[Callable[[str], Task | None]] = []
TASK_NAME = r"^[a-z][a-z0-9_-]*$"  # a family's name, as the config's ``task`` gives it


def kind_of(task: str) -> Task | None:
    """The kind the family ``task`` runs as (a built-in's own, a loaded plugin's), or None."""
    if task in Task._value2member_map_:
        return Task(task)
    return next((k for k in (find(task) for find in TASK_KINDS) if k is not None), None)


# The keys a task kind defaults otherwise than the sections' fields do, filled in when a config
# is loaded (from_dict: YAML, --set, a dict) for the keys it does not give; a section built in
# Python holds what it was built with. Each was measured with the defaults on both libraries
# (docs/tasks.md, "Defaults that learn"):
# - a graph task's readout averages its nodes' states (a molecule's property is a share or a mean
#   over its atoms far more often than a sum, which grows with the graph; OGB's molecule examples
#   and chemprop pool by the mean) and drops nothing (GIN's dropout falls on each readout's scores,
#   where on regression values it is noise the loss fits around): on 1,000 molecule-shaped graphs
#   the share of one bond type went from test R² -0.40 to 0.96 after 10 epochs;
# - a link task drops nothing and steps at 0.001 (as the ogbl experiments do): at 0.01 a dot
#   product of ReLU states collapsed to one score for every pair (loss log 2, ROC-AUC 0.50 on the
#   synthetic graph), at 0.001 without dropout it reached 0.72.
KIND_DEFAULTS: dict[Task, dict[str, dict[str, Any]]] = {
    Task.GRAPH: {"model": {"pooling": "mean", "dropout": 0.0}},
    Task.LINK: {"model": {"dropout": 0.0}, "train": {"lr": 0.001}},
}


def with_kind_defaults(data: dict) -> dict:
    """``data`` (a config as a nested dict) with its task kind's :data:`KIND_DEFAULTS` for the keys
    it does not give (a task that is no family yet, or a section that is no mapping, is left for
    the checks to name)."""
    task = data.get("task", Task.NODE.value)
    kind = kind_of(task.value if isinstance(task, Task) else task) if isinstance(task, str) else None
    out = dict(data)
    for section, values in KIND_DEFAULTS.get(kind, {}).items():
        given = out.get(section, {})
        if isinstance(given, dict):
            out[section] = {**values, **given}
    return out


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
# The validation metrics of each built-in target (gnnbridge/plugins/tasks.py); the first is its
# default monitor. A plugin's target names its own, which any val_NAME may be.
TARGET_MONITORS = {
    "class": NODE_MONITORS,
    "multilabel": ("val_roc_auc", "val_ap", "val_label_acc"),
    "regression": ("val_rmse", "val_mae", "val_r2"),  # lower is better for the errors
}
MONITORS = tuple(dict.fromkeys([*NODE_MONITORS, *LINK_MONITORS[1:], *(m for t in TARGET_MONITORS.values() for m in t)]))
METRIC_NAME = r"^val_[a-z][a-z0-9_]*(@[1-9][0-9]{0,8})?$"  # val_hits@50, or a plugin target's val_NAME
# The losses of the built-in targets; "" is the target's default (its first).
LOSSES = ("cross_entropy", "bce", "mse", "l1", "huber")
LINK_PROTOCOLS = ("per-edge", "shared")  # see LinkConfig.protocol
DEFAULT_MONITOR = {"node": "val_acc", "graph": "val_acc", "link": "val_roc_auc", "edge": "val_acc"}
DECODERS = ("dot", "mlp")
POOLINGS = ("sum", "mean")  # graph readouts (GIN's paper and DGL's tutorial use sum)
EMBEDDINGS = ("dense", "sparse")  # featureless node types' tables (see core/training/sparse.py)
# How a built-in model's weights start (core/models/init.py): one draw on every backend, or each
# library's own (PyG's and DGL's then start apart, as a hand-written script on that library does).
INITS = ("shared", "library")
PLACES = ("host", "device")
LAYER_STORES = ("auto", "memory", "disk")  # see core/inference/layerstore.py
OPTIMIZERS = ("adam", "adamw", "sgd")  # see core/training/optim.py
TARGET_SCALINGS = ("standard", "none")  # regression's values as the model learns them (core/records/labels.py)
SCHEDULES = ("none", "cosine", "step")
PRECISIONS = ("fp32", "bf16", "fp16")
TABLE_COPIES = ("machine", "rank")
DATA_SPLITS = ("given", "drawn")  # dataset.splits: the data's own, or gnnbridge's seeded split
FANOUT = integer(ge=1, also=(-1,), note="-1 for all neighbours")  # one hop's neighbours per node
# bytes of RAM, or "512MB", "2GB" (values.parse_size reads it); 0: off
RAM_SIZE = integer(
    ge=0,
    pattern=SIZE_PATTERN,
    max_length=40,
    form="a number with a unit: 512MB, 2GB",
    what="a size",
    note="bytes; 0: off",
    example="512MB",
)

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
    # a folder partitioned by gnnbridge partition: the job's K machines each open their own part
    partitions: int = bounded(0, integer(ge=0, note="0: the whole folder on every machine"))
    # the splits a graph's arrays hold (a .npz, a graph object, a library's class): given, or
    # drawn (ignored: gnnbridge's seeded 60/20/20 split instead, e.g. for pyg:KarateClub's lone train_mask)
    splits: str = bounded("given", one_of(DATA_SPLITS, "a splits choice", note="drawn: ignore the data's own"))
    # a library's class (LIBRARY:CLASS): the content hash of what it gave the run (set by training,
    # checked by evaluate, predict, --resume and a restarted rank); none: not pinned
    digest: str | None = bounded(
        None,
        Bound(
            pattern=r"^[0-9a-f]{20}$",
            form="the 20 hex digits a run recorded",
            also=(None,),
            what="a digest",
            example="5f0c8e2b9a41d3e7c6b2",
        ),
    )

    def __post_init__(self) -> None:
        check_fields(self, "dataset.")


@dataclass
class ModelSpec:
    """Backend-neutral model description: the same spec builds the same shapes on every backend.

    ``arch`` names a registered model (``gnnbridge models``) or a class by import path
    (``my_lab.models:DeepSAGE``); ``options`` are further keyword arguments of its builder. Which
    of the other fields a model reads is the model's business (``heads`` is GAT's)."""

    arch: str = bounded(
        "sage", Bound(nonblank=True, what="a model (gnnbridge models lists them) or a class as module:Class")
    )
    hidden: int = bounded(64, integer(ge=1))
    layers: int = bounded(2, integer(ge=1))
    dropout: float = bounded(0.5, number(ge=0, lt=1))  # graph and link tasks: 0 (KIND_DEFAULTS)
    aggr: str = bounded("mean", one_of(AGGREGATIONS, note="the aggregations both libraries compute alike"))
    # attention heads (hidden is the per-layer output width, split over heads)
    heads: int = bounded(4, integer(ge=1))
    pooling: str = bounded("sum", one_of(POOLINGS))  # graph readout for graph-level models (GIN); graph tasks: mean
    # featureless node types' tables: dense | sparse gradients (core/training/sparse.py)
    embeddings: str = bounded(
        "dense", one_of(EMBEDDINGS, note="sparse: each step updates the rows its batch looked up")
    )
    init: str = bounded("shared", one_of(INITS, note="library: each library's own draws, which differ between them"))
    options: dict = field(default_factory=dict)  # keyword arguments of the model's builder

    def __post_init__(self) -> None:
        check_fields(self, "model.")
        # Not in the JSON Schema: Python's rule for a keyword name (Unicode letters) has no pattern there.
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
    # auto, native, core, or a plugin's sampler (gnnbridge samplers)
    kind: str = bounded(
        "auto", Bound(nonblank=True, what="auto, native, core or a plugin's sampler (gnnbridge samplers lists them)")
    )
    fanouts: list[int] = bounded([10, 10], list_of(FANOUT, min_items=1, example="[25,10]"))
    # Heterogeneous graphs: fanouts per relation name (or "src,relation,dst"), overriding ``fanouts``.
    edge_fanouts: dict = bounded({}, Bound(values=list_of(FANOUT, example="[25,10]"), example="{writes: [5,5]}"))

    def __post_init__(self) -> None:
        check_fields(self, "sampler.")
        # Not in the JSON Schema: a relation's list has as many fanouts as sampler.fanouts.
        for rel, fanouts in self.edge_fanouts.items():
            if len(fanouts) != len(self.fanouts):
                raise ConfigError(
                    f"sampler.edge_fanouts.{rel}={show(fanouts)} must be a list of {len(self.fanouts)} "
                    "fanouts (one per layer, like sampler.fanouts; -1 for all neighbours)."
                )


@dataclass
class TrainConfig:
    epochs: int = bounded(10, integer(ge=1))
    batch_size: int = bounded(512, integer(ge=1))
    lr: float = bounded(0.01, number(gt=0))  # link tasks: 0.001 (KIND_DEFAULTS)
    weight_decay: float = bounded(0.0, number(ge=0))
    optimizer: str = bounded("adam", one_of(OPTIMIZERS, "an optimizer"))  # see core/training/optim.py
    momentum: float = bounded(0.0, number(ge=0, lt=1, example="0.9"))  # sgd only (READ_ONLY_BY)
    # the learning rate per epoch: none | cosine | step
    schedule: str = bounded("none", one_of(SCHEDULES, "a learning-rate schedule"))
    # epochs of linear warm-up to train.lr before the schedule (any schedule)
    warmup_epochs: int = bounded(0, integer(ge=0, note="0: no warm-up"))
    step_size: int = bounded(10, integer(ge=1))  # step: epochs between decays
    gamma: float = bounded(0.1, number(gt=0, le=1))  # step: the factor of each decay
    min_lr: float = bounded(0.0, number(ge=0))  # cosine: the learning rate it anneals to
    seed: int = bounded(0, integer(ge=0, le=MAX_INT))
    # epochs between checkpoints/latest.pt; 0: only after the last epoch
    checkpoint_every: int = bounded(1, integer(ge=0, note="0: only after the last epoch"))
    # each rank's training batches between checkpoints/latest.pt within an epoch (an epoch of hours
    # resumes where it stopped, exactly); 0: only at the end of an epoch
    checkpoint_every_batches: int = bounded(0, integer(ge=0, note="0: only at the end of an epoch"))
    # stop after this many epochs without a better monitor value; 0: never
    patience: int = bounded(0, integer(ge=0, note="0: never"))
    # each rank's batches per epoch, at most (the first of its shuffled share); 0: all
    max_batches: int = bounded(0, integer(ge=0, note="0: all"))
    # the validation metric that picks "best" and drives early stopping; "": the task's default
    monitor: str = bounded(
        "",
        one_of(
            tuple(m for m in MONITORS if m != "val_hits@K"),  # that one is the pattern, below
            "a validation metric",
            pattern=METRIC_NAME,
            form="val_hits@K or a plugin target's val_NAME",
            also=("",),
            note="val_roc_auc for two classes only",
            example="val_acc",
        ),
    )
    # the loss: "" is the target's own (cross_entropy, bce, mse); regression also takes l1, huber
    loss: str = bounded(
        "",
        one_of(
            LOSSES, "a loss", pattern=r"^[a-z][a-z0-9_]*$", form="a plugin target's loss", also=("",),
            note="empty: the target's default",
        ),
    )  # fmt: skip
    # regression: standard (each column's training mean and std; the model learns standard units,
    # every figure is in the labels' units) | none (the model learns the values as they are)
    target_scaling: str = bounded("standard", one_of(TARGET_SCALINGS, "a target scaling"))

    def __post_init__(self) -> None:
        check_fields(self, "train.")
        check_read(self, "train.")
        # Not in the JSON Schema: rules between keys.
        if self.warmup_epochs >= self.epochs and self.warmup_epochs:
            raise ConfigError(
                f"train.warmup_epochs={self.warmup_epochs} must be less than train.epochs={self.epochs}, "
                "or the warm-up never ends."
            )
        if not self.min_lr < self.lr:
            raise ConfigError(f"train.min_lr={self.min_lr} is out of range; expected 0 <= min_lr < train.lr={self.lr}.")


@dataclass
class EvalConfig:
    mode: EvalMode = EvalMode.LAYERWISE
    batch_size: int = bounded(4096, integer(ge=1))  # seeds per inference batch
    # where each layer-wise layer, and predict's logits, live: auto | memory | disk
    layer_store: str = bounded("auto", one_of(LAYER_STORES, "a place for layer outputs"))

    def __post_init__(self) -> None:
        check_fields(self, "eval.")


LOG_MODEL = ("false", "end", "all")  # log.model: which checkpoints a tracking logger keeps (see LogConfig)


@dataclass
class MlflowConfig:
    """``log.to=[mlflow]``: where the run is tracked. Empty keys leave it to MLflow's own
    environment (``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``) and defaults."""

    tracking_uri: str = ""  # "": MLFLOW_TRACKING_URI, else MLflow's default (sqlite:///mlflow.db here)
    experiment: str = ""  # "": MLFLOW_EXPERIMENT_NAME, else the experiment's name
    run_name: str = ""  # "": the run folder's name


@dataclass
class WandbConfig:
    """``log.to=[wandb]``: the W&B project and entity. Empty keys leave them to W&B's own
    environment (``WANDB_PROJECT``, ``WANDB_ENTITY``; ``WANDB_MODE=offline`` needs no account)."""

    project: str = ""  # "": WANDB_PROJECT, else the experiment's name
    entity: str = ""  # "": WANDB_ENTITY, else the account's default


@dataclass
class LogConfig:
    """Where each epoch's numbers go besides ``results.json``: logger plugins by name
    (``gnnbridge loggers`` lists them; built in: ``csv``, ``tensorboard``, ``mlflow``,
    ``wandb``). Rank 0 writes. ``model``: which checkpoints the tracking loggers keep with the
    run (false: none; end: best.pt and latest.pt when the run ends; all: also every checkpoint
    as it is written), as Lightning's ``log_model`` does."""

    to: list[str] = bounded(
        [],
        list_of(
            Bound(nonblank=True, what="a logger's name (gnnbridge loggers lists them)"),
            unique=True,
            example="[tensorboard,csv]",
        ),
    )
    model: Any = bounded(False, one_of(LOG_MODEL, "a checkpoint policy", also=(False,), example="end"))
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def __post_init__(self) -> None:
        check_fields(self, "log.")
        if self.model == "false":  # YAML's false and the text "false" are one choice
            self.model = False
        # Not in the JSON Schema: the names plugins register are known at run time (Unknown logger ...),
        # and a tracker's keys apply only when log.to names it (set otherwise, they would be ignored).
        for name, section in (("mlflow", self.mlflow), ("wandb", self.wandb)):
            given = [f.name for f in dataclasses.fields(section) if getattr(section, f.name) != ""]
            if given and name not in self.to:
                key = f"log.{name}.{given[0]}"
                raise ConfigError(
                    f"{key}={show(scrubbed(getattr(section, given[0])))} applies to log.to=[{name}] only, but "
                    f"log.to={as_set(self.to)}; add {name} to log.to or drop {key}."
                )
        if self.model is not False and not self.to:
            raise ConfigError(
                f"log.model={self.model} keeps checkpoints with a tracking logger, but log.to is empty; set "
                "log.to=[mlflow] (or wandb), or drop log.model."
            )


@dataclass
class PlacementConfig:
    """Where data lives and work runs on each rank (see docs/performance.md, "Placement and precision")."""

    # device: x and y copied once to the rank's device; batches gather there
    features: str = bounded("host", one_of(PLACES, "a place"))
    # device: the CSC arrays on the device, so the core sampler samples there
    topology: str = bounded("host", one_of(PLACES, "a place"))
    # batches sampled ahead in a background thread while the current one computes
    prefetch: int = bounded(0, integer(ge=0, le=16, note="0: off"))
    # bf16 / fp16: forward and loss under torch.autocast (fp16 with loss scaling)
    precision: str = bounded("fp32", one_of(PRECISIONS))
    # bytes (or "512MB", "2GB") of RAM per machine (shared by its ranks, in /dev/shm) for the rows
    # of the highest in-degree nodes; 0: off (values.parse_size reads it)
    feature_cache: Any = bounded(0, RAM_SIZE)
    # a partitioned graph (dataset.partitions): bytes of RAM per machine for the rows of the other
    # machines' nodes its part's edges name most often, fetched once at the start; 0: off
    remote_cache: Any = bounded(0, RAM_SIZE)
    # threads gathering rows of a feature table mapped from a folder: page faults in flight (the
    # disk's queue depth on a cold page cache; a blocked thread costs no CPU)
    read_depth: int = bounded(32, integer(ge=1, le=256, note="reads in flight per rank on a folder's feature file"))
    # model.embeddings=sparse: one copy of the tables per machine, shared by its ranks (each
    # updates its part), or one per rank (core/training/shared_tables.py says when "machine" applies)
    tables: str = bounded("machine", one_of(TABLE_COPIES))

    def __post_init__(self) -> None:
        check_fields(self, "placement.")


@dataclass
class LinkConfig:
    """Link prediction: which edges are predicted, how they are split, and how scored."""

    edge_type: str = ""  # the relation name (or "src,relation,dst") to predict; "": the dataset's own target
    # training negatives per positive edge (uniform over destination nodes)
    negatives: int = bounded(1, integer(ge=1))
    # per-edge (ogbl-citation2): eval_negatives fixed destinations per val/test edge, MRR and Hits@K;
    # shared (ogbl-collab, -ppa, -ddi): eval_negatives (src, dst) pairs per split, shared by its edges, Hits@K
    protocol: str = bounded("per-edge", one_of(LINK_PROTOCOLS, "an evaluation protocol"))
    # per-edge: per val/test edge; shared: per split (the same for every run)
    eval_negatives: int = bounded(100, integer(ge=1))
    # K of Hits@K, or several: [20, 50, 100]
    hits_at: int | list[int] = bounded(
        10, integer(ge=1, items=integer(ge=1), min_items=1, unique=True, example="[20,50,100]")
    )
    # of the target edges, when the dataset does not split them itself
    val_fraction: float = bounded(0.1, number(gt=0, lt=0.5))
    test_fraction: float = bounded(0.1, number(gt=0, lt=0.5))

    def __post_init__(self) -> None:
        check_fields(self, "link.")
        self._check_hits()

    @property
    def ks(self) -> list[int]:
        """Every K of Hits@K, in the order given (``hits_at`` may be one int)."""
        return [self.hits_at] if isinstance(self.hits_at, int) else list(self.hits_at)

    def _check_hits(self) -> None:
        # Not in the JSON Schema: K is at most the candidates link.eval_negatives gives.
        ks = self.ks
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


# Keys that only some modes read: key -> (the key that picks the mode, the modes that read it).
# Set under another mode, such a key would be ignored without a word; it is refused in one line
# instead, naming the key, the mode and the fix. "Set" means "not its default": a run's
# config.yaml holds every key, defaults included, and must load again on --resume, evaluate and
# predict. Checked by check_read (not in the JSON Schema: each row is a rule between two keys).
# Which ModelSpec fields a model reads (model.heads, model.pooling) is the model's business (its
# docstring): a plugin's model may read any of them, so they are not listed here.
READ_ONLY_BY = {
    "train.momentum": ("train.optimizer", ("sgd",)),
    "train.step_size": ("train.schedule", ("step",)),
    "train.gamma": ("train.schedule", ("step",)),
    "train.min_lr": ("train.schedule", ("cosine",)),
    "placement.tables": ("model.embeddings", ("sparse",)),  # only sparse tables have copies to place
    "train.target_scaling": ("target", ("regression",)),  # the built-in target whose values are scaled
    "sampler.fanouts": ("task", ("node", "link", "edge")),  # graph tasks batch whole graphs
    "sampler.edge_fanouts": ("task", ("node", "link", "edge")),
    "eval.mode": ("task", ("node", "link", "edge")),  # whole graphs are scored whole
    **{f"link.{f.name}": ("task", ("link",)) for f in dataclasses.fields(LinkConfig)},
}


def _either(modes: tuple[str, ...]) -> str:
    """``node``, ``node or link``, ``node, link or edge``."""
    return modes[0] if len(modes) == 1 else f"{', '.join(modes[:-1])} or {modes[-1]}"


def check_read(section: Any, prefix: str) -> None:
    """Refuse a key of :data:`READ_ONLY_BY` set away from its default under a mode that does not
    read it. ``section`` at ``prefix`` (``"train."``) checks the rows within it (so a section
    built alone checks them too), the whole config (``""``) the rows between sections."""
    for key, (mode_key, modes) in READ_ONLY_BY.items():
        home, mode_home = key.rpartition(".")[0], mode_key.rpartition(".")[0]
        if (f"{home}." if home == mode_home and home else "") != prefix:
            continue
        owner, name = _owner(section, key.removeprefix(prefix))
        value, default = getattr(owner, name), _default(type(owner), name)
        mode = _mode(section, mode_key.removeprefix(prefix))
        if mode in modes or value == default:
            continue
        fix = f"{mode_key}={modes[0]}" if len(modes) == 1 else f"{mode_key} to one of: {', '.join(modes)}"
        raise ConfigError(
            f"{key}={_shown(value)} applies to {mode_key}={_either(modes)} only, but it is {show(mode)}; "
            f"drop {key} (its default is {_shown(default)}) or set {fix}."
        )


def _mode(section: Any, key: str) -> Any:
    """The mode ``key`` picks; for ``task``, the kind a plugin's family runs as."""
    if key == "task":
        return section.kind.value
    return plain(getattr(*_owner(section, key)))


def _owner(section: Any, dotted: str) -> tuple[Any, str]:
    """The dataclass holding the field at ``dotted`` (relative to ``section``), and its name."""
    *path, name = dotted.split(".")
    for part in path:
        section = getattr(section, part)
    return section, name


def _default(cls: type, name: str) -> Any:
    found = next(f for f in dataclasses.fields(cls) if f.name == name)
    return found.default_factory() if found.default is dataclasses.MISSING else found.default


def _shown(value: Any) -> str:
    return show(plain(value))


@dataclass
class ExperimentConfig:
    name: str = "custom"
    description: str = ""
    # node | graph | link | edge, or a plugin's task family (see kind)
    task: str = bounded(
        "node",
        one_of(
            tuple(t.value for t in Task), "a task family", pattern=TASK_NAME, form="a plugin's family", example="node"
        ),
    )
    # what each item is predicted as: class | multilabel | regression, or a plugin's target
    target: str = "class"
    backend: str = ""  # empty: the default backend the package registered (core.plugins)
    nproc: int = bounded(1, integer(ge=1))
    device: DeviceChoice = DeviceChoice.CPU
    # seconds; see DEFAULT_TIMEOUT_S
    timeout: float = bounded(DEFAULT_TIMEOUT_S, number(gt=0, le=MAX_TIMEOUT_S, note="seconds", example="120"))
    # times the launcher restarts every rank after a failure (each resumes the run)
    max_restarts: int = bounded(0, integer(ge=0, note="0: a failure ends the run"))
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelSpec = field(default_factory=ModelSpec)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        if isinstance(self.task, Task):  # ExperimentConfig(task=Task.LINK) from Python: its name
            self.task = self.task.value
        check_fields(self, "")
        # Not in the JSON Schema: rules between keys of different sections.
        if self.placement.precision == "fp16" and self.device is DeviceChoice.CPU:
            raise ConfigError(
                "placement.precision=fp16 needs --device cuda (DGL's CPU kernels and most CPUs have no "
                "fp16 arithmetic); use placement.precision=bf16 on the CPU."
            )
        if self.known_kind() is not None:  # a plugin's family is checked once the plugins are loaded
            self.check_task()

    @property
    def kind(self) -> Task:
        """The built-in shape the task runs as (its records, models, batches, which backends run
        it): a built-in task is its own kind, a plugin's family names the one it runs as."""
        kind = self.known_kind()
        if kind is None:
            raise ConfigError(
                f"task={self.task} is not a task family; choose one of: {', '.join(t.value for t in Task)} "
                "or a plugin's (gnnbridge targets lists them)."
            )
        return kind

    def known_kind(self) -> Task | None:
        return kind_of(self.task)

    def check_task(self) -> None:
        """The rules that depend on the task's kind (run again by preflight for a plugin's family)."""
        check_read(self, "")
        self._check_target()
        self._check_monitor()
        # Graph tasks read whole graphs: fanouts do not apply to them.
        if self.kind is not Task.GRAPH and len(self.sampler.fanouts) != self.model.layers:
            raise ConfigError(
                f"sampler.fanouts={self.sampler.fanouts} has {len(self.sampler.fanouts)} entries "
                f"but model.layers={self.model.layers}; give one fanout per layer."
            )

    def _check_target(self) -> None:
        """A link task scores pairs as edges or not: its target is ``class``."""
        if self.kind is Task.LINK and self.target != "class":
            raise ConfigError(
                f"target={self.target} applies to task=node, edge or graph; task={self.task} predicts whether an edge "
                "exists (target=class)."
            )

    def _check_monitor(self) -> None:
        """The monitor the task and a built-in target report (a plugin's target is checked by
        preflight, once the plugins are loaded)."""
        train, link = self.train, self.kind is Task.LINK
        if not link and self.target not in TARGET_MONITORS:
            return
        if not train.monitor:
            train.monitor = TARGET_MONITORS[self.target][0] if not link else DEFAULT_MONITOR["link"]
        valid = self.link.monitors() if link else TARGET_MONITORS[self.target]
        if train.monitor not in valid:
            scored = f"task={self.task}" + (f" with link.protocol={self.link.protocol}" if link else "")
            if self.target != "class":
                scored += f" and target={self.target}"
            raise ConfigError(
                f"train.monitor={train.monitor} does not score {scored}; choose one of: {', '.join(valid)}"
                f"{did_you_mean(train.monitor, valid)}."
            )

    def to_dict(self) -> dict:
        return plain(dataclasses.asdict(self))
