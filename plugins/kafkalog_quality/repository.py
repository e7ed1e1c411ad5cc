"""Reading the data-quality results of a warehouse (docs/tables.md), without Spark: the
repository of the report (what it shows, as types: model.py; in words: words.py).

Two things per run:
Two things per run:

- its rows in the Apache Iceberg table ``dq_results`` of the warehouse's catalog
  (:mod:`spark_jobs.warehouse`; schema :data:`spark_jobs.schemas.DQ_RESULTS`): one row
  per run x check x topic-partition, all of a run's rows replaced in one snapshot on
  ``main`` by ``check_quality.py`` (:meth:`spark_jobs.warehouse.Warehouse.replace_run_rows`).
  A run is the rows of one ``run_id``; its token is :func:`spark_jobs.storage.run_token`
  of that id;
- ``W/data_docs/<run_token>/index.html`` and whatever sits beside it: that run's Great
  Expectations Data Docs, files under the warehouse root ``W`` (local directory or
  ``s3://``), read through :mod:`spark_jobs.storage`.

**Catalog**: the Iceberg catalog's name and the tables' namespace are the settings
``catalog`` and ``namespace`` of :mod:`kafkalog_pipeline.settings` (Airflow Variables
``kafkalog_catalog`` / ``kafkalog_namespace``, else ``$KAFKALOG_CATALOG`` /
``$KAFKALOG_NAMESPACE``, else ``kafkalog`` / ``kafka``), read on every request like the
warehouse root; the catalog itself is found as
:func:`spark_jobs.warehouse.catalog.catalog_properties` says (pyiceberg's configuration, else
the embedded SQLite catalog of a local ``W``). S3 access (an ``s3://`` warehouse, its data
files and Data Docs) comes from the environment.

**Cache**: the table is read with pyarrow through pyiceberg (:func:`scan`: a column a
snapshot's schema lacks reads null) and its runs are kept in a cache keyed by the table's
current snapshot id, so a page view costs one catalog lookup (the table's metadata) and
reads data files only after a new snapshot.

**Failures never break a page**: a catalog or table that cannot be read raises
:class:`WarehouseUnavailable`, which the app shows as a message (status 503); a data file
that cannot be read makes the run that committed it an ``error`` run, and the other runs
are shown as usual. A local warehouse without a catalog yet has no runs (nothing is
created there by the viewer).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import threading
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from kafkalog_pipeline.settings import SETTINGS
from spark_jobs import layout, parquet, schemas, storage, warehouse
from spark_jobs.audit.results import parse_details
from spark_jobs.warehouse.catalog import CONFIG_FILE, mask_password, read_config
from spark_jobs.warehouse.history import ancestry, main_history, snapshot_summary

from .calendar import night_pattern
from .model import Coverage, Result, Run

log = logging.getLogger(__name__)

#: Airflow Variable naming the warehouse root (checked first) ...
VARIABLE = SETTINGS["warehouse"][0]
#: ... then this environment variable.
ENV = SETTINGS["warehouse"][1]

#: the Iceberg table of the results (schema spark_jobs.schemas.DQ_RESULTS)
RESULTS_TABLE = "dq_results"
DOCS_DIR = layout.DATA_DOCS

#: the snapshot night a dq_results row is about (a ``snapshot_missing`` row: the night that had
#: none) and the night whose listing held a ledger row's segment; null in older rows
NIGHT = schemas.NIGHT

_TOKEN = re.compile(r"[A-Za-z0-9._-]+")

#: the pseudo-run of rows whose ``run_id`` is null or empty (shown as an error run)
NO_RUN_ID = "_no_run_id"


class WarehouseNotConfigured(RuntimeError):
    """Neither the Airflow Variable nor the environment variable names a warehouse."""


class WarehouseUnavailable(WarehouseNotConfigured):
    """A warehouse is named but its ``dq_results`` table cannot be read: the catalog is
    unreachable or misconfigured, or the table's metadata cannot be read.

    A subclass of :class:`WarehouseNotConfigured` so that the app's handler for it shows the
    message on the page (status 503) instead of failing the request.
    """


def setting(name: str) -> str | None:
    """Setting ``name`` of :data:`kafkalog_pipeline.settings.SETTINGS`: its Airflow Variable,
    else its environment variable, else its default (read on every call)."""
    var, env, default = SETTINGS[name]
    value = None
    try:
        from kafkalog_pipeline._airflow import variable

        value = variable(var)
    except Exception:  # no metadata database reachable (e.g. outside Airflow): use the env
        value = None
    return (value or os.environ.get(env) or "").strip() or default


def warehouse_root() -> str:
    """The warehouse root: Airflow Variable ``kafkalog_warehouse``, else ``$KAFKALOG_WAREHOUSE``."""
    value = setting("warehouse")
    if not value:
        raise WarehouseNotConfigured(
            f"no warehouse configured: set the Airflow Variable {VARIABLE!r} or ${ENV}")
    return value



def parse_results(data: bytes) -> list[Result]:
    """Rows of a dq_results Parquet file (see :func:`results_from_arrow`)."""
    return results_from_arrow(pq.read_table(pa.BufferReader(data)))


def results_from_arrow(table: pa.Table) -> list[Result]:
    """Rows of dq_results as an Arrow table (columns by name; missing optional ones are null)."""
    missing = {"run_id", "check", "status"} - set(table.column_names)
    if missing:
        raise ValueError(f"not a dq_results table: no column(s) {', '.join(sorted(missing))}")
    cols = {}
    for f in RESULT_SCHEMA:
        cols[f.name] = (table.column(f.name).to_pylist() if f.name in table.column_names
                        else [None] * table.num_rows)
    out = []
    for i in range(table.num_rows):
        out.append(Result(
            run_id=cols["run_id"][i], check=cols["check"][i] or "", topic=cols["topic"][i],
            partition=cols["partition"][i], status=(cols["status"][i] or "").lower(),
            severity=cols["severity"][i], observed=cols["observed"][i], failed=cols["failed"][i],
            details=parse_details(cols["details"][i]), checked_at=_utc(cols["checked_at"][i]),
            night=cols[NIGHT][i], raw_details=cols["details"][i],
        ))
    return out


#: the dq_results columns the view reads
RESULT_SCHEMA = schemas.DQ_RESULTS


def scan(table, snapshot_id: int, schema: pa.Schema, row_filter=None) -> pa.Table:
    """The columns of ``schema`` of Iceberg ``table`` at ``snapshot_id`` (rows ``row_filter``),
    cast to it; a column that snapshot's schema lacks (a table made before it existed) reads
    null, as Iceberg reads it in files written before it was added
    (:func:`spark_jobs.parquet.conform`)."""
    from pyiceberg.expressions import AlwaysTrue

    plan = table.scan(snapshot_id=snapshot_id, row_filter=row_filter or AlwaysTrue())
    have = {f.name for f in plan.projection().fields}
    return parquet.conform(plan.select(*[n for n in schema.names if n in have]).to_arrow(),
                           schema)


def _utc(value):
    if not isinstance(value, dt.datetime):
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


@dataclass(frozen=True)
class _Loaded:
    """One run as read from a snapshot (immutable: cached, and made into a fresh Run per view)."""

    token: str
    run_id: str
    checked_at: dt.datetime | None
    results: tuple[Result, ...]
    error: str | None = None

    def to_run(self) -> Run:
        return Run(self.token, self.run_id, self.checked_at, list(self.results), error=self.error)


# (root, catalog, namespace) -> (snapshot id, {token: _Loaded}) of the last complete read
_CACHE: dict[tuple[str, str, str], tuple[int, dict[str, _Loaded]]] = {}
_CACHE_LOCK = threading.Lock()
# ledger rows by run id: main's by (root, catalog, namespace) with its snapshot id; an
# unpublished run's (rows, reason) by dq_results' snapshot id and the run ids
_LEDGER_CACHE: dict[tuple, tuple[int, object]] = {}
#: the ledger columns the overview reads
LEDGER_SCHEMA = pa.schema([schemas.LEDGER.field(c)
                           for c in ("run_id", "topic", "partition", "segment", NIGHT)])


class Warehouse:
    """The data-quality view of one warehouse root (see the module docstring).

    ``catalog`` and ``namespace`` default to the settings of the same names, ``s3`` (a
    :class:`spark_jobs.storage.S3Config`, for an ``s3://`` root) to the environment's access.
    """

    def __init__(self, root: str, store=None, *, catalog: str | None = None,
                 namespace: str | None = None, s3: storage.S3Config | None = None):
        self.root = root
        self.catalog_name = catalog or setting("catalog") or warehouse.DEFAULT_CATALOG
        self.namespace = namespace or setting("namespace") or warehouse.DEFAULT_NAMESPACE
        if s3 is None and storage.is_s3(root):
            try:
                s3 = storage.S3Config.from_env()
            except Exception as err:  # noqa: BLE001 - shown on the page, never a crash
                raise self._unavailable(err) from err
        self.store = store if store is not None else storage.open_store(root, s3)
        self.tables = warehouse.Warehouse(root, self.catalog_name, self.namespace, s3)
        self._ledger_refs: set[str] = set()  # the ledger's branches and tags, as last loaded

    def runs(self) -> list[Run]:
        """Every run with rows in dq_results, newest first (by ``checked_at``, else commit time)."""
        runs = [loaded.to_run() for loaded in self._load().values()]
        for run in runs:
            run.has_docs = self.store.exists(docs_key(run.token, "index.html"))
        epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        runs.sort(key=lambda r: (r.checked_at or epoch, r.token), reverse=True)
        return runs

    def run(self, token: str) -> Run | None:
        if not valid_token(token):
            return None
        loaded = self._load().get(token)
        if loaded is None:
            return None
        run = loaded.to_run()
        run.has_docs = self.store.exists(docs_key(token, "index.html"))
        return run

    @staticmethod
    def snapshot_template() -> str:
        """The snapshot template setting (``kafkalog_snapshot_template``), read per request."""
        return setting("snapshot_template") or SETTINGS["snapshot_template"][2]

    def night_pattern(self) -> re.Pattern | None:
        """:func:`night_pattern` of the template, None where it cannot be filled."""
        try:
            return night_pattern(self.snapshot_template())
        except ValueError:
            return None

    def coverage(self, runs: list[Run]) -> dict[str, "Coverage"]:
        """Per run token: the snapshot nights and topic-partitions the run read (:class:`Coverage`),
        from its rows of the ``ledger`` table (one per decode task, unchanged segments included):
        ``main``'s for a published run, else those of the ledger snapshot its audit read
        (``kafkalog.audited`` of its dq_results commit). A run whose ledger rows cannot be
        found or read gets a Coverage with a ``reason`` and no nights; never an exception."""
        if not runs or not self._has_catalog():  # viewing never makes a catalog
            return {}
        template = self.snapshot_template()
        try:
            pattern = night_pattern(template)
        except ValueError as err:
            return {r.token: Coverage(reason=str(err)) for r in runs}
        try:
            published = self._ledger_main()
        except Exception as err:  # noqa: BLE001 - shown as each run's reason, never a crash
            log.warning("cannot read the ledger of %s", self.root, exc_info=err)
            reason = f"the ledger table cannot be read: {type(err).__name__}: {_first_line(err)}"
            return {r.token: Coverage(reason=reason) for r in runs}
        out = {}
        for run in runs:
            ids = sorted({r.run_id for r in run.results if r.run_id})
            rows = [row for i in ids for row in published.get(i, ())]
            reason, on_main = None, True if rows else None
            if not rows and ids:
                rows, reason = self._ledger_audited(ids)
                on_main = False if rows else None
            branches = [b for b in map(warehouse.branch_name, ids) if b in self._ledger_refs]
            out[run.token] = Coverage.of(rows, pattern, template, reason,
                                         missing=tuple(run.missing_nights), published=on_main,
                                         branch=branches[0] if branches else None)
        return out

    def _ledger_main(self) -> dict[str, tuple]:
        """``main``'s ledger as ``{run_id: ((topic, partition, segment, night), ...)}``, cached
        by snapshot; notes the table's branches and tags (:attr:`_ledger_refs`)."""
        table = self.tables.load("ledger")
        self._ledger_refs = set(table.refs()) if table is not None else set()
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is None:
            return {}
        key = ("ledger", self.root, self.catalog_name, self.namespace)
        with _CACHE_LOCK:
            hit = _LEDGER_CACHE.get(key)
        if hit is not None and hit[0] == snapshot.snapshot_id:
            return hit[1]
        rows = _ledger_rows(scan(table, snapshot.snapshot_id, LEDGER_SCHEMA))
        with _CACHE_LOCK:
            _LEDGER_CACHE[key] = (snapshot.snapshot_id, rows)
        return rows

    def _ledger_audited(self, run_ids: list[str]) -> tuple[list, str | None]:
        """The ledger rows of an unpublished run, at the ledger snapshot its audit read;
        cached by dq_results' snapshot (which names it) and the run."""
        from pyiceberg.expressions import In

        try:
            results = self.tables.load(RESULTS_TABLE)
            head = results.current_snapshot().snapshot_id
            key = ("audited", self.root, self.catalog_name, self.namespace, head, tuple(run_ids))
            with _CACHE_LOCK:
                hit = _LEDGER_CACHE.get(key)
            if hit is not None:
                return hit[1]
            snapshot_ids = set()
            for sid in ancestry(results, head):
                summary = snapshot_summary(results, sid)
                if summary.get(warehouse.RUN_ID) in run_ids and summary.get(warehouse.AUDITED):
                    found = json.loads(summary[warehouse.AUDITED]).get("ledger")
                    if found is not None:
                        snapshot_ids.add(int(found))
                    break  # the newest audit of the run
            ledger = self.tables.load("ledger") if snapshot_ids else None
            snapshot_ids = {s for s in snapshot_ids
                            if ledger is not None and ledger.metadata.snapshot_by_id(s) is not None}
            rows, reason = [], None
            if not snapshot_ids:
                reason = "no ledger rows of this run on main, nor a ledger snapshot its audit read"
            for sid in sorted(snapshot_ids):
                found = _ledger_rows(scan(ledger, sid, LEDGER_SCHEMA, In("run_id", run_ids)))
                rows += [row for i in run_ids for row in found.get(i, ())]
            with _CACHE_LOCK:
                _LEDGER_CACHE[key] = (head, (rows, reason))
            return rows, reason
        except Exception as err:  # noqa: BLE001 - shown as the run's reason, never a crash
            log.warning("cannot read the audited ledger of %s", run_ids, exc_info=err)
            return [], f"its ledger rows cannot be read: {type(err).__name__}: {_first_line(err)}"

    # ---- reading the table ----------------------------------------------------------------

    def _load(self) -> dict[str, _Loaded]:
        """The runs of ``main``'s current snapshot: one catalog lookup, data files read only
        when the snapshot is not the one cached."""
        if not self._has_catalog():
            return {}
        try:
            table = self.tables.load(RESULTS_TABLE)
            snapshot = table.current_snapshot() if table is not None else None
        except Exception as err:  # noqa: BLE001 - any catalog failure is shown, never a crash
            raise self._unavailable(err) from err
        if snapshot is None:  # no table yet, or no commit yet
            return {}
        key = (self.root, self.catalog_name, self.namespace)
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is not None and hit[0] == snapshot.snapshot_id:
            return hit[1]
        try:
            loaded = self._read(table, snapshot.snapshot_id)
        except WarehouseUnavailable:
            raise
        except Exception as err:  # noqa: BLE001 - whatever else went wrong: shown, never a crash
            raise self._unavailable(err) from err
        if not any(run.error for run in loaded.values()):  # failures are tried again next view
            with _CACHE_LOCK:
                _CACHE[key] = (snapshot.snapshot_id, loaded)
        return loaded

    def _read(self, table, snapshot_id: int) -> dict[str, _Loaded]:
        try:
            return _group(table, results_from_arrow(scan(table, snapshot_id, RESULT_SCHEMA)), {})
        except Exception as err:  # noqa: BLE001 - find out which file (or the catalog) failed
            log.warning("reading %s.%s at snapshot %s failed (%s: %s); reading its files one by one",
                        self.namespace, RESULTS_TABLE, snapshot_id, type(err).__name__, err)
        try:
            plan = table.scan(snapshot_id=snapshot_id)
            present = [n for n in RESULT_SCHEMA.names
                       if n in {f.name for f in plan.projection().fields}]
            plan = plan.select(*present)
            tasks = list(plan.plan_files())
            added_by = _adding_runs(table, snapshot_id)
        except Exception as err:  # noqa: BLE001 - manifests unreadable: the table is
            raise self._unavailable(err) from err
        from pyiceberg.io.pyarrow import ArrowScan

        reader = ArrowScan(table.metadata, table.io, plan.projection(), plan.row_filter,
                           plan.case_sensitive)
        results, broken = [], {}
        for task in tasks:
            path = task.file.file_path
            try:
                if task.delete_files:
                    raise warehouse.CatalogError("the file has delete files, which this "
                                                 "pipeline never writes")
                part = reader.to_table([task]).select(present)
                results += results_from_arrow(part.cast(pa.schema(
                    [RESULT_SCHEMA.field(n) for n in present])))
            except Exception as err:  # noqa: BLE001 - a broken file is shown as its run's error
                log.warning("cannot read %s: %s: %s", path, type(err).__name__, err)
                broken.setdefault(added_by.get(path) or _file_token(path), []).append(
                    f"cannot read data file {path}: {type(err).__name__}: {_first_line(err)}")
        return _group(table, results, broken)

    def _has_catalog(self) -> bool:
        """False for a local root without a catalog yet: no pyiceberg configuration names the
        catalog and ``W`` has no ``.pyiceberg.yaml`` (opening it would create the embedded one).
        Raises :class:`WarehouseUnavailable` where ``W/.pyiceberg.yaml`` names other catalogs."""
        if storage.is_s3(self.root):
            return True
        try:
            from pyiceberg.utils.config import Config

            if Config().get_catalog_config(self.catalog_name) is not None:
                return True
        except Exception:  # noqa: BLE001 - let the catalog lookup say what is wrong
            return True
        local = self.root[len("file://"):] if self.root.startswith("file://") else self.root
        conf = os.path.join(local, CONFIG_FILE)
        if not os.path.exists(conf):
            return False
        try:
            names = sorted(read_config(conf))
        except Exception:  # noqa: BLE001 - let the catalog lookup say what is wrong
            return True
        if self.catalog_name.lower() not in names:
            # opening it would write a new embedded configuration over W's
            raise WarehouseUnavailable(
                f"no Iceberg catalog named {self.catalog_name!r} is configured for warehouse "
                f"{self.root}: {conf} names {', '.join(map(repr, names)) or 'none'} (set the "
                f"Airflow Variable {SETTINGS['catalog'][0]!r} or ${SETTINGS['catalog'][1]}, or "
                "configure pyiceberg)")
        return True

    def _unavailable(self, err: Exception) -> WarehouseUnavailable:
        log.warning("data-quality results of %s unreadable", self.root, exc_info=err)
        return WarehouseUnavailable(
            f"cannot read the data-quality results of warehouse {self.root} (table "
            f"{self.namespace}.{RESULTS_TABLE} of Iceberg catalog {self.catalog_name!r}): "
            f"{type(err).__name__}: {_first_line(err)}")

    # ---- Data Docs ------------------------------------------------------------------------

    def read_doc(self, token: str, path: str) -> bytes:
        """A file of a run's Data Docs; FileNotFoundError if it is not there."""
        if not valid_token(token) or not safe_doc_path(path):
            raise FileNotFoundError(path)
        key = docs_key(token, path)
        try:
            return self.store.read(key)
        except (OSError, storage.StorageError) as err:
            raise FileNotFoundError(key) from err


def _group(table, results: list[Result], broken: dict[str, list[str]]) -> dict[str, _Loaded]:
    """Runs by token: the rows of each ``run_id``, and an error run for each key of ``broken``
    (a run id, or the token of a file no run is known to have committed)."""
    by_token: dict[str, list[Result]] = {}
    for r in results:
        by_token.setdefault(storage.run_token(r.run_id) if r.run_id else NO_RUN_ID, []).append(r)
    committed = _commit_times(table) if (broken or any(
        r.checked_at is None for rows in by_token.values() for r in rows)) else {}
    out = {}
    for token, rows in by_token.items():
        run_ids = sorted({r.run_id for r in rows if r.run_id})
        times = [r.checked_at for r in rows if r.checked_at is not None]
        when = max(times) if times else max((committed[i] for i in run_ids if i in committed),
                                            default=None)
        error = (f"{len(rows)} row(s) without a run_id" if token == NO_RUN_ID else None)
        out[token] = _Loaded(token, " | ".join(run_ids) or token, when, tuple(rows), error)
    for key, errors in broken.items():
        token = storage.run_token(key)
        known = out.get(token)
        run_id = known.run_id if known is not None else key
        # a run with an unreadable file is an error run: its other rows would be half of it
        out[token] = _Loaded(token, run_id, known.checked_at if known else committed.get(key),
                             (), "; ".join(errors))
    return out


def _adding_runs(table, snapshot_id: int) -> dict[str, str]:
    """Data file path -> run id of the snapshot that added it (as far as history is kept)."""
    snap = table.metadata.snapshot_by_id(snapshot_id)
    out = {}
    for manifest in snap.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            run_id = (snapshot_summary(table, entry.snapshot_id).get(warehouse.RUN_ID)
                      if entry.snapshot_id is not None else None)
            if run_id:
                out[entry.data_file.file_path] = run_id
    return out


def _commit_times(table) -> dict[str, dt.datetime]:
    """Run id -> time of the newest ``main`` snapshot committed for it (only a fallback for
    ordering: empty where the history cannot be walked)."""
    out = {}
    try:
        history = main_history(table)
    except Exception as err:  # noqa: BLE001
        log.warning("cannot walk the history of %s: %s", table.name(), err)
        return out
    for entry in reversed(history):
        if entry["run_id"]:
            out.setdefault(entry["run_id"], dt.datetime.fromtimestamp(
                entry["timestamp_ms"] / 1000, dt.timezone.utc))
    return out


def _file_token(path: str) -> str:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name[: -len(".parquet")] if name.endswith(".parquet") else name


def _first_line(err: Exception) -> str:
    """An error's message for a page: its first line (SQLAlchemy appends the SQL; the log has
    it all), credentials in URIs masked."""
    return mask_password(str(err).strip().split("\n", 1)[0])


def valid_token(token: str) -> bool:
    """Run tokens are made of ``[A-Za-z0-9._-]`` (storage.run_token) and are never . or .."""
    return bool(token) and token not in (".", "..") and _TOKEN.fullmatch(token) is not None


def safe_doc_path(path: str) -> bool:
    """A relative path without ``..``/``.`` parts, backslashes or empty segments."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def docs_key(token: str, path: str) -> str:
    return f"{DOCS_DIR}/{token}/{path}"


# ---- series for the charts ---------------------------------------------------------------




def _ledger_rows(table: pa.Table) -> dict[str, tuple]:
    out: dict[str, list] = {}
    for r in table.to_pylist():
        if r["run_id"] and r["topic"] is not None and r["partition"] is not None:
            out.setdefault(r["run_id"], []).append((r["topic"], r["partition"], r["segment"],
                                                   r[NIGHT]))
    return {k: tuple(v) for k, v in out.items()}

