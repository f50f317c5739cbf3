"""The PostgreSQL URL source against a real server (Debian's ``postgresql`` package, which
``make install`` installs where it is missing): one cluster per module, made in a temporary
folder owned by the ``postgres`` user, with password (SCRAM) authentication, started on a free
port of 127.0.0.1 with its socket in that folder, and stopped at the end whatever happened.

It holds the shop warehouse of ``shop.py`` (an age set to NaN beside the NULL ones), a schema
of other column types and one without tables. The tests compare what the source streams with the
same tables read from Parquet, and look for the password everywhere it must not be: ``where``,
every error, every file a prepare writes, the CLI's output."""

from __future__ import annotations

import glob
import math
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pytest
from helpers import gnnbridge, one_line
from shop import make_shop, write_parquet

from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.tables import sources
from gnnbridge.tables.postgres import hide_password
from gnnbridge.tables.sources import open_source

INITDB = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
PASSWORD = "Sh0p@s3cret:42"  # '@' and ':' must be percent-encoded in a URL
ENCODED = quote(PASSWORD, safe="")
SUPER_PASSWORD = "super-Xq9-secret"
USER = "shopper"
DEADLINE_S = 90
SQL_TYPES = {"customers": "customer_id text PRIMARY KEY, age double precision, segment text, signup_date date, "
             "churned boolean",
             "products": "product_id bigint PRIMARY KEY, category text, price double precision",
             "orders": "order_id bigint PRIMARY KEY, customer_id text, order_date date",
             "order_items": "order_id bigint, product_id bigint, quantity integer",
             "reviews": "customer_id text, product_id bigint, rating smallint"}  # fmt: skip
EXTRAS = """
CREATE SCHEMA extras;
CREATE TYPE extras.mood AS ENUM ('calm', 'busy');
CREATE TABLE extras."Odd Table" (
    n numeric(6, 2), u uuid, t timestamp, tz timestamptz, j jsonb, v varchar(8), c char(3),
    s smallint, r real, m extras.mood, gone integer
);
INSERT INTO extras."Odd Table" VALUES
    (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (1.25, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-03-01 12:30:00', '2024-03-01 12:30:00+02',
     '{"k": 1}', 'short', 'ab', 7, 0.5, 'busy', NULL);
CREATE VIEW extras.a_view AS SELECT 1 AS one;
CREATE SCHEMA empty;
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres() -> list[str]:
    """initdb and pg_ctl refuse to run as root: as root they run as the ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class Cluster:
    """A PostgreSQL cluster of this module's own: ``start()`` to ``stop()``."""

    def __init__(self):
        self.bin = Path(INITDB[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="gnnbridge-pg-"))  # in /tmp: the postgres user can reach it
        self.data, self.log = self.dir / "data", self.dir / "server.log"
        self.port = _free_port()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        (self.dir / "pwfile").write_text(SUPER_PASSWORD + "\n")
        os.chmod(self.dir / "pwfile", 0o644)

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*_as_postgres(), *args], capture_output=True, text=True, timeout=DEADLINE_S)

    def start(self) -> None:
        made = self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "scram-sha-256",
                         f"--pwfile={self.dir / 'pwfile'}", "-N", "-E", "UTF8", "--locale=C")  # fmt: skip
        if made.returncode:
            pytest.fail(f"initdb failed: {made.stdout}{made.stderr}")
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        ctl = self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
                        "-w", "-t", str(DEADLINE_S), "start")  # fmt: skip
        self.wait(ctl)

    def wait(self, ctl: subprocess.CompletedProcess) -> None:
        import psycopg

        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                psycopg.connect(self.url("postgres", "postgres", SUPER_PASSWORD), connect_timeout=5).close()
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    log = self.log.read_text() if self.log.exists() else "(no log)"
                    pytest.fail(f"PostgreSQL did not come up on port {self.port}: {exc}\n{ctl.stderr}\n{log}")
                time.sleep(0.2)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: str = "shop", user: str = USER, password: str | None = ENCODED, query: str = "") -> str:
        auth = f"{user}:{password}@" if password is not None else f"{user}@"
        return f"postgresql://{auth}127.0.0.1:{self.port}/{db}{query}"


def _shop() -> dict[str, pa.Table]:
    tables = make_shop(n_customers=120)
    ages = tables["customers"]["age"].to_pylist()
    ages[next(i for i, a in enumerate(ages) if a is not None)] = math.nan  # a NaN beside the NULLs
    customers = tables["customers"].set_column(1, "age", pa.array(ages, pa.float64()))
    return {**tables, "customers": customers}


def _load(cluster: Cluster, tables: dict) -> None:
    import psycopg

    with psycopg.connect(cluster.url("postgres", "postgres", SUPER_PASSWORD), autocommit=True) as su:
        su.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        su.execute(f"CREATE DATABASE shop OWNER {USER}")
    with psycopg.connect(cluster.url()) as con:
        for name, table in tables.items():
            con.execute(f"CREATE TABLE {name} ({SQL_TYPES[name]})")
            with con.cursor().copy(f"COPY {name} FROM STDIN") as copy:
                for row in table.to_pylist():
                    copy.write_row(tuple(row.values()))
        con.execute(EXTRAS)


@pytest.fixture(scope="module")
def server():
    if not INITDB:
        pytest.skip("PostgreSQL's binaries are absent (/usr/lib/postgresql/*/bin/initdb): `make install` installs them")
    if os.geteuid() == 0 and not shutil.which("runuser"):
        pytest.skip("running as root without runuser: initdb must run as the postgres user")
    cluster = Cluster()
    try:
        cluster.start()
        _load(cluster, _shop())
        yield cluster
    finally:
        cluster.stop()


def _rows(table: pa.Table) -> list:
    """Rows in a canonical order, NaN made comparable (NaN != NaN)."""
    rows = [
        tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r.values()) for r in table.to_pylist()
    ]
    return sorted(rows, key=repr)


def _read(table) -> pa.Table:
    return pa.Table.from_batches(list(table.batches()), schema=pa.schema(list(table.columns.items())))


def _secret_in(text: str) -> bool:
    return PASSWORD in text or ENCODED in text or SUPER_PASSWORD in text


# --------------------------------------------------------------------------- tables and rows


def test_lists_the_tables_with_their_catalog_types(server):
    with open_source(server.url()) as source:
        pass
    assert source.kind == "postgresql"
    assert sorted(source.tables) == sorted(SQL_TYPES)
    assert source.tables["customers"].columns == {
        "customer_id": pa.string(),
        "age": pa.float64(),
        "segment": pa.string(),
        "signup_date": pa.date32(),
        "churned": pa.bool_(),
    }
    assert source.tables["reviews"].columns["rating"] == pa.int64()  # smallint


def test_streams_the_same_rows_as_parquet_in_batches(server, tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "BATCH_ROWS", 50)
    parquet = open_source(str(write_parquet(_shop(), tmp_path / "shop")))
    with open_source(server.url()) as postgres:
        for name, table in postgres.tables.items():
            batches = list(table.batches())
            assert all(b.num_rows <= 50 for b in batches) and len(batches) >= 2, name
            ours, theirs = _read(table), _read(parquet.tables[name])
            assert ours.schema == theirs.schema.remove_metadata(), name
            assert _rows(ours) == _rows(theirs), name
        again = list(postgres.tables["orders"].batches())  # a second pass starts again
    assert sum(b.num_rows for b in again) == _read(parquet.tables["orders"]).num_rows


def test_rows_come_through_a_server_side_cursor(server, monkeypatch):
    import psycopg

    monkeypatch.setattr(sources, "BATCH_ROWS", 10)
    with open_source(server.url()) as source:
        passes = source.tables["order_items"].batches()
        first = next(passes)
        with psycopg.connect(server.url("shop", "postgres", SUPER_PASSWORD)) as su:
            seen = su.execute("SELECT query FROM pg_stat_activity WHERE usename = %s AND datname = 'shop'", (USER,))
            queries = [q for (q,) in seen.fetchall()]
        assert first.num_rows == 10 and any(q.startswith("FETCH FORWARD 10 FROM") for q in queries), queries
        passes.close()  # the pass's cursor closes with it; the source's connection with the source


def test_other_types_and_a_batch_of_nulls_keep_the_declared_types(server, monkeypatch):
    monkeypatch.setattr(sources, "BATCH_ROWS", 2)
    with open_source(server.url(query="?schema=extras")) as source:
        assert list(source.tables) == ["Odd Table"]  # the view is left out
        table = source.tables["Odd Table"]
        first, last = table.batches()
    declared = pa.schema(list(table.columns.items()))
    assert declared.types == [pa.float64(), pa.string(), pa.timestamp("us"), pa.timestamp("us", tz="UTC"),
                              pa.string(), pa.string(), pa.string(), pa.int64(), pa.float64(), pa.string(),
                              pa.int64()]  # fmt: skip
    assert first.schema == declared and first.num_rows == 2 and first.column("n").null_count == 2
    row = last.to_pylist()[0]
    assert row["n"] == 1.25 and row["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" and row["m"] == "busy"
    assert row["c"] == "ab " and row["s"] == 7 and row["gone"] is None
    assert row["tz"].isoformat() == "2024-03-01T10:30:00+00:00"


# --------------------------------------------------------------------------- the password


def test_where_hides_the_password(server):
    with open_source(server.url(query="?schema=public")) as source:
        pass
    assert source.where == f"postgresql://{USER}:***@127.0.0.1:{server.port}/shop?schema=public"
    assert hide_password(server.url()) == f"postgresql://{USER}:***@127.0.0.1:{server.port}/shop"
    assert hide_password(f"postgres://{USER}@h/db?password={ENCODED}&sslmode=disable").endswith(
        "?password=***&sslmode=disable"
    )
    assert hide_password("data/shop") == "data/shop"


def test_password_from_pgpassword_or_pgpass(server, tmp_path, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with open_source(server.url(password=None)) as source:
        pass
    assert source.where == f"postgresql://{USER}@127.0.0.1:{server.port}/shop" and len(source.tables) == 5
    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{server.port}:shop:{USER}:{PASSWORD.replace(':', chr(92) + ':')}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    with open_source(server.url(password=None)) as source:
        assert sum(b.num_rows for b in source.tables["products"].batches()) == 60


@pytest.mark.parametrize(
    "url, needle",
    [
        (lambda s: s.url(password="wrong-" + ENCODED), "authentication failed"),
        (lambda s: s.url(db="nope"), "database 'nope' does not exist"),
        (lambda s: s.url(query="?schema=nothere"), "has no schema 'nothere'; its schemas: empty, extras, public"),
        (lambda s: s.url(query="?schema=empty"), "schema 'empty' of database shop has no tables"),
        (lambda s: f"postgresql://{USER}:{ENCODED}@127.0.0.1:{_free_port()}/shop", "is unreachable"),
    ],
    ids=["wrong-password", "missing-db", "missing-schema", "empty-schema", "unreachable"],
)
def test_refusals_are_one_line_without_the_password(server, url, needle):
    with pytest.raises(DataError) as refused:
        open_source(url(server))
    message = str(refused.value)
    assert needle in message and "\n" not in message and not _secret_in(message), message
    assert "127.0.0.1" in message


def test_unreachable_names_host_and_port():
    port = _free_port()
    with pytest.raises(DataError, match=rf"PostgreSQL server 127\.0\.0\.1:{port} is unreachable"):
        open_source(f"postgresql://{USER}:{ENCODED}@127.0.0.1:{port}/shop")


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://{USER}:{ENCODED}@127.0.0.1:5432",
        f"postgresql://{USER}:{ENCODED}@127.0.0.1:5432/shop?bogus=1",
        f"postgres://{USER}:{ENCODED}@127.0.0.1:5432/shop?schema=a&schema=b",
        f"postgresql://{USER}:{PASSWORD}@127.0.0.1:5432/shop",  # its '@' and ':' not encoded
        f"postgresql://{USER}:{PASSWORD.replace('@', '/')}@127.0.0.1:5432/shop",
    ],
    ids=["no-db", "unknown-parameter", "two-schemas", "unencoded-at", "unencoded-slash"],
)
def test_unknown_url_forms_are_one_line(url):
    with pytest.raises(ConfigError) as refused:
        open_source(url)
    message = str(refused.value)
    assert "\n" not in message and f"{USER}:***@" in message, message
    assert not _secret_in(message) and "s3cret" not in message and "Sh0p" not in message, message


# --------------------------------------------------------------------------- prepare and the CLI


def test_prepare_gives_parquets_arrays_and_writes_no_password(server, tmp_path):
    from gnnbridge.tables.build import Settings, prepare_tables

    out, twin = tmp_path / "graph", tmp_path / "twin"
    prepare_tables(Settings(server.url(), str(out), label="customers.churned", progress=False))
    parquet = str(write_parquet(_shop(), tmp_path / "shop"))
    prepare_tables(Settings(parquet, str(twin), label="customers.churned", progress=False))
    ours, theirs = (_arrays(folder) for folder in (out, twin))
    assert ours.keys() == theirs.keys() and "x__customers.npy" in ours
    for key, a in theirs.items():
        assert a.dtype == ours[key].dtype and np.array_equal(a, ours[key], equal_nan=True), key
    assert f"{USER}:***@" in (out / "tables.json").read_text()
    written = [p for p in out.rglob("*") if p.is_file()]
    leaked = [p for p in written if PASSWORD.encode() in p.read_bytes() or ENCODED.encode() in p.read_bytes()]
    assert written and not leaked, leaked


def test_prepare_reads_one_snapshot_whatever_writers_commit_meanwhile(server, tmp_path):
    """A customer and an order committed while prepare reads the customers are seen by no pass:
    every pass is a cursor in the one read-only REPEATABLE READ transaction begun when the source
    was opened, so the folder is the one of the tables as they were then (a second pass seeing a
    customer the first did not would misplace rows), and that transaction ends with the prepare."""
    import psycopg

    from gnnbridge.tables.build import Settings, prepare_tables

    su = psycopg.connect(server.url("shop", "postgres", SUPER_PASSWORD), autocommit=True)
    written = []

    def write(table: str, rows: int) -> None:
        if table == "customers" and not written:
            su.execute("INSERT INTO customers VALUES ('Z9999', 30, 'retail', '2024-01-01', true)")
            su.execute("INSERT INTO orders VALUES (999999, 'Z9999', '2024-02-01')")
            written.append(table)

    out, twin = tmp_path / "graph", tmp_path / "twin"
    try:
        prepare_tables(Settings(server.url(), str(out), label="customers.churned", progress=False, on_batch=write))
        assert written and su.execute("SELECT count(*) FROM customers").fetchone()[0] == 121
        open_now = su.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND state LIKE 'idle in transaction%%'", (USER,)
        ).fetchone()[0]
    finally:
        su.execute("DELETE FROM orders WHERE order_id = 999999")
        su.execute("DELETE FROM customers WHERE customer_id = 'Z9999'")
        su.close()
    assert open_now == 0
    prepare_tables(Settings(str(write_parquet(_shop(), tmp_path / "shop")), str(twin), label="customers.churned",
                            progress=False))  # fmt: skip
    ours, theirs = (_arrays(folder) for folder in (out, twin))
    assert ours.keys() == theirs.keys()
    for key, a in theirs.items():
        assert np.array_equal(a, ours[key], equal_nan=True), key


def _arrays(folder: Path) -> dict:
    return {p.name: np.load(p) for p in sorted(folder.glob("*.npy"))}


@pytest.mark.slow  # two CLI runs that import torch (about 7 s on 2 cores)
def test_cli_schema_and_prepare(server, tmp_path):
    shown = gnnbridge("schema", server.url(), "--label", "customers.churned", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"{USER}:***@" in shown.stdout and not _secret_in(shown.stdout + shown.stderr)
    made = gnnbridge("prepare", server.url(), "--label", "customers.churned", "--out", "g", "--quiet", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert not _secret_in(made.stdout + made.stderr)
    for path in (tmp_path / "g").rglob("*"):
        assert not path.is_file() or not _secret_in(path.read_bytes().decode("utf-8", "replace")), path


def test_cli_refusals(server, tmp_path, refused):
    for url, needle in [
        (server.url(password="wrong"), "authentication failed"),
        (server.url(db="nope"), "database 'nope' does not exist"),
        (f"postgresql://{USER}:{ENCODED}@127.0.0.1:{_free_port()}/shop", "is unreachable"),
    ]:
        for args in (["schema", url], ["prepare", url, "--label", "customers.churned", "--out", "g", "--quiet"]):
            proc = refused(*args)
            one_line(proc, needle)
            assert not _secret_in(proc.stdout + proc.stderr), proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written, not even a partial folder
