"""A nested dict (YAML, ``--set``) made into the schema's dataclasses, key by key.

Hand-written rather than pydantic's validation: every refusal here is one line that names the
dotted key, shows the value cut short, lists the valid keys or choices and guesses a typo (tests
assert these lines), and the conversions are the ones YAML users need and no more (an int where
a float is expected, ``1e-3`` that YAML 1.1 reads as text); pydantic's errors are multi-line
reports and its lax mode converts more than we accept. pydantic does what it does best for us in
:mod:`.help`: the JSON Schema of the experiment file.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from typing import Any

from gnnbridge.core.config.guards import check_plain
from gnnbridge.core.config.schema import ExperimentConfig, with_kind_defaults
from gnnbridge.core.config.values import MAX_INT, check_finite, show
from gnnbridge.core.errors import ConfigError, did_you_mean

_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def from_dict(data: dict) -> ExperimentConfig:
    """Validate a nested dict into an :class:`ExperimentConfig` (raises :class:`ConfigError`); the
    keys it does not give take their defaults, its task kind's where it has its own
    (:data:`~.schema.KIND_DEFAULTS`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"A config must be a mapping of sections, got {type(data).__name__}.")
    check_plain(data, "The config")
    return _build(ExperimentConfig, with_kind_defaults(data), prefix="")


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
        lists = [a for a in args if typing.get_origin(a) is list]
        if lists and len(args) > 1:  # one value or a list of them (link.hits_at: 10 or [20, 50])
            if isinstance(value, list):
                return _coerce(key, value, lists[0])
            one = next(a for a in args if a not in lists)
            if type(value) is not one:
                raise ConfigError(
                    f"{key}={show(value)} has the wrong type: expected {one.__name__} or a list of them, "
                    f"got {type(value).__name__}."
                )
            return _coerce(key, value, one)
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
    if hint is str and isinstance(value, enum.Enum) and isinstance(value.value, str):
        value = value.value  # a text key given as a str Enum from Python (task=Task.EDGE): its name
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
