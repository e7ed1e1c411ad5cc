"""What ``make demo`` prints at the end: the tables and their row counts (the per-key state
tables' also as of each night they are tagged with), the values decoded
from Schema Registry's wire format, each night's data-quality results (the checks that warned
or failed, with their causes) and report, one query to copy, and whether the counts changed
since the previous ``make demo``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spark_jobs.layout import LATEST, NIGHT_TAG_PREFIX, keyed_table, typed_topic
from spark_jobs.audit.policy import RANK
from spark_jobs.audit.results import parse_details, place
from spark_jobs.schemas import ALL_NAMES, NAMES as TABLES, TXN_STATE

from . import tiered
from .servers import BUCKET, warehouse


def table_counts(out: Path) -> dict:
    """Row counts per table on ``main`` (and records per topic), read through the catalog."""
    import pyarrow.compute as pc

    from spark_jobs.tables import read_arrow

    wh = warehouse(out)
    counts: dict = {}
    # the six tables, and those of Kafka's internal topics and state files the runs made
    for name in (n for n in ALL_NAMES if n in TABLES or wh.load(n) is not None):
        counts[name] = read_arrow(wh, name, columns=("run_id",)).num_rows
    # the typed per-topic tables (docs/tables.md): their columns are the topics' own
    for name in wh.typed_tables():
        counts[name] = len(wh.table(name).scan(selected_fields=("run_id",)).to_arrow())
    # the per-key state tables (latest__, cdc__): rows on main
    for name in wh.keyed_tables():
        counts[name] = len(wh.table(name).scan(selected_fields=("run_id",)).to_arrow())
    topics = read_arrow(wh, "records", columns=("topic",)).column("topic")
    counts["records_by_topic"] = {r["values"]: r["counts"]
                                  for r in pc.value_counts(topics).to_pylist()} if len(topics) else {}
    counts["records_by_topic"] = dict(sorted(counts["records_by_topic"].items()))
    states = read_arrow(wh, "records", columns=(TXN_STATE,)).column(TXN_STATE).fill_null("null")
    counts["records_by_txn_state"] = dict(sorted(
        (r["values"], r["counts"]) for r in pc.value_counts(states).to_pylist())) if len(states) else {}
    return counts


def _rank(status: str) -> tuple[int, int]:
    """Sort key of a row's ``status``: the policy's severities worst first, anything else
    after them."""
    return (0, -RANK[status]) if status in RANK else (1, 0)


def _causes(details: str | None) -> str:
    """The classes a result's ``details`` graded not ``pass``, with their items:
    ``"missing_segment 1, index_mismatch 2"`` ("" where there are none or no JSON)."""
    parsed = parse_details(details)
    if parsed is None:
        return ""
    return ", ".join(f"{name} {'?' if c.items is None else c.items}"
                     for name, c in parsed.classes.items() if c.status != "pass")


def problem_lines(rows: list[dict]) -> list[str]:
    """One line per check that did not pass, worst outcome first: the outcome, the check
    and its topic-partitions, each with its causes (``rows``: dq_results rows)."""
    problems: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if row["status"] != "pass":
            problems.setdefault((row["status"], row["check"]), []).append(row)
    lines = []
    for status, check in sorted(problems, key=lambda k: (_rank(k[0]), k)):
        parts = []
        for row in sorted(problems[status, check], key=place):
            causes = _causes(row.get("details"))
            parts.append(place(row) + (f" ({causes})" if causes else ""))
        lines.append(f"{status} {check}: {', '.join(parts)}")
    return lines


def dq_summary(out: Path, run_id: str) -> dict:
    """Run ``run_id``'s data quality: its report's path (None if missing), the count of
    its results per status (worst first) and :func:`problem_lines`."""
    from pyiceberg.expressions import EqualTo

    from spark_jobs.layout import DATA_DOCS
    from spark_jobs.storage import run_token
    from spark_jobs.tables import read_arrow

    html = out / "warehouse" / DATA_DOCS / run_token(run_id) / "index.html"
    rows = read_arrow(warehouse(out), "dq_results", row_filter=EqualTo("run_id", run_id),
                      columns=("check", "topic", "partition", "status", "details",
                               "night")).to_pylist()
    statuses: dict[str, int] = {}
    for row in sorted(rows, key=lambda r: _rank(r["status"])):
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    return {"report": str(html) if html.exists() else None, "statuses": statuses,
            "problems": problem_lines(rows)}


def problems_query(out: Path, wh) -> str:
    """A shell command that prints the warn and fail rows of dq_results (every run's)."""
    return (f"PYICEBERG_HOME={out} {sys.executable} -c \"from pyiceberg.catalog import load_catalog; "
            f"t = load_catalog('{wh.catalog_name}').load_table('{wh.namespace}.dq_results'); "
            "print(t.scan(row_filter=\\\"status != 'pass'\\\", selected_fields=('run_id', 'check', "
            "'topic', 'partition', 'status', 'failed')).to_pandas().to_string())\"")



def value_lines(wh) -> list[str]:
    """What ``make demo`` says of ``records.value_json``: per topic with values in the wire
    format, how many decoded (and their format), how many did not (why), the last one decoded."""
    from spark_jobs.tables import read_arrow

    rows = read_arrow(wh, "records", row_filter="value_schema_id IS NOT NULL",
                      columns=("topic", "offset", "value_format", "value_json", "value_error"))
    by_topic: dict[str, list[dict]] = {}
    for r in sorted(rows.to_pylist(), key=lambda r: (r["topic"], r["offset"])):
        by_topic.setdefault(r["topic"], []).append(r)
    lines = []
    for topic, rs in by_topic.items():
        good = [r for r in rs if r["value_json"] is not None]
        errors = sorted({r["value_error"] for r in rs if r["value_error"]})
        formats = ", ".join(sorted({r["value_format"] for r in good}))
        line = f"{topic}: {len(good)} decoded ({formats})"
        if len(good) < len(rs):
            line += f", {len(rs) - len(good)} not ({', '.join(errors)})"
        if good:
            line += f"; last: {good[-1]['value_json']}"
        lines.append(line)
    return lines


def tier_records_line(wh) -> str:
    """The tiered topic's records (demo.tiered), every run's: each offset once?"""
    from pyiceberg.expressions import EqualTo

    from spark_jobs.tables import read_arrow

    offsets = read_arrow(wh, "records", row_filter=EqualTo("topic", tiered.TOPIC),
                         columns=("offset",)).column("offset").to_pylist()
    span = f"offsets {min(offsets)}..{max(offsets)}" if offsets else "no offsets"
    once = "each once" if len(offsets) == len(set(offsets)) else "SOME MORE THAN ONCE"
    return (f"{tiered.TOPIC}-{tiered.PARTITION}: {len(offsets)} records, {span}, {once} "
            f"(the remote segments of {tiered.tier_uri(BUCKET)} and the local tail)")


def tier_check_line(wh, run_id: str) -> str:
    """Each tier check's outcome in run ``run_id``, worst first, with its causes."""
    from pyiceberg.expressions import EqualTo

    from spark_jobs.audit.registry import TIER_CHECK_NAMES
    from spark_jobs.tables import read_arrow

    rows = [r for r in read_arrow(wh, "dq_results", row_filter=EqualTo("run_id", run_id),
                                  columns=("check", "topic", "partition", "status",
                                           "details")).to_pylist()
            if r["check"] in TIER_CHECK_NAMES]
    checks = []
    for row in sorted(rows, key=lambda r: (_rank(r["status"]), r["check"], place(r))):
        causes = _causes(row["details"])
        checks.append(f"{row['check']} {row['status']}" + (f" ({causes})" if causes else ""))
    return "tier checks: " + (", ".join(checks) or "none ran")


def sink_line(wh, run_id: str) -> str:
    """Each reconciled sink of run ``run_id`` (check sink_reconcile, demo.sink): delivered,
    missing, duplicates, leaks, lag (:func:`spark_jobs.reconcile.summary.brief`)."""
    from pyiceberg.expressions import And, EqualTo

    from spark_jobs.reconcile import summary
    from spark_jobs.reconcile.classes import CHECK
    from spark_jobs.tables import read_arrow

    rows = read_arrow(wh, "dq_results", row_filter=And(EqualTo("run_id", run_id),
                                                        EqualTo("check", CHECK)),
                      columns=("status", "details")).to_pylist()
    totals = summary.totals((r["status"], parse_details(r["details"])) for r in rows)
    return "sinks: " + ("; ".join(summary.brief(name, t) for name, t in totals.items())
                        or "none reconciled")


def night_counts(wh, name: str) -> dict[str, int]:
    """A per-key state table's rows as of each night it is tagged with (``night-YYYY-MM-DD``)."""
    table = wh.table(name)
    return {tag.removeprefix(NIGHT_TAG_PREFIX): len(table.scan(
                snapshot_id=ref.snapshot_id, selected_fields=("run_id",)).to_arrow())
            for tag, ref in sorted(table.refs().items()) if tag.startswith(NIGHT_TAG_PREFIX)}


def key_text(key: bytes | None) -> str:
    """A record key as a person reads it: its UTF-8 text where it is printable text (Kafka keys
    are bytes; pyarrow and pandas show ``b'cust-1'``), else ``0x`` and its hex; ``null``."""
    if key is None:
        return "null"
    try:
        text = bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + bytes(key).hex()
    return text if text.isprintable() else "0x" + bytes(key).hex()


#: keys a latest__ table's report line names before "… +N more"
KEYS_SHOWN = 10


def keys_line(wh, name: str) -> str:
    """``keys: cust-1, cust-2, … +3 more`` of a latest__ table on ``main``, as text."""
    keys = sorted({key_text(k) for k in wh.table(name).scan(selected_fields=("key",))
                  .to_arrow().column("key").to_pylist()})
    more = f", … +{len(keys) - KEYS_SHOWN} more" if len(keys) > KEYS_SHOWN else ""
    return "keys: " + (", ".join(keys[:KEYS_SHOWN]) + more if keys else "none")


def keyed_note(wh, name: str) -> str:
    """What a per-key state table holds, and its rows as of each tagged night."""
    kind, topic = keyed_table(name)
    what = "latest record per key" if kind == LATEST else "source table"
    nights = ", ".join(f"{night} {n}" for night, n in night_counts(wh, name).items())
    keys = f"; {keys_line(wh, name)}" if kind == LATEST else ""
    return f"({kind}: {topic}'s {what}; as of night: {nights or 'no tag'}{keys})"


def report(out: Path, results: list[dict]) -> int:
    counts = table_counts(out)
    wh = warehouse(out)
    print(f"\nIceberg tables (catalog {wh.catalog_name!r}, namespace {wh.namespace!r}; "
          f"configuration {out / '.pyiceberg.yaml'}):")
    fixed = [n for n in ALL_NAMES if n in counts]
    typed = sorted(n for n in counts if typed_topic(n) is not None)
    keyed = sorted(n for n in counts if keyed_table(n) is not None)
    width = max(map(len, fixed + typed + keyed))
    for name in fixed:
        print(f"  {wh.namespace}.{name:<{width}} {counts[name]:>6} rows")
    for name in typed:
        print(f"  {wh.namespace}.{name:<{width}} {counts[name]:>6} rows  "
              f"(typed: {typed_topic(name)}'s values)")
    for name in keyed:
        print(f"  {wh.namespace}.{name:<{width}} {counts[name]:>6} rows  {keyed_note(wh, name)}")
    print("  records by topic: " + ", ".join(f"{t}={n}" for t, n in counts["records_by_topic"].items()))
    print("  records by txn_state (read committed: null or committed; docs/tables.md): "
          + ", ".join(f"{t}={n}" for t, n in counts["records_by_txn_state"].items()))
    print("  values in Schema Registry's wire format (records.value_json; docs/schemas.md):")
    for line in value_lines(wh):
        print(f"    {line}")
    for r in results:
        if r.get("run_id"):
            dq = dq_summary(out, r["run_id"])
            counts_ = ", ".join(f"{n} {status}" for status, n in dq["statuses"].items())
            print(f"Data quality of {r['run_id']}: {counts_ or 'no results'}")
            for line in dq["problems"]:
                print(f"  {line}")
            print(f"  {tier_check_line(wh, r['run_id'])}")
            print(f"  {sink_line(wh, r['run_id'])}")
            print(f"  report:  {dq['report'] or '(missing)'}")
    print(f"Tiered storage: {tier_records_line(wh)}")
    print("Query the tables, e.g. the checks that warned or failed, every run's:\n"
          f"  {problems_query(out, wh)}")
    previous_path = out / "demo-counts.json"
    if previous_path.exists():
        previous = json.loads(previous_path.read_text())
        same = {k: previous.get(k) == counts[k] for k in ("records", "batches", "markers")}
        print("Compared with the previous demo run: "
              + ", ".join(f"{k} {'unchanged' if v else 'CHANGED'}" for k, v in same.items()))
    ok = all(r["ok"] for r in results)
    if ok:
        previous_path.write_text(json.dumps(counts, indent=1))
    print(f"Airflow home (SQLite metadata DB, task logs): {out / 'airflow'};  `make ui` to browse it")
    if not ok:
        print("A DAG run failed: see the logs above.", file=sys.stderr)
    return 0 if ok else 1

