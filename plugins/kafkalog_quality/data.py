"""Reading the data-quality results of a warehouse (docs/tables.md), without Spark.

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
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from kafkalog_pipeline.settings import SETTINGS
from spark_jobs import schemas, storage, warehouse
from spark_jobs.warehouse.catalog import CONFIG_FILE, mask_password, read_config
from spark_jobs.warehouse.history import ancestry, main_history, snapshot_summary
from spark_jobs.audit import registry as checks
from spark_jobs.audit.policy import RANK, SEVERITIES
from spark_jobs.audit.results import checked, plural

from .calendar import night_of, night_pattern

log = logging.getLogger(__name__)

#: Airflow Variable naming the warehouse root (checked first) ...
VARIABLE = SETTINGS["warehouse"][0]
#: ... then this environment variable.
ENV = SETTINGS["warehouse"][1]

#: the Iceberg table of the results (schema spark_jobs.schemas.DQ_RESULTS)
RESULTS_TABLE = "dq_results"
DOCS_DIR = "data_docs"

#: verdict order, worst first (the policy's severities); a run's verdict is the worst status
#: among its rows
STATUSES = tuple(sorted(SEVERITIES, key=RANK.__getitem__, reverse=True))

#: the snapshot night a dq_results row is about (a ``snapshot_missing`` row: the night that had
#: none) and the night whose listing held a ledger row's segment; null in older rows
NIGHT = schemas.NIGHT
#: the checks of what is absent, which the report treats apart: a night that had no snapshot
#: (topic and partition null), a topic-partition earlier nights held and this one lacks (it has
#: no other rows in the run)
SNAPSHOT_MISSING, MISSING_PARTITION = checks.SNAPSHOT_MISSING, checks.MISSING_PARTITION

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
    night: str | None = None  # the column NIGHT, where the table has it

    @property
    def outcome(self) -> str:
        """Its ``status``, except :data:`NOTHING_NEW` for a pass that checked nothing
        (``observed`` 0, e.g. ``crc`` over a partition whose segments were all unchanged)."""
        return NOTHING_NEW if self.status == "pass" and self.observed == 0 else self.status

    @property
    def label(self) -> str:
        """What the row is about: ``orders-1``, ``orders (topic)``, ``snapshot 2026-11-27``."""
        return where(self.topic, self.partition, self.night)

    @property
    def anchor(self) -> str:
        """The id of its row on the run page (:func:`result_anchor`)."""
        return result_anchor(self.check, self.topic, self.partition, self.night)

    def first_problem(self) -> str:
        """Its one problem line (:func:`first_problem`)."""
        return first_problem(self.topic, self.partition, self.details, self.failed, self.night)

    def as_json(self) -> dict:
        return {
            "run_id": self.run_id, "check": self.check, "topic": self.topic,
            "partition": self.partition, "status": self.status, "severity": self.severity,
            "observed": self.observed, "failed": self.failed, "details": self.details,
            "checked_at": _iso(self.checked_at), "night": self.night, "outcome": self.outcome,
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
        """Results by ``status`` (what the verdict is made of)."""
        c = Counter(r.status for r in self.results)
        out = {s: c.pop(s, 0) for s in STATUSES}
        out.update(sorted(c.items()))  # any status outside pass|warn|fail, shown as is
        return out

    @property
    def tally(self) -> dict[str, int]:
        """Results by :attr:`Result.outcome`, as the pages count them: the passes that checked
        nothing apart, as :data:`NOTHING_NEW`."""
        return tally(self.results)

    @property
    def as_of(self) -> str | None:
        """The latest snapshot night the run read, as its rows say (column :data:`NIGHT` of
        its rows other than :data:`SNAPSHOT_MISSING`); None where they do not say."""
        return max((r.night for r in self.results if r.night and r.check != SNAPSHOT_MISSING),
                   default=None)

    @property
    def missing_nights(self) -> dict[str, "Result"]:
        """``{night: its SNAPSHOT_MISSING row}``: the nights the run was due to read that had
        no snapshot."""
        return {r.night: r for r in sorted(self.results, key=lambda r: r.night or "")
                if r.check == SNAPSHOT_MISSING and r.night}

    def suites(self) -> dict[str, int]:
        """The Data Docs' counts: one great-expectations suite per check, whose status is the
        check's worst over the topic-partitions (expectations/README.md)."""
        worst = {}
        for c in self.checks():
            worst[c["check"]] = c["status"]
        c = Counter(worst.values())
        return {**{s: c.pop(s, 0) for s in STATUSES}, **dict(sorted(c.items()))}

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
        """The rows grouped by :attr:`Result.outcome`, problems first: ``fail``, ``warn``, any
        status outside pass|warn|fail, ``pass``, then :data:`NOTHING_NEW`; in a group by
        check, topic, partition and night. Only groups with rows."""
        groups: dict[str, list[Result]] = {}
        for r in self.results:
            groups.setdefault(r.outcome, []).append(r)
        order = (["fail", "warn"] + sorted(set(groups) - set(STATUSES) - {NOTHING_NEW})
                 + ["pass", NOTHING_NEW])
        key = (lambda r: (r.check, r.topic or "", -1 if r.partition is None else r.partition,
                          r.night or ""))
        return [(s, sorted(groups[s], key=key)) for s in order if groups.get(s)]

    def summary_json(self) -> dict:
        return {
            "token": self.token, "run_id": self.run_id, "checked_at": _iso(self.checked_at),
            "verdict": self.verdict, "counts": self.counts, "tally": self.tally,
            "suites": self.suites(), "has_docs": self.has_docs, "error": self.error,
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
    for f in RESULT_SCHEMA:
        cols[f.name] = (table.column(f.name).to_pylist() if f.name in table.column_names
                        else [None] * table.num_rows)
    out = []
    for i in range(table.num_rows):
        out.append(Result(
            run_id=cols["run_id"][i], check=cols["check"][i] or "", topic=cols["topic"][i],
            partition=cols["partition"][i], status=(cols["status"][i] or "").lower(),
            severity=cols["severity"][i], observed=cols["observed"][i], failed=cols["failed"][i],
            details=_parse_details(cols["details"][i]), checked_at=_utc(cols["checked_at"][i]),
            night=cols[NIGHT][i],
        ))
    return out


#: the dq_results columns the view reads
RESULT_SCHEMA = schemas.DQ_RESULTS


def scan(table, snapshot_id: int, schema: pa.Schema, row_filter=None) -> pa.Table:
    """The columns of ``schema`` of Iceberg ``table`` at ``snapshot_id`` (rows ``row_filter``),
    cast to it; a column that snapshot's schema lacks (a table made before it existed) reads
    null, as Iceberg reads it in files written before it was added."""
    from pyiceberg.expressions import AlwaysTrue

    plan = table.scan(snapshot_id=snapshot_id, row_filter=row_filter or AlwaysTrue())
    have = {f.name for f in plan.projection().fields}
    present = [n for n in schema.names if n in have]
    arrow = plan.select(*present).to_arrow()
    columns = [arrow.column(f.name) if f.name in have else pa.nulls(arrow.num_rows, f.type)
               for f in schema]
    return pa.Table.from_arrays(columns, names=schema.names).cast(schema)


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

#: a result's outcome (:attr:`Result.outcome`) when it passed having checked nothing
#: (``observed`` 0): "nothing new", never shown as a pass
NOTHING_NEW = "nothing_new"
#: how a result's outcome reads in a sentence
OUTCOME_WORDS = {"fail": "failed", "warn": "warned", "pass": "passed", NOTHING_NEW: "nothing new"}
#: how a count of results of an outcome reads: (one, several)
COUNT_NOUNS = {"fail": ("failure", "failures"), "warn": ("warning", "warnings"),
               "pass": ("pass", "passes"), NOTHING_NEW: ("nothing new", "nothing new")}
#: the unit of every count of results on the pages (one result = one dq_results row)
COUNTED = "counted per check × topic-partition"
#: what a result's configured ``severity`` means when nothing was found (never an outcome)
SEVERITY_LABELS = {"fail": "would fail", "warn": "warn-only", "pass": "report-only"}


def ordered_counts(counts: Counter) -> dict[str, int]:
    """``counts`` of outcomes in the pages' order: fail, warn, any other status, pass, nothing
    new (those four always present)."""
    c = Counter(counts)
    out = {s: c.pop(s, 0) for s in STATUSES if s != "pass"}
    rest = {"pass": c.pop("pass", 0), NOTHING_NEW: c.pop(NOTHING_NEW, 0)}
    return {**out, **dict(sorted(c.items())), **rest}


def tally(results) -> dict[str, int]:
    """Results by :attr:`Result.outcome` (:func:`ordered_counts`)."""
    return ordered_counts(Counter(r.outcome for r in results))


def counts_text(counts: dict[str, int]) -> str:
    """``6 warnings · 158 passes · 4 nothing new`` (outcomes with none left out)."""
    parts = []
    for outcome, n in counts.items():
        if n:
            one, several = COUNT_NOUNS.get(outcome, (f"status {outcome}", f"status {outcome}"))
            parts.append(f"{n:,} {one if n == 1 else several}")
    return " · ".join(parts) or "no results"


def suites_text(suites: dict[str, int]) -> str:
    """``17 suites, one per check: 5 warned · 12 passed``: the Data Docs' own unit."""
    return (f"{plural(sum(suites.values()), 'suite')}, one per check: "
            + " · ".join(f"{n:,} {OUTCOME_WORDS.get(s, s)}" for s, n in suites.items() if n))


def topic_partition(topic, partition) -> str:
    """``orders-1``, as Kafka names a partition's log directory (and the audit's log lines)."""
    return f"{topic if topic is not None else '?'}-{'?' if partition is None else partition}"


def where(topic, partition, night=None) -> str:
    """What a result is about: a topic-partition (``orders-1``), a whole topic (``orders
    (topic)``: a row of no partition, e.g. a deleted topic) or the snapshot itself
    (``snapshot 2026-11-27``: a row of no topic, e.g. a night without a snapshot)."""
    if topic is None and partition is None:
        return f"snapshot {night}" if night else "snapshot"
    if partition is None:
        return f"{topic} (topic)"
    return topic_partition(topic, partition)


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


def item_line(topic, partition, item: dict, night=None) -> str:
    """``payments-1: offsets 15..24: ... is missing from the snapshot`` (:func:`where`)."""
    return f"{where(topic, partition, night)}: {describe_item(item)}"


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


def first_problem(topic, partition, details, failed=None, night=None) -> str:
    """The one line of a result that failed or warned: its first (worst) item in plain words
    (:func:`item_line`), else what its classes counted."""
    d = _as_details(details)
    items = problem_items(d)
    if items:
        return item_line(topic, partition, items[0], night)
    head = where(topic, partition, night)
    summary = _classes_text(d)
    if summary:
        return f"{head}: {summary} (no item details recorded)"
    if isinstance(details, str) and details.strip() and not d:
        return f"{head}: {details.strip().splitlines()[0]}"
    n = _count(failed) or 0
    return f"{head}: {plural(n, 'item')} found (no details recorded)"


def checked_text(observed, details) -> str | None:
    """``1,204 batches checked``: the result's ``observed`` count in the unit the audit gives
    (``details.unit``: batches, records or segments)."""
    n = _count(observed)
    return None if n is None else checked(n, str(_as_details(details).get("unit") or ""))


def problem_line(check, topic, partition, status, details, failed=None, observed=None,
                 night=None) -> str:
    """A result as one log line, e.g. ``WARN offset_gaps payments-1: 1 item, 12 batches
    checked; first: offsets 15..24: ...``: the form of ``check_quality.report``'s lines, in
    the report's vocabulary (items found, units checked)."""
    head = f"{str(status or '?').upper()} {check} {where(topic, partition, night)}"
    counts = [c for c in (plural(_count(failed), "item") if _count(failed) is not None else None,
                          checked_text(observed, details)) if c]
    line = first_problem(topic, partition, details, failed, night)
    first = line.split(": ", 1)[1] if ": " in line else line
    return f"{head}: {', '.join(counts)}; first: {first}" if counts else f"{head}: {first}"


# ---- what each run read ----------------------------------------------------------------------
#
# The overview is keyed by *snapshot night*: the dates whose snapshots a run read (the ledger's
# ``night``, else the ``{snapshot_date}`` of the segment URIs in its ledger rows), not the time
# its audit ran; a night the run was due to read and found no snapshot of is one of its nights
# too (its SNAPSHOT_MISSING row). The grid itself: nights.py.


def _ledger_rows(table: pa.Table) -> dict[str, tuple]:
    out: dict[str, list] = {}
    for r in table.to_pylist():
        if r["run_id"] and r["topic"] is not None and r["partition"] is not None:
            out.setdefault(r["run_id"], []).append((r["topic"], r["partition"], r["segment"],
                                                   r[NIGHT]))
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True)
class Coverage:
    """What one run read: ``partitions`` = {(topic, partition): its nights, sorted};
    ``missing`` = the nights it was due to read that had no snapshot; ``reason`` says why a run
    has no nights (no ledger rows found, paths the template does not match). ``published``:
    its ledger rows are on ``main`` (True), only in the ledger snapshot its audit read (False),
    nowhere (None); ``branch``: the run's Iceberg branch, where the ledger still has it."""

    partitions: dict = field(default_factory=dict)
    reason: str | None = None
    missing: tuple = ()
    published: bool | None = None
    branch: str | None = None

    @classmethod
    def of(cls, rows, pattern: re.Pattern, template: str, reason: str | None = None,
           **more) -> "Coverage":
        """From ledger rows ``(topic, partition, segment, night)``: a row's ``night``, else
        the night of its segment's URI by the snapshot template (rows written before the
        ledger had the column)."""
        found: dict[tuple[str, int], set[str]] = {}
        unmatched = []
        for topic, partition, segment, night in rows:
            night = night or night_of(segment, pattern)
            if night is None:
                unmatched.append(segment)
            else:
                found.setdefault((topic, partition), set()).add(night)
        if not found and unmatched:
            reason = (f"no segment of this run lies under a night of the snapshot template "
                      f"{template!r} (e.g. {unmatched[0]})")
        if more.get("missing"):
            reason = None  # its nights are known: those without a snapshot
        return cls({tp: tuple(sorted(n)) for tp, n in sorted(found.items())}, reason, **more)

    @property
    def read(self) -> list[str]:
        """The nights whose snapshots it read."""
        return sorted({n for nights in self.partitions.values() for n in nights})

    @property
    def nights(self) -> list[str]:
        """Every night it was about: those it read and those that had no snapshot."""
        return sorted(set(self.read) | set(self.missing))

    @property
    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.partitions})

    def as_json(self) -> dict:
        return {"nights": self.nights, "no_snapshot": list(self.missing), "topics": self.topics,
                "partitions": {topic_partition(t, p): list(n) for (t, p), n in self.partitions.items()},
                "reason": self.reason, "published": self.published, "branch": self.branch}


def worst_status(statuses) -> str:
    """``fail`` over ``warn`` over any status outside pass|warn|fail over ``pass``."""
    present = {str(s) for s in statuses}
    for s in STATUSES[:-1]:
        if s in present:
            return s
    other = sorted(present - set(STATUSES))
    return other[0] if other else "pass"


def worst_rank(status: str) -> float:
    """Sort key of a status, worst first: fail, warn, any status outside those, pass."""
    return STATUSES.index(status) if status in STATUSES else len(STATUSES) - 1.5


def result_anchor(check: str, topic, partition, night=None) -> str:
    """The id of a result's row on its run page (a cell of the overview links to it):
    ``r-crc-orders-1``, ``r-missing_partition-orders-all`` (a topic's row),
    ``r-snapshot_missing-snapshot-2026-11-27`` (the snapshot's)."""
    if topic is None and partition is None:
        return f"r-{check}-snapshot" + (f"-{night}" if night else "")
    if partition is None:
        return f"r-{check}-{topic}-all"
    return f"r-{check}-{topic_partition(topic, partition)}"
