"""A warehouse of audit results for the Data quality plugin's tests, and what its pages must
show, computed from the rows written (``scenario``), never typed in: the rows are committed to
the warehouse's Iceberg table ``dq_results`` as the audit commits them
(``spark_jobs.warehouse.Warehouse.replace_run_rows``); Data Docs are files under the root.
``Dom`` reads the pages' HTML back. Shared by test_plugin (no server) and test_plugin_ui (the
api-server and Chromium)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa

from spark_jobs import schemas, storage
from spark_jobs.warehouse import DEFAULT_CATALOG, DEFAULT_NAMESPACE, Warehouse


REPO = Path(__file__).resolve().parents[2]


PLUGINS = REPO / "plugins"

# the plugin's package, where Airflow puts it on the path (its plugins folder)
sys.path.insert(0, str(PLUGINS))

from kafkalog_quality import repository  # noqa: E402


PARTITIONS = [("orders", 0), ("orders", 1), ("payments", 0)]


# offset-gap causes as check_quality.py classifies them, with the status each one gets
CAUSES = {"compaction": "pass", "aborted_txn": "pass", "missing_segment": "warn"}


# check name (spark_jobs/audit/registry.py) -> status of a row that found something
CHECKS = {"crc": "fail", "offset_gaps": "warn", "create_time": "warn", "log_append_time": "fail",
          "record_count": "pass"}


# the unit each check's ``observed`` counts (spark_jobs/audit/registry.py CHECKS)
UNITS = {"crc": "batches", "offset_gaps": "batches", "create_time": "records",
         "log_append_time": "batches", "record_count": "batches"}


# the snapshot nights each run of scenario() read (its ledger rows): a night each, then a range
NIGHTS = [["2026-11-17"], ["2026-11-18"], ["2026-11-19", "2026-11-20"]]


SNAPSHOTS = "s3://kafka-snapshots/snapshots"  # the default template: {prefix}/{snapshot_date}/


# the severity a check reports when it found nothing (its strictest setting, policy.headline)
CONFIGURED = {"crc": "fail", "offset_gaps": "fail", "create_time": "warn",
              "log_append_time": "fail", "record_count": "fail"}


def segment_name(base: int, folder: str = "") -> str:
    """A segment's file name, under ``folder`` (its partition folder's URI, ending in ``/``)."""
    return f"{folder}{base:020d}.log"


def short(uri: str) -> str:
    """How the pages show a URI: its last two parts (partition folder and file name)."""
    return "…/" + "/".join(uri.rstrip("/").split("/")[-2:]) + ("/" if uri.endswith("/") else "")


def gap_item(cause: str, status: str, lo: int, hi: int, rng: random.Random,
             where: str = "orders-0", folder: str = "") -> dict:
    """An offset-gap item as check_quality.py stores it (its message phrased as checks.py does)."""
    before, after = segment_name(rng.randrange(0, lo + 1), folder), segment_name(hi + 1, folder)
    message = {
        "missing_segment": f"offsets {lo}..{hi} of {where} are missing from the snapshot, "
                           f"between {before} (ends at offset {lo - 1}) and {after} (starts at "
                           f"offset {hi + 1}): the segment file based at {lo} was not copied",
        "compaction": f"offsets {lo}..{hi}: removed by log compaction (the segment holds "
                      "compacted batches)",
        "aborted_txn": f"offsets {lo}..{hi}: inside the transaction producer 4001 aborted at "
                       f"offset {hi + 3} (aborted data cleaned away)",
    }[cause]
    return {"class": cause, "status": status, "first_offset": lo, "last_offset": hi,
            "offsets": hi - lo + 1, "value": None, "segment": after,
            "position": None if cause == "missing_segment" else 0,
            "message": message}


def crc_item(rng: random.Random, folder: str = "") -> dict:
    base = rng.randrange(10**5)
    last, position = base + rng.randrange(0, 9), rng.randrange(0, 10**6)
    segment = segment_name(base - base % 1000, folder)
    return {"class": "crc_mismatch", "status": "fail", "first_offset": base, "last_offset": last,
            "offsets": 1, "value": None, "segment": segment, "position": position,
            "message": f"batch at position {position} of {segment} (offsets {base}..{last}): "
                       f"stored crc 0x{rng.getrandbits(32):08x}, computed 0x{rng.getrandbits(32):08x}"}


def regression_item(check: str, status: str, rng: random.Random, folder: str = "") -> dict:
    offset, step = rng.randrange(10**6), rng.randrange(1, 10**5)
    segment, position = segment_name(offset - offset % 1000, folder), rng.randrange(0, 10**6)
    message = (f"CreateTime went back {step} ms at offset {offset} (2026-11-20 01:00:00 after "
               f"2026-11-20 01:00:05 at offset {offset - 1})" if check == "create_time" else
               f"LogAppendTime went back {step} ms: batch {offset}..{offset + 4} stamped "
               f"2026-11-19 01:00:00 after batch at {offset - 5} stamped 2026-11-19 01:00:07")
    return {"class": "regression", "status": status, "first_offset": offset,
            "last_offset": offset if check == "create_time" else offset + 4, "offsets": 1,
            "value": step, "segment": segment, "position": position, "message": message}


def scenario(seed: int = 7) -> list[dict]:
    """Three runs a day apart: the first passes, the second fails (CRC, broker timestamps),
    the third only warns (a missing segment, producer timestamps). Rows as check_quality.py
    writes them: details with ``unit``, ``classes`` and ``items`` (worst first); ``severity``
    the worst of the classes that found something, else the check's configured one; ``night``
    the last night the run read. A run of one night names its segments by their URIs; the
    range run by their file names only (so its items name no night: they hold on each)."""
    rng = random.Random(seed)
    start = dt.datetime(2026, 11, 18, 2, 30, tzinfo=dt.timezone.utc)
    runs = []
    for i, run_id in enumerate(["scheduled__2026-11-18T00:00:00+00:00",
                                "scheduled__2026-11-19T00:00:00+00:00",
                                "manual__2026-11-20T09:15:00+00:00"]):
        checked_at = start + dt.timedelta(days=i, minutes=rng.randrange(60))
        rows = []
        for check, bad_status in CHECKS.items():
            for topic, partition in PARTITIONS:
                folder = (f"{SNAPSHOTS}/{NIGHTS[i][0]}/{topic}-{partition}/"
                          if len(NIGHTS[i]) == 1 else "")
                observed = rng.randrange(1000, 5000)
                failed, status = 0, "pass"
                details = {"unit": UNITS[check], "classes": {}, "items": [], "more_items": 0}
                if check == "crc" and i == 1:
                    failed = rng.randrange(1, 9)
                    details["classes"]["crc_mismatch"] = {"status": "fail", "items": failed, "offsets": 3 * failed}
                    details["items"] = sorted((crc_item(rng, folder) for _ in range(failed)),
                                              key=lambda it: it["first_offset"])
                elif check == "offset_gaps" and i > 0:
                    items = []
                    for cause, cause_status in CAUSES.items():
                        n = rng.randrange(0, 4)
                        if n:
                            details["classes"][cause] = {"status": cause_status, "items": n, "offsets": 7 * n}
                            failed += n if cause_status != "pass" else 0
                            for _ in range(n):
                                lo = rng.randrange(1, 10**5)
                                items.append(gap_item(cause, cause_status, lo, lo + 6, rng,
                                                      f"{topic}-{partition}", folder))
                    details["items"] = sorted(items, key=lambda it: (
                        ("fail", "warn", "pass").index(it["status"]), it["first_offset"]))
                elif (check, i, partition) in (("create_time", 2, 0), ("log_append_time", 1, 1)):
                    failed = rng.randrange(1, 5)
                    details["classes"]["regression"] = {"status": bad_status, "items": failed, "offsets": failed}
                    details["regressions"] = failed
                    details["max_step_back_ms"] = rng.randrange(1, 10**5)
                    details["items"] = sorted((regression_item(check, bad_status, rng, folder)
                                               for _ in range(failed)), key=lambda it: it["first_offset"])
                if (check, i, topic, partition) == ("offset_gaps", 0, "payments", 0):
                    # an accepted cause on a night that passes: the log start moved past the
                    # previous run's end (retention), drawn neutral, never as an alarm
                    details["classes"]["retention"] = {"status": "pass", "items": 1, "offsets": 40}
                    details["items"] = [{
                        "class": "retention", "status": "pass", "first_offset": 100,
                        "last_offset": 139, "offsets": 40, "value": None,
                        "segment": segment_name(140, folder), "position": 0,
                        "message": "offsets 100..139: before the log start 140 (retention)"}]
                if failed:
                    status = bad_status
                elif any(c["status"] == "warn" for c in details["classes"].values()):
                    status = "warn"
                rows.append({
                    "run_id": run_id, "check": check, "topic": topic, "partition": partition,
                    "status": status, "severity": status if status != "pass" else CONFIGURED[check],
                    "observed": observed, "failed": failed, "details": json.dumps(details),
                    "checked_at": checked_at, "night": NIGHTS[i][-1],
                })
        runs.append({"run_id": run_id, "checked_at": checked_at, "rows": rows, "nights": NIGHTS[i]})
    return runs


def ledger_rows(run: dict) -> list[dict]:
    """The ledger rows of a run of scenario(): a segment per topic-partition and night it read
    (``run["ledger_night"]``: their ``night`` column, else null as in older rows)."""
    return [{"run_id": run["run_id"], "topic": t, "partition": p, "segment_base_offset": 0,
             "segment": f"{SNAPSHOTS}/{night}/{t}-{p}/{segment_name(0)}", "action": "decoded",
             "night": run.get("ledger_night")}
            for night in run.get("nights", ()) for t, p in run.get("partitions", PARTITIONS)]


@contextlib.contextmanager
def night_columns(on: bool = True):
    """While the test writes: dq_results and ledger as this version has them (with the column
    ``night``); ``on=False``: without it, as tables made before it (issue 32)."""
    saved = dict(schemas.TABLES)
    for name in ("dq_results", "ledger"):
        if not on:
            schemas.TABLES[name] = pa.schema([f for f in saved[name] if f.name != repository.NIGHT])
    try:
        yield
    finally:
        schemas.TABLES.update(saved)


def write_ledger(root: str, runs: list[dict], catalog: str = DEFAULT_CATALOG,
                 night: bool = True) -> int:
    """Append the runs' ledger rows to ``main`` in one commit; the new snapshot's id."""
    with night_columns(night):
        table = iceberg_warehouse(root, catalog).table("ledger")
        table.append(pa.Table.from_pylist([r for run in runs for r in ledger_rows(run)],
                                          schema=schemas.TABLES["ledger"]))
    return table.refresh().current_snapshot().snapshot_id


def iceberg_warehouse(root: str, catalog: str = DEFAULT_CATALOG,
                      namespace: str = DEFAULT_NAMESPACE) -> Warehouse:
    s3 = storage.S3Config.from_env() if storage.is_s3(root) else None
    return Warehouse(str(root), catalog_name=catalog, namespace=namespace, s3=s3)


def write_run(root: str, run: dict, *, docs: bool = True, catalog: str = DEFAULT_CATALOG,
              namespace: str = DEFAULT_NAMESPACE, night: bool = True,
              summary: dict | None = None) -> str:
    """Commit one run's rows to dq_results (replacing that run's earlier rows) and write its
    Data Docs with an asset; return its token. ``night=False``: as an audit before the column
    ``night`` wrote them."""
    token = storage.run_token(run["run_id"])
    with night_columns(night):
        iceberg_warehouse(root, catalog, namespace).replace_run_rows(
            "dq_results", run["run_id"],
            pa.Table.from_pylist(run["rows"], schema=schemas.TABLES["dq_results"]), summary)
    if docs:
        store = storage.open_store(str(root))
        store.write(f"data_docs/{token}/index.html", docs_html(run["run_id"]).encode())
        store.write(f"data_docs/{token}/static/styles.css", docs_css(run["run_id"]).encode())
    return token


def docs_html(run_id: str) -> str:
    return (f'<!DOCTYPE html><html><head><link rel="stylesheet" href="static/styles.css"></head>'
            f'<body><h1 id="gx-docs">Data Docs of {run_id}</h1></body></html>')


def docs_css(run_id: str) -> str:
    return f"/* {run_id} */ h1 {{ color: #123456; }}"


def write_warehouse(root: str, catalog: str = DEFAULT_CATALOG) -> list[dict]:
    runs = scenario()
    for run in runs:
        run["token"] = write_run(root, run, catalog=catalog)
    write_ledger(root, runs, catalog)
    return runs


def expected_counts(run: dict) -> dict:
    c = Counter(r["status"] for r in run["rows"])
    return {s: c.get(s, 0) for s in ("fail", "warn", "pass")}


def expected_verdict(run: dict) -> str:
    c = expected_counts(run)
    return "fail" if c["fail"] else "warn" if c["warn"] else "pass"


def expected_series(runs: list[dict]) -> dict:
    oldest_first = sorted(runs, key=lambda r: r["checked_at"])
    crc = [sum(r["failed"] for r in run["rows"] if r["check"] == "crc") for run in oldest_first]
    ts = {check: [sum(json.loads(r["details"]).get("regressions", 0) for r in run["rows"]
                      if r["check"] == check) for run in oldest_first]
          for check in ("log_append_time", "create_time")}
    gaps: dict[str, list[int]] = {}
    for i, run in enumerate(oldest_first):
        for r in run["rows"]:
            if r["check"] == "offset_gaps":
                for cause, info in json.loads(r["details"])["classes"].items():
                    gaps.setdefault(cause, [0] * len(runs))[i] += info["items"]
    return {"crc": crc, "ts": ts, "gaps": gaps}


class Element:
    def __init__(self, tag, attrs):
        self.tag, self.attrs, self.text = tag, dict(attrs), ""
        self.classes = set((self.attrs.get("class") or "").split())


class Dom(HTMLParser):
    """Every element with its attributes and its text (including descendants' text)."""

    VOID = {"meta", "link", "br", "img", "input", "base", "hr", "col", "rect", "line"}

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        el = Element(tag, attrs)
        self.elements.append(el)
        if tag not in self.VOID:
            self._open.append(el)

    def handle_startendtag(self, tag, attrs):
        self.elements.append(Element(tag, attrs))

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i].tag == tag:
                del self._open[i:]
                break

    def handle_data(self, text):
        for el in self._open:
            el.text += text

    def find(self, tag=None, cls=None, **attrs) -> list[Element]:
        out = []
        for el in self.elements:
            if tag and el.tag != tag:
                continue
            if cls and cls not in el.classes:
                continue
            if any(el.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            out.append(el)
        return out

    def one(self, tag=None, cls=None, **attrs) -> Element:
        found = self.find(tag, cls, **attrs)
        assert len(found) == 1, f"expected one {tag}.{cls} {attrs}, found {len(found)}"
        return found[0]


RANK = {"fail": 0, "warn": 1, "pass": 3}


def expected_cells(runs: list[dict]) -> dict:
    """{(topic-partition, night): (outcome, run token, anchor)} from scenario()'s rows: the
    newest run that read the night; its worst check on that topic-partition (a range run's
    items name no night's segment, so its outcome holds on each of its nights); ``accepted``
    where every check passed and some found items the policy accepts."""
    out = {}
    for run in sorted(runs, key=lambda r: r["checked_at"]):  # newer runs overwrite
        for topic, partition in PARTITIONS:
            rows = [r for r in run["rows"] if (r["topic"], r["partition"]) == (topic, partition)]
            worst = min(rows, key=lambda r: (RANK[r["status"]], r["check"]))
            accepting = [r for r in sorted(rows, key=lambda r: r["check"])
                         if any(c["status"] == "pass" and c["items"]
                                for c in json.loads(r["details"])["classes"].values())]
            outcome = worst["status"]
            target = worst if outcome != "pass" else (accepting[0] if accepting else None)
            if outcome == "pass" and accepting:
                outcome = "accepted"
            anchor = f"r-{target['check']}-{topic}-{partition}" if target else None
            for night in run.get("nights", ()):
                out[(f"{topic}-{partition}", night)] = (outcome, run["token"], anchor)
    return out


def row(run_id: str, check: str, topic, partition, night: str, at: dt.datetime, *,
        status: str = "pass", observed: int = 10, unit: str = "batches", items=()) -> dict:
    """A dq_results row of ``check`` whose details hold ``items`` (each graded by its own
    ``status``): ``failed`` counts those that warned or failed, as results.build_rows does."""
    classes: dict = {}
    for it in items:
        c = classes.setdefault(it["class"], {"status": it["status"], "items": 0, "offsets": None})
        c["items"] += 1
    failed = sum(1 for it in items if it["status"] != "pass")
    return {"run_id": run_id, "check": check, "topic": topic, "partition": partition,
            "status": status, "severity": status, "observed": observed, "failed": failed,
            "details": json.dumps({"unit": unit, "classes": classes, "items": list(items),
                                   "more_items": 0}),
            "checked_at": at, "night": night}


def item(cls: str, status: str, message: str, segment=None, first=None, last=None) -> dict:
    return {"class": cls, "status": status, "first_offset": first, "last_offset": last,
            "offsets": None if first is None else last - first + 1, "value": None,
            "segment": segment, "position": None, "message": message}


def no_snapshot_row(run_id: str, night: str, at: dt.datetime, status: str = "warn") -> dict:
    """The audit's row for a night it was due to read that had no snapshot."""
    folder = f"{SNAPSHOTS}/{night}/"
    return row(run_id, "snapshot_missing", None, None, night, at, status=status, observed=1,
               unit="nights", items=[item("no_snapshot", status, f"no snapshot for {night}: "
                                          f"nothing under {folder}", folder)])


def passing_run(run_id: str, night: str, at: dt.datetime, partitions=PARTITIONS) -> dict:
    """A run of one night whose every check passed on ``partitions``."""
    rows = [row(run_id, check, t, p, night, at, observed=100 + i, unit=UNITS[check])
            for i, (t, p) in enumerate(partitions) for check in CHECKS]
    return {"run_id": run_id, "checked_at": at, "rows": rows, "nights": [night],
            "partitions": list(partitions), "token": storage.run_token(run_id)}
