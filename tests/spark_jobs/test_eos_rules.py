"""The exactly-once rules over ``producer_transactions`` rows (issue 45;
spark_jobs/audit/eos.py ``transaction_observations``), on rows written here by hand: what
each rule reports, and what it leaves alone. No Spark (the SQL rules run in test_eos.py)."""

from __future__ import annotations

from spark_jobs.audit import eos

OFFSETS = "__consumer_offsets"


def txn(key, epoch, parts, commits=(), outcome="committed", duration=5, fenced=False, pid=1):
    return {"producer_id": pid, "producer_epoch": epoch, "outcome": outcome, "txn_key": key,
            "fenced": fenced, "duration_ms": duration, "offsets_committed": bool(commits),
            "partitions": [{"topic": t, "partition": p, "first_offset": lo, "last_offset": hi}
                           for t, p, lo, hi in parts],
            "offset_commits": [{"group": "g", "topic": "in", "partition": 0,
                                "committed_offset": c, "source_partition": 0, "source_offset": s}
                               for s, c in commits]}


EVERYTHING = {(OFFSETS, 0): [(0, 100)], ("out", 0): [(0, 100)]}


def found(rows, ranges=EVERYTHING, max_ms=10):
    return sorted((o[0], o[3], o[1], o[4], o[6]) for o in
                  eos.transaction_observations(rows, ranges, max_ms) if o[3] != "within")


def test_a_read_process_write_app_in_order_gives_nothing():
    rows = [txn("a", 0, [("out", 0, 0, 1), (OFFSETS, 0, 2, 2)], [(2, 5)]),
            txn("b", 0, [("out", 0, 4, 5), (OFFSETS, 0, 6, 6)], [(6, 9)])]
    assert found(rows) == []


def test_input_claimed_twice():
    rows = [txn("a", 0, [("out", 0, 0, 1), (OFFSETS, 0, 2, 2)], [(2, 5)]),
            txn("b", 0, [("out", 0, 4, 5), (OFFSETS, 0, 6, 6)], [(6, 9)]),
            txn("c", 1, [("out", 0, 8, 9), (OFFSETS, 0, 10, 10)], [(10, 9)])]
    # c commits 9 again: b's claim [5, 9) processed twice (4 offsets)
    assert found(rows) == [("double_consumption", "double_consumption", OFFSETS, 10, 4)]
    # an aborted re-commit claims nothing; one of another night's batches is not this run's
    aborted = rows[:2] + [dict(rows[2], outcome="aborted")]
    assert found(aborted) == []
    assert found(rows, {(OFFSETS, 0): [(0, 9)], ("out", 0): [(0, 100)]}) == []
    # a re-commit with no output (an idle commit) is no double processing
    assert found(rows[:2] + [txn("c", 1, [(OFFSETS, 0, 10, 10)], [(10, 9)])]) == []


def test_output_without_its_offset_commit():
    rows = [txn("a", 0, [("out", 0, 0, 1), (OFFSETS, 0, 2, 2)], [(2, 5)]),
            txn("b", 0, [("out", 0, 4, 5)])]
    assert found(rows) == [("output_without_offset_commit", "no_offset_commit", "out", 4, 2)]
    # not an application that commits offsets transactionally; a fenced one (zombie_write's)
    assert found([rows[1]]) == []
    assert found([rows[0], dict(rows[1], fenced=True)]) == []


def test_long_transactions_by_the_policy_bound():
    rows = [txn("a", 0, [("out", 0, 0, 1)], duration=11), txn("b", 0, [("out", 0, 3, 4)], duration=10),
            txn("c", 0, [("out", 0, 6, 7)], outcome="open", duration=None)]
    assert found(rows) == [("long_transaction", "long", "out", 0, 2)]
    within = [o for o in eos.transaction_observations(rows, EVERYTHING, 10) if o[3] == "within"]
    assert [o[4] for o in within] == [3]
