"""The schema of a set of tables, inferred from names and checked against values, written as
YAML a person edits, and read back with every entry checked.

The guesses, each visible and overridable in the file: a table's primary key is a column named
``id``, ``<table>_id`` or ``<singular table>_id`` whose values are unique and non-null; a foreign
key is a column named like another table's key (``customer_id`` for ``customers.customer_id`` or
``customers.id``), its values checked against that table's keys; a table with a key is an
entity (a node type), one with no key and exactly two foreign keys an edge table (a relation,
its other columns edge features), anything else is skipped with a note. Column kinds come from
arrow types and values: integers that are only 0/1 and booleans are ``boolean``; dates,
timestamps and ISO date text ``datetime``; text whose values repeat (at most
:data:`DISTINCT_LIMIT` distinct, on average twice each or more) and are short ``categorical``,
other text ``text``; key columns ``id``. A categorical column of an entity table with more than
``max_categories`` values is given ``transform: node`` (its values become a node type of their
own, whose learnt embeddings are the column's embedding ids) instead of ``onehot``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gnnbridge.core.errors import ConfigError
from gnnbridge.tables.keys import KeySet, count_in, integer_key, key_values
from gnnbridge.tables.transforms import BUCKETS, DEFAULT_TRANSFORM, KINDS, MAX_CATEGORIES, OTHER, TRANSFORMS

ROLES = ("entity", "edge", "skip")
TARGETS = ("class", "regression", "multilabel")
DISTINCT_LIMIT = 1000  # distinct text values tracked while profiling; beyond: text
WORDS_LIMIT = 4  # a categorical value has at most this many words (longer values: text)
COLUMN_KEYS = ("kind", "transform", "max_categories", "buckets")
TABLE_KEYS = ("role", "primary_key", "foreign_keys", "columns", "notes")
TASK_KEYS = ("label", "target", "split_column", "time_column")


@dataclass
class Profile:
    """One pass's facts about a table's columns: what fits in memory whatever the rows, each
    column's distinct values up to :data:`DISTINCT_LIMIT` and the primary key's distinct values
    (entity-sized), never a column's values."""

    rows: int = 0
    nulls: dict = field(default_factory=dict)
    distinct: dict = field(default_factory=dict)  # column -> set of values (None once past DISTINCT_LIMIT)
    dates: dict = field(default_factory=dict)  # text column -> every value is an ISO date or time
    key: str | None = None  # the primary key (named as one), whose values are kept
    key_type: object = None
    keys: np.ndarray | None = None  # its distinct present values, sorted (see gnnbridge.tables.keys)
    found: dict = field(default_factory=dict)  # foreign key column -> rows whose value is among its table's keys


def singular(name: str) -> str:
    if name.endswith("ies"):
        return name[:-3] + "y"
    if name.endswith(("ses", "xes", "ches", "shes")):
        return name[:-2]
    return name[:-1] if name.endswith("s") else name


def key_names(table: str) -> tuple:
    return ("id", f"{table}_id", f"{singular(table)}_id")


def is_text(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def candidates(table) -> list[str]:
    """The columns named as keys (``id``, ``*_id``), in the table's order."""
    return [c for c in table.columns if c == "id" or c.endswith("_id")]


def profile(table, key: str | None = None, checks: dict | None = None) -> Profile:
    """Stream ``table`` once: row and null counts, distinct values (bounded), the distinct values
    of its primary key ``key``, and how many rows of each foreign key in ``checks`` (column ->
    the profile of the table it names) are found among that table's keys."""
    import pyarrow.compute as pc

    p = Profile(nulls=dict.fromkeys(table.columns, 0), distinct={c: set() for c in table.columns})
    p.key, p.key_type = key, table.columns.get(key)
    p.dates = {c: True for c, t in table.columns.items() if is_text(t)}
    p.found = dict.fromkeys(checks or {}, 0)
    seen = KeySet()
    for batch in table.batches():
        p.rows += batch.num_rows
        for c in table.columns:
            col = batch.column(c)
            p.nulls[c] += col.null_count
            if p.distinct[c] is not None:
                p.distinct[c].update(pc.unique(col.drop_null()).to_pylist())
                if len(p.distinct[c]) > DISTINCT_LIMIT:
                    p.distinct[c] = None
            if p.dates.get(c):
                valid = col.drop_null()
                p.dates[c] = len(valid) == 0 or bool(
                    pc.all(
                        pc.match_substring_regex(valid, r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?$")
                    ).as_py()
                )
        if key:
            seen.add(key_values(batch.column(key)))
        _count_found(batch, checks or {}, p)
    p.keys = seen.keys() if key else None
    return p


def _count_found(batch, checks: dict, p: Profile) -> None:
    """Add each foreign key's rows found among its table's keys: a missing value is found where that
    key has missing values too, an integer never among text keys (nor text among integers)."""
    for c, target in checks.items():
        col = batch.column(c)
        found = col.null_count if target.nulls[target.key] else 0
        if integer_key(col.type) == integer_key(target.key_type):
            found += count_in(target.keys, key_values(col))
        p.found[c] += found


def _profiles(source, pks: dict, refs: dict) -> dict:
    """Every table profiled, each table whose key others name before them, so that a foreign key is
    checked while its own table is read; only the foreign keys of a cycle of references (a table
    naming one that names it back) take a second pass over their table."""
    profiles: dict = {}
    for name in _targets_first(list(source.tables), refs):
        checks = {c: profiles[t] for c, t in refs[name].items() if t in profiles}
        profiles[name] = profile(source.tables[name], pks[name], checks)
    for name, p in profiles.items():
        late = {c: profiles[t] for c, t in refs[name].items() if c not in p.found}
        if late:
            p.found.update(dict.fromkeys(late, 0))
            for batch in source.tables[name].batches():
                _count_found(batch, late, p)
    return profiles


def _targets_first(names: list, refs: dict) -> list:
    """``names`` with every table after the tables its foreign keys name, where no cycle forbids it."""
    order: list = []

    def visit(name: str, path: frozenset) -> None:
        if name in order or name in path:
            return
        for target in refs[name].values():
            visit(target, path | {name})
        order.append(name)

    for name in names:
        visit(name, frozenset())
    return order


def kind_of(name: str, t, p: Profile, keys: set) -> str:
    import pyarrow as pa

    values = p.distinct[name]
    if name in keys or name == "id" or name.endswith("_id"):
        return "id"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t) and values is not None and set(values) <= {0, 1} and values:
        return "boolean"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "numeric"
    if pa.types.is_temporal(t):
        return "datetime"
    if is_text(t):
        if p.dates.get(name) and values != set():
            return "datetime"
        if values is not None and len(values) <= max(p.rows // 2, 2) and _short(values):
            return "categorical"
        return "text"
    return "text"


def _short(values: set) -> bool:
    return all(len(str(v).split()) <= WORDS_LIMIT for v in values)


def column_spec(table: str, column: str, kind: str, distinct, role: str) -> tuple[dict, str | None]:
    """A column's inferred entry, and the note it needs (a wide category, text left out)."""
    spec = {"kind": kind, "transform": DEFAULT_TRANSFORM[kind]}
    if kind == "categorical" and len(distinct) > MAX_CATEGORIES:
        if role == "entity":
            spec["transform"] = "node"
            return spec, (
                f"{column}: {len(distinct)} categories, more than {MAX_CATEGORIES} to one-hot: a node type "
                f"'{value_type(table, column)}' (one node per value, plus {OTHER!r}), each with a learnt embedding "
                "(transform: onehot keeps the most frequent instead)"
            )
        return spec, (
            f"{column}: {len(distinct)} categories; the {MAX_CATEGORIES} most frequent one-hot, the rest "
            f"{OTHER!r} (an edge table's column cannot be a node type)"
        )
    if kind == "text":
        return spec, f"{column}: text, left out (transform: hashed gives hashed word counts)"
    return spec, None


def infer(source, label: str | None = None) -> dict:
    """The schema of ``source`` (an opened :class:`~gnnbridge.tables.sources.Source`), every guess
    checked, each table streamed once (memory: the primary keys' distinct values, not the rows)."""
    named = {name: candidates(t) for name, t in source.tables.items()}
    pks = {name: _primary_key(name, cols) for name, cols in named.items()}
    refs = {name: _foreign_keys(name, cols, pks) for name, cols in named.items()}
    profiles = _profiles(source, pks, refs)
    tables = {}
    for name, t in source.tables.items():
        p, pk, notes = profiles[name], pks[name], []
        if pk and key_problem(pk, p):
            notes.append(key_problem(pk, p))
        fks, checks = refs[name], []
        for c, target in fks.items():
            known = p.found[c]
            checks.append(f"{c} -> {target}.{pks[target]}: {known} of {p.rows} rows found, {p.rows - known} dangling")
        role = "entity" if pk else "edge" if len(fks) == 2 else "skip"
        if role == "skip":
            notes.append(f"no primary key ({' / '.join(key_names(name))}) and {len(fks)} foreign keys: skipped")
        if p.rows == 0:
            notes.append("empty")
        keyset = {pk, *fks} if pk else set(fks)
        columns = {}
        for c, typ in t.columns.items():
            columns[c], note = column_spec(name, c, kind_of(c, typ, p, keyset), p.distinct[c], role)
            if note:
                notes.append(note)
        entry = {"role": role, "primary_key": pk, "foreign_keys": dict(fks), "columns": columns}
        tables[name] = {**entry, "notes": checks + notes} if checks or notes else entry
    schema = {"tables": tables, "task": {"label": label, "target": None, "split_column": None, "time_column": None}}
    if label:
        table, column = split_name(label, "--label", schema)
        schema["task"]["target"] = guess_target(
            tables[table]["columns"][column]["kind"], profiles[table].distinct[column]
        )
    return schema


def guess_target(kind: str, distinct) -> str:
    if kind in ("boolean", "categorical"):
        return "class"
    if (
        kind == "numeric"
        and distinct is not None
        and len(distinct) <= 10
        and all(float(v).is_integer() for v in distinct)
    ):
        return "class"
    return "regression"


def _primary_key(name: str, columns: list) -> str | None:
    """The first column named as a key; whether its values are unique and non-null is checked
    by :func:`key_problem` (noted here, refused by prepare with the counts)."""
    return next((c for c in key_names(name) if c in columns), None)


def _foreign_keys(name: str, columns: list, pks: dict) -> dict:
    """``{column: table}``: the columns (in the table's order) named like another table's key."""
    found = {}
    for c in columns:
        target = _referenced(c, name, pks) if c != pks[name] else None
        if target is not None:
            found[c] = target
    return found


def key_problem(column: str, p: Profile) -> str | None:
    repeats = p.rows - p.nulls[column] - len(p.keys)
    if p.nulls[column] or repeats:
        return f"primary key {column}: {p.nulls[column]} missing, {repeats} repeated (prepare refuses it until fixed)"
    return None


def _referenced(column: str, table: str, pks: dict) -> str | None:
    """The table whose key ``column`` names: same key name, or ``<singular>_id`` for a key ``id``."""
    found = [
        t
        for t, k in pks.items()
        if t != table and k and (k == column != "id" or (k == "id" and column in key_names(t)[1:]))
    ]
    return found[0] if len(found) == 1 else None


# --------------------------------------------------------------------------- reading it back


def split_name(text: str, what: str, schema: dict) -> tuple[str, str]:
    tables = schema["tables"]
    table, dot, column = (text or "").partition(".")
    if not dot or table not in tables:
        raise ConfigError(f"{what} {text!r} names no table; give TABLE.COLUMN with TABLE one of: {', '.join(tables)}.")
    if column not in tables[table]["columns"]:
        cols = ", ".join(tables[table]["columns"])
        raise ConfigError(f"{what} {text!r}: table '{table}' has no column '{column}'; its columns: {cols}.")
    return table, column


def check(schema: dict, source) -> dict:
    """``schema`` (read from a file a person edited) checked against ``source``: one line per bad entry."""
    if not isinstance(schema, dict) or not isinstance(schema.get("tables"), dict):
        raise ConfigError(
            "The schema file needs a 'tables:' mapping (write one with gnnbridge schema SOURCE --out FILE)."
        )
    _only(schema, ("tables", "task", "source"), "the schema file")
    for name in schema["tables"]:
        if name not in source.tables:
            raise ConfigError(
                f"Schema table '{name}' is not in {source.where}; its tables: {', '.join(source.tables)}."
            )
    for name, entry in schema["tables"].items():
        _check_table(name, entry, schema, source)
    task = schema.setdefault("task", {})
    _only(task, TASK_KEYS, "task")
    if task.get("target") not in (None, *TARGETS):
        raise ConfigError(f"task.target {task['target']!r} is not a target; use one of: {', '.join(TARGETS)}.")
    for key in ("label", "split_column", "time_column"):
        if task.get(key):
            split_name(task[key], f"task.{key}", schema)
    return schema


def _only(entry: dict, allowed: tuple, where: str) -> None:
    for key in entry:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown entry '{key}'; valid: {', '.join(allowed)}.")


def _check_table(name: str, entry: dict, schema: dict, source) -> None:
    if name not in source.tables:
        raise ConfigError(f"Schema table '{name}' is not in {source.where}; its tables: {', '.join(source.tables)}.")
    if not isinstance(entry, dict):
        raise ConfigError(f"Schema table '{name}' must be a mapping of {', '.join(TABLE_KEYS)}.")
    _only(entry, TABLE_KEYS, f"table '{name}'")
    real = source.tables[name].columns
    role = entry.setdefault("role", "entity")
    if role not in ROLES:
        raise ConfigError(f"Table '{name}': role {role!r} is not a role; use one of: {', '.join(ROLES)}.")
    pk = entry.get("primary_key")
    for c in [pk] if isinstance(pk, str) else (pk or []):
        if c not in real:
            raise ConfigError(f"Table '{name}': primary_key '{c}' is not a column; its columns: {', '.join(real)}.")
    if role == "entity" and not pk:
        raise ConfigError(
            f"Table '{name}' is an entity but names no primary_key; give one of its columns: {', '.join(real)}."
        )
    fks = entry.setdefault("foreign_keys", {}) or {}
    entry["foreign_keys"] = fks
    for c, target in fks.items():
        if c not in real:
            raise ConfigError(f"Table '{name}': foreign key '{c}' is not a column; its columns: {', '.join(real)}.")
        entities = [t for t, e in schema["tables"].items() if e.get("role", "entity") == "entity"]
        if target not in entities:
            raise ConfigError(
                f"Table '{name}': foreign key '{c}' points at '{target}', not an entity table; "
                f"entity tables: {', '.join(entities)}."
            )
    if role == "edge" and len(fks) != 2:
        raise ConfigError(
            f"Table '{name}' is an edge table and needs exactly two foreign_keys (source, destination); "
            f"it has {len(fks)}."
        )
    columns = entry.setdefault("columns", {})
    for c, spec in columns.items():
        _check_column(name, c, spec, real)
        if spec["transform"] == "node":
            _check_value_type(name, c, role, schema)


def _check_value_type(table: str, column: str, role: str, schema: dict) -> None:
    """``transform: node`` needs an entity table, and a type name no table has."""
    if role != "entity":
        raise ConfigError(
            f"Table '{table}', column '{column}': transform node needs an entity table (this one is {role}); "
            "use onehot."
        )
    _check_type_name(value_type(table, column), table, column, schema)


def _check_type_name(name: str, table: str, column: str, schema: dict) -> None:
    if name in schema["tables"]:
        raise ConfigError(
            f"Table '{table}', column '{column}': transform node makes a node type '{name}', which is a table's "
            "name; rename the column or use onehot."
        )


def value_type(table: str, column: str) -> str:
    """The node type of a ``transform: node`` column's values: ``<table>_<column>``."""
    return f"{table}_{column}"


def _check_column(table: str, c: str, spec: dict, real: dict) -> None:
    if c not in real:
        raise ConfigError(f"Table '{table}': column '{c}' is not in the table; its columns: {', '.join(real)}.")
    if not isinstance(spec, dict):
        raise ConfigError(
            f"Table '{table}', column '{c}': give kind and transform, e.g. {{kind: numeric, transform: standardize}}."
        )
    _only(spec, COLUMN_KEYS, f"table '{table}', column '{c}'")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ConfigError(
            f"Table '{table}', column '{c}': kind {kind!r} is not a kind; use one of: {', '.join(KINDS)}."
        )
    spec.setdefault("transform", DEFAULT_TRANSFORM[kind])
    if spec["transform"] not in TRANSFORMS[kind]:
        raise ConfigError(
            f"Table '{table}', column '{c}': transform {spec['transform']!r} does not apply to kind {kind}; "
            f"use one of: {', '.join(TRANSFORMS[kind])}."
        )
    cap = spec.get("max_categories", MAX_CATEGORIES)
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise ConfigError(f"Table '{table}', column '{c}': max_categories {cap!r} must be a whole number >= 1.")
    count = spec.get("buckets", BUCKETS.get(spec["transform"], 2))
    if "buckets" in spec and spec["transform"] not in BUCKETS:
        raise ConfigError(
            f"Table '{table}', column '{c}': buckets applies to transform {' or '.join(BUCKETS)}, "
            f"not {spec['transform']}."
        )
    if not isinstance(count, int) or isinstance(count, bool) or count < 2:
        raise ConfigError(f"Table '{table}', column '{c}': buckets {count!r} must be a whole number >= 2.")


def to_yaml(schema: dict, where: str) -> str:
    import yaml

    head = (
        f"# The schema gnnbridge inferred from {where}: edit any entry, then\n"
        "#   gnnbridge prepare SOURCE --schema THIS_FILE --label TABLE.COLUMN --out DIR\n"
        f"# roles: {', '.join(ROLES)}; kinds and their transforms (the first is the default):\n"
        + "".join(f"#   {k}: {', '.join(TRANSFORMS[k])}\n" for k in KINDS)
        + f"# categorical: onehot keeps the max_categories (default {MAX_CATEGORIES}) most frequent values,\n"
        + "#   node makes a node type TABLE_COLUMN (a node per value, each with a learnt embedding)\n"
        + f"# buckets: the count of {', '.join(f'{t} (default {n})' for t, n in BUCKETS.items())}\n"
        + f"# task.target: {', '.join(TARGETS)}\n"
    )
    return head + yaml.safe_dump(schema, sort_keys=False, default_flow_style=False, width=120)


def read_yaml(path: str) -> dict:
    import yaml

    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"Schema file '{path}' does not exist; write one with gnnbridge schema SOURCE --out {path}."
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"Schema file '{path}' is not YAML: {str(exc).splitlines()[0]}.") from None
