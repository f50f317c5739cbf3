"""Tables as dataset sources: each kind of table source (a folder of Parquet or CSV files,
SQLite, DuckDB, a PostgreSQL URL) registered in core's one registry of dataset sources, as a
third-party plugin would register its own; core imports nothing of this package.

A run does not read tables (no ``section``): ``gnnbridge prepare SOURCE --label TABLE.COLUMN
--out DIR`` writes them as a folder first, which ``--dataset DIR`` then reads.
"""

from __future__ import annotations

from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.core.contracts.sources import DatasetSource
from gnnbridge.core.errors import ConfigError
from gnnbridge.tables.sources import kinds

OPTIONS = ("label", "schema", "target", "on_dangling", "like")


@hookimpl
def register_dataset_sources(register):
    for kind in kinds():
        register(DatasetSource(f"tables-{kind.name}", kind.matches, kind.describe, None, prepare, OPTIONS))


def prepare(
    source: str, out, dtype: str, progress: bool, label=None, schema=None, target=None, on_dangling="refuse", like=None
) -> dict:
    """:func:`gnnbridge.tables.build.prepare_tables` of these settings; its result carries
    ``notes`` and, unless the tables are read ``like`` a prepared folder (to predict on), the
    ``train`` command."""
    from gnnbridge.tables.build import Settings, prepare_tables

    if out is None:
        raise ConfigError("From tables, give the folder to write: --out DIR.")
    result = prepare_tables(Settings(source, out, label, schema, target, on_dangling, dtype, progress, like))
    return {k: v for k, v in result.items() if k != "train"} if like else result
