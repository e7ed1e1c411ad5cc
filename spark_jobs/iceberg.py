"""The warehouse's tables as Apache Iceberg tables in a catalog (docs/tables.md).

One module owns the catalog and the write -> audit -> publish protocol:

* **Catalog**: pyiceberg's standard configuration (``.pyiceberg.yaml`` in
  ``$PYICEBERG_HOME``, the home or the working directory, or
  ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables) names the catalog (default
  ``kafkalog``). Where none is configured and the warehouse root ``W`` is a local
  directory, the embedded default is a SQL catalog on ``W/catalog.db`` (SQLite),
  written down in ``W/.pyiceberg.yaml`` so that ``PYICEBERG_HOME=W`` finds it.
* **Tables** (namespace default ``kafka``): format v2, created on first use with
  the schemas of :mod:`spark_jobs.schemas` and identity partitions on columns
  that are inside every data file (one partition value per file). Every table
  gets an empty first snapshot on ``main``, so that a branch can be made from it.
* **A run's commits go to its branch** ``run_<run token>``, made from ``main``;
  the first commit on it removes the run's earlier files (a rerun replaces
  exactly that run's rows). Data files are written by the executors; the driver
  commits them (:meth:`Warehouse.commit_files`), replacing the submission's
  earlier files in the same snapshot.
* **The audit reads the branch**; **publish** moves ``main`` to the branch's
  head (a fast-forward), or, when ``main`` moved since the branch was made,
  re-applies the run's files onto ``main`` in one snapshot after checking that
  none of the snapshots committed meanwhile holds offsets of the same
  topic-partitions (else :class:`ConflictError`, naming the other run). Every
  step is a compare-and-swap in the catalog; a lost race is re-checked and
  tried again. Publishing again after a crash completes what is left.

pyiceberg's own commit retries are off on these tables (``commit.retry.num-retries``
0): they would rebase a commit onto a moved ``main`` without our overlap check.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import threading
import time
import warnings
from dataclasses import dataclass

import pyarrow as pa

from spark_jobs import layout, schemas, storage

log = logging.getLogger(__name__)

DEFAULT_CATALOG = "kafkalog"
DEFAULT_NAMESPACE = "kafka"
#: the embedded catalog's database and the configuration naming it, under a local W
EMBEDDED_DB = "catalog.db"
CONFIG_FILE = ".pyiceberg.yaml"
MAIN = "main"

#: snapshot summary keys (docs/tables.md)
RUN_ID = "kafkalog.run-id"
CHUNK_ID = "kafkalog.chunk-id"
DAG_ID = "kafkalog.dag-id"
DAG_RUN_ID = "kafkalog.dag-run-id"
STAGE = "kafkalog.stage"  # staged | published | maintenance
ROWS = "kafkalog.rows"
FILES = "kafkalog.files"
AUDITED = "kafkalog.audited"  # dq_results: {table: snapshot id} the audit of the run read
PUBLISHED_FROM = "kafkalog.published-from"  # a re-applied publish: the branch head it copies
#: table property (on the first table published) while a run's publish is under way
PUBLISHING = "kafkalog.publishing."

#: the tables a decode run writes, in publish order (ledger last: later runs trust it)
DECODE_TABLES = schemas.DECODE_TABLES
#: how to find a file's offset range, for the publish-time overlap check
OFFSET_COLUMNS = {"records": ("offset", "offset"), "markers": ("offset", "offset"),
                  "batches": ("base_offset", "last_offset")}

NAME_MAPPING = "schema.name-mapping.default"
TABLE_PROPERTIES = {
    "format-version": "2",
    # our own retry loop re-checks the overlap before committing again
    "commit.retry.num-retries": "0",
    "write.parquet.compression-codec": "lz4",
    # the job's files carry min/max statistics for these columns only (and no null
    # counts elsewhere): the catalog keeps bounds for them and asks for nothing else
    "write.metadata.metrics.default": "none",
    **{f"write.metadata.metrics.column.{c}": "full" for c in schemas.STATISTICS},
}
COMMIT_ATTEMPTS = 8


class CatalogError(RuntimeError):
    """No catalog could be found or used; the message says what to configure."""


class ConflictError(RuntimeError):
    """Another run committed overlapping offsets to ``main`` after this run read it.

    ``table``: the table where it was found; ``runs``: the run ids that published them
    (``?`` where a file's run is unknown); ``files``: how many of their files overlap."""

    def __init__(self, message: str, *, table: str = "", runs=(), files: int = 0):
        super().__init__(message)
        self.table, self.runs, self.files = table, tuple(runs), files


class NothingStaged(LookupError):
    """A run has no branch and nothing published: there is nothing to publish."""


class NotAudited(RuntimeError):
    """A publish that requires the audit found a branch head the audit did not read."""


def branch_name(run_id: str) -> str:
    return "run_" + storage.run_token(run_id)


def publishing_key(run_id: str) -> str:
    return PUBLISHING + storage.run_token(run_id)


def run_files_prefix(run_id: str, chunk_id: str | None = None) -> str:
    """The file-name prefix of a run's (or one chunk's) data files, ``~`` included."""
    token = storage.run_token(run_id)
    return f"{token}~" if chunk_id is None else f"{token}~c{storage.run_token(chunk_id)}~"


def is_run_file(path: str, run_id: str, chunk_id: str | None = None) -> bool:
    return os.path.basename(path).startswith(run_files_prefix(run_id, chunk_id))


def airflow_summary() -> dict[str, str]:
    """The DAG and DAG run a task runs for (Airflow exports them to its subprocesses)."""
    out = {}
    for key, env in ((DAG_ID, "AIRFLOW_CTX_DAG_ID"), (DAG_RUN_ID, "AIRFLOW_CTX_DAG_RUN_ID")):
        if os.environ.get(env):
            out[key] = os.environ[env]
    return out


# ------------------------------------------------------------------ catalog


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
                       s3: storage.S3Config | None = None) -> dict:
    """Catalog ``name``'s properties: pyiceberg's configuration, else ``root/.pyiceberg.yaml``,
    else (a local root only) the embedded default, which this writes down."""
    from pyiceberg.utils.config import Config

    props = Config().get_catalog_config(name)
    if props is None and not storage.is_s3(root):
        local = os.path.abspath(root[len("file://"):] if root.startswith("file://") else root)
        conf = os.path.join(local, CONFIG_FILE)
        if os.path.exists(conf):
            props = _read_config(conf).get(name.lower())
            if props is None:  # never overwritten: a mistyped --catalog must not lose it
                raise CatalogError(f"{conf} defines no catalog named {name!r}")
        else:
            props = embedded_config(local, name)
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


def mask_password(text: str) -> str:
    """``text`` with the password of any ``scheme://user:password@host`` in it masked."""
    return _PASSWORD.sub(r"\1***@", text)


_PASSWORD = re.compile(r"(://[^/:@\s]*:)[^@/\s]+@")


def _read_config(path: str) -> dict:
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


# ------------------------------------------------------------------ tables


def partition_spec(name: str, iceberg_schema):
    """Identity partitions on :data:`schemas.PARTITIONS` columns (inside every file)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    fields = [PartitionField(source_id=iceberg_schema.find_field(col).field_id,
                             field_id=1000 + i, transform=IdentityTransform(), name=col)
              for i, col in enumerate(schemas.PARTITIONS[name])]
    return PartitionSpec(*fields)


def evolve(table, name: str, attempts: int = COMMIT_ATTEMPTS):
    """``table`` (warehouse table ``name``) with the columns, partition fields and table
    properties this version adds, by Iceberg's own schema and partition evolution in one
    commit: files written before keep their columns (read as null) and their spec."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(attempts):
        have = {f.name for f in table.schema().fields}
        spec = {table.schema().find_column_name(f.source_id) for f in table.spec().fields}
        cols = [f.name for f in schemas.TABLES[name] if f.name not in have]
        parts = [c for c in schemas.PARTITIONS[name] if c not in spec]
        props = {k: v for k, v in TABLE_PROPERTIES.items()
                 if k != "format-version" and k not in table.properties}
        if not (cols or parts or props):
            return table
        log.warning("%s: adding columns %s, partition fields %s, properties %s",
                    name, cols, parts, sorted(props))
        try:
            with table.transaction() as tx:
                if cols:
                    with tx.update_schema() as update:
                        update.union_by_name(schemas.TABLES[name])
                if parts:
                    with tx.update_spec() as update:
                        for col in parts:
                            update.add_identity(col)
                # files are written without field ids: columns are found by name
                tx.set_properties(**props, **{NAME_MAPPING: tx.table_metadata.schema()
                                              .name_mapping.model_dump_json()})
        except CommitFailedException:
            _backoff(attempt)
        table = table.refresh()
    raise CatalogError(f"{name}: could not evolve the table after {attempts} tries")


def _covers(have, want) -> bool:
    """Whether Arrow type ``have`` (a table's) holds every struct field of ``want``."""
    if pa.types.is_struct(want):
        if not pa.types.is_struct(have):
            return False
        names = {have.field(i).name: have.field(i).type for i in range(have.num_fields)}
        return all(want.field(i).name in names and _covers(names[want.field(i).name], want.field(i).type)
                   for i in range(want.num_fields))
    if pa.types.is_list(want) or pa.types.is_large_list(want):
        return hasattr(have, "value_type") and _covers(have.value_type, want.value_type)
    if pa.types.is_map(want):
        return pa.types.is_map(have) and _covers(have.item_type, want.item_type)
    return True


@dataclass(frozen=True)
class Warehouse:
    """The tables of one warehouse: root ``W`` (data, scratch), catalog and namespace."""

    root: str
    catalog_name: str = DEFAULT_CATALOG
    namespace: str = DEFAULT_NAMESPACE
    s3: storage.S3Config | None = None

    @property
    def catalog(self):
        return load_catalog(self.root, self.catalog_name, self.s3)

    def identifier(self, name: str) -> tuple[str, str]:
        if name not in schemas.TABLES and layout.typed_topic(name) is None:
            raise KeyError(f"no warehouse table named {name!r}")
        return (self.namespace, name)

    def load(self, name: str):
        """Table ``name``, or None where it does not exist yet."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.identifier(name))
        except NoSuchTableError:
            return None

    def table(self, name: str):
        """Table ``name``, created (with its empty first snapshot) where missing, and
        brought up to this version's schema, partition spec and properties where an
        earlier version made it (:func:`evolve`)."""
        from pyiceberg.catalog import Catalog
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError
        from pyiceberg.schema import assign_fresh_schema_ids

        table = self.load(name)
        if table is None and name not in schemas.TABLES:
            raise KeyError(f"typed table {name!r} does not exist yet (Warehouse.typed_table)")
        if table is not None and name in schemas.TABLES:
            table = evolve(table, name)
        if table is None:
            try:
                self.catalog.create_namespace_if_not_exists(self.namespace)
            except Exception:
                # two first runs at once: the other made it between pyiceberg's check and its
                # insert (a SQL catalog raises its database's unique-constraint error)
                if not self.catalog.namespace_exists(self.namespace):
                    raise
            ice = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schemas.TABLES[name]))
            try:
                table = self.catalog.create_table(
                    self.identifier(name), schema=ice, partition_spec=partition_spec(name, ice),
                    properties=TABLE_PROPERTIES)
            except TableAlreadyExistsError:
                table = self.catalog.load_table(self.identifier(name))
        if table.current_snapshot() is None:
            try:
                with table.transaction() as tx:
                    # files are written without field ids: columns are found by name
                    tx.set_properties(**{NAME_MAPPING:
                                         table.schema().name_mapping.model_dump_json()})
                    tx.append((schemas.TABLES[name] if name in schemas.TABLES
                               else table.schema().as_arrow()).empty_table(),
                              snapshot_properties={STAGE: "created"})
            except CommitFailedException:
                pass  # another process made it
            table = self.catalog.load_table(self.identifier(name))
        return table

    def typed_table(self, name: str, schema: pa.Schema):
        """Typed table ``name`` (:func:`layout.typed_table_name`) with at least the columns of
        ``schema``: made where missing (unpartitioned, with its empty first snapshot), else
        evolved by Iceberg's ``union_by_name`` (new columns optional, old rows read null).
        The caller has checked that ``schema`` only adds to the table's columns
        (:mod:`spark_jobs.typed_tables`)."""
        from pyiceberg.catalog import Catalog
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError
        from pyiceberg.schema import assign_fresh_schema_ids

        self.identifier(name)
        table = self.load(name)
        if table is None:
            try:
                self.catalog.create_namespace_if_not_exists(self.namespace)
            except Exception:  # made between the check and the insert (as in table())
                if not self.catalog.namespace_exists(self.namespace):
                    raise
            ice = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))
            try:
                self.catalog.create_table(self.identifier(name), schema=ice,
                                          properties=TABLE_PROPERTIES)
            except TableAlreadyExistsError:
                pass
            return self.table(name)
        for attempt in range(COMMIT_ATTEMPTS):
            have = table.schema().as_arrow()
            if all(f.name in have.names and _covers(have.field(f.name).type, f.type)
                   for f in schema):
                return table
            try:
                with table.transaction() as tx:
                    with tx.update_schema() as update:
                        update.union_by_name(schema)
                    tx.set_properties(**{NAME_MAPPING: tx.table_metadata.schema()
                                         .name_mapping.model_dump_json()})
            except CommitFailedException:
                _backoff(attempt)
            table = table.refresh()
        raise CatalogError(f"{name}: could not evolve the table after {COMMIT_ATTEMPTS} tries")

    def data_root(self, name: str) -> str:
        """Where the executors write table ``name``'s data files (a storage root)."""
        return self.table(name).location().rstrip("/") + "/data"

    def scratch_root(self, run_id: str) -> str:
        """Scratch space of a run under W (output still to be deduplicated)."""
        return f"{self.root.rstrip('/')}/_scratch/{storage.run_token(run_id)}"

    # ---------------------------------------------------------- run branches

    def run_tables(self) -> tuple[str, ...]:
        """The tables a decode run writes and publishes, in publish order: the decode
        tables, with the derived tables (:data:`schemas.DERIVED_TABLES`) that exist
        already before the ledger (a warehouse that never saw an internal topic or a
        state file has none, and pays nothing for them)."""
        existing = self.table_names()  # one listing, not a lookup per table: every run asks
        derived = tuple(n for n in schemas.DERIVED_TABLES if n in existing)
        return DECODE_TABLES[:-1] + derived + self.typed_tables(existing) + DECODE_TABLES[-1:]

    def table_names(self) -> set[str]:
        """The names of the namespace's tables (one catalog listing; none: empty)."""
        from pyiceberg.exceptions import NoSuchNamespaceError

        try:
            return {ident[-1] for ident in self.catalog.list_tables(self.namespace)}
        except NoSuchNamespaceError:
            return set()

    def typed_tables(self, existing: set[str] | None = None) -> tuple[str, ...]:
        """The typed per-topic tables that exist (:func:`layout.typed_table_name`), sorted;
        ``existing``: a listing already made (:meth:`table_names`)."""
        names = self.table_names() if existing is None else existing
        return tuple(sorted(n for n in names if layout.typed_topic(n) is not None))

    def begin_table(self, name: str, run_id: str) -> int:
        """Join (or make) run ``run_id``'s branch on table ``name``, which the run writes
        for the first time (a derived table it has just created); returns the fork point."""
        return self._begin(name, run_id, False)

    def begin_run(self, run_id: str, *, reset: bool, names=None) -> dict[str, int]:
        """Make (``reset``: make again) run ``run_id``'s branch on each table (default
        :meth:`run_tables`); its first commit drops the run's files inherited from ``main``.
        Returns each table's fork point: the ``main`` snapshot the run reads as what is
        already published."""
        names = names or self.run_tables()
        self.complete_interrupted(names)
        bases = {}
        for name in names:
            bases[name] = self._begin(name, run_id, reset)
        return bases

    def complete_interrupted(self, names=None) -> list[str]:
        """Finish the publish of every run that stopped part-way (its publish marker is
        still on the first table): its audit passed and its publish began, and a run that
        begins now must see all of it, or it would take half a run for what is published
        (its records without its ledger: the next night would decode them again).
        ``names`` default: :meth:`run_tables` (a derived table's rows are published with
        the run's). Returns the runs completed; raises where one cannot be
        (:class:`ConflictError`)."""
        names = names or self.run_tables()
        table = self.table(names[0])
        runs = sorted(v for k, v in table.properties.items() if k.startswith(PUBLISHING))
        for run in runs:
            log.warning("run %s stopped part-way through its publish: completing it", run)
            self.publish(run, names)
        return runs

    def _begin(self, name: str, run_id: str, reset: bool) -> int:
        from pyiceberg.exceptions import CommitFailedException

        branch = branch_name(run_id)
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table(name)
            refs = table.refs()
            if branch in refs and not reset:
                return fork_point(table, branch)
            main_id = table.current_snapshot().snapshot_id
            try:  # made, or (reset) moved back to main's head
                commit_refs(table, {branch: (refs[branch].snapshot_id if branch in refs
                                             else None, main_id)})
            except CommitFailedException:
                _backoff(attempt)
                continue
            reset = False
            # the commit updated ``table`` in place
            inherited = [f for f in live_files(table, main_id) if is_run_file(f.file_path, run_id)]
            if inherited:
                self._commit(name, branch, remove=lambda p: is_run_file(p, run_id), add=[],
                             summary={RUN_ID: run_id, STAGE: "staged", "kafkalog.step": "begin"})
            return main_id
        raise CatalogError(f"{name}: could not make branch {branch} after {COMMIT_ATTEMPTS} tries")

    def commit_files(self, name: str, run_id: str, files: list[str], *, chunk_id: str | None = None,
                     summary: dict | None = None) -> int | None:
        """Commit ``files`` (written for ``run_id``) to the run's branch, replacing what the
        same submission (run, or run and chunk) committed before. Returns the snapshot id."""
        props = {RUN_ID: run_id, STAGE: "staged", FILES: str(len(files)), **airflow_summary(),
                 **(summary or {})}
        if chunk_id is not None:
            props[CHUNK_ID] = chunk_id
        return self._commit(name, branch_name(run_id), add=files, summary=props,
                            remove=lambda p: is_run_file(p, run_id, chunk_id))

    def _commit(self, name: str, ref: str, *, add: list[str], remove, summary: dict,
                parent: int | None = None) -> int | None:
        """One overwrite snapshot on ``ref``: drop the live files ``remove`` selects, add
        ``add`` (paths, or DataFiles); retried after a lost compare-and-swap."""
        from pyiceberg.exceptions import CommitFailedException

        table = self.table(name)
        added = [f if not isinstance(f, str) else None for f in add]
        paths = [f for f in add if isinstance(f, str)]
        if paths:
            it = iter(data_files(table, paths))
            added = [next(it) if f is None else f for f in added]
        summary = {k: str(v) for k, v in summary.items()}
        summary.setdefault(ROWS, str(sum(f.record_count for f in added)))
        for attempt in range(COMMIT_ATTEMPTS):
            if attempt:  # the first try uses the table just loaded, later ones load it again
                table = self.table(name)
            head = table.refs()[ref].snapshot_id if ref in table.refs() else None
            if parent is not None and head != parent:
                raise CommitFailedException(f"{ref} moved from {parent} to {head}")
            try:
                with adding_snapshot():
                    return commit_snapshot(table, ref, add=added, remove=remove, summary=summary)
            except CommitFailedException:
                if parent is not None:
                    raise
                _backoff(attempt)
        raise CatalogError(f"{name}: could not commit to {ref} after {COMMIT_ATTEMPTS} tries")

    def staged_snapshot(self, name: str, run_id: str) -> int | None:
        """The head of run ``run_id``'s branch on table ``name`` (None: no branch)."""
        table = self.load(name)
        if table is None:
            return None
        ref = table.refs().get(branch_name(run_id))
        return ref.snapshot_id if ref is not None else None

    # ---------------------------------------------------------- publish

    def audited_heads(self, run_id: str) -> dict[str, int] | None:
        """``{table: snapshot id}`` the newest audit of run ``run_id`` read (the
        ``kafkalog.audited`` summary of its ``dq_results`` snapshot); None: never audited."""
        table = self.load("dq_results")
        if table is None or table.current_snapshot() is None:
            return None
        for sid in ancestry(table, table.current_snapshot().snapshot_id):
            summary = snapshot_summary(table, sid)
            if summary.get(RUN_ID) == run_id and AUDITED in summary:
                return {name: int(s) for name, s in json.loads(summary[AUDITED]).items()}
        return None

    def check_audited(self, run_id: str, names=None) -> None:
        """Raise :class:`NotAudited` unless every branch head of run ``run_id`` is the
        snapshot its newest audit read (a table already published has no branch left)."""
        names = names or self.run_tables()
        heads = self.audited_heads(run_id)
        if heads is None:
            raise NotAudited(f"run {run_id!r} has no audit in {self.namespace}.dq_results: "
                             "audit it (spark_jobs/check_quality.py) before publishing")
        for name in names:
            head = self.staged_snapshot(name, run_id)
            if head is not None and heads.get(name) != head:
                raise NotAudited(
                    f"{name}: the head of {branch_name(run_id)} is snapshot {head}, the audit "
                    f"read {heads.get(name)}: the run was written again after its audit; "
                    "audit it again before publishing")

    def publish(self, run_id: str, names=None, *, audited: bool = False) -> dict:
        """Make run ``run_id``'s audited branch the current state of ``main``, table by
        table in ``names`` order (ledger last), each table's branch dropped in the same
        commit. Idempotent: a table already published is left as it is, so publishing
        again after a crash at any point completes the run. ``audited``: refuse
        (:class:`NotAudited`) unless the branches are what the run's newest audit read.
        Returns ``{table: action}``. ``names`` default: :meth:`run_tables`."""
        names = names or self.run_tables()
        if audited:
            self.check_audited(run_id, names)
        branch = branch_name(run_id)
        tables = {name: self.table(name) for name in names}
        marked = publishing_key(run_id) in tables[names[0]].properties
        if not any(branch in t.refs() for t in tables.values()):
            if marked or any(published_snapshot(t, run_id) is not None for t in tables.values()):
                if marked:
                    self._mark(names[0], run_id, False)
                return {name: "published" for name in names}
            raise NothingStaged(f"run {run_id!r} has no branch {branch} and nothing published "
                                f"in catalog {self.catalog_name!r}: nothing to publish")
        # each step's first try uses the table as loaded above (or as its last commit left
        # it: pyiceberg updates the Table in place); a lost compare-and-swap loads it again.
        # The marker goes on with the first table's own step: from then on, the publish
        # is completed by whoever comes next (complete_interrupted)
        out = {}
        for i, name in enumerate(names):
            try:
                out[name], tables[name] = self._publish_table(name, run_id, tables[name],
                                                              mark=i == 0 and not marked)
            except ConflictError:
                if all(action == "nothing" for action in out.values()):
                    self._mark(names[0], run_id, False)  # nothing of it reached main
                raise
        self._mark(names[0], run_id, False, tables[names[0]])
        return out

    def _mark(self, name: str, run_id: str, on: bool, table=None):
        """Set (``on``) or remove run ``run_id``'s publish marker on table ``name``
        (``table``: as just loaded, for the first try); returns the table as it left it."""
        from pyiceberg.exceptions import CommitFailedException

        key = publishing_key(run_id)
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table(name) if table is None or attempt else table
            if (key in table.properties) == on:
                return table
            try:
                commit_refs(table, {}, properties={key: run_id} if on else None,
                            removed=() if on else (key,))
                return table
            except CommitFailedException:
                _backoff(attempt)
        raise CatalogError(f"{name}: could not {'set' if on else 'remove'} {key}")

    def _publish_table(self, name: str, run_id: str, table=None, *, mark: bool = False):
        """Put run ``run_id``'s branch of table ``name`` on ``main`` and drop the branch;
        ``mark``: set the run's publish marker no later than ``main`` changes (in the same
        commit where it can). Returns the action and the table as it left it."""
        from pyiceberg.exceptions import CommitFailedException

        branch = branch_name(run_id)
        marker = {publishing_key(run_id): run_id} if mark else None
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table(name) if table is None or attempt else table
            if marker and publishing_key(run_id) in table.properties:
                marker = None  # set by an earlier try
            ref = table.refs().get(branch)
            if ref is None:
                action = "published" if published_snapshot(table, run_id) is not None else "nothing"
                return action, self._mark(name, run_id, True, table) if marker else table
            head = ref.snapshot_id
            main = table.current_snapshot().snapshot_id
            moves = {branch: (head, None)}  # the branch goes in the table's one commit
            try:
                if snapshot_summary(table, head).get(RUN_ID) != run_id:
                    action = "nothing"  # the run committed nothing here (a derived table)
                elif is_published(table, head):
                    action = "published"  # by an earlier try that stopped before the drop
                elif main == (fork := fork_point(table, branch)):
                    action = "nothing" if head == fork else "fast-forward"
                    if head != fork:
                        moves[MAIN] = (main, head)
                else:
                    check_overlap(table, name, run_id, fork, main, head)
                    if marker:  # the re-applied snapshot is a commit of its own: mark first
                        table = self._mark(name, run_id, True, table)
                        marker = None
                    mine = [f for f in live_files(table, head) if is_run_file(f.file_path, run_id)]
                    summary = {**snapshot_summary(table, head), STAGE: "published",
                               PUBLISHED_FROM: str(head)}
                    self._commit(name, MAIN, add=mine, remove=lambda p: is_run_file(p, run_id),
                                 summary=summary, parent=main)
                    return "re-applied", self._drop_branch(name, branch)
                commit_refs(table, moves, properties=marker)
                return action, table
            except CommitFailedException:
                log.info("%s: main moved while publishing run %s; checking again", name, run_id)
                _backoff(attempt)
        raise CatalogError(f"{name}: could not publish run {run_id!r} after {COMMIT_ATTEMPTS} tries")

    def _drop_branch(self, name: str, branch: str, table=None):
        """Drop ``branch`` of table ``name`` (``table``: as just loaded, for the first
        try); returns the table as it left it (None: it could not)."""
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table(name) if table is None or attempt else table
            ref = table.refs().get(branch)
            if ref is None:
                return table
            try:
                commit_refs(table, {branch: (ref.snapshot_id, None)})
                return table
            except CommitFailedException:
                _backoff(attempt)

    def discard(self, run_id: str, names=None) -> None:
        """Drop run ``run_id``'s branches (its staged, unpublished commits)."""
        names = names or self.run_tables()
        for name in names:
            self._drop_branch(name, branch_name(run_id))

    # ---------------------------------------------------------- direct writes

    def replace_run_rows(self, name: str, run_id: str, rows: pa.Table, summary: dict | None = None,
                         where=None):
        """Replace run ``run_id``'s rows of table ``name`` on ``main`` with ``rows`` in one
        snapshot (the audit's own table, dq_results, is written so); ``where`` (a pyiceberg
        expression): the rows replaced instead of all of the run's."""
        from pyiceberg.expressions import EqualTo
        from pyiceberg.exceptions import CommitFailedException

        props = {RUN_ID: run_id, STAGE: "published", ROWS: str(rows.num_rows), **airflow_summary(),
                 **{k: str(v) for k, v in (summary or {}).items()}}
        rows = rows.cast(schemas.TABLES[name])
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table(name)
            try:
                with warnings.catch_warnings(), adding_snapshot():
                    # a run's first write deletes nothing: fine
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    table.overwrite(rows, overwrite_filter=EqualTo("run_id", run_id)
                                    if where is None else where, snapshot_properties=props)
                return
            except CommitFailedException:
                _backoff(attempt)
        raise CatalogError(f"{name}: could not write run {run_id!r} after {COMMIT_ATTEMPTS} tries")


# ------------------------------------------------------------------ snapshots and files


#: pyiceberg 0.12 sends a new snapshot without a check of the table's last sequence number:
#: where another branch's snapshot took the next number in between, the catalog refuses it
#: with this ValueError before writing anything. A lost race, as a failed compare-and-swap is
STALE_SEQUENCE = re.compile(r"Cannot add snapshot with sequence number \d+ older than last "
                            r"sequence number")


@contextlib.contextmanager
def adding_snapshot():
    """Around a commit that adds a snapshot: a race lost to another writer of the table
    comes out as the ``CommitFailedException`` that callers retry, whichever way the
    catalog said it (:data:`STALE_SEQUENCE`)."""
    from pyiceberg.exceptions import CommitFailedException

    try:
        yield
    except ValueError as err:
        if STALE_SEQUENCE.search(str(err)):
            raise CommitFailedException(f"another snapshot came first: {err}") from err
        raise


def commit_refs(table, moves: dict[str, tuple[int | None, int | None]], *,
                properties: dict | None = None, removed: tuple[str, ...] = ()) -> None:
    """One compare-and-swap commit of ``table``'s branches and properties: each
    ``branch: (now, then)`` in ``moves`` must point at snapshot ``now`` (None: not exist)
    and then points at ``then`` (None: dropped); ``properties`` are set and ``removed``
    taken away in the same commit. Raises ``CommitFailedException`` where a branch is not
    where the caller saw it; updates ``table`` in place.

    The updates and requirements go to the catalog as they are (what a REST catalog's
    commit request carries). pyiceberg's ``ManageSnapshots`` keeps only one requirement of
    a kind per commit, so it cannot check two branches at once, and copies the whole
    metadata at every step: most of a commit's time here (docs/bench_job.md)."""
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import (AssertRefSnapshotId, AssertTableUUID,
                                        RemovePropertiesUpdate, RemoveSnapshotRefUpdate,
                                        SetPropertiesUpdate, SetSnapshotRefUpdate)

    requirements = [AssertTableUUID(uuid=table.metadata.table_uuid)]
    updates = []
    for ref, (now, then) in moves.items():
        requirements.append(AssertRefSnapshotId(ref=ref, snapshot_id=now))
        updates.append(RemoveSnapshotRefUpdate(ref_name=ref) if then is None else
                       SetSnapshotRefUpdate(ref_name=ref, type=SnapshotRefType.BRANCH,
                                            snapshot_id=then))
    if properties:
        updates.append(SetPropertiesUpdate(updates=properties))
    if removed:
        updates.append(RemovePropertiesUpdate(removals=list(removed)))
    # the one per-table commit call pyiceberg's own transactions make (tests count it)
    table._do_commit(tuple(updates), tuple(requirements))


def commit_snapshot(table, ref: str, *, add: list, remove, summary: dict) -> int | None:
    """One compare-and-swap commit of a snapshot on branch ``ref`` of ``table``: the
    branch head's live files that ``remove`` (a path predicate) selects are dropped and
    the DataFiles ``add`` added. Returns the new head, or the head as it was where there
    is nothing to drop or add (no commit). Raises ``CommitFailedException`` where the
    branch moved since ``table`` was loaded; updates ``table`` in place.

    The snapshot is the one pyiceberg's overwrite makes (manifests, manifest list, the
    summary's totals), written here in one pass: an ``append`` where nothing is dropped,
    else an ``overwrite`` whose rewritten manifests mark the dropped files deleted.
    pyiceberg's ``Transaction`` reads the head's manifests three times and deep-copies
    the whole table metadata ~16 times per snapshot (docs/bench_job.md)."""
    import uuid

    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.manifest import (ManifestEntry, ManifestEntryStatus, write_manifest,
                                    write_manifest_list)
    from pyiceberg.table import TableProperties
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.snapshots import (Operation, Snapshot, SnapshotSummaryCollector,
                                           Summary, update_snapshot_summaries)
    from pyiceberg.table.update import (AddSnapshotUpdate, AssertRefSnapshotId,
                                        AssertTableUUID, SetSnapshotRefUpdate)

    md = table.metadata
    head = md.refs[ref].snapshot_id if ref in md.refs else None
    parent = md.snapshot_by_id(head) if head is not None else None
    snapshot_id, commit_uuid = md.new_snapshot_id(), uuid.uuid4()
    schema, specs = md.schema(), md.specs()
    compression = md.properties.get(TableProperties.WRITE_AVRO_COMPRESSION,
                                    TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
    written: list[str] = []

    def manifest_writer(spec_id: int):
        path = table.location_provider().new_metadata_location(
            f"{commit_uuid}-m{len(written)}.avro")
        written.append(path)
        return write_manifest(format_version=md.format_version, spec=specs[spec_id],
                              schema=schema, output_file=table.io.new_output(path),
                              snapshot_id=snapshot_id, avro_compression=compression)

    collector = SnapshotSummaryCollector(partition_summary_limit=int(md.properties.get(
        TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
        TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT)))
    manifests, dropped, committing = [], False, False
    try:
        for manifest in data_manifests(table, head):
            entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            drop = [remove(e.data_file.file_path) for e in entries]
            if not any(drop):
                manifests.append(manifest)  # kept as it is
                continue
            with manifest_writer(manifest.partition_spec_id) as writer:
                for entry, dropping in zip(entries, drop):
                    if dropping:
                        writer.delete(entry)
                        collector.remove_file(entry.data_file, schema,
                                              specs[entry.data_file.spec_id])
                    else:
                        writer.existing(entry)
            manifests.append(writer.to_manifest_file())
            dropped = True
        if not add and not dropped:
            return head
        if add:
            with manifest_writer(md.default_spec_id) as writer:
                for f in add:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                       snapshot_id=snapshot_id, data_file=f))
                    collector.add_file(f, schema, specs[md.default_spec_id])
            manifests.insert(0, writer.to_manifest_file())
        sequence_number = md.next_sequence_number()
        manifest_list = table.location_provider().new_metadata_location(
            f"snap-{snapshot_id}-0-{commit_uuid}.avro")
        written.append(manifest_list)
        with write_manifest_list(format_version=md.format_version,
                                 output_file=table.io.new_output(manifest_list),
                                 snapshot_id=snapshot_id, parent_snapshot_id=head,
                                 sequence_number=sequence_number,
                                 avro_compression=compression) as writer:
            writer.add_manifests(manifests)
        snapshot = Snapshot(
            snapshot_id=snapshot_id, parent_snapshot_id=head, manifest_list=manifest_list,
            sequence_number=sequence_number, schema_id=md.current_schema_id,
            summary=update_snapshot_summaries(
                Summary(operation=Operation.OVERWRITE if dropped else Operation.APPEND,
                        **collector.build(), **summary),
                parent.summary if parent is not None else None))
        committing = True
        table._do_commit(
            (AddSnapshotUpdate(snapshot=snapshot),
             SetSnapshotRefUpdate(ref_name=ref, type=SnapshotRefType.BRANCH,
                                  snapshot_id=snapshot_id, parent_snapshot_id=head)),
            (AssertTableUUID(uuid=md.table_uuid), AssertRefSnapshotId(ref=ref, snapshot_id=head)))
    except BaseException as err:
        # before the catalog's commit nothing refers to the files written; a commit it
        # refused (the branch moved, or another snapshot took the sequence number) neither.
        # Any other failure of the commit itself may have landed: the files stay
        if not committing or isinstance(err, CommitFailedException) or STALE_SEQUENCE.search(
                str(err)):
            for path in written:
                table.io.delete(path)
        raise
    return snapshot_id


def live_files(table, snapshot_id: int | None) -> list:
    """The data files of a snapshot (None: none; :func:`data_manifests`)."""
    from pyiceberg.manifest import ManifestEntryStatus

    out = []
    for manifest in data_manifests(table, snapshot_id):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status != ManifestEntryStatus.DELETED:
                out.append(entry.data_file)
    return out


def data_manifests(table, snapshot_id: int | None) -> list:
    """The manifests of a snapshot (None: none). Raises where it has delete files: this
    pipeline never writes them, and plain-Parquet readers would ignore them."""
    if snapshot_id is None:
        return []
    from pyiceberg.manifest import ManifestContent

    manifests = table.metadata.snapshot_by_id(snapshot_id).manifests(table.io)
    if any(m.content != ManifestContent.DATA for m in manifests):
        raise CatalogError(f"{table.name()}: snapshot {snapshot_id} has delete files, "
                           "which this pipeline never writes and cannot read")
    return manifests


def ancestry(table, snapshot_id: int | None) -> list[int]:
    """Snapshot ids from ``snapshot_id`` back to the first (as far as history is kept)."""
    out = []
    while snapshot_id is not None:
        out.append(snapshot_id)
        snap = table.metadata.snapshot_by_id(snapshot_id)
        snapshot_id = snap.parent_snapshot_id if snap is not None else None
    return out


def fork_point(table, branch: str) -> int:
    """The newest ``main`` snapshot the branch descends from."""
    main = set(ancestry(table, table.current_snapshot().snapshot_id))
    for sid in ancestry(table, table.refs()[branch].snapshot_id):
        if sid in main:
            return sid
    raise CatalogError(f"{table.name()}: branch {branch} shares no snapshot with main "
                       "(were its snapshots expired?)")


def snapshot_summary(table, snapshot_id: int) -> dict[str, str]:
    snap = table.metadata.snapshot_by_id(snapshot_id)
    if snap is None or snap.summary is None:
        return {}
    return {k: v for k, v in snap.summary.additional_properties.items() if k.startswith("kafkalog.")}


def is_published(table, head: int) -> bool:
    """Whether branch head ``head`` is on ``main``: an ancestor, or re-applied."""
    for sid in ancestry(table, table.current_snapshot().snapshot_id):
        if sid == head or snapshot_summary(table, sid).get(PUBLISHED_FROM) == str(head):
            return True
    return False


def published_snapshot(table, run_id: str) -> int | None:
    """The newest ``main`` snapshot committed for run ``run_id`` (None: not published)."""
    for sid in ancestry(table, table.current_snapshot().snapshot_id):
        if snapshot_summary(table, sid).get(RUN_ID) == run_id:
            return sid
    return None


def main_history(table) -> list[dict]:
    """``main``'s snapshots, oldest first: id, time (ms), run id, stage, rows."""
    out = []
    for sid in reversed(ancestry(table, table.current_snapshot().snapshot_id)):
        snap = table.metadata.snapshot_by_id(sid)
        s = snapshot_summary(table, sid)
        out.append({"snapshot_id": sid, "timestamp_ms": snap.timestamp_ms,
                    "run_id": s.get(RUN_ID), "stage": s.get(STAGE), "rows": s.get(ROWS)})
    return out


def _ranges(table, name: str, files) -> list[tuple[str, int, int, int, int]]:
    """``(topic, partition lo, partition hi, offset lo, offset hi)`` of each file, from
    its partition value and column statistics (a file without them spans everything)."""
    from pyiceberg.conversions import from_bytes

    lo_col, hi_col = OFFSET_COLUMNS[name]
    schema = table.schema()
    fields = {c: schema.find_field(c) for c in ("partition", lo_col, hi_col)}
    topic_pos = [f.name for f in table.spec().fields].index("topic")
    inf = 2 ** 63

    def bound(f, col, which, default):
        raw = (f.lower_bounds if which == "lo" else f.upper_bounds).get(fields[col].field_id)
        return default if raw is None else from_bytes(fields[col].field_type, raw)

    return [(f.partition[topic_pos], bound(f, "partition", "lo", -inf), bound(f, "partition", "hi", inf),
             bound(f, lo_col, "lo", -inf), bound(f, hi_col, "hi", inf)) for f in files]


#: footers read at once by :func:`data_files` (on S3 each is a GET)
FOOTER_READERS = 16


def data_files(table, paths: list[str]) -> list:
    """The ``DataFile`` of each Parquet file in ``paths`` (written for ``table``), as
    pyiceberg's ``parquet_file_to_data_file`` makes it: the footer read (``FOOTER_READERS``
    at a time), the file's schema checked against the table's, the statistics and
    partition from the footer. The schema check, the statistics plan and the column
    mapping are made once per call, the check once per distinct file schema, instead of
    once per file: a night of thousands of small partitions commits thousands of files
    of one schema, and the check was 60% of the time (docs/bench_job.md)."""
    import concurrent.futures

    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (_check_pyarrow_schema_compatible, compute_statistics_plan,
                                      data_file_statistics_from_parquet_metadata,
                                      parquet_path_to_id_mapping)
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    metadata = table.metadata
    schema, spec = metadata.schema(), metadata.spec()
    plan = compute_statistics_plan(schema, metadata.properties)
    mapping = parquet_path_to_id_mapping(schema)

    def footer(path: str):
        input_file = table.io.new_input(path)
        with input_file.open() as stream:
            return pq.read_metadata(stream), len(input_file)

    with concurrent.futures.ThreadPoolExecutor(max(1, min(FOOTER_READERS, len(paths)))) as pool:
        footers = list(pool.map(footer, paths))
    # the file schemas found compatible: a list, since a pyarrow schema's hash and == leave
    # out the fields' metadata, where Parquet keeps the field ids
    checked: list = []
    out = []
    for path, (footer_metadata, size) in zip(paths, footers):
        arrow_schema = footer_metadata.schema.to_arrow_schema()
        if not any(arrow_schema.equals(c, check_metadata=True) for c in checked):
            _check_pyarrow_schema_compatible(schema, arrow_schema,
                                             format_version=metadata.format_version)
            checked.append(arrow_schema)
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer_metadata, stats_columns=plan, parquet_column_mapping=mapping)
        out.append(DataFile.from_args(
            content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
            partition=statistics.partition(spec, schema), file_size_in_bytes=size,
            sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None,
            key_metadata=None, **statistics.to_serialized_dict()))
    return out


def check_overlap(table, name: str, run_id: str, fork: int, main: int, head: int) -> None:
    """Raise :class:`ConflictError` where a snapshot committed to ``main`` after ``fork``
    (by another run) added rows at offsets this run's branch adds to the same
    topic-partitions: this run deduplicated against ``fork`` and did not see them."""
    if name not in OFFSET_COLUMNS:
        return
    base = {f.file_path for f in live_files(table, fork)}
    theirs = [f for f in live_files(table, main) if f.file_path not in base
              and not is_run_file(f.file_path, run_id)]
    if not theirs:
        return
    mine = _ranges(table, name, [f for f in live_files(table, head)
                                 if is_run_file(f.file_path, run_id) and f.file_path not in base])
    clash = []
    for f, (t, plo, phi, olo, ohi) in zip(theirs, _ranges(table, name, theirs)):
        for (t2, plo2, phi2, olo2, ohi2) in mine:
            if t == t2 and plo <= phi2 and plo2 <= phi and olo <= ohi2 and olo2 <= ohi:
                clash.append(f)
                break
    if clash:
        others = set()
        adders = _adding_runs(table, main, fork)
        for f in clash:
            others.add(adders.get(f.file_path, "?"))
        raise ConflictError(
            f"{name}: run(s) {', '.join(sorted(others))} published offsets of the same "
            f"topic-partitions to main after run {run_id!r} read it ({len(clash)} files, e.g. "
            f"{clash[0].file_path}); this run's output may duplicate them. Run {run_id!r} "
            "again (it deduplicates against the new main), or discard it",
            table=name, runs=sorted(others), files=len(clash))


def _adding_runs(table, main: int, fork: int) -> dict[str, str]:
    """File path -> run id of the ``main`` snapshot (after ``fork``) that added it."""
    from pyiceberg.manifest import ManifestEntryStatus

    out = {}
    for sid in ancestry(table, main):
        if sid == fork:
            break
        run = snapshot_summary(table, sid).get(RUN_ID, f"snapshot {sid}")
        snap = table.metadata.snapshot_by_id(sid)
        for manifest in snap.manifests(table.io):
            if manifest.added_snapshot_id != sid:
                continue
            for entry in manifest.fetch_manifest_entry(table.io):
                if entry.status == ManifestEntryStatus.ADDED:
                    out.setdefault(entry.data_file.file_path, run)
    return out


def _backoff(attempt: int) -> None:
    time.sleep(min(0.05 * 2 ** attempt, 2.0) * (1 + random.random()))
