"""Reading the data-quality results of a warehouse (docs/tables.md), without Spark.

Two things per run:

- its rows in the Apache Iceberg table ``dq_results`` of the warehouse's catalog
  (:mod:`spark_jobs.iceberg`; schema :data:`spark_jobs.schemas.DQ_RESULTS`): one row
  per run x check x topic-partition, all of a run's rows replaced in one snapshot on
  ``main`` by ``check_quality.py`` (:meth:`spark_jobs.iceberg.Warehouse.replace_run_rows`).
  A run is the rows of one ``run_id``; its token is :func:`spark_jobs.storage.run_token`
  of that id;
- ``W/data_docs/<run_token>/index.html`` and whatever sits beside it: that run's Great
  Expectations Data Docs, files under the warehouse root ``W`` (local directory or
  ``s3://``), read through :mod:`spark_jobs.storage`.

**Catalog**: the Iceberg catalog's name and the tables' namespace are the settings
``catalog`` and ``namespace`` of :mod:`kafkalog_pipeline.settings` (Airflow Variables
``kafkalog_catalog`` / ``kafkalog_namespace``, else ``$KAFKALOG_CATALOG`` /
``$KAFKALOG_NAMESPACE``, else ``kafkalog`` / ``kafka``), read on every request like the
warehouse root; the catalog itself is found as :func:`spark_jobs.iceberg.catalog_properties`
says (pyiceberg's configuration, else the embedded SQLite catalog of a local ``W``). S3
access (an ``s3://`` warehouse, its data files and Data Docs) comes from the environment.

**Cache**: the table is read with pyarrow through pyiceberg
(:func:`spark_jobs.tables.read_arrow`) and its runs are kept in a cache keyed by the
table's current snapshot id, so a page view costs one catalog lookup (the table's
metadata) and reads data files only after a new snapshot.

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
from collections import Counter
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace

import pyarrow as pa
import pyarrow.parquet as pq

from kafkalog_pipeline import snapshots
from kafkalog_pipeline.settings import SETTINGS
from spark_jobs import iceberg, layout, schemas, storage, tables
from spark_jobs.quality.results import checked, plural

log = logging.getLogger(__name__)

#: Airflow Variable naming the warehouse root (checked first) ...
VARIABLE = SETTINGS["warehouse"][0]
#: ... then this environment variable.
ENV = SETTINGS["warehouse"][1]

#: the Iceberg table of the results (schema spark_jobs.schemas.DQ_RESULTS)
RESULTS_TABLE = "dq_results"
DOCS_DIR = "data_docs"

#: verdict order, worst first; a run's verdict is the worst status among its rows
STATUSES = ("fail", "warn", "pass")

# Which checks feed which chart: the check names of spark_jobs/quality/checks.py.
CRC_CHECKS = ("crc",)
GAP_CHECKS = ("offset_gaps",)
TIMESTAMP_CHECKS = ("log_append_time", "create_time")
_TOKEN = re.compile(r"[A-Za-z0-9._-]+")

#: cause used for a gap row whose details carry no ``by_cause`` counts
UNSPECIFIED_CAUSE = "unspecified"

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
        from airflow.models.variable import Variable

        value = Variable.get(var, default_var=None)
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


@dataclass(frozen=True)
class Result:
    """One dq_results row."""

    run_id: str
    check: str
    topic: str | None
    partition: int | None
    status: str
    severity: str | None
    observed: int | None
    failed: int | None
    details: object  # parsed JSON (dict, list, ...), the raw string if it is not JSON, or None
    checked_at: dt.datetime | None

    def as_json(self) -> dict:
        return {
            "run_id": self.run_id, "check": self.check, "topic": self.topic,
            "partition": self.partition, "status": self.status, "severity": self.severity,
            "observed": self.observed, "failed": self.failed, "details": self.details,
            "checked_at": _iso(self.checked_at),
        }


@dataclass
class Run:
    """The results of one run: its rows of the ``dq_results`` table (one ``run_id``)."""

    token: str
    run_id: str
    checked_at: dt.datetime | None
    results: list[Result] = field(default_factory=list)
    error: str | None = None  # set when its rows could not be read (a broken data file)
    has_docs: bool = False

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(r.status for r in self.results)
        out = {s: c.pop(s, 0) for s in STATUSES}
        out.update(sorted(c.items()))  # any status outside pass|warn|fail, shown as is
        return out

    @property
    def verdict(self) -> str:
        """``fail`` | ``warn`` | ``pass``; ``error`` (unreadable) or ``empty`` (no rows)."""
        if self.error:
            return "error"
        if not self.results:
            return "empty"
        counts = self.counts
        if counts["fail"]:
            return "fail"
        # a status outside pass|warn|fail never lets a run pass
        return "pass" if counts["pass"] == len(self.results) else "warn"

    def checks(self) -> list[dict]:
        """Per check: its rows (sorted by topic, partition), counts and worst status."""
        by_check: dict[str, list[Result]] = {}
        for r in self.results:
            by_check.setdefault(r.check, []).append(r)
        out = []
        for name in sorted(by_check):
            rows = sorted(by_check[name], key=lambda r: (r.topic or "", -1 if r.partition is None
                                                        else r.partition))
            statuses = Counter(r.status for r in rows)
            worst = next((s for s in STATUSES if statuses.get(s)), rows[0].status)
            out.append({
                "check": name,
                "severity": sorted({r.severity for r in rows if r.severity}),
                "status": worst,
                "counts": dict(statuses),
                "failed": sum(r.failed or 0 for r in rows),
                "rows": rows,
            })
        return out

    def by_outcome(self) -> list[tuple[str, list[Result]]]:
        """The rows grouped by outcome, problems first: ``fail``, ``warn``, any status outside
        pass|warn|fail, then ``pass``; in a group by check, topic and partition. Only groups
        with rows."""
        groups: dict[str, list[Result]] = {}
        for r in self.results:
            groups.setdefault(r.status, []).append(r)
        order = ["fail", "warn"] + sorted(set(groups) - set(STATUSES)) + ["pass"]
        key = (lambda r: (r.check, r.topic or "", -1 if r.partition is None else r.partition))
        return [(s, sorted(groups[s], key=key)) for s in order if groups.get(s)]

    def summary_json(self) -> dict:
        return {
            "token": self.token, "run_id": self.run_id, "checked_at": _iso(self.checked_at),
            "verdict": self.verdict, "counts": self.counts, "has_docs": self.has_docs,
            "error": self.error,
        }

    def as_json(self) -> dict:
        out = self.summary_json()
        out["checks"] = [{k: v for k, v in c.items() if k != "rows"} for c in self.checks()]
        out["results"] = [r.as_json() for r in self.results]
        return out


def parse_results(data: bytes) -> list[Result]:
    """Rows of a dq_results Parquet file (see :func:`results_from_arrow`)."""
    return results_from_arrow(pq.read_table(pa.BufferReader(data)))


def results_from_arrow(table: pa.Table) -> list[Result]:
    """Rows of dq_results as an Arrow table (columns by name; missing optional ones are null)."""
    missing = {"run_id", "check", "status"} - set(table.column_names)
    if missing:
        raise ValueError(f"not a dq_results table: no column(s) {', '.join(sorted(missing))}")
    cols = {}
    for f in schemas.DQ_RESULTS:
        cols[f.name] = (table.column(f.name).to_pylist() if f.name in table.column_names
                        else [None] * table.num_rows)
    out = []
    for i in range(table.num_rows):
        out.append(Result(
            run_id=cols["run_id"][i], check=cols["check"][i] or "", topic=cols["topic"][i],
            partition=cols["partition"][i], status=(cols["status"][i] or "").lower(),
            severity=cols["severity"][i], observed=cols["observed"][i], failed=cols["failed"][i],
            details=_parse_details(cols["details"][i]), checked_at=_utc(cols["checked_at"][i]),
        ))
    return out


def _utc(value):
    if not isinstance(value, dt.datetime):
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def _parse_details(raw):
    if raw is None or raw == "":
        return None
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


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
LEDGER_COLUMNS = ("run_id", "topic", "partition", "segment")


class Warehouse:
    """The data-quality view of one warehouse root (see the module docstring).

    ``catalog`` and ``namespace`` default to the settings of the same names, ``s3`` (a
    :class:`spark_jobs.storage.S3Config`, for an ``s3://`` root) to the environment's access.
    """

    def __init__(self, root: str, store=None, *, catalog: str | None = None,
                 namespace: str | None = None, s3: storage.S3Config | None = None):
        self.root = root
        self.catalog_name = catalog or setting("catalog") or iceberg.DEFAULT_CATALOG
        self.namespace = namespace or setting("namespace") or iceberg.DEFAULT_NAMESPACE
        if s3 is None and storage.is_s3(root):
            try:
                s3 = storage.S3Config.from_env()
            except Exception as err:  # noqa: BLE001 - shown on the page, never a crash
                raise self._unavailable(err) from err
        self.store = store if store is not None else storage.open_store(root, s3)
        self.tables = iceberg.Warehouse(root, self.catalog_name, self.namespace, s3)

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
            reason = None
            if not rows and ids:
                rows, reason = self._ledger_audited(ids)
            out[run.token] = Coverage.of(rows, pattern, template, reason)
        return out

    def _ledger_main(self) -> dict[str, tuple]:
        """``main``'s ledger as ``{run_id: ((topic, partition, segment), ...)}``, cached by snapshot."""
        table = self.tables.load("ledger")
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is None:
            return {}
        key = ("ledger", self.root, self.catalog_name, self.namespace)
        with _CACHE_LOCK:
            hit = _LEDGER_CACHE.get(key)
        if hit is not None and hit[0] == snapshot.snapshot_id:
            return hit[1]
        rows = _ledger_rows(tables.read_arrow(self.tables, "ledger", snapshot=snapshot.snapshot_id,
                                              columns=LEDGER_COLUMNS))
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
            for sid in iceberg.ancestry(results, head):
                summary = iceberg.snapshot_summary(results, sid)
                if summary.get(iceberg.RUN_ID) in run_ids and summary.get(iceberg.AUDITED):
                    found = json.loads(summary[iceberg.AUDITED]).get("ledger")
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
                found = _ledger_rows(tables.read_arrow(self.tables, "ledger", snapshot=sid,
                                                       columns=LEDGER_COLUMNS,
                                                       row_filter=In("run_id", run_ids)))
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
            arrow = tables.read_arrow(self.tables, RESULTS_TABLE, snapshot=snapshot_id)
            return _group(table, results_from_arrow(arrow), {})
        except Exception as err:  # noqa: BLE001 - find out which file (or the catalog) failed
            log.warning("reading %s.%s at snapshot %s failed (%s: %s); reading its files one by one",
                        self.namespace, RESULTS_TABLE, snapshot_id, type(err).__name__, err)
        try:
            scan = table.scan(snapshot_id=snapshot_id, selected_fields=tuple(schemas.DQ_RESULTS.names))
            tasks = list(scan.plan_files())
            added_by = _adding_runs(table, snapshot_id)
        except Exception as err:  # noqa: BLE001 - manifests unreadable: the table is
            raise self._unavailable(err) from err
        from pyiceberg.io.pyarrow import ArrowScan

        reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter,
                           scan.case_sensitive)
        results, broken = [], {}
        for task in tasks:
            path = task.file.file_path
            try:
                if task.delete_files:
                    raise iceberg.CatalogError("the file has delete files, which this pipeline "
                                               "never writes")
                part = reader.to_table([task]).select(schemas.DQ_RESULTS.names)
                results += results_from_arrow(part.cast(schemas.DQ_RESULTS))
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
        conf = os.path.join(local, iceberg.CONFIG_FILE)
        if not os.path.exists(conf):
            return False
        try:
            names = sorted(iceberg._read_config(conf))
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
            run_id = (iceberg.snapshot_summary(table, entry.snapshot_id).get(iceberg.RUN_ID)
                      if entry.snapshot_id is not None else None)
            if run_id:
                out[entry.data_file.file_path] = run_id
    return out


def _commit_times(table) -> dict[str, dt.datetime]:
    """Run id -> time of the newest ``main`` snapshot committed for it (only a fallback for
    ordering: empty where the history cannot be walked)."""
    out = {}
    try:
        history = iceberg.main_history(table)
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
    return iceberg.mask_password(str(err).strip().split("\n", 1)[0])


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


def check_kind(check: str) -> str | None:
    """``crc`` | ``gaps`` | ``timestamps`` | None: which chart a check feeds."""
    if check in CRC_CHECKS:
        return "crc"
    if check in GAP_CHECKS:
        return "gaps"
    if check in TIMESTAMP_CHECKS:
        return "timestamps"
    return None


def _count(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def gap_causes(result: Result) -> dict[str, int]:
    """Gaps by cause of an offset-gap row.

    ``details.classes`` = ``{cause: {"status", "items", "offsets"}}`` (check_quality.py): the
    number of gaps (``items``) of every cause, explained ones included; else
    ``details.by_cause`` = ``{cause: count}``; else the row's ``failed`` as ``unspecified``.
    """
    details = result.details if isinstance(result.details, dict) else {}
    classes = details.get("classes")
    if isinstance(classes, dict):
        out = {}
        for cause, info in classes.items():
            n = _count(info.get("items") if isinstance(info, dict) else info)
            if n:
                out[str(cause)] = n
        return out
    by_cause = details.get("by_cause")
    if isinstance(by_cause, dict):
        return {str(c): n for c, n in ((c, _count(v)) for c, v in by_cause.items()) if n}
    return {UNSPECIFIED_CAUSE: result.failed} if result.failed else {}


def timestamp_regressions(result: Result) -> int:
    """``details.regressions`` of a timestamp row (every regression, warned or failed), else ``failed``."""
    details = result.details if isinstance(result.details, dict) else {}
    n = _count(details.get("regressions"))
    return n if n is not None else (result.failed or 0)


def series(runs: list[Run]) -> dict:
    """Chart data over runs, oldest first, all topic-partitions of a run summed.

    ``crc_failures``: ``failed`` of the CRC check; ``gaps_by_cause``: {cause: counts} of the
    offset-gap check; ``timestamp_regressions``: {check: counts} of the timestamp checks.
    A run without such a check counts 0.
    """
    ordered = list(reversed(runs))
    crc, gaps, ts = [], [], []
    for run in ordered:
        c = 0
        g: Counter = Counter()
        t: Counter = Counter()
        for r in run.results:
            kind = check_kind(r.check)
            if kind == "crc":
                c += r.failed or 0
            elif kind == "gaps":
                g.update(gap_causes(r))
            elif kind == "timestamps":
                t[r.check] += timestamp_regressions(r)
        crc.append(c)
        gaps.append(g)
        ts.append(t)
    causes = sorted({cause for g in gaps for cause in g})
    cause_status: dict[str, set] = {}
    for run in ordered:
        for r in run.results:
            if check_kind(r.check) == "gaps":
                classes = _as_details(r.details).get("classes")
                for cause, info in (classes.items() if isinstance(classes, dict) else ()):
                    if isinstance(info, dict):
                        cause_status.setdefault(str(cause), set()).add(str(info.get("status") or ""))
    return {
        # the worst status the policy gave each cause: accepted ones are drawn neutral
        "gap_cause_status": {c: worst_status(cause_status.get(c, {"warn"})) for c in causes},
        "runs": [{"token": r.token, "run_id": r.run_id, "checked_at": _iso(r.checked_at)}
                 for r in ordered],
        "crc_failures": crc,
        "gaps_by_cause": {cause: [g.get(cause, 0) for g in gaps] for cause in causes},
        "timestamp_regressions": {check: [t.get(check, 0) for t in ts] for check in TIMESTAMP_CHECKS},
    }


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# ---- problems in plain words --------------------------------------------------------------
#
# One formatter for the report page and for log lines: ``check_quality.report`` prints
# ``FAIL crc orders-1: ...`` lines of its own today and could print :func:`problem_line`
# instead (this module needs no Spark, only the dq_results row's fields).

#: how a result's ``status`` reads in a sentence
OUTCOME_WORDS = {"fail": "failed", "warn": "warned", "pass": "passed"}
#: what a result's configured ``severity`` means when nothing was found (never an outcome)
SEVERITY_LABELS = {"fail": "would fail", "warn": "warn-only", "pass": "report-only"}


def topic_partition(topic, partition) -> str:
    """``orders-1``, as Kafka names a partition's log directory (and the audit's log lines)."""
    return f"{topic if topic is not None else '?'}-{'?' if partition is None else partition}"


def severity_label(severity) -> str | None:
    """The configured severity as a label (``would fail``, ``warn-only``), never as an outcome."""
    if not severity:
        return None
    return SEVERITY_LABELS.get(str(severity).lower(), f"severity {severity}")


def _as_details(details) -> dict:
    if isinstance(details, (str, bytes)):
        details = _parse_details(details)
    return details if isinstance(details, dict) else {}


def _offsets_text(first, last) -> str | None:
    if first is None and last is None:
        return None
    if first is None or last is None or first == last:
        return f"offset {first if first is not None else last}"
    return f"offsets {first}..{last}"


def describe_item(item: dict) -> str:
    """One item a check found (an entry of ``details.items``), in the audit's own words: its
    ``message`` (checks.py phrases each with offsets, segment and byte position), followed by
    whichever of offsets, segment and byte position the message does not already name."""
    if not isinstance(item, dict):
        return str(item)
    message = str(item.get("message") or "").strip()
    first, last = item.get("first_offset"), item.get("last_offset")
    segment, position = item.get("segment"), item.get("position")
    where = []
    offsets = _offsets_text(first, last)
    if offsets and not (
            (first is not None and last is not None and f"{first}..{last}" in message)
            or (first is not None and first == last and f"offset {first}" in message)
            or (last is None and f"offset {first}" in message)):
        where.append(offsets)
    seg_in = bool(segment) and str(segment) in message
    pos_in = position is not None and any(
        f"{word}{position}" in message for word in ("position ", " at ", "byte "))
    if position is not None and not pos_in:  # a byte position means nothing without its file
        where.append(f"segment {segment} at byte {position}" if segment else f"at byte {position}")
    elif segment and not seg_in:
        where.append(f"segment {segment}")
    if not message:
        label = str(item.get("class") or "item").replace("_", " ")
        return f"{label} at {', '.join(where)}" if where else label
    return f"{message} ({', '.join(where)})" if where else message


def item_line(topic, partition, item: dict) -> str:
    """``payments-1: offsets 15..24: ... is missing from the snapshot``."""
    return f"{topic_partition(topic, partition)}: {describe_item(item)}"


def _items(details: dict) -> list[dict]:
    items = details.get("items")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def problem_items(details) -> list[dict]:
    """The items of a result that are problems (status fail/warn/other), worst first as the
    audit stores them; accepted items (status ``pass``) are left out."""
    return [i for i in _items(_as_details(details)) if str(i.get("status") or "").lower() != "pass"]


def more_items(details) -> int:
    """Items the audit found beyond those it stored (``details.more_items``)."""
    return _count(_as_details(details).get("more_items")) or 0


def accepted_items(details) -> list[dict]:
    """The stored items the policy accepted (status ``pass``), e.g. gaps of a compacted log."""
    return [i for i in _items(_as_details(details)) if str(i.get("status") or "").lower() == "pass"]


def accepted_classes(details) -> dict[str, dict]:
    """``{class: {"items", "offsets"}}`` of the classes the policy accepted (status ``pass``)
    that found something, e.g. gaps explained by compaction."""
    classes = _as_details(details).get("classes")
    out = {}
    if isinstance(classes, dict):
        for name, info in classes.items():
            if isinstance(info, dict) and str(info.get("status") or "").lower() == "pass":
                n = _count(info.get("items"))
                if n:
                    out[str(name)] = {"items": n, "offsets": _count(info.get("offsets"))}
    return out


def _classes_text(details: dict, bad: bool = True) -> str | None:
    classes = details.get("classes")
    if not isinstance(classes, dict):
        return None
    parts = []
    for name, info in classes.items():
        if not isinstance(info, dict):
            continue
        status = str(info.get("status") or "").lower()
        n = _count(info.get("items"))
        if not n or (status == "pass") == bad:
            continue
        offsets = _count(info.get("offsets"))
        parts.append(f"{name}: {plural(n, 'item')}"
                     + (f" ({plural(offsets, 'offset')})" if offsets else ""))
    return ", ".join(parts) or None


def first_problem(topic, partition, details, failed=None) -> str:
    """The one line of a result that failed or warned: its first (worst) item in plain words
    (:func:`item_line`), else what its classes counted."""
    d = _as_details(details)
    items = problem_items(d)
    if items:
        return item_line(topic, partition, items[0])
    summary = _classes_text(d)
    if summary:
        return f"{topic_partition(topic, partition)}: {summary} (no item details recorded)"
    if isinstance(details, str) and details.strip() and not d:
        return f"{topic_partition(topic, partition)}: {details.strip().splitlines()[0]}"
    n = _count(failed) or 0
    return f"{topic_partition(topic, partition)}: {plural(n, 'item')} found (no details recorded)"


def checked_text(observed, details) -> str | None:
    """``1,204 batches checked``: the result's ``observed`` count in the unit the audit gives
    (``details.unit``: batches, records or segments)."""
    n = _count(observed)
    return None if n is None else checked(n, str(_as_details(details).get("unit") or ""))


def problem_line(check, topic, partition, status, details, failed=None, observed=None) -> str:
    """A result as one log line, e.g. ``WARN offset_gaps payments-1: 1 item, 12 batches
    checked; first: offsets 15..24: ...``: the form of ``check_quality.report``'s lines, in
    the report's vocabulary (items found, units checked)."""
    head = f"{str(status or '?').upper()} {check} {topic_partition(topic, partition)}"
    counts = [c for c in (plural(_count(failed), "item") if _count(failed) is not None else None,
                          checked_text(observed, details)) if c]
    line = first_problem(topic, partition, details, failed)
    first = line.split(": ", 1)[1] if ": " in line else line
    return f"{head}: {', '.join(counts)}; first: {first}" if counts else f"{head}: {first}"


# ---- nights at a glance --------------------------------------------------------------------
#
# The overview is keyed by *snapshot night*: the dates whose snapshots a run read (the
# ``{snapshot_date}`` of the segment URIs in its ledger rows), not the time its audit ran.
# A run covers one night (the nightly DAG) or several (a date range); a night may be read by
# several runs (a rerun, a range over nights already run): its cell shows the newest of them.

#: a day whose parts are told apart in a filled template (year, month, day all different)
_SAMPLE_DAY = dt.date(1987, 6, 5)
_PREFIX_MARK = "kafkalogprefixmark"
_DAY_PARTS = {"1987-06-05": ("iso", r"\d{4}-\d{2}-\d{2}"), "19870605": ("compact", r"\d{8}"),
              "1987": ("yyyy", r"\d{4}"), "06": ("mm", r"\d{2}"), "05": ("dd", r"\d{2}"),
              _PREFIX_MARK: (None, r".*?")}
#: a cell's outcome when every check passed and some found items the policy accepts
ACCEPTED = "accepted"


def night_pattern(template: str) -> re.Pattern:
    """A regex over a segment's directory (the URI up to its ``<topic>-<partition>/``) that
    finds the snapshot date, built by filling ``template`` through
    :func:`kafkalog_pipeline.snapshots.snapshot_prefix` (the one definition of its
    placeholders) with a sample day and turning the day's parts back into groups."""
    filled = snapshots.snapshot_prefix(template, _PREFIX_MARK, _SAMPLE_DAY.isoformat())
    out, seen = [], set()
    for piece in re.split("(" + "|".join(map(re.escape, _DAY_PARTS)) + ")", filled):
        if piece not in _DAY_PARTS:
            out.append(re.escape(piece))
            continue
        name, rx = _DAY_PARTS[piece]
        out.append(rx if name is None else f"(?P={name})" if name in seen else f"(?P<{name}>{rx})")
        if name:
            seen.add(name)
    return re.compile("(?:^|/)" + "".join(out) + "$")


def night_of(uri, pattern: re.Pattern) -> str | None:
    """The snapshot night (``YYYY-MM-DD``) of a segment URI, or None where the URI is no
    ``.../<topic>-<partition>/<base>.log`` under a night's prefix of ``pattern``."""
    if not uri or layout.SEGMENT_KEY.search(str(uri)) is None:
        return None
    directory = str(uri).rsplit("/", 2)[0] + "/"
    m = pattern.search(directory)
    if m is None:
        return None
    parts = m.groupdict()
    try:
        if parts.get("iso"):
            day = dt.date.fromisoformat(parts["iso"])
        elif parts.get("compact"):
            day = dt.datetime.strptime(parts["compact"], "%Y%m%d").date()
        else:
            day = dt.date(int(parts["yyyy"]), int(parts["mm"]), int(parts["dd"]))
    except (TypeError, ValueError):
        return None
    return day.isoformat()


def _ledger_rows(table: pa.Table) -> dict[str, tuple]:
    out: dict[str, list] = {}
    for r in table.to_pylist():
        if r["run_id"] and r["topic"] is not None and r["partition"] is not None:
            out.setdefault(r["run_id"], []).append((r["topic"], r["partition"], r["segment"]))
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True)
class Coverage:
    """What one run read: ``partitions`` = {(topic, partition): its nights, sorted}; ``reason``
    says why a run has none (no ledger rows found, paths the template does not match)."""

    partitions: dict = field(default_factory=dict)
    reason: str | None = None

    @classmethod
    def of(cls, rows, pattern: re.Pattern, template: str, reason: str | None = None) -> "Coverage":
        found: dict[tuple[str, int], set[str]] = {}
        unmatched = []
        for topic, partition, segment in rows:
            night = night_of(segment, pattern)
            if night is None:
                unmatched.append(segment)
            else:
                found.setdefault((topic, partition), set()).add(night)
        if not found and unmatched:
            reason = (f"no segment of this run lies under a night of the snapshot template "
                      f"{template!r} (e.g. {unmatched[0]})")
        return cls({tp: tuple(sorted(n)) for tp, n in sorted(found.items())}, reason)

    @property
    def nights(self) -> list[str]:
        return sorted({n for nights in self.partitions.values() for n in nights})

    @property
    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.partitions})

    def as_json(self) -> dict:
        return {"nights": self.nights, "topics": self.topics,
                "partitions": {topic_partition(t, p): list(n) for (t, p), n in self.partitions.items()},
                "reason": self.reason}


def nights_text(nights: list[str]) -> str:
    """``2026-11-18..2026-11-20, 2026-11-23``: runs of consecutive days as ranges."""
    days = sorted({dt.date.fromisoformat(n) for n in nights})
    spans: list[list[dt.date]] = []
    for d in days:
        if spans and (d - spans[-1][1]).days == 1:
            spans[-1][1] = d
        else:
            spans.append([d, d])
    return ", ".join(a.isoformat() if a == b else f"{a.isoformat()}..{b.isoformat()}"
                     for a, b in spans)


def worst_status(statuses) -> str:
    """``fail`` over ``warn`` over any status outside pass|warn|fail over ``pass``."""
    present = {str(s) for s in statuses}
    for s in ("fail", "warn"):
        if s in present:
            return s
    other = sorted(present - set(STATUSES))
    return other[0] if other else "pass"


def worst_rank(status: str) -> int:
    """Sort key of a status, worst first: fail, warn, any other, pass."""
    return {"fail": 0, "warn": 1, "pass": 3}.get(status, 2)


def result_anchor(check: str, topic, partition) -> str:
    """The id of a result's row on its run page (a cell of the overview links to it)."""
    return f"r-{check}-{topic_partition(topic, partition)}"


def status_on_night(r: Result, night: str, run_nights, pattern: re.Pattern | None) -> str:
    """A result's outcome on one of the nights its run read for its topic-partition. A run
    of one night: its status. A run of several: the worst of its stored problem items whose
    segment lies in that night (pass if none), when every item is stored with a segment of a
    known night; else (items not stored, or not placed) its status on every night."""
    if len(run_nights) <= 1 or r.status == "pass" or pattern is None:
        return r.status
    items = problem_items(r.details)
    if not items or more_items(r.details):
        return r.status
    placed = [night_of(i.get("segment"), pattern) for i in items]
    if any(p is None for p in placed):
        return r.status
    return worst_status(str(i.get("status") or "").lower() for i, p in zip(items, placed) if p == night)


@dataclass(frozen=True)
class Cell:
    """One topic-partition on one night, as the newest run that read it graded it."""

    topic: str
    partition: int
    night: str
    outcome: str  # fail | warn | pass | accepted | a status outside those
    run: Run
    problems: tuple  # ((Result, status on this night), ...) that failed or warned, worst first
    accepted: dict  # {class: items} the policy accepted (e.g. retention, compaction)
    counts: dict  # {status: checks} on this night
    anchor: str | None  # the run page's row to open (the worst check), None: the page's top
    run_nights: tuple  # every night the run read of this topic-partition
    others: tuple  # ((Run, outcome), ...) older runs that read it too

    @property
    def tp(self) -> str:
        return topic_partition(self.topic, self.partition)

    def title(self) -> str:
        """The cell's tooltip: night, topic-partition, outcome, which checks, which run."""
        head = f"{self.night} · {self.tp} · {OUTCOME_WORDS.get(self.outcome, self.outcome)}"
        lines = [head]
        for r, status in self.problems:
            found = f" ({plural(r.failed, 'item')})" if r.failed else ""
            lines.append(f"{status} {r.check}{found}")
        if self.accepted:
            lines.append("accepted: " + ", ".join(f"{k} {plural(v, 'item')}"
                                                 for k, v in self.accepted.items()))
        lines.append("checks per topic-partition: " + " · ".join(
            f"{n} {OUTCOME_WORDS.get(s, s)}" for s, n in self.counts.items() if n))
        span = (f" (it read {plural(len(self.run_nights), 'night')}: "
                f"{nights_text(list(self.run_nights))})" if len(self.run_nights) > 1 else "")
        lines.append(f"run {self.run.run_id}{span}")
        lines += [f"also read by run {o.run_id}: {OUTCOME_WORDS.get(s, s)}" for o, s in self.others]
        return "\n".join(lines)

    def as_json(self) -> dict:
        return {"night": self.night, "topic": self.topic, "partition": self.partition,
                "outcome": self.outcome, "token": self.run.token, "run_id": self.run.run_id,
                "anchor": self.anchor, "counts": self.counts, "accepted": self.accepted,
                "problems": [{"check": r.check, "status": s, "items": r.failed,
                              "line": first_problem(r.topic, r.partition, r.details, r.failed)}
                             for r, s in self.problems],
                "run_nights": list(self.run_nights),
                "also_read_by": [{"token": o.token, "run_id": o.run_id, "outcome": s}
                                 for o, s in self.others]}


_EPOCH = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
#: longest span of days drawn as a calendar (every day a column); longer: nights in the data only
MAX_CALENDAR_DAYS = 400


@dataclass
class Overview:
    nights: list[str]  # the columns, oldest first
    partitions: list[tuple[str, int]]  # the rows
    cells: dict  # {(topic, partition, night): Cell}
    coverage: dict  # {token: Coverage}
    runs: list[Run]  # newest first
    unplaced: list[Run]  # runs with no night to show (Coverage.reason)
    by_night: dict = field(default_factory=dict)  # {night: [Cell, ...]}, made from ``cells``

    def __post_init__(self):
        for (_, _, night), cell in self.cells.items():
            self.by_night.setdefault(night, []).append(cell)

    def night_outcome(self, night: str) -> str | None:
        """The worst outcome of a night's cells (``accepted`` counts as a pass), None: no cell."""
        outcomes = [c.outcome for c in self.by_night.get(night, ())]
        if not outcomes:
            return None
        worst = worst_status("pass" if o == ACCEPTED else o for o in outcomes)
        return ACCEPTED if worst == "pass" and ACCEPTED in outcomes else worst

    def problem_nights(self) -> list[tuple[str, list[Cell]]]:
        """Nights with a cell that failed or warned, newest first, with those cells worst first."""
        out = []
        for night in reversed(self.nights):
            bad = [c for c in self.by_night.get(night, ()) if c.outcome not in ("pass", ACCEPTED)]
            if bad:
                out.append((night, sorted(bad, key=lambda c: (worst_rank(c.outcome), c.topic,
                                                              c.partition))))
        return out

    def as_json(self) -> dict:
        return {
            "nights": self.nights,
            "partitions": [topic_partition(t, p) for t, p in self.partitions],
            "night_outcomes": {n: self.night_outcome(n) for n in self.nights},
            "cells": [c.as_json() for c in self.cells.values()],
            "runs": [{"token": r.token, "run_id": r.run_id, **self.coverage[r.token].as_json()}
                     for r in self.runs if r.token in self.coverage],
        }


def overview(runs: list[Run], coverage: dict, pattern: re.Pattern | None = None) -> Overview:
    """The nights-at-a-glance grid of ``runs`` (newest first) read with ``coverage``
    ({token: Coverage}, :meth:`Warehouse.coverage`); ``pattern`` (:func:`night_pattern`)
    places a range run's items on their nights (:func:`status_on_night`)."""
    graded: dict[tuple[str, int, str], list[tuple[Run, Cell]]] = {}
    unplaced = []
    by_time = sorted(runs, key=lambda r: (r.checked_at or _EPOCH, r.token), reverse=True)
    for run in by_time:
        cov = coverage.get(run.token)
        if cov is None or not cov.partitions or run.error or not run.results:
            unplaced.append(run)
            continue
        rows_by_tp: dict[tuple, list[Result]] = {}
        for r in run.results:
            rows_by_tp.setdefault((r.topic, r.partition), []).append(r)
        all_nights = tuple(cov.nights)
        for (topic, partition), rows in rows_by_tp.items():
            if topic is None or partition is None:  # no topic-partition: on the run page only
                continue
            nights = cov.partitions.get((topic, partition), all_nights)
            for night in nights:
                cell = _cell(run, topic, partition, night, rows, nights, pattern)
                graded.setdefault((topic, partition, night), []).append((run, cell))
    cells = {}
    for key, graded_by in graded.items():
        newest = graded_by[0][1]
        cells[key] = dataclass_replace(newest, others=tuple((r, c.outcome) for r, c in graded_by[1:]))
    days = sorted({n for _, _, n in cells})
    if days:
        first, last = dt.date.fromisoformat(days[0]), dt.date.fromisoformat(days[-1])
        if (last - first).days < MAX_CALENDAR_DAYS:
            days = [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
    parts = sorted({(t, p) for t, p, _ in cells}, key=lambda tp: (tp[0], tp[1]))
    return Overview(days, parts, cells, coverage, by_time, unplaced)


def _cell(run: Run, topic, partition, night, rows, nights, pattern) -> Cell:
    statuses = [(r, status_on_night(r, night, nights, pattern)) for r in rows]
    counts = Counter(s for _, s in statuses)
    counts = {**{s: counts.pop(s, 0) for s in STATUSES}, **dict(sorted(counts.items()))}
    problems = tuple(sorted(((r, s) for r, s in statuses if s != "pass"),
                            key=lambda rs: (worst_rank(rs[1]), rs[0].check)))
    accepted: Counter = Counter()
    accepting = None
    for r in sorted(rows, key=lambda r: r.check):
        for name, info in accepted_classes(r.details).items():
            accepted[name] += info["items"]
            accepting = accepting or r
    outcome = worst_status(s for _, s in statuses)
    if outcome == "pass" and accepted:
        outcome = ACCEPTED
    target = problems[0][0] if problems else accepting
    return Cell(topic, partition, night, outcome, run, problems, dict(accepted), counts,
                result_anchor(target.check, topic, partition) if target else None,
                tuple(nights), ())
