"""The typed dq_results row (spark_jobs/audit/results.py) and the check registry
(spark_jobs/audit/registry.py), without Spark."""

from __future__ import annotations

import datetime as dt
import json

from spark_jobs import schemas
from spark_jobs.audit import registry, results
from spark_jobs.audit.policy import Policy

AT = dt.datetime(2026, 11, 20, 3, 0, tzinfo=dt.timezone.utc)

# the details of a create_time result as the audit has always written them: the column's
# JSON, key order included (readers and Data Docs show it as it is)
CREATE_TIME_DETAILS = (
    '{"unit": "records", "classes": {"beyond_tolerance": {"status": "fail", "items": 2, '
    '"offsets": 2}, "regression": {"status": "warn", "items": 1, "offsets": 1}}, "items": '
    '[{"class": "beyond_tolerance", "status": "fail", "first_offset": 7, "last_offset": 7, '
    '"offsets": 1, "value": 90000, "segment": "s3://b/orders-0/0.log", "position": 128, '
    '"message": "CreateTime went back 90000 ms at offset 7"}], "more_items": 0, '
    '"max_step_back_ms": 90000, "regressions": 3, "tolerance_ms": null}')


def create_time_result(policy=None) -> results.DqResult:
    cls = [{"check": "create_time", "class": "regression", "status": "warn", "severity": "warn",
            "items": 1, "offsets": 1, "max_value": 40},
           {"check": "create_time", "class": "beyond_tolerance", "status": "fail",
            "severity": "fail", "items": 2, "offsets": 2, "max_value": 90000}]
    items = [{"class": "beyond_tolerance", "status": "fail", "first_offset": 7, "last_offset": 7,
              "offsets": 1, "value": 90000, "segment": "s3://b/orders-0/0.log", "position": 128,
              "message": "CreateTime went back 90000 ms at offset 7"}]
    return results.graded_result("r1", "create_time", "orders", 0, 10, cls, items,
                                 policy or Policy.load(), AT, "2026-11-19")


def test_a_graded_result_writes_the_details_json_it_always_did():
    r = create_time_result()
    assert (r.status, r.severity, r.observed, r.failed) == ("fail", "fail", 10, 3)
    row = r.to_row()
    assert list(row) == schemas.DQ_RESULTS.names
    assert row["details"] == CREATE_TIME_DETAILS
    assert row[schemas.NIGHT] == "2026-11-19"


def test_details_round_trip_through_json_and_rows():
    details = results.Details.from_json(CREATE_TIME_DETAILS)
    assert details.unit == "records"
    assert details.classes["beyond_tolerance"] == results.ClassCount("fail", 2, 2)
    assert details.items[0].class_ == "beyond_tolerance" and details.items[0].position == 128
    assert details.extras == {"max_step_back_ms": 90000, "regressions": 3, "tolerance_ms": None}
    assert details.to_json() == CREATE_TIME_DETAILS
    row = create_time_result().to_row()
    assert results.DqResult.from_row(row) == create_time_result()
    assert results.DqResult.from_row(row).to_row() == row
    # a reader that selected some columns gets the others as None
    some = results.DqResult.from_row({"check": "crc", "status": "pass", "details": None})
    assert (some.check, some.status, some.run_id, some.details, some.night) == (
        "crc", "pass", None, None, None)


def test_parse_details_reads_what_readers_meet():
    assert results.parse_details(CREATE_TIME_DETAILS) == results.Details.from_json(
        CREATE_TIME_DETAILS)
    assert results.parse_details(json.loads(CREATE_TIME_DETAILS)).unit == "records"
    for raw in (None, "", "not json", "[1, 2]", "3"):
        assert results.parse_details(raw) is None
    # rows of older audits: fewer keys, an extra one kept
    old = results.parse_details('{"classes": {"gap": {"status": "warn", "items": 1}}, '
                                '"by_cause": {"gap": 1}}')
    assert (old.unit, old.items, old.more_items) == (None, (), 0)
    assert old.classes == {"gap": results.ClassCount("warn", 1, None)}
    assert old.extras == {"by_cause": {"gap": 1}}


def test_parse_details_tolerates_odd_rows():
    # counts stored as strings or floats are read as ints; a count that is no number is None
    odd = results.parse_details({"classes": {"gap": {"status": "warn", "items": "2",
                                                     "offsets": 3.0},
                                             "bad": {"status": "warn", "items": "x"},
                                             "bare": 4},
                                 "items": 5, "more_items": "7", "regressions": "6"})
    assert odd.classes == {"gap": results.ClassCount("warn", 2, 3),
                           "bad": results.ClassCount("warn", None, None)}
    assert (odd.items, odd.more_items, odd.extras) == ((), 7, {"regressions": "6"})
    # classes or items of the wrong JSON type are none, the rest is read
    wrong = results.parse_details('{"unit": "batches", "classes": [1], "items": {"a": 1}}')
    assert (wrong.unit, wrong.classes, wrong.items) == ("batches", {}, ())
    assert [results.count(v) for v in (3, "3", 3.7, None, "x", [1])] == [3, 3, 3, None, None, None]


def test_stored_details_is_the_value_as_stored():
    assert results.stored_details(CREATE_TIME_DETAILS) == json.loads(CREATE_TIME_DETAILS)
    assert results.stored_details("[1, 2]") == [1, 2]
    assert results.stored_details("not json\nsecond") == "not json\nsecond"
    assert results.stored_details(None) is None and results.stored_details("") is None


def test_a_snapshot_missing_row_is_graded_by_the_policy():
    [row] = results.missing_night_rows("r", {"2026-11-19": "s3://b/snapshots/2026-11-19/"},
                                       Policy.load(), checked_at=AT)
    assert (row["check"], row["topic"], row["partition"], row["status"]) == (
        registry.SNAPSHOT_MISSING, None, None, "warn")
    d = results.parse_details(row["details"])
    assert d.unit == "nights" and d.items[0].segment == "s3://b/snapshots/2026-11-19/"
    assert results.place(row) == "2026-11-19"


def test_the_registry_is_the_one_table_of_checks():
    assert list(registry.UNITS) == list(registry.CHECKS)
    assert registry.UNITS == {name: c.unit for name, c in registry.CHECKS.items()}
    assert registry.OPTIONAL_CHECKS == {
        "committed_offset_beyond_log_end", "committed_offset_before_log_start",
        "producer_snapshot", "leader_epoch_checkpoint", "missing_partition", "snapshot_missing",
        "beyond_high_watermark", "hanging_transaction", "mixed_cluster", "sink_reconcile",
        *registry.TIER_CHECK_NAMES}
    assert registry.INTERNAL_CHECKS < registry.OPTIONAL_CHECKS
    assert registry.TIER_CHECK_NAMES < registry.OPTIONAL_CHECKS
    for name, check in registry.CHECKS.items():
        assert check.name == name
        # only decoder_findings' classes are open (the finding kinds)
        assert (check.classes is None) == (name == registry.DECODER_FINDINGS)
        # only the plan writes snapshot_missing, only python -m spark_jobs.reconcile
        # sink_reconcile (issue 44)
        assert (check.observe is None) == (name in (registry.SNAPSHOT_MISSING, "sink_reconcile"))
    # one observe function may serve several checks; each runs once
    observers = registry.observers()
    assert len(observers) == len(set(observers)) < len(registry.CHECKS)
