"""Tables to the heterogeneous folder dataset: ``gnnbridge prepare SOURCE --label TABLE.COLUMN``.

Each entity table becomes a node type whose rows are ordered by key (so the same tables in any
row order, from any source, give the same arrays), each foreign key a relation from the table
holding it to the table it names, each edge table a relation whose other columns are its edges'
features. The folder's ``train-defaults.json`` names its task and target and sets
``dataset.reverse_edges``, so messages reach the labelled type whichever way a key points (the
``rev_`` types are added at load, where a link task can leave out its held-out edges' mirrors)
and ``gnnbridge train --dataset DIR`` needs nothing more.

Two streamed passes per table: the first collects keys (the key maps are what stays in memory)
and fits the encoders, the second encodes each batch and writes its rows in key order into a
memory-mapped ``x``. An edge table's rows (ids and encoded features) are sorted into a canonical
order out of core: spilled batch by batch to raw files, scattered into buckets of source ids of at
most ``SORT_ROWS`` rows each, and each bucket sorted in memory and written into the memory-mapped
outputs, so its memory is one bucket, not the table (a labelled edge table is still held whole).
Everything is written under a temporary folder beside ``--out``, then the folder prepare checks
it and derives its topology, and only then is it renamed into place: a refusal leaves nothing
behind. A source file that changed while it was read (:mod:`.stamps`) is such a refusal.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gnnbridge.core.errors import ConfigError, DataError, OutputExistsError
from gnnbridge.core.storage.intent import write_train_defaults, write_unknown_labels
from gnnbridge.tables.keys import positions, shown, text_bytes
from gnnbridge.tables.like import like_state
from gnnbridge.tables.schema import check, infer, read_yaml, split_name, value_type
from gnnbridge.tables.sources import open_source
from gnnbridge.tables.stamps import changed_since, read_unchanged
from gnnbridge.tables.transforms import OTHER, Encoder, category_strings, encoder_from_state, to_float

SPLITS = ("train", "val", "test")
SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
TIME_FRACTIONS = (0.6, 0.2)
DANGLING = ("refuse", "drop")
INFO = "tables.json"
SORT_ROWS = 1 << 22  # rows of an edge table sorted in memory at once


@dataclass(frozen=True)
class Settings:
    source: str
    out: str
    label: str | None = None
    schema: str | None = None
    target: str | None = None
    on_dangling: str = "refuse"
    dtype: str = "float32"
    progress: bool = True
    like: str | None = None  # a folder prepared from tables whose saved state to apply
    # told (table, rows) after each record batch the build reads: a caller's progress, or a stop (raise)
    on_batch: Callable[[str, int], None] | None = None


@dataclass
class Entity:
    name: str
    pk: list
    keys: np.ndarray = None  # sorted normalised keys: row i of the node type is keys[i]
    encoders: list = field(default_factory=list)


def prepare_tables(settings: Settings) -> dict:
    """Write the folder dataset of ``settings.source`` into ``settings.out``; returns the folder
    prepare's result plus ``notes`` (what was dropped or left out) and ``train`` (the command)."""
    if settings.on_dangling not in DANGLING:
        raise ConfigError(f"--on-dangling {settings.on_dangling!r}: use one of {', '.join(DANGLING)}.")
    out = Path(settings.out)
    if out.exists() and not (out / INFO).is_file() and any(out.iterdir()):
        raise OutputExistsError(
            f"{out} exists and is not a dataset prepared from tables; give a new --out DIR (or remove it)."
        )
    earlier = json.loads((out / INFO).read_text()).get("files", {}) if (out / INFO).is_file() else {}
    changed = changed_since(earlier)
    with open_source(settings.source) as source:
        with read_unchanged(source.files, out):
            saved = like_state(settings, source) if settings.like else None
            schema = saved["schema"] if saved else _schema(settings, source)
        result, notes = _build(source, schema, saved, settings, out)
    if changed:
        notes.insert(0, f"changed since {out} was prepared: {', '.join(changed)}")
    return {**result, "out": str(out), "notes": notes, "train": f"gnnbridge train --dataset {out}"}


def _build(source, schema: dict, saved: dict | None, settings: Settings, out: Path) -> tuple[dict, list]:
    """The folder written from ``source`` beside ``out``, checked by the folder prepare and only
    then swapped into place (a refusal at any step leaves ``out`` as it was); its result and notes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        folder = work / out.name
        folder.mkdir()
        with read_unchanged(source.files, out):  # the last batch read: every file as it was opened
            notes = Builder(source, schema, folder, settings, saved).run()
        write_train_defaults(folder, train_defaults(schema["task"]))
        from gnnbridge.core.storage.prepare import prepare_folder

        result = prepare_folder(folder, folder, settings.dtype, settings.progress)
        _swap(folder, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result, notes


def train_defaults(task: dict) -> dict:
    """How the folder is trained (``DIR/train-defaults.json``, read by ``train --dataset DIR``):
    its task kind and target, with every relation also passed backwards (``rev_`` types added at
    load, so a link task on it leaves out the mirrors of its held-out edges)."""
    return {"task": task["kind"], "target": task["target"], "dataset.reverse_edges": True}


def _swap(folder: Path, out: Path) -> None:
    if out.exists():
        old = folder.parent / "replaced"
        os.replace(out, old)
    os.replace(folder, out)


def _schema(settings: Settings, source) -> dict:
    if settings.schema:
        schema = check(read_yaml(settings.schema), source)
        if settings.label:
            schema["task"]["label"] = settings.label
    else:
        schema = infer(source, settings.label)
    task = schema["task"]
    if not task.get("label"):
        raise ConfigError("Give the label: --label TABLE.COLUMN (or task.label in the schema file).")
    table, column = split_name(task["label"], "--label", schema)
    role = schema["tables"][table]["role"]
    if role == "skip":
        raise ConfigError(
            f"--label {task['label']}: table '{table}' is skipped (no key, not an edge table); "
            "label an entity or edge table."
        )
    if settings.target:
        task["target"] = settings.target
    if not task.get("target"):
        from gnnbridge.tables.schema import guess_target

        task["target"] = guess_target(schema["tables"][table]["columns"][column]["kind"], None)
    task["kind"] = "node" if role == "entity" else "edge"
    return schema


class Builder:
    """The two passes over every table, and the arrays they write into ``folder``."""

    def __init__(self, source, schema: dict, folder: Path, settings: Settings, saved: dict | None = None):
        self.source, self.schema, self.folder, self.settings = source, schema, folder, settings
        self.saved = saved  # --like: the earlier folder's tables.json, whose encoders and labels are applied
        self.task = schema["task"]
        self.label_table, self.label_column = self.task["label"].split(".", 1)
        self.used = {self.label_column} | {self.task[k].split(".", 1)[1] for k in ("split_column",) if self.task.get(k)}
        self.entities: dict[str, Entity] = {}
        self.notes: list[str] = []
        self.info = {
            "source": {"kind": source.kind, "where": source.where},
            "schema": schema,
            "node_types": {},
            "edge_types": {},
            "files": source.files.record(),
        }
        if saved:
            self.info["like"] = str(Path(settings.like).resolve())

    def tables(self, role: str) -> list[str]:
        return sorted(n for n, e in self.schema["tables"].items() if e["role"] == role)

    def _batches(self, name: str):
        """One pass over table ``name``, each batch told to ``settings.on_batch`` as it is read."""
        told = self.settings.on_batch
        for batch in self.source.tables[name].batches():
            if told is not None:
                told(name, batch.num_rows)
            yield batch

    def run(self) -> list[str]:
        for name in self.tables("entity"):
            _check_name(name)
            self.entities[name] = self._fit_entity(name)
        for name in self.tables("entity"):
            self._write_entity(name)
        for name in self.tables("edge"):
            self._write_edge_table(name)
        (self.folder / INFO).write_text(json.dumps(self.info, indent=1, default=str) + "\n")
        return self.notes

    # -- encoders ------------------------------------------------------------
    def _encoders(self, name: str, skip: set) -> list[Encoder]:
        if self.saved:
            types = {**self.saved["node_types"], **self.saved["edge_types"]}
            entry = next(t for t in types.values() if t.get("table") == name and "encoders" in t)
            return [encoder_from_state(state) for state in entry["encoders"]]
        entry = self.schema["tables"][name]
        out = []
        for c, spec in entry["columns"].items():
            if c in skip or spec["transform"] == "drop" or (name == self.label_table and c in self.used):
                continue
            out.append(Encoder(c, spec["kind"], spec["transform"], spec.get("max_categories", 32), spec.get("buckets")))
        return out

    def _fit(self, name: str, encoders: list, keys: list | None = None) -> int:
        rows = 0
        for batch in self._batches(name):
            rows += batch.num_rows
            for e in encoders if not self.saved else ():
                e.observe(batch.column(e.column))
            if keys is not None:
                keys.append(batch)
        if rows == 0:
            raise DataError(f"Table '{name}' is empty; give it rows or set its role to skip in the schema.")
        for e in encoders if not self.saved else ():
            e.finish()
        return rows

    # -- entities --------------------------------------------------------------
    def _fit_entity(self, name: str) -> Entity:
        entry = self.schema["tables"][name]
        pk = [entry["primary_key"]] if isinstance(entry["primary_key"], str) else list(entry["primary_key"])
        entity = Entity(name, pk, encoders=self._encoders(name, {*pk, *entry["foreign_keys"]}))
        import pyarrow as pa

        batches: list = []
        encoders = entity.encoders
        rows = 0
        for batch in self._batches(name):
            rows += batch.num_rows
            for e in encoders if not self.saved else ():
                e.observe(batch.column(e.column))
            batches.append(batch.select(pk))
        if rows == 0:
            raise DataError(f"Table '{name}' is empty; give it rows or set its role to skip in the schema.")
        for e in encoders if not self.saved else ():
            e.finish()
        key_table = pa.Table.from_batches(batches) if batches else None
        keys = _normal_keys(key_table, pk, name)
        order = np.argsort(keys, kind="stable")
        entity.keys = keys[order]
        _check_unique(name, pk, entity.keys)
        (self.folder / "keys").mkdir(exist_ok=True)
        import pyarrow.parquet as pq

        key_map = key_table.take(pa.array(order)).append_column("id", pa.array(np.arange(len(order), dtype=np.int64)))
        pq.write_table(key_map, self.folder / "keys" / f"{name}.parquet")
        return entity

    def _write_entity(self, name: str) -> None:
        entity, entry = self.entities[name], self.schema["tables"][name]
        n = len(entity.keys)
        names = [c for e in entity.encoders for c in e.names()]
        x = (
            np.lib.format.open_memmap(self.folder / f"x__{name}.npy", "w+", np.float32, (n, len(names)))
            if names
            else None
        )
        fks = entry["foreign_keys"]
        edges = {c: np.full(n, -1, dtype=np.int64) for c in fks}
        values = {e.column: np.full(n, -1, dtype=np.int64) for e in entity.encoders if e.transform == "node"}
        labelled = name == self.label_table
        labels, times, splits = [], [], []
        for batch in self._batches(name):
            rank = positions(entity.keys, _normal_keys(batch, entity.pk, name))
            if x is not None:
                x[rank] = np.concatenate([e.encode(batch.column(e.column)) for e in entity.encoders], axis=1)
            for c, target in fks.items():
                edges[c][rank] = self._lookup(name, c, target, batch.column(c))
            for e in entity.encoders:
                if e.transform == "node":
                    values[e.column][rank] = e.node_ids(batch.column(e.column))
            if labelled:
                labels.append((rank, self._label(batch)))
                times.append((rank, self._time(batch)))
                splits.append((rank, self._split_values(batch)))
        if x is not None:
            x.flush()
            del x
        else:
            np.save(self.folder / f"num_nodes__{name}.npy", np.array([n], dtype=np.int64))
        for c, target in fks.items():
            src = np.flatnonzero(edges[c] >= 0)
            self._save_relation(name, c, target, np.stack([src, edges[c][src]]), None)
        for e in entity.encoders:
            if e.transform == "node":
                self._write_value_nodes(name, e, values[e.column])
        self.info["node_types"][name] = {
            "table": name,
            "rows": n,
            "primary_key": entity.pk,
            "key_map": f"keys/{name}.parquet",
            "features": names,
            "encoders": [e.describe() for e in entity.encoders],
        }
        if labelled:
            y = self._labels(labels, n)
            np.save(self.folder / f"y__{name}.npy", y)
            for split, idx in self._splits(times, splits, n, y).items():
                np.save(self.folder / f"{split}_idx__{name}.npy", idx)

    def _write_value_nodes(self, table: str, encoder: Encoder, ids: np.ndarray) -> None:
        """A ``transform: node`` column: a featureless node type ``<table>_<column>`` of one node
        per vocabulary value plus ``<other>`` (last), and a relation from each row to its value's
        node (none where the value is missing); models learn an embedding per node of it."""
        column, vocab = encoder.column, encoder.state["vocabulary"]
        kind = value_type(table, column)
        _check_name(kind)
        if kind in self.schema["tables"]:
            raise ConfigError(
                f"Table '{table}', column '{column}': transform node makes a node type '{kind}', which is a "
                "table's name; rename the column or use onehot."
            )
        import pyarrow as pa
        import pyarrow.parquet as pq

        count = len(vocab) + 1
        np.save(self.folder / f"num_nodes__{kind}.npy", np.array([count], dtype=np.int64))
        key_map = pa.table({column: [*vocab, OTHER], "id": np.arange(count, dtype=np.int64)})
        pq.write_table(key_map, self.folder / "keys" / f"{kind}.parquet")
        src = np.flatnonzero(ids >= 0)
        self._save_relation(table, column, kind, np.stack([src, ids[src]]), None)
        unseen = int((ids == len(vocab)).sum())
        if self.saved and unseen:
            self.notes.append(f"{table}.{column}: {unseen} rows with a value not seen in training: node {OTHER!r}")
        self.info["node_types"][kind] = {
            "values_of": f"{table}.{column}",
            "rows": count,
            "key_map": f"keys/{kind}.parquet",
            "features": [],
        }

    # -- keys ------------------------------------------------------------------
    def _lookup(self, table: str, column: str, target: str, values) -> np.ndarray:
        """Ids in ``target`` of a foreign key's values; -1 where missing (or dangling and dropped)."""
        import pyarrow.compute as pc

        keys = self.entities[target].keys
        present = ~pc.is_null(values).to_numpy(zero_copy_only=False)
        v = _as_keys(values, keys.dtype)
        pos = np.minimum(positions(keys, v), len(keys) - 1)
        found = present & (keys[pos] == v)
        dangling = present & ~found
        if dangling.any():
            count = int(dangling.sum())
            examples = ", ".join(repr(k) for k in shown(dict.fromkeys(v[dangling].tolist()))[:3])
            where = f"{table}.{column}: {count} values not among {target}'s keys (e.g. {examples})"
            if self.settings.on_dangling == "refuse":
                raise DataError(f"{where}; fix them, or give --on-dangling drop.")
            self.notes.append(f"{where}: dropped")
        return np.where(found, pos, -1)

    # -- edge tables -------------------------------------------------------------
    def _write_edge_table(self, name: str) -> None:
        _check_name(name)
        entry = self.schema["tables"][name]
        (a, ta), (b, tb) = list(entry["foreign_keys"].items())
        encoders = self._encoders(name, {a, b})
        self._fit(name, encoders)
        if name == self.label_table:
            return self._write_labelled_edge_table(name, entry, encoders)
        spill = self.folder / f".spill-{name}"
        spill.mkdir()
        try:
            width = len([c for e in encoders for c in e.names()])
            rows = self._spill_edge_rows(name, encoders, spill)
            rel = (ta, name, tb)
            if rows:
                _sort_spilled(spill, rows, width, len(self.entities[ta].keys), self.folder, rel, bool(encoders))
            else:
                self._save_relation(
                    name,
                    name,
                    tb,
                    np.zeros((2, 0), np.int64),
                    np.zeros((0, width), np.float32) if encoders else None,
                    rel,
                )
        finally:
            shutil.rmtree(spill, ignore_errors=True)
        self._edge_table_info(name, entry, encoders, rel, rows)

    def _edge_table_info(self, name, entry, encoders, rel, rows) -> None:
        self.info["edge_types"]["__".join(rel)] = {
            "table": name,
            "rows": int(rows),
            "features": [c for e in encoders for c in e.names()],
            "encoders": [e.describe() for e in encoders],
            "foreign_keys": entry["foreign_keys"],
        }

    def _edge_batches(self, name: str, encoders: list):
        """``(batch, src, dst, feats, keep)`` of each batch of an edge table (rows whose ends are known: ``keep``)."""
        (a, ta), (b, tb) = list(self.schema["tables"][name]["foreign_keys"].items())
        for batch in self._batches(name):
            src, dst = self._lookup(name, a, ta, batch.column(a)), self._lookup(name, b, tb, batch.column(b))
            keep = (src >= 0) & (dst >= 0)
            feats = (
                np.concatenate([e.encode(batch.column(e.column)) for e in encoders], axis=1)
                if encoders
                else np.zeros((batch.num_rows, 0), np.float32)
            )
            yield batch, src, dst, feats, keep

    def _spill_edge_rows(self, name: str, encoders: list, spill: Path) -> int:
        """Each batch's kept rows appended to raw files (src, dst int64; feats float32): only one batch in memory."""
        rows = 0
        with open(spill / "src", "wb") as fs, open(spill / "dst", "wb") as fd, open(spill / "feats", "wb") as ff:
            for _, src, dst, feats, keep in self._edge_batches(name, encoders):
                fs.write(src[keep].tobytes())
                fd.write(dst[keep].tobytes())
                ff.write(np.ascontiguousarray(feats[keep], dtype=np.float32).tobytes())
                rows += int(keep.sum())
        return rows

    def _write_labelled_edge_table(self, name: str, entry: dict, encoders: list) -> None:
        """A labelled edge table is held in memory (its labels and splits are sorted with its rows)."""
        (a, ta), (b, tb) = list(entry["foreign_keys"].items())
        parts, labels, times, splits = [], [], [], []
        for batch, src, dst, feats, keep in self._edge_batches(name, encoders):
            parts.append((src[keep], dst[keep], feats[keep]))
            batch = batch.filter(keep)
            labels.append(self._label(batch))
            times.append(self._time(batch))
            splits.append(self._split_values(batch))
        src, dst, feats = (np.concatenate(p) for p in zip(*parts))
        label = self._edge_label_rows(labels)
        keys = [*(feats[:, j] for j in range(feats.shape[1] - 1, -1, -1)), dst, src]
        keys.insert(0, np.nan_to_num(label.reshape(len(src), -1)[:, 0].astype(np.float64), nan=-1e300))
        order = np.lexsort(keys) if len(src) else np.zeros(0, np.int64)
        rel = (ta, name, tb)
        self._save_relation(name, name, tb, np.stack([src[order], dst[order]]), feats[order] if encoders else None, rel)
        self._edge_table_info(name, entry, encoders, rel, len(src))
        et = "__".join(rel)
        np.save(self.folder / f"edge_label__{et}.npy", label[order])
        time = np.concatenate(times)[order] if times[0] is not None else None
        split = [s for part in splits for s in part][: len(order)] if splits[0] is not None else None
        if split is not None:
            split = [split[i] for i in order]
        for s, idx in self._splits(
            [(np.arange(len(order)), time)], [(np.arange(len(order)), split)], len(order), label[order]
        ).items():
            np.save(self.folder / f"edge_{s}_idx__{et}.npy", idx)

    def _save_relation(self, table, relation, target, edges, feats, rel=None) -> None:
        s, r, d = rel or (table, relation, target)
        _check_name(r)
        np.save(self.folder / f"edge_index__{s}__{r}__{d}.npy", np.ascontiguousarray(edges, dtype=np.int64))
        if feats is not None:
            np.save(self.folder / f"edge_attr__{s}__{r}__{d}.npy", feats.astype(np.float32))
        if rel is None:
            self.info["edge_types"][f"{s}__{r}__{d}"] = {
                "table": table,
                "foreign_key": relation,
                "rows": int(edges.shape[1]),
            }

    # -- labels and splits -----------------------------------------------------------
    def _label_values(self, column):
        return (
            category_strings(column) if self.task["target"] in ("class", "multilabel") else to_float(column, "numeric")
        )

    def _labels(self, parts: list, n: int) -> np.ndarray:
        rank = np.concatenate([r for r, _ in parts])
        values = (
            [v for _, col in parts for v in self._label_values(col)]
            if self.task["target"] != "regression"
            else np.concatenate([self._label_values(c) for _, c in parts])
        )
        y = self._encode_labels(values)
        out = np.empty((n, *y.shape[1:]), dtype=y.dtype)
        out[rank] = y
        return out

    def _edge_label_rows(self, columns: list) -> np.ndarray:
        if self.task["target"] == "regression":
            return self._encode_labels(np.concatenate([self._label_values(c) for c in columns]))
        return self._encode_labels([v for c in columns for v in self._label_values(c)])

    def _label(self, batch):
        """The label column of a batch; with --like, a new table may lack it (all missing)."""
        if self.saved and self.label_column not in batch.schema.names:
            import pyarrow as pa

            return pa.nulls(batch.num_rows)
        return batch.column(self.label_column)

    def _encode_labels(self, values) -> np.ndarray:
        if self.saved:
            return self._saved_labels(values)
        target, where = self.task["target"], self.task["label"]
        if target == "regression":
            v = np.asarray(values, dtype=np.float32)
            if np.isnan(v).all():
                raise DataError(f"Label {where} has no value on any row (target regression).")
            self.info["labels"] = {"target": target, "missing": int(np.isnan(v).sum())}
            return v
        missing = sum(v is None for v in values)
        if target == "class":
            if missing:
                raise DataError(
                    f"Label {where} is missing on {missing} rows; target class needs a label on every row "
                    "(fill them, or --target regression)."
                )
            vocab = sorted(set(values), key=_label_order)
            slot = {v: i for i, v in enumerate(vocab)}
            self.info["labels"] = {"target": target, "classes": vocab}
            return np.fromiter((slot[v] for v in values), dtype=np.int64, count=len(values))
        sets = [None if v is None else [p for p in v.split("|") if p] for v in values]
        vocab = sorted({p for s in sets if s for p in s})
        slot = {v: i for i, v in enumerate(vocab)}
        y = np.zeros((len(sets), len(vocab)), dtype=np.float32)
        for i, s in enumerate(sets):
            if s is None:
                y[i] = np.nan
            else:
                y[i, [slot[p] for p in s]] = 1.0
        self.info["labels"] = {"target": target, "labels": vocab, "separator": "|"}
        return y

    def _saved_labels(self, values) -> np.ndarray:
        """--like: labels read with the earlier folder's classes; a missing or unseen one is a
        placeholder (the classes in turn, or NaN), counted in a note: new rows are there to be predicted."""
        labels = self.saved["labels"]
        if labels["target"] == "regression":
            v = np.asarray([np.nan if x is None else x for x in values], dtype=np.float32)
            unknown = int(np.isnan(v).sum())
        elif labels["target"] == "class":
            slot, c = {c: i for i, c in enumerate(labels["classes"])}, len(labels["classes"])
            # placeholders take the classes in turn: the folder check wants two classes, predict reads none
            v = np.fromiter((slot.get(x, i % c) for i, x in enumerate(values)), dtype=np.int64, count=len(values))
            unknown = sum(x not in slot for x in values)
        else:
            slot = {c: i for i, c in enumerate(labels["labels"])}
            v = np.zeros((len(values), len(slot)), dtype=np.float32)
            for i, x in enumerate(values):
                parts = [slot.get(p) for p in (x or "").split("|") if p]
                v[i] = np.nan if x is None or None in parts else 0.0
                v[i, [p for p in parts if p is not None]] = 1.0
            unknown = int(np.isnan(v).any(axis=1).sum())
        self.info["labels"] = labels
        if unknown:
            self.notes.append(f"{self.task['label']}: {unknown} rows without a known label (placeholders, for predict)")
            if labels["target"] == "class":  # (a value or a set of labels is NaN where unknown: never scored)
                write_unknown_labels(self.folder, self.task["label"], unknown)
        return v

    def _time(self, batch):
        named = self._task_column("time_column", "time")
        if named is None:
            return None
        table, column = named
        kind = self.schema["tables"][table]["columns"][column]["kind"]
        return to_float(batch.column(column), "datetime" if kind == "datetime" else "numeric")

    def _split_values(self, batch):
        named = self._task_column("split_column", "split")
        return None if named is None else category_strings(batch.column(named[1]))

    def _task_column(self, key: str, what: str) -> tuple[str, str] | None:
        """``task.<key>``'s (table, column), which must be in the labelled table; None when the
        schema names none, or with --like (new rows are not split: they are predicted)."""
        col = self.task.get(key)
        if not col or self.saved:
            return None
        table, column = col.split(".", 1)
        if table != self.label_table:
            raise ConfigError(
                f"task.{key} {col}: the {what} column must be in the labelled table '{self.label_table}'."
            )
        return table, column

    def _splits(self, times: list, splits: list, n: int, y: np.ndarray) -> dict:
        """From the split column, else by time (train before val before test), else none (seeded at train)."""
        labelled = ~np.isnan(y.reshape(n, -1)).all(axis=1) if y.dtype.kind == "f" else np.ones(n, bool)
        if splits and splits[0][1] is not None:
            which = np.full(n, "", dtype=object)
            for rank, values in splits:
                which[rank] = [SPLIT_WORDS.get((v or "").lower(), f"?{v}") if v is not None else "" for v in values]
            bad = sorted({w[1:] for w in which if w.startswith("?")})
            if bad:
                raise DataError(
                    f"Split column {self.task['split_column']} holds {bad[:3]}; use train, val, test (or empty)."
                )
            return {s: np.flatnonzero((which == s) & labelled).astype(np.int64) for s in SPLITS}
        if times and times[0][1] is not None:
            t = np.empty(n)
            for rank, values in times:
                t[rank] = values
            if np.isnan(t).any():
                raise DataError(
                    f"Time column {self.task['time_column']} is missing on {int(np.isnan(t).sum())} rows; "
                    "every labelled row needs a time."
                )
            rows = np.flatnonzero(labelled)
            rows = rows[np.lexsort((rows, t[rows]))]
            a, b = int(len(rows) * TIME_FRACTIONS[0]), int(len(rows) * sum(TIME_FRACTIONS))
            return {s: np.sort(part).astype(np.int64) for s, part in zip(SPLITS, (rows[:a], rows[a:b], rows[b:]))}
        return {}


def _label_order(v):
    try:
        return (0, float(v), "")
    except ValueError:
        return (1, 0.0, v)


def _check_name(name: str) -> None:
    if "__" in name or not name:
        raise ConfigError(
            f"Table or column name {name!r} holds '__', which the folder format uses to join names; rename it."
        )


def _normal_keys(table, pk: list, name: str) -> np.ndarray:
    """A table's (or batch's) primary key as one comparable numpy array: int64 for a single
    integer column, else text bytes (:mod:`.keys`; composite keys joined by a separator no key holds)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for c in pk:
        nulls = table.column(c).null_count
        if nulls:
            raise DataError(f"Table '{name}': primary key {c} is missing on {nulls} rows; every row needs a key.")
    cols = [table.column(c) for c in pk]
    if len(cols) == 1 and pa.types.is_integer(cols[0].type):
        return np.asarray(cols[0].to_numpy(), dtype=np.int64)
    text = [pc.cast(c, pa.string()) for c in cols]
    return text_bytes(text[0] if len(text) == 1 else pc.binary_join_element_wise(*text, "\x1f"))


def _as_keys(values, dtype) -> np.ndarray:
    """A foreign key's values as its target's keys are kept (missing ones: 0 or empty, masked by the
    caller); text read against integer keys is parsed (digits only, else a value no key has)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if dtype.kind == "i":
        if pa.types.is_integer(values.type):
            return np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        return np.asarray(
            [int(v) if v is not None and str(v).lstrip("-").isdigit() else -(2**62) for v in values.to_pylist()],
            dtype=np.int64,
        )
    return text_bytes(pc.cast(values, pa.string()))


def _check_unique(name: str, pk: list, keys: np.ndarray) -> None:
    same = keys[1:] == keys[:-1]
    if same.any():
        dup = shown(dict.fromkeys(keys[1:][same].tolist()))
        examples = ", ".join(repr(k) for k in dup[:3])
        raise DataError(
            f"Table '{name}': primary key {'+'.join(pk)} repeats on {int(same.sum())} rows (e.g. {examples}); "
            "keys must be unique."
        )


# --------------------------------------------------------------------------- out-of-core edge sort


def _sort_spilled(spill: Path, rows: int, width: int, sources: int, folder: Path, rel: tuple, feats: bool) -> None:
    """Write the spilled edge rows sorted as ``np.lexsort((feats[:, -1], ..., feats[:, 0], dst, src))`` (stable),
    the relation (its reverse is added at load), into ``folder``: rows are scattered by source-id bucket, then
    each bucket sorted."""
    src, dst = (np.memmap(spill / n, np.int64, "r", shape=(rows,)) for n in ("src", "dst"))
    attr = np.memmap(spill / "feats", np.float32, "r", shape=(rows, width)) if width else None
    starts, offsets = _src_buckets(src, sources)
    src, dst, attr = _scatter(spill, src, dst, attr, starts, offsets)
    s, r, d = rel
    out = {
        "fwd": np.lib.format.open_memmap(folder / f"edge_index__{s}__{r}__{d}.npy", "w+", np.int64, (2, rows)),
    }
    if feats:
        path = folder / f"edge_attr__{s}__{r}__{d}.npy"
        out["fwd_attr"] = np.lib.format.open_memmap(path, "w+", np.float32, (rows, width))
    for lo, hi in zip(offsets[:-1], offsets[1:]):
        if hi > lo:
            _write_bucket(
                out, np.array(src[lo:hi]), np.array(dst[lo:hi]), None if attr is None else np.array(attr[lo:hi]), lo
            )
    for m in out.values():
        m.flush()
    del out


def _src_buckets(src: np.memmap, sources: int) -> tuple[np.ndarray, np.ndarray]:
    """Source ids where each bucket starts (after the first, which starts at 0), and each bucket's first row."""
    counts = np.zeros(sources, np.int64)
    for lo in range(0, len(src), SORT_ROWS):
        counts += np.bincount(src[lo : lo + SORT_ROWS], minlength=sources)
    cum = np.cumsum(counts)
    starts = np.searchsorted(cum, np.arange(SORT_ROWS, len(src), SORT_ROWS), side="right")
    starts = np.unique(starts[(starts > 0) & (starts < sources)])
    offsets = np.concatenate([[0], cum[starts - 1], [len(src)]]).astype(np.int64)
    return starts, offsets


def _scatter(spill: Path, src, dst, attr, starts: np.ndarray, offsets: np.ndarray):
    """The rows moved into their buckets (stably: a bucket keeps the rows' order), as new memory-mapped files."""
    rows = len(src)
    moved = [np.memmap(spill / f"{n}.b", np.int64, "w+", shape=(rows,)) for n in ("src", "dst")]
    if attr is not None:
        moved.append(np.memmap(spill / "feats.b", np.float32, "w+", shape=attr.shape))
    cursor = offsets[:-1].copy()
    for lo in range(0, rows, SORT_ROWS):
        s = np.array(src[lo : lo + SORT_ROWS])
        bucket = np.searchsorted(starts, s, side="right")
        order = np.argsort(bucket, kind="stable")
        sizes = np.bincount(bucket, minlength=len(cursor))
        first = np.cumsum(sizes) - sizes
        where = np.repeat(cursor - first, sizes) + np.arange(len(s))
        moved[0][where] = s[order]
        moved[1][where] = np.asarray(dst[lo : lo + SORT_ROWS])[order]
        if attr is not None:
            moved[2][where] = np.asarray(attr[lo : lo + SORT_ROWS])[order]
        cursor += sizes
    for m in moved:
        m.flush()
    return moved[0], moved[1], moved[2] if attr is not None else None


def _write_bucket(out: dict, src: np.ndarray, dst: np.ndarray, attr, lo: int) -> None:
    keys = [*(attr[:, j] for j in range(attr.shape[1] - 1, -1, -1))] if attr is not None else []
    order = np.lexsort([*keys, dst, src])
    src, dst = src[order], dst[order]
    hi = lo + len(src)
    out["fwd"][0, lo:hi], out["fwd"][1, lo:hi] = src, dst
    if attr is not None:
        out["fwd_attr"][lo:hi] = attr[order]
