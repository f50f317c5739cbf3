"""Sources of tables: one registry, a source one registration.

Every source answers the same two questions per table: its columns (names and arrow types) and
an iterator of ``pyarrow.RecordBatch`` over its rows. Nothing here parses a file by hand or holds
a table whole: folders of Parquet or CSV files go through ``pyarrow.dataset`` (a table is a file
named after it, or a sub-folder of files), DuckDB files through ``duckdb``'s record-batch reader,
SQLite files through the standard library's ``sqlite3`` (``fetchmany``, typed by the declared
column types, so a batch of NULLs does not change a column's type). A source that reads files
fingerprints them when it is opened, before it reads them (:mod:`.stamps`), so that prepare can
refuse a file that changed while it read it; one that holds a connection closes it with
``close()`` (or a ``with`` block).

A new source (PostgreSQL, an object store) is one call to :func:`register_source` with a test of
the text the user gave and an opener returning a :class:`Source`; the PostgreSQL URL source is
the next one (``postgresql://...``; its password must never be written into a dataset).
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gnnbridge.core.errors import ConfigError, DataError, DataFileNotFoundError
from gnnbridge.tables.stamps import Files

BATCH_ROWS = 65536
SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")
DUCKDB_SUFFIXES = (".duckdb",)
FILE_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class Table:
    """One table of a source: ``columns`` maps each column name to its arrow type (in the
    table's order); ``batches()`` starts a new pass over its rows."""

    name: str
    columns: dict
    batches: Callable[[], Iterator]

    def __post_init__(self):
        if not self.columns:
            raise DataError(f"Table '{self.name}' has no columns.")


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Source:
    """An opened source: ``kind`` (its registry name), ``where`` (what to show the user, with
    no secret in it), its tables by name, the files it reads fingerprinted when it was opened
    (none for a server) and ``close``, which releases what it holds (a connection, a snapshot)."""

    kind: str
    where: str
    tables: dict
    files: Files = field(default_factory=Files)
    close: Callable[[], None] = _nothing

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class SourceKind:
    name: str
    matches: Callable[[str], bool]
    open: Callable[[str], Source]
    describe: str


SOURCES: dict[str, SourceKind] = {}
# Built-in sources kept in modules of their own, registered as a plugin's would be: loaded by
# name when the registry is first asked (they import this module for register_source, and a
# source whose driver is missing then fails on use, not on every import of the tables package).
BUILTIN_SOURCES = ("gnnbridge.tables.postgres",)
_loaded: list[str] = []


def _kinds() -> list[SourceKind]:
    for module in BUILTIN_SOURCES:
        if module not in _loaded:
            _loaded.append(module)
            importlib.import_module(module)
    return list(SOURCES.values())


def register_source(name: str, matches: Callable[[str], bool], open: Callable[[str], Source], describe: str) -> None:
    """Add a kind of source; the first registered whose ``matches(text)`` is true opens it."""
    if name in SOURCES:
        raise ConfigError(f"A table source named '{name}' is already registered.")
    SOURCES[name] = SourceKind(name, matches, open, describe)


def open_source(text: str) -> Source:
    """The source ``text`` names (a folder, a database file, a URL), every table listed."""
    for kind in _kinds():
        if kind.matches(text):
            source = kind.open(text)
            if not source.tables:
                source.close()
                raise DataError(f"{source.where}: no tables found.")
            return source
    if not Path(text).exists():
        raise DataFileNotFoundError(f"Table source '{text}' does not exist; {_choices()}.")
    raise ConfigError(f"'{text}' is not a table source; {_choices()}.")


def kinds() -> list[SourceKind]:
    """Every kind of table source, in the order they are asked (the dataset sources' plugin,
    :mod:`gnnbridge.tables.plugin`, registers one dataset source per kind)."""
    return _kinds()


def _choices() -> str:
    return "give " + "; ".join(k.describe for k in _kinds())


# --------------------------------------------------------------------------- folders


def _folder_tables(root: Path) -> dict[str, tuple[str, list[Path]]]:
    """``{table: (format, files)}``: each file named after its table, or a sub-folder of files."""
    found: dict[str, tuple[str, list[Path]]] = {}
    for entry in sorted(root.iterdir()):
        if entry.is_file() and entry.suffix.lower() in FILE_FORMATS:
            found[entry.stem] = (FILE_FORMATS[entry.suffix.lower()], [entry])
        elif entry.is_dir():
            members = sorted(p for p in entry.rglob("*") if p.is_file() and p.suffix.lower() in FILE_FORMATS)
            formats = {FILE_FORMATS[p.suffix.lower()] for p in members}
            if len(formats) > 1:
                raise DataError(f"{entry}: mixes CSV and Parquet files; one table is one format.")
            if members:
                found[entry.name] = (formats.pop(), members)
    return found


def _is_table_folder(text: str) -> bool:
    """A folder of table files, and not a folder of ``.npy`` arrays that also holds a ``.csv``
    (the array folder ignores other files: ``notes.csv`` beside ``x.npy`` keeps it one)."""
    path = Path(text)
    return path.is_dir() and not any(path.glob("*.npy")) and bool(_folder_tables(path))


def _open_folder(text: str) -> Source:
    import pyarrow.dataset as ds

    found = _folder_tables(Path(text))
    files = Files.of(p for _, members in found.values() for p in members)
    tables = {}
    for name, (fmt, members) in found.items():
        try:
            schema = _one_schema(name, members, fmt) if len(members) > 1 else None
            dataset = ds.dataset([str(p) for p in members], format=fmt, schema=schema)
        except DataError:
            raise
        except Exception as exc:  # pyarrow's own words: a column whose type changes across files, a bad file
            raise DataError(f"{text}: table '{name}' cannot be read: {str(exc).splitlines()[0]}") from None
        tables[name] = Table(
            name,
            {f.name: f.type for f in dataset.schema},
            lambda d=dataset: iter(d.to_batches(batch_size=BATCH_ROWS)),
        )
    return Source("folder", str(text), tables, files)


def _one_schema(name: str, members: list, fmt: str):
    """The schema of a table split over ``members``: every file's (pyarrow would take the first
    file's and fail, or cast, later). A column all missing in one file takes the others' type,
    integers beside floats read as floats; any other disagreement is refused, naming the files."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    seen: dict = {}
    for path in members:
        for f in ds.dataset(str(path), format=fmt).schema:
            t, (old, where) = f.type, seen.get(f.name, (None, None))
            if old is None or pa.types.is_null(old):
                seen[f.name] = (t, path)
            elif pa.types.is_null(t) or t == old:
                continue
            elif all(pa.types.is_integer(x) or pa.types.is_floating(x) for x in (t, old)):
                seen[f.name] = (pa.float64(), where)
            else:
                raise DataError(
                    f"Table '{name}': column '{f.name}' is {old} in {where.name} but {t} in {path.name}; "
                    "give every file of a table the same column types."
                )
    return pa.schema([pa.field(c, t) for c, (t, _) in seen.items()])


# --------------------------------------------------------------------------- DuckDB


def _open_duckdb(text: str) -> Source:
    import duckdb

    files = Files.of([Path(text)], sides=[Path(f"{text}.wal")])
    try:
        con = duckdb.connect(text, read_only=True)
        names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()]
    except duckdb.Error as exc:
        raise DataError(f"{text}: not a DuckDB database ({str(exc).splitlines()[0]}).") from None
    tables = {}
    for name in names:
        reader = con.cursor().sql(f'SELECT * FROM "{name}" LIMIT 0').to_arrow_reader()
        tables[name] = Table(
            name,
            {f.name: f.type for f in reader.schema},
            lambda n=name: iter(con.cursor().sql(f'SELECT * FROM "{n}"').to_arrow_reader(BATCH_ROWS)),
        )
    return Source("duckdb", str(text), tables, files, con.close)


# --------------------------------------------------------------------------- SQLite


def _sqlite_type(declared: str):
    """SQLite's type affinity rules (datatype3.html, 3.1) as an arrow type."""
    import pyarrow as pa

    d = declared.upper()
    if "INT" in d:
        return pa.int64()
    if any(t in d for t in ("CHAR", "CLOB", "TEXT")) or not d:
        return pa.string()
    if any(t in d for t in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    if "BOOL" in d:
        return pa.bool_()
    return pa.float64()  # NUMERIC affinity


def _open_sqlite(text: str) -> Source:
    files = Files.of([Path(text)], sides=[Path(f"{text}-wal")])
    try:
        con = sqlite3.connect(f"file:{text}?mode=ro", uri=True)
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    except sqlite3.DatabaseError as exc:
        raise DataError(f"{text}: not a SQLite database ({exc}).") from None
    tables = {}
    for name in names:
        if name.startswith("sqlite_"):
            continue
        columns = {r[1]: _sqlite_type(r[2] or "") for r in con.execute(f'PRAGMA table_info("{name}")')}
        tables[name] = Table(name, columns, lambda n=name, c=columns: _sqlite_batches(con, n, c))
    return Source("sqlite", str(text), tables, files, con.close)


def _sqlite_batches(con, name: str, columns: dict) -> Iterator:
    import pyarrow as pa

    schema = pa.schema(list(columns.items()))
    cursor = con.execute(f'SELECT * FROM "{name}"')
    while rows := cursor.fetchmany(BATCH_ROWS):
        cols = list(zip(*rows))
        try:
            yield pa.RecordBatch.from_arrays([pa.array(c, type=t) for c, t in zip(cols, schema.types)], schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise DataError(f"SQLite table '{name}': a value does not fit its declared type ({exc}).") from None


def _suffix(suffixes: tuple) -> Callable[[str], bool]:
    return lambda text: Path(text).suffix.lower() in suffixes and Path(text).is_file()


register_source("folder", _is_table_folder, _open_folder, "a folder of .parquet or .csv files (one per table)")
register_source("sqlite", _suffix(SQLITE_SUFFIXES), _open_sqlite, "a SQLite file (.sqlite, .sqlite3, .db)")
register_source("duckdb", _suffix(DUCKDB_SUFFIXES), _open_duckdb, "a DuckDB file (.duckdb)")
