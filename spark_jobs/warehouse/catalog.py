"""Which Iceberg catalog holds the warehouse's tables, and opening it.

pyiceberg's standard configuration (``.pyiceberg.yaml`` in ``$PYICEBERG_HOME``, the home
or the working directory, or ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables) names the
catalog (default ``kafkalog``). Where none is configured and the warehouse root ``W`` is
a local directory, the embedded default is a SQL catalog on ``W/catalog.db`` (SQLite),
written down in ``W/.pyiceberg.yaml`` so that ``PYICEBERG_HOME=W`` finds it
(docs/tables.md, "How the catalog is found"). Where a catalog puts a table it is asked to
make is :func:`default_table_location` (read without opening the catalog: the DAG file's
table assets are named by it, ``kafkalog_pipeline.assets``).
"""

from __future__ import annotations

import os
import re
import threading

from spark_jobs import storage
from spark_jobs.warehouse.errors import CatalogError

DEFAULT_CATALOG = "kafkalog"
DEFAULT_NAMESPACE = "kafka"
#: the embedded catalog's database and the configuration naming it, under a local W
EMBEDDED_DB = "catalog.db"
CONFIG_FILE = ".pyiceberg.yaml"


def add_catalog_args(parser) -> None:
    """``--catalog`` and ``--namespace``, shared by the decode, audit and publish commands."""
    parser.add_argument(
        "--catalog", default=os.environ.get("KAFKALOG_CATALOG") or DEFAULT_CATALOG,
        help="the Iceberg catalog's name in pyiceberg's configuration (default: "
             "$KAFKALOG_CATALOG or %(default)s; none configured and a local warehouse: an "
             "embedded SQLite catalog under it)")
    parser.add_argument(
        "--namespace", default=os.environ.get("KAFKALOG_NAMESPACE") or DEFAULT_NAMESPACE,
        help="the tables' namespace (default: $KAFKALOG_NAMESPACE or %(default)s)")


def embedded_config(root: str, name: str = DEFAULT_CATALOG) -> dict:
    """The embedded catalog of a local warehouse root: SQLite beside the data."""
    path = os.path.abspath(root)
    return {"type": "sql", "uri": f"sqlite:///{path}/{EMBEDDED_DB}",
            "warehouse": f"file://{path}"}


def write_config(directory: str, name: str, props: dict) -> str:
    """Write ``directory/.pyiceberg.yaml`` defining catalog ``name`` (a fresh file)."""
    lines = ["catalog:", f"  {name}:"]
    lines += [f"    {k}: {_yaml_scalar(v)}" for k, v in props.items()]
    path = os.path.join(directory, CONFIG_FILE)
    os.makedirs(directory, exist_ok=True)
    storage.write_atomically(path, ("\n".join(lines) + "\n").encode())
    return path


def _yaml_scalar(value) -> str:
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def catalog_properties(root: str, name: str = DEFAULT_CATALOG,
                       s3: storage.S3Config | None = None, *, parse_time: bool = False) -> dict:
    """Catalog ``name``'s properties: pyiceberg's configuration, else ``root/.pyiceberg.yaml``,
    else (a local root only) the embedded default, which this writes down. ``parse_time``:
    the DAG file's reading, which writes nothing and leaves pyiceberg's readers as they are
    (``_pyiceberg`` imports pyiceberg's Arrow IO: a second at every parse)."""
    from pyiceberg.utils.config import Config

    if not parse_time:
        from spark_jobs.warehouse._pyiceberg import cache_config_files

        cache_config_files()  # every Config after this one parses the file once, not again
    props = Config().get_catalog_config(name)
    if props is None and not storage.is_s3(root):
        local = os.path.abspath(root[len("file://"):] if root.startswith("file://") else root)
        conf = os.path.join(local, CONFIG_FILE)
        if os.path.exists(conf):
            props = read_config(conf).get(name.lower())
            if props is None:  # never overwritten: a mistyped --catalog must not lose it
                raise CatalogError(f"{conf} defines no catalog named {name!r}")
        else:
            props = embedded_config(local, name)
            if not parse_time:
                write_config(local, name, props)
    if props is None:
        raise CatalogError(
            f"no Iceberg catalog named {name!r} is configured for warehouse {root}: define it in "
            f"$PYICEBERG_HOME/{CONFIG_FILE} (or ~/{CONFIG_FILE}) or with "
            f"PYICEBERG_CATALOG__{name.upper()}__URI and friends (docs/tables.md)")
    props = dict(props)
    if s3 is not None:  # the job's S3 access, where the configuration does not say
        for key, value in (("s3.endpoint", s3.endpoint_url), ("s3.region", s3.region),
                           ("s3.access-key-id", s3.access_key),
                           ("s3.secret-access-key", s3.secret_key),
                           ("s3.session-token", s3.session_token)):
            if value and key not in props:
                props[key] = value
    return props


#: where pyiceberg 0.12 puts a table created without a location (as ours are,
#: :func:`spark_jobs.warehouse.ddl.create_table`) in a namespace without a ``location``
#: property (as ours is made), by catalog type: ``Catalog._get_default_warehouse_location``
#: (sql, in-memory) or its Hive-style variant that glue.py, hive.py and dynamodb.py call. A
#: REST catalog's server places its tables itself (its ``warehouse`` may be a mere name).
TABLE_LAYOUTS = {
    "sql": "{warehouse}/{namespace}/{table}",
    "in-memory": "{warehouse}/{namespace}/{table}",
    "hive": "{warehouse}/{namespace}.db/{table}",
    "glue": "{warehouse}/{namespace}.db/{table}",
    "dynamodb": "{warehouse}/{namespace}.db/{table}",
}


def catalog_type(props: dict) -> str | None:
    """A catalog's type: its ``type``, else as pyiceberg infers it from its ``uri``
    (``pyiceberg.catalog.infer_catalog_type``: ``http``... a REST catalog, ``thrift``... Hive,
    ``sqlite``/``postgresql``... SQL); None where neither says."""
    if props.get("type"):
        return str(props["type"]).lower()
    uri = str(props.get("uri") or "")
    for prefix, kind in (("http", "rest"), ("thrift", "hive"), ("sqlite", "sql"),
                         ("postgresql", "sql")):
        if uri.startswith(prefix):
            return kind
    return None


def default_table_location(props: dict, namespace: str, table: str) -> str | None:
    """Where catalog ``props`` makes table ``namespace.table`` (:data:`TABLE_LAYOUTS`), known
    without opening the catalog; None where the catalog decides (REST, an unknown type) or
    has no ``warehouse``."""
    layout = TABLE_LAYOUTS.get(catalog_type(props) or "")
    warehouse = str(props.get("warehouse") or "").rstrip("/")
    if layout is None or not warehouse:
        return None
    return layout.format(warehouse=warehouse, namespace=namespace, table=table)


def mask_password(text: str) -> str:
    """``text`` with the password of any ``scheme://user:password@host`` in it masked."""
    return _PASSWORD.sub(r"\1***@", text)


_PASSWORD = re.compile(r"(://[^/:@\s]*:)[^@/\s]+@")


def read_config(path: str) -> dict:
    """The catalogs a ``.pyiceberg.yaml`` defines, parsed once per version of the file
    (a job asks for its catalog dozens of times, and strictyaml takes ~4 ms a parse)."""
    import strictyaml

    st = os.stat(path)
    version = (st.st_ino, st.st_mtime_ns, st.st_size)  # write_config renames: a new inode
    with _CONFIGS_LOCK:
        seen, found = _CONFIGS.get(path, (None, None))
    if seen != version:
        with open(path) as f:
            doc = strictyaml.load(f.read()).data
        found = {k.lower(): v for k, v in (doc.get("catalog") or {}).items()}
        with _CONFIGS_LOCK:
            _CONFIGS[path] = (version, found)
    return {k: dict(v) if isinstance(v, dict) else v for k, v in found.items()}


_CONFIGS: dict = {}  # path -> ((inode, mtime_ns, size), catalogs)
_CONFIGS_LOCK = threading.Lock()


_CATALOGS: dict = {}
_CATALOGS_LOCK = threading.Lock()


def load_catalog(root: str, name: str = DEFAULT_CATALOG, s3: storage.S3Config | None = None):
    """The pyiceberg catalog (one per process and configuration)."""
    from pyiceberg.catalog import load_catalog as _load

    props = catalog_properties(root, name, s3)
    key = (name, tuple(sorted((k, str(v)) for k, v in props.items())))
    with _CATALOGS_LOCK:
        cat = _CATALOGS.get(key)
        if cat is None:
            uri = props.get("uri", "")
            if uri.startswith("sqlite:///"):
                path = uri[len("sqlite:///"):].split("?", 1)[0]
                if path and path != ":memory:":  # a new warehouse: the file's folder too
                    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                if "timeout=" not in uri:
                    # several processes commit at once (chunks, publish): wait for the lock
                    props["uri"] = uri + ("&" if "?" in uri else "?") + "timeout=60"
            try:
                cat = _load(name, **props)
            except Exception as err:  # noqa: BLE001 - any misconfiguration, said once
                raise CatalogError(f"cannot open Iceberg catalog {name!r} ({props.get('type', '?')} "
                                   f"{mask_password(props.get('uri', ''))}): "
                                   f"{mask_password(str(err))}") from err
            _CATALOGS[key] = cat
    return cat

