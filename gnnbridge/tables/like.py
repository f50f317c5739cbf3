"""``gnnbridge prepare NEW --like DIR``: new tables read exactly as DIR's were.

A model trained on DIR knows DIR's columns, in DIR's order and widths, each encoded by DIR's
fitted state; new rows (new customers, their new orders) must reach it the same way, or its
numbers mean nothing. So the new source is checked against DIR's saved schema (every table and
column DIR used is there, each of a type its saved kind can read: refused in one line naming
the column), and the build applies DIR's encoders (unseen categories to ``<other>``, missing
numbers filled with the saved mean and flagged) and DIR's label classes, fitting nothing. The
label column may be missing from the new tables (they are there to be predicted).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from gnnbridge.core.errors import ConfigError, DataError

INFO = "tables.json"


def like_state(settings, source) -> dict:
    """DIR's (``settings.like``) saved state, its schema checked against ``source``."""
    if settings.label or settings.schema or settings.target:
        raise ConfigError(
            f"--like {settings.like} applies that folder's schema, label and target; leave out --label, "
            "--schema and --target."
        )
    path = Path(settings.like) / INFO
    if not path.is_file():
        raise ConfigError(f"--like {settings.like}: no {INFO} there; give a folder prepared from tables.")
    saved = json.loads(path.read_text())
    schema = copy.deepcopy(saved["schema"])
    task = schema["task"]
    optional = {task[k] for k in ("label", "split_column", "time_column") if task.get(k)}
    for name, entry in schema["tables"].items():
        if entry["role"] == "skip":
            continue
        if name not in source.tables:
            raise DataError(
                f"{source.where}: no table '{name}', which {settings.like} was prepared with; "
                f"its tables: {', '.join(source.tables)}."
            )
        real = source.tables[name].columns
        for column, spec in entry["columns"].items():
            if column not in real:
                if f"{name}.{column}" in optional:
                    continue
                raise DataError(
                    f"{source.where}: table '{name}' has no column '{column}', which {settings.like} was prepared "
                    "with; give the same columns."
                )
            if not fits(spec["kind"], real[column]):
                raise DataError(
                    f"{source.where}: table '{name}' column '{column}' is {real[column]}, but {settings.like} read it "
                    f"as {spec['kind']}; give it the same type."
                )
    return {**saved, "schema": schema}


def fits(kind: str, t) -> bool:
    """Whether a column of arrow type ``t`` can be read as ``kind`` (the saved schema's)."""
    import pyarrow as pa

    if pa.types.is_null(t):  # every value missing: any kind reads it
        return True
    if kind == "numeric":
        return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    if kind == "boolean":
        return pa.types.is_boolean(t) or pa.types.is_integer(t)
    if kind == "datetime":
        return pa.types.is_temporal(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
    return True  # categorical, text and id columns are read as text
