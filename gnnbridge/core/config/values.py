"""Small checks and renderings every part of the config uses: how a value is shown in a
message, sizes with units (one pattern for Python and the JSON Schema), finite numbers, enums
made plain for YAML/JSON."""

from __future__ import annotations

import enum
import math
import re
from typing import Any

from gnnbridge.core.errors import ConfigError

MAX_INT = 2**63 - 1  # what torch and numpy can hold


def plain(obj: Any) -> Any:
    """Enums to their values, recursively, so the dict dumps as plain YAML / JSON."""
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def check_finite(key: str, value: float) -> None:
    """Refuse NaN and infinity: they pass every ``>`` check one writes (``inf > 0``) and then
    train to NaN, or wait forever."""
    if not math.isfinite(value):
        raise ConfigError(f"{key}={value} is not a finite number; give a real number (NaN and infinity are refused).")


# A size as text: a number and a unit of powers of 1024 (KB or KiB, any case). Written for both
# Python's re and JSON Schema's regexes (ECMA 262: no inline flags), so placement.feature_cache's
# bound in the schema is this very pattern.
SIZE_PATTERN = r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([bB]|[kKmMgGtT][iI]?[bB])?\s*$"
_SIZE = re.compile(SIZE_PATTERN)
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
