"""The experiment configuration, one job per module:

    schema.py   the sections as dataclasses, each checking its own values
    bounds.py   each key's valid values, declared on its field: the check and the JSON Schema
    coerce.py   a nested dict (YAML, overrides) made into the dataclasses, key by key
    loading.py  YAML files, ``--set KEY=VALUE`` overrides, YAML out
    guards.py   what a config may be at all (size, depth, alias bombs), before anything reads it
    help.py     each key's help line (``config show``) and the JSON Schema (``config schema``)
    values.py   showing a value in a message, sizes with units, finite and positive numbers

A config is built in layers: the built-in defaults, then an experiment (a YAML file or a
registered name), then ``--set KEY=VALUE`` overrides, then CLI flags; the merged dict is
validated once (:func:`from_dict`), so every later stage can trust it. The names most callers
need are re-exported here.

May import: ``errors`` (nothing else in core: every layer above reads the config).
"""

from gnnbridge.core.config.coerce import from_dict
from gnnbridge.core.config.guards import MAX_DEPTH, MAX_TEXT_BYTES, MAX_VALUES, check_plain, safe_yaml
from gnnbridge.core.config.help import KEY_HELP, annotated_yaml, json_schema, schema_json
from gnnbridge.core.config.loading import apply_overrides, check_overrides, dump_yaml, load_yaml, parse_override
from gnnbridge.core.config.schema import (
    AGGREGATIONS,
    DECODERS,
    DEFAULT_MONITOR,
    DEFAULT_TIMEOUT_S,
    EMBEDDINGS,
    INITS,
    LAYER_STORES,
    LINK_MONITORS,
    MAX_TIMEOUT_S,
    MONITORS,
    NODE_MONITORS,
    OPTIMIZERS,
    PLACES,
    POOLINGS,
    PRECISIONS,
    SCHEDULES,
    TARGET_MONITORS,
    DatasetConfig,
    DeviceChoice,
    EvalConfig,
    EvalMode,
    ExperimentConfig,
    LinkConfig,
    LogConfig,
    ModelSpec,
    PlacementConfig,
    SamplerConfig,
    SamplerKind,
    Task,
    TrainConfig,
)
from gnnbridge.core.config.values import MAX_INT, check_finite, parse_size, show

__all__ = [
    "AGGREGATIONS",
    "DECODERS",
    "DEFAULT_MONITOR",
    "DEFAULT_TIMEOUT_S",
    "KEY_HELP",
    "LAYER_STORES",
    "LINK_MONITORS",
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_TEXT_BYTES",
    "MAX_TIMEOUT_S",
    "MAX_VALUES",
    "MONITORS",
    "NODE_MONITORS",
    "OPTIMIZERS",
    "PLACES",
    "EMBEDDINGS",
    "INITS",
    "POOLINGS",
    "PRECISIONS",
    "SCHEDULES",
    "TARGET_MONITORS",
    "DatasetConfig",
    "DeviceChoice",
    "EvalConfig",
    "EvalMode",
    "ExperimentConfig",
    "LinkConfig",
    "LogConfig",
    "ModelSpec",
    "PlacementConfig",
    "SamplerConfig",
    "SamplerKind",
    "Task",
    "TrainConfig",
    "annotated_yaml",
    "apply_overrides",
    "check_finite",
    "check_overrides",
    "check_plain",
    "dump_yaml",
    "from_dict",
    "json_schema",
    "load_yaml",
    "parse_override",
    "parse_size",
    "safe_yaml",
    "schema_json",
    "show",
]
