"""What each config key means: one line per key (``gnnbridge config show`` prints them as
comments), and the JSON Schema of an experiment file (``gnnbridge config schema``) so editors
validate and complete experiment YAML.

The schema is pydantic's (``TypeAdapter(ExperimentConfig).json_schema()``: types, defaults,
enums, straight from the dataclasses), completed with what only this package knows: each key's
help line, each key's bound (ranges, choices, list items: the :class:`~.bounds.Bound` its field
declares, which loading checks too), and that unknown keys are refused. Rules between keys stay
out of it (they are code in :mod:`.schema`).
"""

from __future__ import annotations

import dataclasses
import json
import typing

import yaml

from gnnbridge.core.config.bounds import bound_of
from gnnbridge.core.config.schema import ExperimentConfig

# One line per key, shown by ``gnnbridge config show``; a test keeps it complete.
KEY_HELP = {
    "name": "the experiment's name (run folders are named after it)",
    "description": "one line about the experiment",
    "task": "node (a label per node) | graph (a label per graph) | link (edges of one type) | edge (a label per edge)"
    " | a plugin's family (gnnbridge targets lists them)",
    "backend": "pyg | dgl | any installed backend plugin (gnnbridge backends)",
    "nproc": "ranks on this machine (a torchrun / SLURM job sets it to its size)",
    "device": "cpu | cuda | auto (cuda when available and the backend can use it)",
    "timeout": "seconds any rank may wait on its peers before the job stops",
    "max_restarts": "restarts of every rank after a failure, each continuing from latest.pt",
    "dataset": "what to train on (gnnbridge experiments; docs: datasets)",
    "dataset.name": "synthetic, karate, gin-synthetic, rec-synthetic, npz, reddit, ... (a dataset plugin)",
    "dataset.path": "npz: the file; folder: the prepared folder",
    "dataset.root": "downloaded datasets: where they live",
    "dataset.options": "dataset-specific options, e.g. {num_nodes: 20000} for synthetic",
    "dataset.reverse_edges": "heterogeneous graphs: add (dst, rev_<relation>, src) for every edge type",
    "dataset.partitions": "K: a folder cut by gnnbridge partition --parts K; machine M of the job opens part M only",
    "dataset.splits": "given (the splits a .npz, graph object or LIBRARY:CLASS holds) | drawn (ignore them: a seeded "
    "60/20/20 split from train.seed)",
    "dataset.digest": "LIBRARY:CLASS: the content hash of what the class gave the run (training sets it; evaluate, "
    "predict and --resume refuse other data; empty: not checked)",
    "model": "the network, the same on every backend for the built-in architectures",
    "model.arch": "sage | gcn | gat (node), gin (graph), a zoo or plugin model (gnnbridge models), or module:Class",
    "model.hidden": "width of every hidden layer",
    "model.layers": "message-passing layers (one fanout per layer)",
    "model.dropout": "dropout between layers (GIN: on each readout's scores), 0 <= p < 1; graph and link tasks "
    "default to 0",
    "model.aggr": "GraphSAGE neighbour aggregation",
    "model.heads": "GAT attention heads (hidden must divide by heads)",
    "model.pooling": "graph readout (GIN): sum | mean (graph tasks default to mean)",
    "model.embeddings": "featureless node types' tables: dense | sparse (a step updates only the rows it looked up)",
    "model.init": "how a built-in model's weights start: shared (the same on every backend) | library (its own)",
    "model.options": "further keyword arguments of the model's builder, e.g. {jk: cat}",
    "sampler": "which neighbours feed each seed (docs: models and samplers)",
    "sampler.kind": "auto | native (the library's own) | core | a plugin's sampler (gnnbridge samplers)",
    "sampler.fanouts": "neighbours per layer, counted from the seeds; -1: all of them",
    "sampler.edge_fanouts": "heterogeneous graphs: {relation: [per layer]} overriding fanouts",
    "train": "the optimisation (Adam unless train.optimizer says otherwise)",
    "train.epochs": "passes over the training seeds",
    "train.batch_size": "seeds (nodes, graphs or edges) per batch per rank, at most",
    "train.lr": "the learning rate (the peak, with a schedule); link tasks default to 0.001",
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
    "train.checkpoint_every_batches": "each rank's batches between checkpoints/latest.pt inside an epoch (0: off)",
    "train.patience": "early stopping: epochs without a better monitor value (0: off)",
    "train.max_batches": "each rank's batches per epoch, at most: a timed look at a large graph (0: all)",
    "train.monitor": "the validation metric that picks best.pt (empty: the target's first: val_acc, val_roc_auc "
    "for multilabel and links, val_rmse for regression; links also val_mrr, val_hits@K)",
    "train.loss": "the loss (empty: the target's own: cross_entropy, bce, mse; regression also l1, huber)",
    "train.target_scaling": "regression: standard (learnt in each column's training mean and std, reported in "
    "the labels' units) | none (learnt as given)",
    "target": "what each node, edge or graph is predicted as: class | multilabel | regression (or a plugin's target)",
    "eval": "how the final scores are computed",
    "eval.mode": "node tasks: layerwise (exact) | full (every neighbour) | sampled",
    "eval.batch_size": "seeds per inference batch",
    "eval.layer_store": "layer outputs, predict's logits: auto (on disk when they would not fit) | memory | disk",
    "link": "link prediction (task: link)",
    "link.edge_type": "the relation (or src,relation,dst) to predict; empty: the dataset's own",
    "link.negatives": "training negatives per positive edge",
    "link.protocol": "how val/test edges are ranked: per-edge (ogbl-citation2: each among its own "
    "eval_negatives; MRR, Hits@K) | shared (ogbl-collab: against eval_negatives pairs per split; Hits@K)",
    "link.eval_negatives": "fixed negatives drawn from train.seed: per val/test edge (per-edge), or "
    "(src, dst) pairs per split (shared)",
    "link.hits_at": "K of Hits@K (metrics <split>_hits@K), or a list: [20, 50, 100]",
    "link.val_fraction": "of the target edges held out for validation (when the dataset does not)",
    "link.test_fraction": "of the target edges held out for testing (when the dataset does not)",
    "placement": "where data lives and work runs on each rank (docs: performance, placement)",
    "placement.features": "host | device: features and labels copied once to the rank's GPU",
    "placement.topology": "host | device: the graph on the GPU, so the core sampler samples there",
    "placement.prefetch": "batches sampled ahead in a background thread (0: off)",
    "placement.precision": "fp32 | bf16 | fp16 (fp16 needs cuda)",
    "placement.read_depth": "reads in flight per rank gathering a folder's mapped features (1-256)",
    "placement.tables": "model.embeddings=sparse: machine (one copy per machine, its ranks share it) | rank",
    "placement.feature_cache": "RAM per machine (its ranks share it, in /dev/shm) for the most-sampled rows: "
    "512MB, 2GB (0: off)",
    "placement.remote_cache": "a partitioned graph: RAM per machine for the other machines' rows its edges name "
    "most, fetched once: 512MB (0: off)",
    "log": "where each epoch's numbers go besides results.json",
    "log.to": "logger plugins, e.g. [tensorboard, csv] or [mlflow] (gnnbridge loggers)",
    "log.model": "checkpoints a tracking logger keeps: false | end (best.pt, latest.pt) | all (also each one written)",
    "log.mlflow": "log.to=[mlflow]: where the run is tracked (docs: tracking)",
    "log.mlflow.tracking_uri": "the tracking server or store; empty: MLFLOW_TRACKING_URI, else MLflow's default",
    "log.mlflow.experiment": "empty: MLFLOW_EXPERIMENT_NAME, else the experiment's name",
    "log.mlflow.run_name": "empty: the run folder's name",
    "log.wandb": "log.to=[wandb]: the W&B project (WANDB_MODE=offline needs no account)",
    "log.wandb.project": "empty: WANDB_PROJECT, else the experiment's name",
    "log.wandb.entity": "empty: WANDB_ENTITY, else the account's default",
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
        if isinstance(value, dict) and value and dotted in _SECTIONS:
            lines.append((f"{indent}{key}:", note))
            _annotate(value, dotted + ".", depth + 1, lines)
        else:
            text = yaml.safe_dump({key: value}, default_flow_style=True, width=10**6).strip()
            lines.append((f"{indent}{text.removeprefix('{').removesuffix('}')}", note))


def _sections(cls: type, prefix: str = "") -> dict[str, type]:
    """Every section's dotted name and its dataclass, a section inside one (``log.mlflow``) included."""
    found = {}
    for name, hint in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(hint):
            found[f"{prefix}{name}"] = hint
            found.update(_sections(hint, f"{prefix}{name}."))
    return found


_SECTIONS = _sections(ExperimentConfig)  # dotted name -> dataclass


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of an experiment file, every key described by its help line
    and bounded by the bound its field declares (:mod:`.bounds`: the same one loading checks)."""
    import pydantic  # imported here: only this command needs it

    out = pydantic.TypeAdapter(ExperimentConfig).json_schema()
    _describe(out, ExperimentConfig, "")
    for dotted, cls in _SECTIONS.items():
        _describe(out["$defs"][cls.__name__], cls, f"{dotted}.")
    out.update({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "gnnbridge experiment"})
    return out


def _describe(definition: dict, cls: type, prefix: str) -> None:
    definition["additionalProperties"] = False
    bounds = {f.name: bound_of(f) for f in dataclasses.fields(cls)}
    for key, prop in definition.get("properties", {}).items():
        dotted = f"{prefix}{key}"
        prop.pop("title", None)
        if bounds.get(key) is not None:  # the bound's types and limits replace pydantic's types
            kept = {k: prop[k] for k in ("default",) if k in prop}
            prop.clear()
            prop.update({**bounds[key].schema(), **kept})
        if dotted in KEY_HELP:
            prop["description"] = KEY_HELP[dotted]


def schema_json() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"
