"""Reading the data-quality results of a warehouse (docs/tables.md), without Spark.

Two things per run live in a warehouse root ``W`` (local directory or ``s3://``):

- ``W/dq_results/<run_token>.parquet``: one row per run x check x topic-partition
  (schema :data:`spark_jobs.schemas.DQ_RESULTS`), written by ``check_quality.py``;
- ``W/data_docs/<run_token>/index.html`` and whatever sits beside it: that run's
  Great Expectations Data Docs.

Everything goes through :mod:`spark_jobs.storage`, so both kinds of root behave the
same. Parquet files are read with pyarrow and kept in a small cache keyed by the
object's size and ETag/mtime, so a page view lists ``dq_results/`` once and reads
only the files that changed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import re
import threading
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs import schemas, storage

#: Airflow Variable naming the warehouse root (checked first) ...
VARIABLE = "kafkalog_warehouse"
#: ... then this environment variable.
ENV = "KAFKALOG_WAREHOUSE"

RESULTS_DIR = "dq_results"
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


class WarehouseNotConfigured(RuntimeError):
    """Neither the Airflow Variable nor the environment variable names a warehouse."""


def warehouse_root() -> str:
    """The warehouse root: Airflow Variable ``kafkalog_warehouse``, else ``$KAFKALOG_WAREHOUSE``."""
    value = None
    try:
        from airflow.models.variable import Variable

        value = Variable.get(VARIABLE, default_var=None)
    except Exception:  # no metadata database reachable (e.g. outside Airflow): use the env
        value = None
    value = (value or os.environ.get(ENV) or "").strip()
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
    """The results of one run (one ``dq_results/<token>.parquet`` file)."""

    token: str
    run_id: str
    checked_at: dt.datetime | None
    results: list[Result] = field(default_factory=list)
    error: str | None = None  # set when the file could not be read
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
    """Rows of a dq_results Parquet file (columns by name; missing optional ones are null)."""
    table = pq.read_table(pa.BufferReader(data))
    missing = {"run_id", "check", "status"} - set(table.column_names)
    if missing:
        raise ValueError(f"not a dq_results file: no column(s) {', '.join(sorted(missing))}")
    cols = {}
    for f in schemas.DQ_RESULTS:
        cols[f.name] = (table.column(f.name).to_pylist() if f.name in table.column_names
                        else [None] * table.num_rows)
    out = []
    for i in range(table.num_rows):
        checked = cols["checked_at"][i]
        if isinstance(checked, dt.datetime) and checked.tzinfo is None:
            checked = checked.replace(tzinfo=dt.timezone.utc)
        out.append(Result(
            run_id=cols["run_id"][i], check=cols["check"][i] or "", topic=cols["topic"][i],
            partition=cols["partition"][i], status=(cols["status"][i] or "").lower(),
            severity=cols["severity"][i], observed=cols["observed"][i], failed=cols["failed"][i],
            details=_parse_details(cols["details"][i]), checked_at=checked,
        ))
    return out


def _parse_details(raw):
    if raw is None or raw == "":
        return None
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


# (root, key) -> (size, etag or mtime, results or error text)
_CACHE: dict[tuple[str, str], tuple[int, object, list[Result] | str]] = {}
_CACHE_LOCK = threading.Lock()


class Warehouse:
    """The data-quality view of one warehouse root."""

    def __init__(self, root: str, store=None):
        self.root = root
        self.store = store if store is not None else storage.open_store(root)

    def runs(self) -> list[Run]:
        """Every run with a dq_results file, newest first (by ``checked_at``, else file time)."""
        runs = []
        for info in self.store.list(RESULTS_DIR + "/"):
            name = posixpath.basename(info.key)
            if posixpath.dirname(info.key) != RESULTS_DIR or not name.endswith(".parquet"):
                continue
            runs.append(self._load(info))
        for run in runs:
            run.has_docs = self.store.exists(docs_key(run.token, "index.html"))
        epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        runs.sort(key=lambda r: (r.checked_at or epoch, r.token), reverse=True)
        return runs

    def run(self, token: str) -> Run | None:
        if not valid_token(token):
            return None
        key = f"{RESULTS_DIR}/{token}.parquet"
        try:
            info = self.store.stat(key)
        except (OSError, storage.StorageError):
            return None
        run = self._load(info)
        run.has_docs = self.store.exists(docs_key(token, "index.html"))
        return run

    def _load(self, info: storage.ObjectInfo) -> Run:
        token = posixpath.basename(info.key)[: -len(".parquet")]
        version = info.etag or info.mtime
        cache_key = (self.root, info.key)
        with _CACHE_LOCK:
            hit = _CACHE.get(cache_key)
        if hit is not None and hit[0] == info.size and hit[1] == version:
            loaded = hit[2]
        else:
            try:
                loaded = parse_results(self.store.read(info.key))
            except Exception as err:  # a broken file is shown as such, never breaks the page
                loaded = f"{type(err).__name__}: {err}"
            with _CACHE_LOCK:
                _CACHE[cache_key] = (info.size, version, loaded)
        if isinstance(loaded, str):
            return Run(token, token, info.mtime, [], error=loaded)
        run_ids = sorted({r.run_id for r in loaded if r.run_id})
        times = [r.checked_at for r in loaded if r.checked_at is not None]
        return Run(token, " | ".join(run_ids) or token, max(times) if times else info.mtime,
                   list(loaded))

    def read_doc(self, token: str, path: str) -> bytes:
        """A file of a run's Data Docs; FileNotFoundError if it is not there."""
        if not valid_token(token) or not safe_doc_path(path):
            raise FileNotFoundError(path)
        key = docs_key(token, path)
        try:
            return self.store.read(key)
        except (OSError, storage.StorageError) as err:
            raise FileNotFoundError(key) from err


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
    return {
        "runs": [{"token": r.token, "run_id": r.run_id, "checked_at": _iso(r.checked_at)}
                 for r in ordered],
        "crc_failures": crc,
        "gaps_by_cause": {cause: [g.get(cause, 0) for g in gaps] for cause in causes},
        "timestamp_regressions": {check: [t.get(check, 0) for t in ts] for check in TIMESTAMP_CHECKS},
    }


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
