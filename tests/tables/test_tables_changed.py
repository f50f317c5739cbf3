"""A source file that changes while prepare reads it is refused: one line naming the file and
what changed, a non-zero exit, nothing written at --out (an earlier folder there left as it was).

The changes are real writes to the files on disk, made while prepare holds the source open. Two
seams time them. The CLI's: ``--schema`` given as a named pipe, which prepare opens only after it
has opened the source and fingerprinted its files, so the test's open of the pipe's other end
returns exactly then; the test changes a file and only then writes the schema, and prepare reads
on. The library's: ``Settings.on_batch``, told of each record batch the build reads, from which
the test changes a file between two batches (a second pass, another table's, still to come)."""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import ok, one_line, start
from shop import make_shop, write_csv, write_duckdb, write_parquet, write_sqlite

from gnnbridge.tables.build import Settings, prepare_tables
from gnnbridge.tables.schema import infer, to_yaml
from gnnbridge.tables.sources import open_source
from gnnbridge.tables.stamps import SourceChangedError

ADVICE = "prepare again once whatever writes it is done"


@pytest.fixture(scope="module")
def tables():
    return make_shop(60)


def schema_text(source: Path) -> str:
    with open_source(str(source)) as opened:
        return to_yaml(infer(opened, "customers.churned"), opened.where)


def _pipe_writer(fifo: Path, proc):
    """The write end of ``fifo``, open once prepare has opened its read end."""
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: no reader yet
            if exc.errno != errno.ENXIO:
                raise
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"prepare ended before it read its schema: {err}")
            time.sleep(0.01)
            continue
        os.set_blocking(fd, True)
        return os.fdopen(fd, "w")


def prepare_while(tmp_path: Path, source: str, change, schema: str) -> subprocess.CompletedProcess:
    """``gnnbridge prepare SOURCE --schema PIPE --out g``, ``change()`` made once it has opened
    the source, then the schema written down the pipe."""
    fifo = tmp_path / "schema.yaml"
    os.mkfifo(fifo)
    proc = start("prepare", source, "--schema", "schema.yaml", "--out", "g", "--quiet", cwd=tmp_path)
    with _pipe_writer(fifo, proc) as pipe:
        change()
        pipe.write(schema)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def contents(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- the command


def test_a_file_grown_while_prepare_reads_it_is_refused(tables, tmp_path):
    src = write_csv(tables, tmp_path / "src")
    orders = src / "orders.csv"
    size = orders.stat().st_size
    row = '99999,"C0001",2024-05-01\n'

    def append():
        with open(orders, "a") as f:
            f.write(row)

    proc = prepare_while(tmp_path, "src", append, schema_text(src))
    one_line(proc, f"Error: src/orders.csv (size {size} -> {size + len(row)}) changed while prepare read it; {ADVICE}")
    assert "(nothing was written to g)" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schema.yaml", "src"]  # no g, no temporary folder


def test_a_file_replaced_leaves_the_earlier_folder_as_it_was(tables, tmp_path):
    src = write_parquet(tables, tmp_path / "src")
    prepare_tables(Settings(str(src), str(tmp_path / "g"), label="customers.churned", progress=False))
    before = contents(tmp_path / "g")
    products = tables["products"]

    def replace():  # as a writer that writes a new file beside it and renames it into place does
        pq.write_table(products.slice(0, products.num_rows - 1), src / "new.tmp")
        os.replace(src / "new.tmp", src / "products.parquet")

    proc = prepare_while(tmp_path, "src", replace, schema_text(src))
    one_line(proc, f"src/products.parquet (replaced by another file) changed while prepare read it; {ADVICE}")
    assert contents(tmp_path / "g") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g", "schema.yaml", "src"]


def test_an_unchanged_source_read_through_a_pipe_prepares(tables, tmp_path):
    src = write_parquet(tables, tmp_path / "src")
    ok(prepare_while(tmp_path, "src", lambda: None, schema_text(src)))
    assert (tmp_path / "g" / "x__customers.npy").is_file()
    files = json.loads((tmp_path / "g" / "tables.json").read_text())["files"]
    assert sorted(Path(p).name for p in files) == sorted(f"{n}.parquet" for n in tables)
    assert all({"size", "mtime_ns", "inode"} <= set(stamp) for stamp in files.values())


# --------------------------------------------------------------------------- between two batches


def _when(table: str, change):
    """An ``on_batch`` that makes ``change()`` at the first batch of ``table``."""
    done = []

    def told(name: str, rows: int) -> None:
        if name == table and not done:
            done.append(name)
            change()

    return told


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


@pytest.mark.parametrize(
    "change, what",
    [
        (lambda p: p.write_bytes(p.read_bytes() + b'99999,"C0001",2024-05-01\n'), "(size {size} -> {grown})"),
        (_truncate, "(size {size} -> {half})"),
        (lambda p: p.unlink(), "(removed)"),
    ],
    ids=["grown", "truncated", "removed"],
)
def test_a_change_between_two_batches_is_refused(tables, tmp_path, change, what):
    """``customers`` is read first; ``orders`` is changed as its first pass begins, so its second
    pass (and the folder's other reads) come after the change: a removed file fails that pass,
    which is told as the change."""
    src = write_csv(tables, tmp_path / "src")
    orders = src / "orders.csv"
    size = orders.stat().st_size
    expected = what.format(size=size, grown=size + 25, half=size // 2)
    settings = Settings(str(src), str(tmp_path / "g"), label="customers.churned", progress=False,
                        on_batch=_when("orders", lambda: change(orders)))  # fmt: skip
    with pytest.raises(SourceChangedError) as refused:
        prepare_tables(settings)
    assert str(refused.value).startswith(f"{orders} {expected} changed while prepare read it; {ADVICE}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_like_gets_the_same_check(tables, tmp_path):
    src = write_parquet(tables, tmp_path / "src")
    prepare_tables(Settings(str(src), str(tmp_path / "g"), label="customers.churned", progress=False))
    new = write_parquet(tables, tmp_path / "new")
    reviews = new / "reviews.parquet"
    rewrite = _when("customers", lambda: pq.write_table(tables["reviews"].slice(1), reviews))
    settings = Settings(str(new), str(tmp_path / "new-g"), like=str(tmp_path / "g"), progress=False, on_batch=rewrite)
    with pytest.raises(SourceChangedError, match=rf"^{re.escape(str(reviews))} \(size \d+ -> \d+\) changed while"):
        prepare_tables(settings)
    assert not (tmp_path / "new-g").exists()


def _sqlite_write(path: Path) -> None:
    with sqlite3.connect(path) as con:
        con.execute("INSERT INTO products VALUES (99999, 'toys', 1.5)")
    con.close()


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_sqlite_write_while_prepare_reads_is_refused(tables, tmp_path, journal):
    """In WAL mode a committed write sits in ``shop.sqlite-wal`` and the main file is untouched:
    the side file is fingerprinted with it."""
    db = write_sqlite(tables, tmp_path / "shop.sqlite")
    with sqlite3.connect(db) as con:
        con.execute(f"PRAGMA journal_mode={journal}")
    con.close()
    changed = f"{db}-wal (size 0 -> " if journal == "wal" else f"{db} ("
    settings = Settings(str(db), str(tmp_path / "g"), label="customers.churned", progress=False,
                        on_batch=_when("orders", lambda: _sqlite_write(db)))  # fmt: skip
    with pytest.raises(SourceChangedError, match=f"^{re.escape(changed)}"):
        prepare_tables(settings)
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_an_unchanged_sqlite_prepares(tables, tmp_path, journal):
    """Opening a WAL database creates its ``-wal`` file empty: that is no change."""
    db = write_sqlite(tables, tmp_path / "shop.sqlite")
    with sqlite3.connect(db) as con:
        con.execute(f"PRAGMA journal_mode={journal}")
    con.close()
    prepare_tables(Settings(str(db), str(tmp_path / "g"), label="customers.churned", progress=False))
    assert (tmp_path / "g" / "x__customers.npy").is_file()


def test_a_duckdb_file_replaced_while_prepare_reads_is_refused(tables, tmp_path):
    """A DuckDB writer cannot open the file while prepare holds it; one put in its place can."""
    db = write_duckdb(tables, tmp_path / "shop.duckdb")
    other = write_duckdb(tables, tmp_path / "other.duckdb")
    settings = Settings(str(db), str(tmp_path / "g"), label="customers.churned", progress=False,
                        on_batch=_when("orders", lambda: os.replace(other, db)))  # fmt: skip
    with pytest.raises(SourceChangedError, match=rf"^{re.escape(str(db))} \(replaced by another file\) changed"):
        prepare_tables(settings)
    assert not (tmp_path / "g").exists()
