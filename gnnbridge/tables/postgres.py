"""The PostgreSQL URL source: ``postgresql://user:password@host:port/db[?schema=NAME]``.

Why a module of its own: a database URL carries a secret, which no other source does. The
password is kept in memory only, to open connections; what leaves this module never holds it.
``Source.where`` (shown to the user, recorded as a prepared dataset's origin) is the URL with the
password replaced by ``***``, and every error is one line naming host, port, database and user with
the driver's reason, any password stripped from it. Without a password in the URL, libpq reads it
from the ``PGPASSWORD`` environment variable or ``~/.pgpass`` as it always does (and ``PGHOST``,
``PGPORT``, ``PGUSER`` likewise), so it need not be typed into a command line at all.

What it assumes: psycopg 3 (``psycopg[binary]``, whose wheel bundles libpq) and a server it can
read with the user's rights. The tables are every base table of one schema (``?schema=NAME``,
default ``public``) as ``information_schema`` lists them; views are left out. Each column's arrow
type comes from the catalog, not from the rows, so a batch of NULLs keeps its column's type:
smallint, integer and bigint are int64; real, double precision and numeric are float64 (numeric
is cast on the server, so exact decimals become floats); boolean is bool; text, varchar, char and
uuid are strings; date is date32; timestamp and timestamptz are microsecond timestamps (timestamptz
in UTC). Any other type (json, arrays, intervals, enums, bytea...) is read as its text form, a
string column. Rows are streamed through a server-side (named) cursor in batches of
:data:`~gnnbridge.tables.sources.BATCH_ROWS`, so a table is never held whole in memory.

One snapshot, not fingerprints: a server has no files here to fingerprint (:mod:`.stamps`), and
its writers need not wait for a prepare. The source holds one read-only ``REPEATABLE READ``
transaction from its opening (the catalog is its first read) until ``close()``, and every pass of
every table is a cursor in it, so prepare reads the database as it was when opened: rows that
writers commit meanwhile are not seen by any pass (a first pass and a second never disagree, a
foreign key never names a row its table's pass missed) and nothing is refused. The price is
PostgreSQL's for any long read: the rows the snapshot can see are kept from vacuum until it ends.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from urllib.parse import parse_qsl, quote_plus, unquote, urlencode

from gnnbridge.core.errors import HIDDEN, ConfigError, DataError
from gnnbridge.core.errors import hide_url_password as _hidden
from gnnbridge.tables import sources
from gnnbridge.tables.sources import Source, Table, register_source

SCHEMES = ("postgresql://", "postgres://")
FORM = "postgresql://user:password@host:port/db[?schema=NAME]"
DEFAULT_SCHEMA = "public"
CONNECT_TIMEOUT_S = 10
ENCODE = "percent-encode any of : / @ ? # in the password"
# information_schema.columns.data_type -> (arrow type name, SQL cast applied on the server or None)
TYPES = {
    "smallint": ("int64", None),
    "integer": ("int64", None),
    "bigint": ("int64", None),
    "real": ("float64", None),
    "double precision": ("float64", None),
    "numeric": ("float64", "float8"),
    "boolean": ("bool", None),
    "text": ("string", None),
    "character varying": ("string", None),
    "character": ("string", None),
    "uuid": ("string", "text"),
    "date": ("date32", None),
    "timestamp without time zone": ("timestamp", None),
    "timestamp with time zone": ("timestamptz", None),
}
UNREACHABLE = ("connection refused", "timeout expired", "failed to resolve host", "could not translate host")
UNREACHABLE += ("network is unreachable", "no route to host", "no such file or directory")


class Url:
    """A parsed URL: ``conninfo`` (what libpq is given, password included: never shown),
    ``schema``, ``where`` (the URL with its password hidden) and the parts an error names."""

    def __init__(self, text: str):
        self.where = _hidden(text)
        raw = _raw_password(text)
        forms = (raw, unquote(raw), quote_plus(unquote(raw))) if raw else ()
        self.secrets = [s for s in (*forms, os.environ.get("PGPASSWORD")) if s]
        self.schema, self.conninfo = self._split_schema(text)
        params = self._params()
        self.db = params["dbname"]
        self.host = params.get("host") or os.environ.get("PGHOST") or "localhost"
        self.port = params.get("port") or os.environ.get("PGPORT") or "5432"
        if "@" in self.host or not re.fullmatch(r"\d+(,\d+)*", self.port):
            raise ConfigError(f"{self.where}: no host:port can be read from it; give {FORM} ({ENCODE}).")
        self.user = params.get("user") or os.environ.get("PGUSER") or _login()

    def _split_schema(self, text: str) -> tuple[str, str]:
        """``?schema=NAME`` (ours, not libpq's) and the URL without it."""
        base, _, query_text = text.partition("?")
        query = parse_qsl(query_text, keep_blank_values=True)
        schemas = [v for k, v in query if k == "schema"]
        if len(schemas) > 1 or schemas == [""]:
            raise ConfigError(f"{self.where}: give one ?schema=NAME (or none, for {DEFAULT_SCHEMA}).")
        rest = urlencode([(k, v) for k, v in query if k != "schema"])
        return (schemas[0] if schemas else DEFAULT_SCHEMA), (f"{base}?{rest}" if rest else base)

    def _params(self) -> dict:
        """libpq's reading of the URL (its own parser), which must name a database."""
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(self.conninfo)
        except ProgrammingError as exc:
            reason = self.scrub(str(exc).strip().splitlines()[0])
            raise ConfigError(f"{self.where}: not a PostgreSQL URL ({reason}); give {FORM}.") from None
        self.secrets = [s for s in (*self.secrets, params.get("password")) if s]
        if not params.get("dbname"):
            raise ConfigError(f"{self.where}: names no database; give {FORM}.")
        return params

    def scrub(self, text: str) -> str:
        """``text`` with every password this URL could carry replaced by ``***``."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, HIDDEN)
        return text

    def names(self) -> str:
        return f"database {self.db}, user {self.user}"


def hide_password(text: str) -> str:
    """``text`` with the password of a PostgreSQL URL in it replaced by ``***`` (any other text
    unchanged): for whatever echoes a command line, such as a crash report."""
    return _hidden(text) if str(text).startswith(SCHEMES) else text


def _raw_password(text: str) -> str | None:
    """The password as written in the URL, to strip from messages (the rule of
    :func:`~gnnbridge.core.errors.hide_url_password`)."""
    head, _, query = text.partition("://")[2].partition("?")
    userinfo, at, _ = head.rpartition("@")
    found = re.search(r"(?i)(?:^|&)password=([^&]*)", query)
    return (userinfo.partition(":")[2] if at else "") or (found.group(1) if found else None)


def _login() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "(default)"


def _connect(url: Url):
    """A read-only connection in UTC whose transaction is one snapshot (repeatable read), or one
    line saying why not (never the password)."""
    import psycopg

    try:
        conn = psycopg.connect(url.conninfo, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise _refusal(url, str(exc)) from None
    conn.read_only = True
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.execute("SET TIME ZONE 'UTC'")
    return conn


def _refusal(url: Url, message: str) -> DataError:
    """libpq's words for a failed connection as one line: host, port, database, user, reason."""
    first = message.strip().splitlines()[0] if message.strip() else "no reason given"
    reason = re.sub(r"^(FATAL|ERROR):\s+", "", first.rsplit("failed: ", 1)[-1].strip()).rstrip(".")
    reason = url.scrub(reason)
    low = message.lower()
    at = f"PostgreSQL {url.host}:{url.port}"
    if "authentication failed" in low or "no password supplied" in low:
        return DataError(
            f"{at}: authentication failed ({url.names()}): {reason}; "
            "check the user and the password (in the URL, PGPASSWORD or ~/.pgpass)."
        )
    if re.search(r'database ".*" does not exist', low):
        return DataError(f"{at}: database '{url.db}' does not exist (user {url.user}); create it or fix the URL's /db.")
    if any(word in low for word in UNREACHABLE):
        return DataError(f"PostgreSQL server {url.host}:{url.port} is unreachable ({url.names()}): {reason}.")
    return DataError(f"{at} refused the connection ({url.names()}): {reason}.")


def _catalog(conn, url: Url) -> dict[str, dict[str, str]]:
    """``{table: {column: data_type}}`` for the base tables of the URL's schema, in order."""
    found = conn.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (url.schema,)).fetchone()
    if not found:
        schemas = conn.execute(
            "SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname NOT LIKE 'pg\\_%%' "
            "AND nspname <> 'information_schema' ORDER BY 1"
        ).fetchall()
        valid = ", ".join(r[0] for r in schemas)
        raise DataError(f"{url.where}: database {url.db} has no schema '{url.schema}'; its schemas: {valid}.")
    rows = conn.execute(
        "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c "
        "JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
        "WHERE c.table_schema = %s AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position",
        (url.schema,),
    ).fetchall()
    tables: dict[str, dict[str, str]] = {}
    for table, column, data_type in rows:
        tables.setdefault(table, {})[column] = data_type
    if not tables:
        raise DataError(f"{url.where}: schema '{url.schema}' of database {url.db} has no tables.")
    return tables


def arrow_type(data_type: str):
    """The arrow type a column of ``data_type`` (information_schema's name) is read as."""
    import pyarrow as pa

    name = TYPES.get(data_type, ("string", "text"))[0]
    if name == "timestamp":
        return pa.timestamp("us")
    if name == "timestamptz":
        return pa.timestamp("us", tz="UTC")
    return {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}.get(name) or getattr(pa, name)()


def _select(url: Url, table: str, columns: dict[str, str]):
    """``SELECT`` of every column, cast on the server where its arrow type needs it."""
    from psycopg import sql

    parts = []
    for column, data_type in columns.items():
        cast = TYPES.get(data_type, ("string", "text"))[1]
        ident = sql.Identifier(column)
        parts.append(sql.SQL("{}::{} AS {}").format(ident, sql.SQL(cast), ident) if cast else ident)
    return sql.SQL("SELECT {} FROM {}.{}").format(
        sql.SQL(", ").join(parts), sql.Identifier(url.schema), sql.Identifier(table)
    )


def _batches(conn, url: Url, table: str, columns: dict[str, str], cursor_name: str) -> Iterator:
    """One pass over ``table``: a named cursor in the source's snapshot, ``BATCH_ROWS`` rows a
    batch, each a RecordBatch of the declared schema."""
    import psycopg
    import pyarrow as pa

    schema = pa.schema([(c, arrow_type(t)) for c, t in columns.items()])
    with conn.cursor(name=cursor_name) as cursor:
        try:
            cursor.execute(_select(url, table, columns))
            while rows := cursor.fetchmany(sources.BATCH_ROWS):
                arrays = [pa.array(values, type=t) for values, t in zip(zip(*rows), schema.types)]
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        except (psycopg.Error, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            reason = url.scrub(str(exc).strip().splitlines()[0])
            raise DataError(f"{url.where}: table '{table}' cannot be read: {reason}.") from None


def open_postgres(text: str) -> Source:
    """The base tables of the URL's schema, each column typed from the catalog, read in the
    snapshot that reading the catalog began (held until the source is closed)."""
    url = Url(text)
    conn = _connect(url)
    try:
        catalog = _listed(conn, url)
    except BaseException:
        conn.close()
        raise
    passes = itertools.count()  # cursors live side by side in the one transaction: each its own name

    def batches(name: str, columns: dict) -> Iterator:
        return _batches(conn, url, name, columns, f"gnnbridge_pass_{next(passes)}")

    tables = {
        name: Table(name, {c: arrow_type(t) for c, t in cols.items()}, lambda n=name, c=cols: batches(n, c))
        for name, cols in catalog.items()
    }
    return Source("postgresql", url.where, tables, close=conn.close)


def _listed(conn, url: Url) -> dict[str, dict[str, str]]:
    import psycopg

    try:
        return _catalog(conn, url)
    except psycopg.Error as exc:  # the server's words, e.g. a catalog the user may not read
        reason = url.scrub(str(exc).strip().splitlines()[0])
        raise DataError(f"{url.where}: its tables cannot be listed: {reason}.") from None


register_source(
    "postgresql",
    lambda text: str(text).startswith(SCHEMES),
    open_postgres,
    f"a PostgreSQL URL ({FORM}; the password may come from PGPASSWORD or ~/.pgpass)",
)
