"""DuckDB as a second engine over the warehouse's Iceberg tables (issue 35, item 4): the one
place the tests open a table with DuckDB's own Iceberg reader, and the comparison of what it
reads with what pyiceberg reads.

DuckDB's ``iceberg`` extension is not downloaded (``INSTALL iceberg`` needs the internet): the
packages ``duckdb-extension-avro`` and ``duckdb-extension-iceberg`` (requirements.txt) ship the
extension files, built for one DuckDB version, under
``duckdb_extension_<name>/extensions/v<duckdb version>/<name>.duckdb_extension``, and
``LOAD '<file>'`` loads them (avro first: the iceberg extension reads Iceberg's Avro manifests
through it). A table is read from its metadata file, ``iceberg_scan('<metadata location>')``,
the location the catalog holds (pyiceberg's public ``Table.metadata_location``); a snapshot,
and so a branch or a tag, with ``snapshot_from_id``. DuckDB plans the files itself from the
manifests: nothing of pyiceberg's scan is involved. An ``s3://`` warehouse: ``connect(s3)``
also loads ``duckdb-extension-httpfs`` and makes an S3 secret (endpoint, region, keys).

Values are compared by value: timestamps as instants (DuckDB names UTC ``Etc/UTC``), NaN equal
to NaN, structs, lists, maps and binary as Python values; rows sorted, every column.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import math
from collections import Counter
from pathlib import Path

import pyarrow as pa

#: in load order: the iceberg extension reads manifests (Avro) through the avro extension
EXTENSIONS = ("avro", "iceberg")


class EngineMismatch(AssertionError):
    """A table that DuckDB and pyiceberg read differently; the message names it and shows
    the first differing rows."""


def extension_file(name: str) -> Path:
    """The extension file package ``duckdb-extension-<name>`` ships for the installed DuckDB."""
    import duckdb

    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or spec.origin is None:
        raise RuntimeError(f"no package duckdb-extension-{name}: pip install -c requirements.lock "
                           "-r requirements.txt")
    folder = Path(spec.origin).parent / "extensions"
    path = folder / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        built = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        raise RuntimeError(f"duckdb-extension-{name} has no build for duckdb {duckdb.__version__} "
                           f"(it has {built}): pin duckdb to the extension's version")
    return path


def connect(s3=None):
    """An in-memory DuckDB connection with the avro and iceberg extensions loaded; with ``s3``
    (a resolved ``spark_jobs.storage.S3Config``) also httpfs and an S3 secret for its
    endpoint, region and keys (path-style URLs, as moto and MinIO want them)."""
    import duckdb

    # never from the internet: only the packages' files, loaded below
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for name in EXTENSIONS + (("httpfs",) if s3 is not None else ()):
        con.execute(f"LOAD '{extension_file(name)}'")
    if s3 is not None:
        options = {"KEY_ID": s3.access_key, "SECRET": s3.secret_key, "REGION": s3.region}
        if s3.endpoint_url:
            scheme, _, host = s3.endpoint_url.partition("://")
            options.update(ENDPOINT=host.rstrip("/"), URL_STYLE="path")
            ssl = "true" if scheme == "https" else "false"
        settings = ", ".join(f"{k} '{v}'" for k, v in options.items() if v)
        con.execute(f"CREATE SECRET kafkalog_s3 (TYPE s3, {settings}"
                    + (f", USE_SSL {ssl})" if s3.endpoint_url else ")"))
    return con


def snapshot_of(table, ref: str | None = None, snapshot: int | None = None) -> int | None:
    """The snapshot id of ``ref`` (a branch or tag) of a pyiceberg table, else ``snapshot``
    (None: the current one)."""
    if ref is None:
        return snapshot
    found = table.refs().get(ref)
    if found is None:
        raise LookupError(f"table {table.name()} has no branch or tag {ref!r}")
    return found.snapshot_id


def scan_sql(metadata_location: str, snapshot: int | None = None) -> str:
    """The ``iceberg_scan`` of a table's metadata file (at ``snapshot``; default: current)."""
    quoted = metadata_location.replace("'", "''")
    at = "" if snapshot is None else f", snapshot_from_id = {int(snapshot)}"
    return f"SELECT * FROM iceberg_scan('{quoted}'{at})"


def read(con, table, *, ref: str | None = None, snapshot: int | None = None) -> pa.Table:
    """A pyiceberg table (``Warehouse.load(name)``) read by DuckDB, as Arrow."""
    sql = scan_sql(table.metadata_location, snapshot_of(table, ref, snapshot))
    return con.execute(sql).to_arrow_table()


def read_pyiceberg(table, *, ref: str | None = None, snapshot: int | None = None) -> pa.Table:
    """The same table and snapshot read by pyiceberg's scan."""
    sid = snapshot_of(table, ref, snapshot)
    return table.scan(**({} if sid is None else {"snapshot_id": sid})).to_arrow()


# ------------------------------------------------------------------ comparison by value
class _NaN:
    def __repr__(self):
        return "NaN"

    def __eq__(self, other):
        return isinstance(other, _NaN)

    def __hash__(self):
        return 0


NAN = _NaN()


def comparable(value):
    """A value read by either engine as a comparable Python value."""
    if isinstance(value, float) and math.isnan(value):
        return NAN
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc)
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(comparable(v) for v in value)
    return value


def rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    """``table``'s rows as tuples of :func:`comparable` values in ``columns``' order, sorted."""
    out = [tuple(comparable(r[c]) for c in columns) for r in table.to_pylist()]
    return sorted(out, key=repr)


def type_shape(t: pa.DataType):
    """An Arrow type as a comparable shape: the name of UTC (``UTC`` / ``Etc/UTC``), string
    and binary flavours (plain / large / view) and the name of a list's item field (``element``
    / ``l``) left out: what both engines read as the same Python values."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return ("list", type_shape(t.value_type))
    if pa.types.is_map(t):
        return ("map", type_shape(t.key_type), type_shape(t.item_type))
    if pa.types.is_struct(t):
        return ("struct", tuple((f.name, type_shape(f.type)) for f in t))
    if pa.types.is_timestamp(t):
        return ("timestamp", t.unit, {"Etc/UTC": "UTC"}.get(t.tz, t.tz))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    return str(t)


def assert_same(name: str, iceberg: pa.Table, duck: pa.Table) -> int:
    """Raise :class:`EngineMismatch` unless ``duck`` has ``iceberg``'s columns (names, order,
    types as :func:`type_shape`) and rows (by value, sorted); returns the row count."""
    if duck.column_names != iceberg.column_names:
        raise EngineMismatch(f"{name}: DuckDB reads columns {duck.column_names}, "
                             f"pyiceberg {iceberg.column_names}")
    types = [(f.name, str(f.type), str(duck.schema.field(f.name).type)) for f in iceberg.schema
             if type_shape(f.type) != type_shape(duck.schema.field(f.name).type)]
    if types:
        raise EngineMismatch(f"{name}: column types differ (column, pyiceberg, DuckDB): {types}")
    a, b = rows(iceberg, iceberg.column_names), rows(duck, iceberg.column_names)
    if a != b:
        ca, cb = Counter(map(repr, a)), Counter(map(repr, b))
        only_a, only_b = list((ca - cb).elements())[:3], list((cb - ca).elements())[:3]
        raise EngineMismatch(f"{name}: {len(a)} rows in pyiceberg, {len(b)} in DuckDB; "
                             f"only in pyiceberg: {only_a}; only in DuckDB: {only_b}")
    return len(a)


def compare_table(con, table, name: str, *, ref: str | None = None) -> int:
    """Table ``table`` (pyiceberg) at ``ref`` (default: current) read by both engines:
    :func:`assert_same`; returns the row count."""
    import duckdb

    where = f"{name}@{ref or 'current'}"
    try:
        duck = read(con, table, ref=ref)
    except duckdb.Error as err:
        raise EngineMismatch(f"{where}: DuckDB cannot read it ({table.metadata_location}): "
                             f"{err}") from err
    return assert_same(where, read_pyiceberg(table, ref=ref), duck)


def compare_warehouse(wh, *, ref: str | None = None, con=None) -> dict[str, int]:
    """Every table the warehouse's catalog lists (``wh``: a ``Warehouse``; whatever the
    tables' names: the fixed ones, typed, derived, those added later), read by both engines
    at ``ref`` (a branch or tag; tables without it are left out) or their current snapshot;
    rows a table. A test that builds a warehouse checks it with one call."""
    con = connect() if con is None else con
    counts = {}
    for name in sorted(wh.table_names()):
        table = wh.load(name)
        if ref is None or ref in table.refs():
            counts[name] = compare_table(con, table, name, ref=ref)
    return counts


def compare_refs(wh, *, con=None) -> dict[tuple[str, str], int]:
    """Every branch and tag but ``main`` of every table (a run's branch, a night's tag), read
    by both engines; rows a (table, ref)."""
    con = connect() if con is None else con
    return {(name, ref): compare_table(con, table, name, ref=ref)
            for name in sorted(wh.table_names()) for table in [wh.load(name)]
            for ref in sorted(table.refs()) if ref != "main"}
