"""Keys that only some modes read (READ_ONLY_BY): set under a mode that ignores them, they are
refused in one line (the key, the mode, the fix), as ``train.momentum`` with adam always was;
under a mode that reads them, or left at their defaults (as every run's config.yaml holds them),
they load."""

from __future__ import annotations

import dataclasses
import enum
import typing

import pytest

from gnnbridge.core.config import ExperimentConfig, TrainConfig, from_dict
from gnnbridge.core.config.bounds import bound_of
from gnnbridge.core.config.schema import READ_ONLY_BY, TARGET_MONITORS
from gnnbridge.core.errors import ConfigError

# A value other than the default for each key, valid under the modes that read it.
SET = {
    "train.momentum": 0.9,
    "train.step_size": 3,
    "train.gamma": 0.5,
    "train.min_lr": 0.001,
    "placement.tables": "rank",
    "sampler.fanouts": [5, 5],
    "sampler.edge_fanouts": {"writes": [5, 5]},
    "eval.mode": "sampled",
    "link.edge_type": "buys",
    "link.negatives": 3,
    "link.protocol": "shared",
    "link.eval_negatives": 50,
    "link.hits_at": [5, 20],
    "link.val_fraction": 0.2,
    "link.test_fraction": 0.2,
    "train.target_scaling": "none",
}


def nested(pairs: dict) -> dict:
    data: dict = {}
    for dotted, value in pairs.items():
        *path, name = dotted.split(".")
        node = data
        for part in path:
            node = node.setdefault(part, {})
        node[name] = value
    return data


def modes_of(mode_key: str) -> list[str]:
    """Every value the key that picks the mode may take: its declared choices, or its Enum's (the
    built-in targets for ``target``, whose names a plugin may add to)."""
    if mode_key == "target":
        return list(TARGET_MONITORS)
    *path, name = mode_key.split(".")
    cls = ExperimentConfig
    for part in path:
        cls = typing.get_type_hints(cls)[part]
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    hint = typing.get_type_hints(cls)[name]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return [m.value for m in hint]
    return list(bound_of(field).choices)


IGNORING = [
    (key, mode) for key, (mode_key, reads) in READ_ONLY_BY.items() for mode in modes_of(mode_key) if mode not in reads
]
READING = [(key, mode) for key, (_, reads) in READ_ONLY_BY.items() for mode in reads]


def test_every_key_only_some_modes_read_is_tested_and_is_a_key():
    assert set(SET) == set(READ_ONLY_BY)
    keys = {f"link.{f.name}" for f in dataclasses.fields(ExperimentConfig().link)}
    assert keys <= set(READ_ONLY_BY)


@pytest.mark.parametrize("key, mode", IGNORING, ids=[f"{k}-{m}" for k, m in IGNORING])
def test_a_key_set_under_a_mode_that_ignores_it_is_refused_naming_the_fix(key, mode):
    mode_key, reads = READ_ONLY_BY[key]
    with pytest.raises(ConfigError) as err:
        from_dict(nested({key: SET[key], mode_key: mode}))
    line = str(err.value)
    assert "\n" not in line
    either = reads[0] if len(reads) == 1 else f"{', '.join(reads[:-1])} or {reads[-1]}"  # "node, link or edge"
    assert line.startswith(f"{key}=") and f"applies to {mode_key}={either} only" in line, line
    assert f"but it is '{mode}'; drop {key} (its default is " in line and f"or set {mode_key}" in line, line


@pytest.mark.parametrize("key, mode", READING, ids=[f"{k}-{m}" for k, m in READING])
def test_a_key_set_under_a_mode_that_reads_it_loads(key, mode):
    config = from_dict(nested({key: SET[key], READ_ONLY_BY[key][0]: mode}))
    section, _, name = key.rpartition(".")
    value = getattr(getattr(config, section), name)
    assert (value.value if isinstance(value, enum.Enum) else value) == SET[key]


@pytest.mark.parametrize("key, mode", IGNORING, ids=[f"{k}-{m}" for k, m in IGNORING])
def test_a_key_left_at_its_default_loads_under_any_mode_as_a_runs_config_yaml_holds_it(key, mode):
    mode_key = READ_ONLY_BY[key][0]
    config = from_dict(nested({mode_key: mode}))
    again = from_dict(config.to_dict())  # every key written out, defaults included
    assert again == config


def test_the_messages_a_user_reads():
    cases = [
        (
            ("train.momentum", 0.9, "train.optimizer", "adam"),
            "train.momentum=0.9 applies to train.optimizer=sgd only, but it is 'adam'; drop train.momentum "
            "(its default is 0.0) or set train.optimizer=sgd.",
        ),
        (
            ("train.gamma", 0.5, "train.schedule", "cosine"),
            "train.gamma=0.5 applies to train.schedule=step only, but it is 'cosine'; drop train.gamma "
            "(its default is 0.1) or set train.schedule=step.",
        ),
        (
            ("train.step_size", 3, "train.schedule", "none"),
            "train.step_size=3 applies to train.schedule=step only, but it is 'none'; drop train.step_size "
            "(its default is 10) or set train.schedule=step.",
        ),
        (
            ("train.min_lr", 0.001, "train.schedule", "step"),
            "train.min_lr=0.001 applies to train.schedule=cosine only, but it is 'step'; drop train.min_lr "
            "(its default is 0.0) or set train.schedule=cosine.",
        ),
        (
            ("sampler.fanouts", [5, 5], "task", "graph"),
            "sampler.fanouts=[5, 5] applies to task=node, link or edge only, but it is 'graph'; drop sampler.fanouts "
            "(its default is [10, 10]) or set task to one of: node, link, edge.",
        ),
    ]
    for (key, value, mode_key, mode), line in cases:
        with pytest.raises(ConfigError) as err:
            from_dict(nested({key: value, mode_key: mode}))
        assert str(err.value) == line


def test_a_section_built_alone_refuses_what_it_ignores():
    """The rows within one section are that section's own check: TrainConfig built in Python
    (the optimizer tests, a plugin) refuses as a loaded config does."""
    with pytest.raises(ConfigError, match="train.step_size=3 applies to train.schedule=step only"):
        TrainConfig(step_size=3)
    assert TrainConfig(schedule="step", step_size=3).step_size == 3
