"""What a folder dataset says about itself beyond its arrays: how it is meant to be trained
(``DIR/train-defaults.json``) and the user's keys of its nodes (``DIR/keys/TYPE.parquet``).

A folder written from tables knows its task (an entity table's label is a node task, an edge
table's an edge task), the label's form and that its relations should also be passed backwards;
``gnnbridge train --dataset DIR`` reads those as defaults (above the experiment's values for the
same keys, below ``--set``), so the command needs nothing more. Only the keys in
:data:`DEFAULT_KEYS` may be given: a folder says how it is used, not how a model is built. The
key maps are what ``predict`` writes beside its outputs, so a table of predictions answers in
the user's own ids (``customer_id``), not in row numbers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gnnbridge.core.errors import DataError

TRAIN_DEFAULTS = "train-defaults.json"
KEYS_FOLDER = "keys"
# Rows whose class label a folder does not know (new rows written to be predicted: ``prepare
# --like``); their labels are placeholders, so the folder is scored by predict only.
UNKNOWN_LABELS = "unknown-labels.json"
# key -> the type its value must have
DEFAULT_KEYS = {"task": str, "target": str, "dataset.reverse_edges": bool}


def write_train_defaults(folder: str | os.PathLike, defaults: dict) -> None:
    """Write ``defaults`` (dotted keys of :data:`DEFAULT_KEYS`) as ``folder``'s training defaults."""
    _check(defaults, Path(folder) / TRAIN_DEFAULTS)
    (Path(folder) / TRAIN_DEFAULTS).write_text(json.dumps(defaults, indent=1, sort_keys=True) + "\n")


def read_train_defaults(folder: str | os.PathLike) -> dict:
    """``folder``'s training defaults (``{}`` when it has none); a file holding anything but
    :data:`DEFAULT_KEYS` with values of their types is refused in one line."""
    path = Path(folder) / TRAIN_DEFAULTS
    if not path.is_file():
        return {}
    try:
        defaults = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot be read as JSON ({exc}); prepare the folder again.") from None
    return _check(defaults, path)


def _check(defaults, path: Path) -> dict:
    if not isinstance(defaults, dict):
        raise DataError(f"{path}: must hold an object of {', '.join(DEFAULT_KEYS)}, not {type(defaults).__name__}.")
    for key, value in defaults.items():
        if key not in DEFAULT_KEYS:
            raise DataError(f"{path}: key {key!r} is not a training default; the keys are {', '.join(DEFAULT_KEYS)}.")
        if not isinstance(value, DEFAULT_KEYS[key]):
            raise DataError(f"{path}: {key}={value!r} must be a {DEFAULT_KEYS[key].__name__}.")
    return defaults


def write_unknown_labels(folder: str | os.PathLike, label: str, rows: int) -> None:
    """Record that ``rows`` rows of ``folder`` carry placeholders for ``label`` (a class label a
    class cannot mark missing, as NaN does a value), so training and evaluation refuse it."""
    (Path(folder) / UNKNOWN_LABELS).write_text(json.dumps({"label": label, "rows": int(rows)}) + "\n")


def refuse_unknown_labels(folder: str | os.PathLike, action: str) -> None:
    """One line when ``folder`` holds placeholder labels (see :func:`write_unknown_labels`):
    ``action`` (train, evaluate) would learn from or score them as if they were the user's."""
    path = Path(folder) / UNKNOWN_LABELS
    if not path.is_file():
        return
    try:
        record = json.loads(path.read_text())
        label, rows = record["label"], int(record["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError(f"{path}: cannot be read; prepare the folder again.") from None
    raise DataError(
        f"{folder}: {rows} rows have no {label} (placeholders written for predict), so it cannot be used to "
        f"{action}; {action} on a folder whose rows carry their labels, or predict on this one."
    )


def with_defaults(data: dict, defaults: dict) -> dict:
    """A config dict with ``defaults``' dotted keys set (copies of the sections it changes)."""
    data = dict(data)
    for key, value in defaults.items():
        *sections, last = key.split(".")
        node = data
        for s in sections:
            node[s] = dict(node.get(s) or {})
            node = node[s]
        node[last] = value
    return data


def key_map(folder: str | os.PathLike, node_type: str):
    """``folder``'s key map of ``node_type`` (a pyarrow table: the user's key columns and ``id``,
    the node's row), or None when the folder keeps none."""
    path = Path(folder) / KEYS_FOLDER / f"{node_type}.parquet"
    if not path.is_file():
        return None
    import pyarrow.parquet as pq

    return pq.read_table(path)
