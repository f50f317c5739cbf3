"""What every built-in dataset loader checks before it builds anything: its ``dataset.options``
against its defaults (unknown keys and wrong types refused, one line each), the bounds of each
option, and that what it is about to build fits in this machine's memory."""

from __future__ import annotations

import math

from gnnbridge.core.errors import ConfigError, ResourceError, did_you_mean
from gnnbridge.core.interfaces import DatasetConfig, available_memory, format_bytes


def options(config: DatasetConfig, defaults: dict) -> dict:
    """``config.options`` over ``defaults``, with unknown keys and wrong types refused."""
    out = dict(defaults)
    for key, value in config.options.items():
        if key not in defaults:
            valid = (
                f"Valid options: {', '.join(sorted(defaults))}."
                if defaults
                else f"Dataset '{config.name}' takes no options; remove dataset.options."
            )
            raise ConfigError(
                f"Unknown option {_show(f'dataset.options.{key}')} for dataset '{config.name}'"
                f"{did_you_mean(str(key)[:100], defaults)}. {valid}"
            )
        expected = type(defaults[key])
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:
                raise ConfigError(f"dataset.options.{key}={_show(value)} is too large for a number.") from None
        if type(value) is not expected:
            raise ConfigError(f"dataset.options.{key}={_show(value)} has the wrong type: expected {expected.__name__}.")
        if expected is float and not math.isfinite(value):
            raise ConfigError(f"dataset.options.{key}={value} is not a finite number; give a real number.")
        out[key] = value
    return out


def _show(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_fits(what: str, nbytes: int, fix: str) -> None:
    """Refuse to build something of ``nbytes`` that this machine cannot hold (before building it)."""
    free = available_memory()
    if nbytes > free:
        raise ResourceError(
            f"{what} would need about {format_bytes(nbytes)} of memory but {format_bytes(free)} is free; {fix}."
        )


def at_least(key: str, value: int, low: int, why: str) -> None:
    if value < low:
        raise ConfigError(f"dataset.options.{key}={value} is too small: it must be at least {low} ({why}).")
