"""Tables in: a warehouse's tables (Parquet or CSV folders, SQLite, DuckDB) become the
heterogeneous folder dataset that ``gnnbridge train`` reads, with no arrays written by hand.

Four files of one job each: :mod:`.sources` opens a source and streams each table as pyarrow
record batches (one registry, a source is one registration); :mod:`.schema` infers the keys,
foreign keys, roles and column kinds, as YAML a person edits and prepare reads back;
:mod:`.transforms` fits each column's encoding in one pass and applies it in another, its state
kept as JSON; :mod:`.build` writes the arrays, key maps and ``tables.json`` under a temporary
name, runs the folder prepare on them and renames the folder into place.
"""
