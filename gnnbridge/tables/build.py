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
memory-mapped ``x``. An edge table's rows (ids and encoded features, and for the labelled table
its labels, times and split words, coded by :mod:`.labels`) are sorted into a canonical order out
of core (:mod:`.edgesort`), so its memory is one bucket, not the table.
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
from gnnbridge.tables.edgesort import Column, Spill, sort_spilled
from gnnbridge.tables.keys import positions, shown, text_bytes
from gnnbridge.tables.labels import LabelCoder, SplitWords, write_splits
from gnnbridge.tables.like import like_state
from gnnbridge.tables.schema import check, infer, read_yaml, split_name, value_type
from gnnbridge.tables.sources import open_source
from gnnbridge.tables.stamps import changed_since, read_unchanged
from gnnbridge.tables.transforms import OTHER, Encoder, encoder_from_state, to_float

DANGLING = ("refuse", "drop")
INFO = "tables.json"


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
        self.labels = LabelCoder(self.task.get("target"), self.task["label"], saved["labels"] if saved else None)
        self.split_words = SplitWords(self.task.get("split_column"))

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

    def _fit(self, name: str, encoders: list, pk: list | None = None) -> list:
        """The first pass: ``encoders`` fitted (not with --like) and the label's classes found;
        returns each batch's ``pk`` columns (an entity's primary key, kept: the key map)."""
        rows, labelled, keys = 0, name == self.label_table, []
        for batch in self._batches(name):
            rows += batch.num_rows
            for e in encoders if not self.saved else ():
                e.observe(batch.column(e.column))
            if labelled:
                self.labels.observe(self._label(batch))
            if pk:
                keys.append(batch.select(pk))
        if rows == 0:
            raise DataError(f"Table '{name}' is empty; give it rows or set its role to skip in the schema.")
        for e in encoders if not self.saved else ():
            e.finish()
        if labelled:
            self.labels.start()
        return keys

    # -- entities --------------------------------------------------------------
    def _fit_entity(self, name: str) -> Entity:
        entry = self.schema["tables"][name]
        pk = [entry["primary_key"]] if isinstance(entry["primary_key"], str) else list(entry["primary_key"])
        entity = Entity(name, pk, encoders=self._encoders(name, {*pk, *entry["foreign_keys"]}))
        import pyarrow as pa

        key_table = pa.Table.from_batches(self._fit(name, entity.encoders, pk))
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
                labels.append((rank, self.labels.encode(self._label(batch))))
                times.append((rank, self._time(batch)))
                splits.append((rank, self._split_codes(batch)))
        if x is not None:
            x.flush()
            del x
        else:
            np.save(self.folder / f"num_nodes__{name}.npy", np.array([n], dtype=np.int64))
        for c, target in fks.items():
            src = np.flatnonzero(edges[c] >= 0)
            self._save_relation(name, c, target, np.stack([src, edges[c][src]]))
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
            self._finish_labels()
            y = _placed([(r, self.labels.final(v)) for r, v in labels], n)
            np.save(self.folder / f"y__{name}.npy", y)
            self._write_splits(y, _placed(splits, n), _placed(times, n), lambda s: f"{s}_idx__{name}.npy")

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
        self._save_relation(table, column, kind, np.stack([src, ids[src]]))
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
        rel, labelled = (ta, name, tb), name == self.label_table
        columns = self._edge_columns(encoders, labelled)
        spill = self.folder / f".spill-{name}"
        spill.mkdir()
        try:
            with Spill(spill, columns) as spilled:
                for part in self._edge_rows(name, encoders, labelled):
                    spilled.write(part)
            rows = spilled.rows
            if labelled:
                self._finish_labels()
            out = self._edge_outputs(rel, columns, rows, spill, bool(encoders))
            if rows:
                sort_spilled(spill, rows, columns, len(self.entities[ta].keys), out, self.labels if labelled else None)
            for m in out.values():
                if isinstance(m, np.memmap):
                    m.flush()
            if labelled:
                et = "__".join(rel)
                self._write_splits(out["label"], out.get("split"), out.get("time"), lambda s: f"edge_{s}_idx__{et}.npy")
            del out
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

    def _edge_columns(self, encoders: list, labelled: bool) -> list[Column]:
        """What is spilled of each kept row: its ends, its features, and the label table's label, time and split."""
        width = len([c for e in encoders for c in e.names()])
        columns = [Column("src", "int64"), Column("dst", "int64")] + (
            [Column("feats", "float32", width)] if width else []
        )
        if labelled:
            columns.append(Column("label", self.labels.dtype, self.labels.width))
            if self._task_column("time_column", "time"):
                columns.append(Column("time", "float64"))
            if self._task_column("split_column", "split"):
                columns.append(Column("split", "int8"))
        return columns

    def _edge_rows(self, name: str, encoders: list, labelled: bool):
        """Each batch's kept rows (both ends known) as ``{column: values}`` of :meth:`_edge_columns`."""
        (a, ta), (b, tb) = list(self.schema["tables"][name]["foreign_keys"].items())
        for batch in self._batches(name):
            src, dst = self._lookup(name, a, ta, batch.column(a)), self._lookup(name, b, tb, batch.column(b))
            keep = (src >= 0) & (dst >= 0)
            part = {"src": src[keep], "dst": dst[keep]}
            if encoders:
                part["feats"] = np.concatenate([e.encode(batch.column(e.column)) for e in encoders], axis=1)[keep]
            if labelled:
                kept = batch.filter(keep)
                part["label"] = self.labels.encode(self._label(kept))
                part["time"], part["split"] = self._time(kept), self._split_codes(kept)
            yield part

    def _edge_outputs(self, rel: tuple, columns: list[Column], rows: int, spill: Path, feats: bool) -> dict:
        """Where each sorted column goes: the relation's edge_index, edge_attr and edge_label files
        (memory-mapped), and raw files for the times and split codes that the splits are counted from."""
        s, r, d = rel
        et = "__".join(rel)
        index = np.lib.format.open_memmap(self.folder / f"edge_index__{s}__{r}__{d}.npy", "w+", np.int64, (2, rows))
        out = {"src": index[0], "dst": index[1], "index": index}
        if feats:
            width = next((c.width for c in columns if c.name == "feats"), 0)
            path = self.folder / f"edge_attr__{s}__{r}__{d}.npy"
            out["feats"] = np.lib.format.open_memmap(path, "w+", np.float32, (rows, width))
        for c in columns:
            if c.name == "label":
                path = self.folder / f"edge_label__{et}.npy"
                out["label"] = np.lib.format.open_memmap(path, "w+", c.dtype, c.shape(rows))
            elif c.name in ("time", "split"):
                out[c.name] = (
                    np.memmap(spill / f"{c.name}.sorted", c.dtype, "w+", shape=(rows,))
                    if rows
                    else np.zeros(0, c.dtype)
                )
        return out

    def _save_relation(self, table: str, relation: str, target: str, edges: np.ndarray) -> None:
        """A foreign key's (or a ``node`` column's) relation: ``edges`` [2, E] from ``table`` to ``target``."""
        _check_name(relation)
        np.save(self.folder / f"edge_index__{table}__{relation}__{target}.npy", np.ascontiguousarray(edges, np.int64))
        self.info["edge_types"][f"{table}__{relation}__{target}"] = {
            "table": table,
            "foreign_key": relation,
            "rows": int(edges.shape[1]),
        }

    # -- labels and splits -----------------------------------------------------------
    def _finish_labels(self) -> None:
        """The labels' entry of tables.json; with --like, the count of rows without a known label noted."""
        self.info["labels"] = self.labels.finish()
        unknown = self.labels.unknown
        if unknown:
            self.notes.append(f"{self.task['label']}: {unknown} rows without a known label (placeholders, for predict)")
            if self.labels.target == "class":  # (a value or a set of labels is NaN where unknown: never scored)
                write_unknown_labels(self.folder, self.task["label"], unknown)

    def _label(self, batch):
        """The label column of a batch; with --like, a new table may lack it (all missing)."""
        if self.saved and self.label_column not in batch.schema.names:
            import pyarrow as pa

            return pa.nulls(batch.num_rows)
        return batch.column(self.label_column)

    def _time(self, batch):
        named = self._task_column("time_column", "time")
        if named is None:
            return None
        table, column = named
        kind = self.schema["tables"][table]["columns"][column]["kind"]
        return to_float(batch.column(column), "datetime" if kind == "datetime" else "numeric")

    def _split_codes(self, batch):
        named = self._task_column("split_column", "split")
        return None if named is None else self.split_words.encode(batch.column(named[1]))

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

    def _write_splits(self, label, which, time, name: Callable[[str], str]) -> None:
        """From the split column, else by time (train before val before test), else none (seeded at train)."""
        if which is not None:
            self.split_words.check()
        write_splits(label, lambda s: self.folder / name(s), which, time, self.task.get("time_column"))


def _placed(parts: list, n: int):
    """Values given by batch, ``[(rows, values)]``, in row order (None where they are None)."""
    if not parts or parts[0][1] is None:
        return None
    first = parts[0][1]
    out = np.empty((n, *first.shape[1:]), dtype=first.dtype)
    for rank, values in parts:
        out[rank] = values
    return out


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
