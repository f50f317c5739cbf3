"""Reading an experiment: a YAML file, ``--set KEY=VALUE`` overrides (VALUE read as YAML), and
writing a config back as YAML. Every failure is one line naming the file, line or override.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from gnnbridge.core.config.guards import safe_yaml
from gnnbridge.core.config.schema import ExperimentConfig
from gnnbridge.core.config.values import show
from gnnbridge.core.errors import ConfigError, DataFileNotFoundError


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
