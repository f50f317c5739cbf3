"""Predictions by the user's keys: what ``predict`` reads and writes as tables for a dataset
prepared from tables (its key maps, ``DIR/keys/TYPE.parquet``).

A user knows a customer as ``C0042`` and a product as ``107``, never as node rows. So a table of
predictions carries each row's key columns as the user wrote them (a node task: the node's; an
edge task: both ends'; a link task's pairs and top-k lists: the source's and the destination's),
and a pairs table is given by those same columns, mapped to rows once here and refused, naming
the keys as written, where a key is not in the map. Everything is checked before any scoring:
a table here is built from arrays the model already produced.

``--embeddings`` writes each node type's final states beside the predictions, a table per type
(its keys, then ``embedding_J``), since the types' keys are different columns. A machine of a
partitioned run writes its own rows the same way, looked up by the dataset ids it already
writes (``node_ids``) in its copy of the folder's key maps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnnbridge.core import files
from gnnbridge.core.config import ExperimentConfig, Task
from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.storage.intent import KEYS_FOLDER, key_map

TABLE_SUFFIXES = (".csv", ".parquet")
ROW = "__gnnbridge_row"  # a pairs table's own row number while its keys are looked up


class Ends:
    """The key maps (sorted by ``id``) of a link or edge task's source and destination types, and
    the columns that name each end in a table: the key columns as written, or ``src.`` / ``dst.``
    before every one of them where the two ends' columns share a name."""

    def __init__(self, target_edge, src_map, dst_map):
        self.types = (target_edge[0], target_edge[2])
        self.maps = (src_map.sort_by("id"), dst_map.sort_by("id"))
        self.keys = tuple([c for c in m.column_names if c != "id"] for m in self.maps)
        clash = set(self.keys[0]) & set(self.keys[1])
        self.names = tuple(
            [f"{side}.{c}" for c in cols] if clash else list(cols) for side, cols in zip(("src", "dst"), self.keys)
        )

    def columns(self, end: int, ids: np.ndarray) -> dict:
        """``{name: pyarrow array}``: the keys of ``end``'s (0 source, 1 destination) nodes ``ids``."""
        import pyarrow as pa

        rows = self.maps[end].take(pa.array(np.ascontiguousarray(ids, dtype=np.int64)))
        return {name: rows.column(c) for name, c in zip(self.names[end], self.keys[end])}


def ends_of(config: ExperimentConfig, target) -> Ends | None:
    """The key maps of the two ends of ``target`` (a (source, relation, destination) edge type,
    or its text ``"src,rel,dst"`` as a checkpoint records it), or None where the dataset keeps none."""
    target = tuple(target.split(",")) if isinstance(target, str) else target
    if not target or len(target) != 3 or not config.dataset.path:
        return None
    maps = [key_map(config.dataset.path, t) for t in (target[0], target[2])]
    return None if any(m is None for m in maps) else Ends(target, *maps)


def no_keys(config: ExperimentConfig, what: str, fix: str) -> ConfigError:
    """The line for a table asked of a dataset without key maps: a graph not prepared from tables,
    or a machine whose copy of a partitioned folder lacks them (the usual cause there)."""
    if config.dataset.partitions:  # a machine holds its part; the key maps are copied beside it
        return ConfigError(
            f"{what} by the user's keys, from the prepared folder's {KEYS_FOLDER}/TYPE.parquet, which this "
            f"machine's {config.dataset.path} lacks: copy the folder's {KEYS_FOLDER}/ to every machine (beside "
            f"partitions/), or {fix}."
        )
    return ConfigError(
        f"{what} by the user's keys, which needs a dataset prepared from tables (its keys/TYPE.parquet); "
        f"this run's task is {config.task} on {config.dataset.path or config.dataset.name}: {fix}."
    )


@dataclass
class KeyedOutput:
    """The tables a prediction writes by the user's keys: ``paths``, known before any work (so
    each is checked new then), and ``make``, the model's arrays to one table per path."""

    paths: list[Path]
    make: Callable[[dict], list]


def embedding_file(out: Path, node_type: str) -> Path:
    """Where ``--embeddings`` writes ``node_type``'s states beside the table ``out``: named as the
    ``.npz`` names its array (``preds.csv`` -> ``preds.embedding__customers.csv``)."""
    return out.with_name(f"{out.stem}.embedding__{node_type}{out.suffix}")


def table_maker(config: ExperimentConfig, data, out: Path, request: dict | None) -> KeyedOutput:
    """How this prediction's arrays become tables by the user's keys (``out`` a .csv or .parquet,
    and with ``--embeddings`` a table per node type beside it); refused before any work where
    the dataset keeps no key maps."""
    main = _main_table(config, data, out, request)
    if not (request and request.get("embeddings")):
        return KeyedOutput([out], lambda arrays: [main(arrays)])
    types = list(data.num_nodes)  # every node type's states (a heterogeneous graph, or a link task's view)
    maps = {t: key_map(config.dataset.path, t) for t in types}
    if any(m is None for m in maps.values()):
        lacking = ", ".join(t for t, m in maps.items() if m is None)
        raise no_keys(config, f"--embeddings --out {out} writes each node type's states (no key map of {lacking})",
                      "use --out FILE.npz")  # fmt: skip
    maps = {t: m.sort_by("id") for t, m in maps.items()}
    return KeyedOutput(
        [out, *(embedding_file(out, t) for t in types)],
        lambda arrays: [main(arrays), *(states_table(maps[t], arrays, t) for t in types)],
    )


def _main_table(config: ExperimentConfig, data, out: Path, request: dict | None) -> Callable[[dict], object]:
    if config.kind is Task.NODE:
        node_type = getattr(data, "target_node", None)
        keys = key_map(config.dataset.path, node_type) if node_type and config.dataset.path else None
        if keys is None:
            raise no_keys(config, f"--out {out} writes a table", "use --out FILE.npz")
        return lambda arrays: keyed_table(keys.sort_by("id"), arrays)
    ends = ends_of(config, getattr(data, "target_edge", None)) if config.kind in (Task.EDGE, Task.LINK) else None
    if ends is None:
        raise no_keys(config, f"--out {out} writes a table", "use --out FILE.npz")
    if config.kind is Task.EDGE:
        src, dst = edge_rows(data)
        return lambda arrays: edge_table(ends, src, dst, arrays)
    if "pairs" in request:
        return lambda arrays: pairs_table(ends, arrays)
    return lambda arrays: top_k_table(ends, arrays)


def keyed_table(keys, arrays: dict):
    """One row per node (a machine's: those ``node_ids`` names): the key columns, then each
    per-node output (a column per class of a 2-D one)."""
    rows = _rows(keys, arrays.get("node_ids"))
    return _with_outputs(rows.drop_columns(["id"]), arrays, rows.num_rows)


def states_table(keys, arrays: dict, node_type: str):
    """One row per node of ``node_type`` (a machine's: those ``node_ids__TYPE`` names): its key
    columns, then ``embedding_J``, its final states."""
    import pyarrow as pa

    rows = _rows(keys, arrays.get(f"node_ids__{node_type}")).drop_columns(["id"])
    states = arrays[f"embedding__{node_type}"]
    for j in range(states.shape[1]):
        rows = rows.append_column(f"embedding_{j}", pa.array(np.ascontiguousarray(states[:, j])))
    return rows


def _rows(keys, ids):
    """The key map's rows of the nodes ``ids`` (the dataset's ids), or all of them (None)."""
    import pyarrow as pa

    return keys if ids is None else keys.take(pa.array(np.ascontiguousarray(ids, dtype=np.int64)))


def _with_outputs(table, arrays: dict, n: int):
    """``table`` with each output of ``n`` rows appended (a column per class of a 2-D one); labels,
    splits, states and node ids are left out."""
    import pyarrow as pa

    for name, value in arrays.items():
        if name == "y" or name.endswith("_idx") or name.startswith(("embedding__", "node_ids")) or len(value) != n:
            continue
        columns = [value] if value.ndim == 1 else [value[:, j] for j in range(value.shape[1])]
        names = [name] if value.ndim == 1 else [f"{name}_{j}" for j in range(value.shape[1])]
        for c, v in zip(names, columns):
            table = table.append_column(c, pa.array(np.ascontiguousarray(v)))
    return table


def edge_rows(data) -> tuple[np.ndarray, np.ndarray]:
    """The source and destination node of each row of an edge task's outputs (row ``i``: column
    ``i`` of the edge_index the dataset gave)."""
    ei = data.edge_index[data.target_edge]
    if getattr(data, "edge_column", None) is not None:
        ei = torch.stack([data.given_rows(ei[0]), data.given_rows(ei[1])])
    return ei[0].numpy(), ei[1].numpy()


def _ends_table(ends: Ends, src: np.ndarray, dst: np.ndarray):
    import pyarrow as pa

    return pa.table({**ends.columns(0, src), **ends.columns(1, dst)})


def edge_table(ends: Ends, src: np.ndarray, dst: np.ndarray, arrays: dict):
    """One row per scored edge: both ends' key columns, then the outputs."""
    return _with_outputs(_ends_table(ends, src, dst), arrays, len(src))


def pairs_table(ends: Ends, arrays: dict):
    """One row per given pair: its ends' key columns, ``score`` (a logit) and ``prob``; a machine's
    share of them first has ``index``, each pair's row in the pairs file."""
    import pyarrow as pa

    table = _ends_table(ends, arrays["src"], arrays["dst"])
    if "index" in arrays:
        table = table.add_column(0, "index", pa.array(np.ascontiguousarray(arrays["index"], dtype=np.int64)))
    table = table.append_column("score", pa.array(arrays["scores"]))
    return table.append_column("prob", pa.array(arrays["probs"]))


def top_k_table(ends: Ends, arrays: dict):
    """One row per filled slot of every source's list: the source's keys, ``rank`` (1 best), the
    destination's keys and ``score``."""
    import pyarrow as pa

    top, counts = arrays["top_dst"], arrays["counts"]
    filled = np.arange(top.shape[1])[None, :] < counts[:, None]
    src = np.repeat(arrays["src"], counts)
    rank = (np.nonzero(filled)[1] + 1).astype(np.int64)
    columns = {**ends.columns(0, src), "rank": pa.array(rank), **ends.columns(1, top[filled])}
    return pa.table(columns).append_column("score", pa.array(arrays["top_scores"][filled]))


def write_table(table, f, suffix: str) -> None:
    """``table`` as CSV or Parquet into the open binary file ``f``."""
    if suffix == ".csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, f)
    else:
        import pyarrow.parquet as pq

        pq.write_table(table, f)


def write_tables(paths: list[Path], tables: list) -> None:
    """Each table at its path, every one written beside its target and linked into place; where
    one fails, those already in place are removed: a prediction's tables appear together or not
    at all."""
    placed = []
    try:
        with contextlib.ExitStack() as stack:
            for path, table in zip(paths, tables):
                tmp = stack.enter_context(files.reserved(path))
                files.publish(path, tmp, lambda f, t=table, p=path: write_table(t, f, p.suffix), "predicting")
                placed.append(path)
    except BaseException:
        for path in placed:
            path.unlink(missing_ok=True)
        raise


def read_key_pairs(path: Path, config: ExperimentConfig, target) -> tuple[torch.Tensor, torch.Tensor]:
    """The (source, destination) rows of a pairs table given by the key columns of ``target``'s
    ends; a missing column, a value of another type or a key not in the map is refused in one
    line (read from the key maps alone: before the graph is loaded, where the checkpoint names
    ``target``)."""
    ends = ends_of(config, target)
    if ends is None:
        raise no_keys(config, f"--pairs {path} gives the pairs", "give a .npz with int64 src and dst")
    want = dict(zip(ends.names[0] + ends.names[1], [*ends.maps[0].select(ends.keys[0]).schema.types,
                                                    *ends.maps[1].select(ends.keys[1]).schema.types]))  # fmt: skip
    table = _read_pairs_table(path, want)
    missing = [c for c in want if c not in table.column_names]
    if missing:
        raise DataError(
            f"--pairs {path} has no column {', '.join(missing)}; a pairs table of this run has the columns "
            f"{', '.join(want)} (the '{ends.types[0]}' and '{ends.types[1]}' keys), found: "
            f"{', '.join(table.column_names) or 'none'}."
        )
    (src, bad_src), (dst, bad_dst) = (_lookup(table, ends, end) for end in (0, 1))
    if bad_src or bad_dst:
        raise DataError(f"--pairs {path}: {'; '.join(filter(None, (bad_src, bad_dst)))}; give keys the dataset has.")
    return torch.from_numpy(src), torch.from_numpy(dst)


def _read_pairs_table(path: Path, types: dict):
    import pyarrow as pa

    try:
        if path.suffix == ".csv":
            import pyarrow.csv as pcsv

            return pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(column_types=types))
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        present = [c for c in types if c in table.column_names]
        return table.select(present).cast(pa.schema([(c, types[c]) for c in present]))
    except (OSError, pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
        first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise DataError(
            f"--pairs {path}: cannot be read as a table with the columns {', '.join(types)} of the key maps' types "
            f"({first})."
        ) from None


def _lookup(table, ends: Ends, end: int) -> tuple[np.ndarray | None, str]:
    """``end``'s node rows of every pair of ``table``, or what is wrong: the keys not in the map,
    with their column(s), how many there are and up to three of them, as the user wrote them."""
    import pyarrow as pa

    names, keys = ends.names[end], ends.keys[end]
    asked = table.select(names).rename_columns(keys).append_column(ROW, pa.array(np.arange(table.num_rows)))
    found = asked.join(ends.maps[end], keys=keys, join_type="left outer").sort_by(ROW)
    ids = found.column("id")
    if not ids.null_count:
        return ids.to_numpy().astype(np.int64), ""
    unknown = found.filter(ids.is_null()).select(keys).to_pylist()
    distinct = list(dict.fromkeys(tuple(row.values()) for row in unknown))
    shown = ", ".join(repr(k[0]) if len(k) == 1 else repr(k) for k in distinct[:3])
    return None, f"{len(distinct)} {', '.join(names)} value(s) not among the keys of '{ends.types[end]}' (e.g. {shown})"


class KeyLookup:
    """One node type's key map, to find the nodes a request names by the user's keys and to name
    nodes back by them (``serve``). The map stays a pyarrow table: a request's keys are joined
    against it (vectorised, no index of Python objects held beside the map), one join per request."""

    def __init__(self, node_type: str, keys):
        self.type = node_type
        self.map = keys.sort_by("id")  # row i: node i (the map holds every node of the type once)
        self.columns = [c for c in keys.column_names if c != "id"]
        self.types = [keys.schema.field(c).type for c in self.columns]

    def ids(self, columns: dict) -> np.ndarray:
        """The node ids of the keys ``{column: pyarrow array}`` (every key column, as long each),
        in their order; -1 where a key is not in the map."""
        import pyarrow as pa

        asked = pa.table(columns).append_column(ROW, pa.array(np.arange(len(next(iter(columns.values()))))))
        found = asked.join(self.map, keys=self.columns, join_type="left outer").sort_by(ROW)
        return found.column("id").fill_null(-1).to_numpy().astype(np.int64)

    def keys(self, ids: np.ndarray) -> list:
        """The keys of the nodes ``ids`` as JSON values: the value of a one-column key, an object
        ``{column: value}`` of a composite one (dates and other values as their text)."""
        import pyarrow as pa

        rows = self.map.take(pa.array(np.ascontiguousarray(ids, dtype=np.int64))).select(self.columns).to_pylist()
        plain = [{c: _json_value(v) for c, v in row.items()} for row in rows]
        return [row[self.columns[0]] for row in plain] if len(self.columns) == 1 else plain


def key_lookup(config: ExperimentConfig, node_type: str | None) -> KeyLookup | None:
    """``node_type``'s key map in the run's dataset folder, or None where it keeps none."""
    if not node_type or not config.dataset.path:
        return None
    keys = key_map(config.dataset.path, node_type)
    return None if keys is None else KeyLookup(node_type, keys)


def _json_value(value):
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
