"""The audit sees what is absent and says the same thing every time (issue 32).

Nights are decoded with the decode job (``--night``), audited with check_quality and
published, as the nightly DAG does; every expectation is computed from the segments the
test writes. A night's verdict is a function of that night: audited again, rerun after
later nights, or backfilled after them, it gives the same dq_results rows; a partition
earlier nights held and tonight lacks is a ``missing_partition`` warning; a ``.log`` outside
any partition folder is graded; a night without a snapshot is a ``snapshot_missing`` result.
"""

from __future__ import annotations

import json

import pytest

from kafkalog.writer import SegmentWriter, internal_record
from spark_jobs import tables
from spark_jobs.warehouse import Warehouse
from spark_jobs.audit import results

from test_quality import T0, dq_rows, recs, write_segments

pytestmark = pytest.mark.pipeline

HOUR = 3_600_000
NIGHTS = ("2026-11-19", "2026-11-20", "2026-11-21")


def commits(directory, upto: int) -> None:
    """``__consumer_offsets-0``: group ``billing`` commits offset 5 of ``orders-0`` on the
    first night, 15 on the second, 25 on the third (each night's log holds the ones before:
    a growing segment, as a broker keeps it). ``upto``: how many nights' commits."""
    with SegmentWriter(directory, 0) as w:
        for n in range(upto):
            at = T0 + n * 24 * HOUR + 1000
            w.append([internal_record("offsets", {
                "key": {"type": 1, "data": {"group": "billing", "topic": "orders", "partition": 0}},
                "value": {"version": 3, "data": {"offset": 5 + 10 * n, "leaderEpoch": 0,
                                                 "metadata": "", "commitTimestamp": at}}},
                timestamp=at)])


def night_snapshot(root, n: int, *, drop=()):
    """Night ``n`` (0, 1, 2) of a small cluster: ``orders-0`` grows by 10 records a night
    (a new segment each night, the earlier ones kept), ``orders-1`` and ``payments-0`` hold
    5 records each, ``__consumer_offsets-0`` the commits so far. ``drop``: partition folders
    this night's copy lacks."""
    out = root / NIGHTS[n]
    folders = {
        "orders-0": [(10 * k, lambda w, k=k: w.append(recs(10, T0 + k * 24 * HOUR)))
                     for k in range(n + 1)],
        "orders-1": [(0, lambda w: w.append(recs(5)))],
        "payments-0": [(0, lambda w: w.append(recs(5)))],
    }
    for name, spec in folders.items():
        if name not in drop:
            write_segments(out / name, spec)
    commits(out / "__consumer_offsets-0", n + 1)
    return out


def run_night(spark, W, snapshot, run_id: str, night: str, *, publish=True) -> int:
    """Decode ``snapshot`` as run ``run_id`` of ``night``, audit it, publish it if it passed;
    the audit's exit status."""
    from spark_jobs import check_quality
    from spark_jobs import decode as job
    from spark_jobs import publish as publishing

    job.main(["--input", str(snapshot), "--output", W, "--run-id", run_id, "--night", night,
              "--no-publish"], spark=spark)
    code = check_quality.main(["--warehouse", W, "--run-id", run_id, "--no-docs"], spark=spark)
    if publish and code == 0:
        publishing.publish(W, run_id)
    return code


def verdict_rows(W, run_id: str) -> list[tuple]:
    """Run ``run_id``'s dq_results rows without their run metadata (``checked_at``), the
    details as parsed JSON: what must be the same however often and whenever the night is
    audited."""
    out = []
    for r in dq_rows(W, run_id):
        details = json.loads(r["details"])
        out.append((r["check"], r["topic"], r["partition"], r["status"], r["severity"],
                    r["observed"], r["failed"], r["night"],
                    json.dumps(details["classes"], sort_keys=True),
                    json.dumps(details["items"], sort_keys=True)))
    return sorted(out, key=repr)


def lag_rows(W, run_id: str) -> list[tuple]:
    from pyiceberg.expressions import EqualTo

    rows = tables.read_arrow(W, "consumer_lag", row_filter=EqualTo("run_id", run_id)).to_pylist()
    return sorted((r["group"], r["topic"], r["partition"], r["committed_offset"],
                   r["log_end_offset"], r["status"]) for r in rows)


@pytest.fixture(scope="module")
def in_order(spark, tmp_path_factory):
    """Nights 1 and 2 run in order into one warehouse: ``(W, snapshots, {run: rows},
    {run: consumer_lag rows})`` as they were right after."""
    tmp = tmp_path_factory.mktemp("in-order")
    W = str(tmp / "w")
    snaps = [night_snapshot(tmp / "s", n) for n in range(3)]
    rows, lags = {}, {}
    for n, run in enumerate(("n1", "n2")):
        assert run_night(spark, W, snaps[n], run, NIGHTS[n]) == 0
        rows[run], lags[run] = verdict_rows(W, run), lag_rows(W, run)
    return W, snaps, rows, lags


def test_a_night_audited_again_after_later_nights_says_the_same(spark, in_order):
    """Nights 1 and 2 in order, then night 1 rerun (its decode and audit, the same run id,
    as clearing the run in Airflow does) and audited once more: the same rows each time.
    Night 2's commit (offset 15 of orders-0) is past night 1's log end (10): as of night 1
    the group had committed 5, and the rerun must not see night 2's commit (before the
    fix it read main's latest commits and warned committed_offset_beyond_log_end)."""
    from spark_jobs import check_quality

    W, snaps, rows, lags = in_order
    assert lags == {"n1": [("billing", "orders", 0, 5, 10, "ok")],
                    "n2": [("billing", "orders", 0, 15, 20, "ok")]}
    assert run_night(spark, W, snaps[0], "n1", NIGHTS[0]) == 0  # the rerun, after night 2
    assert verdict_rows(W, "n1") == rows["n1"]
    assert lag_rows(W, "n1") == lags["n1"]
    assert check_quality.main(["--warehouse", W, "--run-id", "n1", "--no-docs"], spark=spark) == 0
    assert verdict_rows(W, "n1") == rows["n1"]
    assert {r[7] for r in rows["n1"]} == {NIGHTS[0]}  # every row names the night it is about
    # nothing of it is a warning: the night is whole
    assert [r[:4] for r in rows["n1"] if r[3] != "pass"] == []


def test_a_backfilled_night_says_what_it_would_have_said_in_order(spark, in_order, tmp_path):
    """Night 2 run after night 3 (a backfill: a new run of an older night) gives the rows it
    gives when the nights run in order: what came before it is the nights before it, not
    the runs that happened to run before it; the later night's rows of night 2's new
    offsets are audited as night 2's (spark_jobs/audit/as_of.py)."""
    _, snaps, rows, lags = in_order
    backfilled = str(tmp_path / "backfilled")
    for n in (0, 2, 1):
        assert run_night(spark, backfilled, snaps[n], f"n{n + 1}", NIGHTS[n]) == 0
    assert verdict_rows(backfilled, "n2") == rows["n2"]
    assert lag_rows(backfilled, "n2") == lags["n2"]


def test_a_partition_earlier_nights_held_and_tonight_lacks_is_named(spark, tmp_path):
    """Night 2's copy lacks orders-1's folder, and every partition of payments: orders-1 is a
    missing_partition warning naming its last offset and the night it was last seen;
    payments is one topic_deleted item (an accepted cause: pass); the partitions that are
    there pass; a run that did not ask for payments does not miss it; a third night with
    orders-1 back finds nothing missing."""
    from spark_jobs import check_quality

    W = str(tmp_path / "w")
    s1 = night_snapshot(tmp_path / "s", 0)
    s2 = night_snapshot(tmp_path / "s", 1, drop=("orders-1", "payments-0"))
    assert run_night(spark, W, s1, "n1", NIGHTS[0]) == 0
    assert run_night(spark, W, s2, "n2", NIGHTS[1]) == 0  # warnings publish
    rows = {(r["topic"], r["partition"]): r for r in dq_rows(W, "n2")
            if r["check"] == "missing_partition"}
    assert {k: (r["status"], r["failed"]) for k, r in rows.items()} == {
        ("orders", 0): ("pass", 0), ("__consumer_offsets", 0): ("pass", 0),
        ("orders", 1): ("warn", 1), ("payments", None): ("pass", 0)}
    [item] = json.loads(rows[("orders", 1)]["details"])["items"]
    assert item["class"] == "missing" and item["status"] == "warn"
    assert item["last_offset"] == 4  # orders-1 held offsets 0..4
    assert item["segment"] == str(s1 / "orders-1" / f"{0:020d}.log")
    assert f"last seen on {NIGHTS[0]}" in item["message"] and "offset 4" in item["message"]
    [deleted] = json.loads(rows[("payments", None)]["details"])["items"]
    assert (deleted["class"], deleted["status"], deleted["value"]) == ("topic_deleted", "pass", 1)
    # the absent partition gets no other result (nothing was checked there)
    assert {r["check"] for r in dq_rows(W, "n2") if (r["topic"], r["partition"]) == ("orders", 1)} \
        == {"missing_partition"}
    assert results.verdict(dq_rows(W, "n2"))["warned"] == {"missing_partition": ["orders-1"]}

    # the run asked for orders* and __* only: payments is not missing (the DAG passes its
    # `topics`), orders-1 still is
    assert check_quality.main(["--warehouse", W, "--run-id", "n2", "--no-docs",
                               "--topics", "orders*, __*"], spark=spark) == 0
    assert [(r["topic"], r["partition"]) for r in dq_rows(W, "n2")
            if r["check"] == "missing_partition" and r["topic"] == "payments"] == []
    assert results.verdict(dq_rows(W, "n2"))["warned"] == {"missing_partition": ["orders-1"]}

    s3 = night_snapshot(tmp_path / "s", 2)
    assert run_night(spark, W, s3, "n3", NIGHTS[2]) == 0
    assert [r for r in dq_rows(W, "n3") if r["check"] == "missing_partition" and r["status"] != "pass"] \
        == []


def test_a_log_outside_any_partition_folder_does_not_pass(spark, tmp_path):
    """A .log whose folder is no partition is graded like the same bad name inside orders-0:
    a decoder_findings failure (unparsable_name: `other` in the policy), not a silent pass."""
    W = str(tmp_path / "w")
    snap = night_snapshot(tmp_path / "s", 0)
    stray = snap / "misc" / f"{0:020d}.log"
    stray.parent.mkdir()
    stray.write_bytes((snap / "orders-1" / f"{0:020d}.log").read_bytes())
    assert run_night(spark, W, snap, "n1", NIGHTS[0], publish=False) == 65
    [row] = [r for r in dq_rows(W, "n1") if r["topic"] is None]
    assert (row["check"], row["partition"], row["status"], row["failed"]) == (
        "decoder_findings", None, "fail", 1)
    [item] = json.loads(row["details"])["items"]
    assert item["class"] == "unparsable_name" and item["segment"] == str(stray)
    assert results.verdict(dq_rows(W, "n1"))["failed"] == {"decoder_findings": [results.UNPLACED]}


def test_snapshot_missing_rows_and_a_late_snapshot_replaces_them(tmp_path):
    """The plan's rows for nights without a snapshot: one per night, graded by the policy,
    kept by the run's audit, replaced by a later run that found the night's snapshot."""
    from pyiceberg.expressions import EqualTo

    from kafkalog_pipeline import tasks
    from spark_jobs.audit.policy import Policy

    wh = Warehouse(str(tmp_path / "w"))
    where = {NIGHTS[0]: "s3://b/snapshots/2026-11-19/", NIGHTS[1]: "s3://b/snapshots/2026-11-20/"}
    rows = tasks.record_missing_nights(wh, "late", where, {NIGHTS[1]: 3})
    assert [(r["night"], r["status"], r["topic"], r["partition"]) for r in rows] == [
        (NIGHTS[0], "warn", None, None)]
    assert tasks.record_missing_nights(wh, "other", where, {NIGHTS[1]: 1}) != []
    assert tasks.missing_verdict(rows) == {"fail": 0, "warn": 1, "pass": 0, "failed": {},
                                           "warned": {"snapshot_missing": [NIGHTS[0]]}}
    # the audit replaces a run's rows but its snapshot_missing ones
    results.write(wh, "late", [{**rows[0], "check": "crc", "topic": "orders", "partition": 0,
                                "status": "pass"}])
    assert sorted(r["check"] for r in dq_rows(wh, "late")) == ["crc", "snapshot_missing"]
    assert results.run_missing_nights(wh, "late")[0]["night"] == NIGHTS[0]
    # the snapshot arrives late: a run that finds it drops every run's result of that night
    assert tasks.record_missing_nights(wh, "found", {NIGHTS[0]: where[NIGHTS[0]]},
                                       {NIGHTS[0]: 2}) == []
    left = tables.read_arrow(wh, "dq_results", row_filter=EqualTo("check", "snapshot_missing"))
    assert left.num_rows == 0
    assert sorted(r["check"] for r in dq_rows(wh, "late")) == ["crc"]
    # nothing missing and nothing to replace: no commit at all
    before = wh.table("dq_results").current_snapshot().snapshot_id
    assert tasks.record_missing_nights(wh, "quiet", {NIGHTS[1]: where[NIGHTS[1]]},
                                       {NIGHTS[1]: 1}) == []
    assert wh.table("dq_results").current_snapshot().snapshot_id == before
    # fail is settable in the policy
    strict = Policy({"checks": {**Policy.load().checks, "snapshot_missing": {"severity": "fail"}}})
    [row] = results.missing_night_rows("r", {NIGHTS[0]: where[NIGHTS[0]]}, strict)
    assert (row["status"], row["severity"], row["failed"]) == ("fail", "fail", 1)
