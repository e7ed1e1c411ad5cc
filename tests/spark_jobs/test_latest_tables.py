"""latest__<topic> tables against an independent replay (issue 35, item 2).

The nights are written with kafkalog's writer; the expectation is a replay written
(tests/spark_jobs/keyed_nights.py) from what the test wrote: each record ``(offset, key, value, producer)`` and each marker
in offset order, a transaction's records held until its producer's marker (COMMIT shows
them, ABORT drops them, none yet: not shown), the latest visible record per key winning
and a tombstone removing its key. Nothing of spark_jobs.derive is used for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs import layout, tables
from spark_jobs.warehouse import Warehouse

from tests.runs import decode
from tests.spark_jobs.keyed_nights import (T0, TABLE, TOPIC, Log, decode_night, replay, table_state,
                                          write_nights)


def test_replay_sees_each_case(tmp_path):
    _, _, e1, e2 = write_nights(tmp_path)
    assert replay(e1) == {"a": (3, "a2"), "c": (2, "c1"), "f": (10, "f1")}
    assert replay(e2) == {"a": (14, "a3"), "b": (15, "b2"), "c": (2, "c1"), "d": (7, "d-late"),
                          "f": (10, "f1")}


def test_latest_equals_replay_over_nights_reruns_and_overlaps(spark, tmp_path):
    n1, n2, e1, e2 = write_nights(tmp_path)
    wh = str(tmp_path / "wh")
    out1 = decode_night(spark, n1, wh, "night-1", "2025-11-21")
    assert out1["keyed"][TABLE] > 0
    assert table_state(wh) == {k: v for k, v in replay(e1).items()}
    night1 = Warehouse(wh).load(TABLE).snapshot_by_name(layout.night_tag("2025-11-21"))
    assert night1 is not None
    decode_night(spark, n2, wh, "night-2", "2025-11-22")
    assert table_state(wh) == replay(e2)
    # as of night 1: a tag read
    assert table_state(wh, snapshot=night1.snapshot_id) == replay(e1)
    tagged = Warehouse(wh).load(TABLE).snapshot_by_name(layout.night_tag("2025-11-22"))
    assert tagged.snapshot_id == Warehouse(wh).load(TABLE).current_snapshot().snapshot_id
    # a rerun of night 2 and an overlapping snapshot (night 2's bytes again) change nothing
    before = table_state(wh)
    decode_night(spark, n2, wh, "night-2", "2025-11-22")
    assert table_state(wh) == before
    decode_night(spark, n2, wh, "night-3", "2025-11-23")
    assert table_state(wh) == before
    rows = tables.read_arrow(wh, "records", columns=("offset",))
    assert rows.num_rows == len({o for o in rows.column("offset").to_pylist()})


def test_a_compacted_topic_gets_its_table_by_itself_and_only_touched_partitions_are_rewritten(
        spark, tmp_path):
    """No --latest-topics: the cleaner's evidence (a batch spanning more offsets than it
    holds records, a batch with a delete horizon) makes the table. Night 2 changes partition
    1 only: partition 0's state file stays the same file. DuckDB reads every table and tag
    as pyiceberg does."""
    from tests.duckdb_engine import compare_refs, compare_warehouse

    def night(root: Path, n: int):
        for p in (0, 1):
            with SegmentWriter(root / f"cleaned-{p}", 0) as w:
                # compacted: offsets 0..3 hold only two records (deltas 0 and 3)
                w.append([WriteRecord(b"k0", b"v0", timestamp=T0),
                          WriteRecord(b"k1", b"v1", timestamp=T0, offset_delta=3)])
                w.append([WriteRecord(b"k2", None, timestamp=T0)], delete_horizon_ms=T0 + 1)
                w.append([WriteRecord(b"k2", b"again", timestamp=T0)])
                if n == 2 and p == 1:
                    w.append([WriteRecord(b"k0", b"night2", timestamp=T0)])
        with SegmentWriter(root / "plain-0", 0) as w:
            w.append([WriteRecord(b"k", b"v", timestamp=T0)])
        return root

    wh = str(tmp_path / "wh")
    for n in (1, 2):
        decode(spark, night(tmp_path / f"n{n}", n), wh, f"r{n}", night=f"2025-11-2{n}")
        if n == 1:
            w = Warehouse(wh)
            assert "latest__plain" not in w.table_names()
            before = {p: table_paths(w, p) for p in (0, 1)}
    w = Warehouse(wh)
    assert table_state(wh, 0, table="latest__cleaned") == \
        {"k0": (0, "v0"), "k1": (3, "v1"), "k2": (5, "again")}
    assert table_state(wh, 1, table="latest__cleaned") == \
        {"k0": (6, "night2"), "k1": (3, "v1"), "k2": (5, "again")}
    assert table_paths(w, 0) == before[0] and table_paths(w, 1) != before[1]
    assert compare_warehouse(w)["latest__cleaned"] == 6
    assert compare_refs(w)[("latest__cleaned", layout.night_tag("2025-11-21"))] == 6


def table_paths(w: Warehouse, partition: int) -> list[str]:
    from pyiceberg.expressions import EqualTo

    return sorted(tables.table_paths(w, "latest__cleaned", row_filter=EqualTo("partition", partition)))


def test_a_backfilled_older_night_leaves_the_later_tags(spark, tmp_path):
    """Night 2 is published first, then night 1 arrives (a backfill): the state is still
    the replay of everything (night 1 adds nothing night 2 lacks), night 2's tag stays where
    it was and no night-1 tag claims a state that holds night 2."""
    n1, n2, e1, e2 = write_nights(tmp_path)
    wh = str(tmp_path / "wh")
    decode_night(spark, n2, wh, "late", "2025-11-22")
    t = Warehouse(wh).load(TABLE)
    tag2 = t.snapshot_by_name(layout.night_tag("2025-11-22")).snapshot_id
    decode_night(spark, n1, wh, "early", "2025-11-21")
    t = Warehouse(wh).load(TABLE)
    assert table_state(wh) == replay(e2)
    assert t.snapshot_by_name(layout.night_tag("2025-11-22")).snapshot_id == tag2
    assert t.snapshot_by_name(layout.night_tag("2025-11-21")) is None


@pytest.mark.pipeline
def test_a_night_killed_at_its_last_commit_points_then_retried_equals_the_replay(spark, tmp_path):
    """Night 2 dies at each of the catalog commits of its txn resolution, its refresh and
    its publish (the tags too): the task's retry (a rerun of the decode, a publish again)
    leaves exactly the replay, tagged."""
    from tests.spark_jobs.faults import Crash, crash_at_commit

    n1, n2, e1, e2 = write_nights(tmp_path)

    def night1(wh):
        decode_night(spark, n1, wh, "night-1", "2025-11-21")

    probe = str(tmp_path / "probe")
    night1(probe)
    with crash_at_commit(None) as count:
        decode_night(spark, n2, probe, "night-2", "2025-11-22", "--no-publish")
    decode_commits = count[0]
    with crash_at_commit(None) as count:
        Warehouse(probe).publish("night-2")
    publish_commits = count[0]
    points = [("decode", k) for k in range(decode_commits - 3, decode_commits)] + \
        [("publish", k) for k in range(publish_commits - 4, publish_commits)]
    for where, k in points:
        wh = str(tmp_path / f"wh-{where}-{k}")
        night1(wh)
        if where == "decode":
            with pytest.raises(Crash), crash_at_commit(k):
                decode_night(spark, n2, wh, "night-2", "2025-11-22", "--no-publish")
            assert table_state(wh) == replay(e1), (where, k)  # main: night 1's state
            decode_night(spark, n2, wh, "night-2", "2025-11-22", "--no-publish")
        else:
            decode_night(spark, n2, wh, "night-2", "2025-11-22", "--no-publish")
            with pytest.raises(Crash), crash_at_commit(k):
                Warehouse(wh).publish("night-2")
        Warehouse(wh).publish("night-2")
        assert table_state(wh) == replay(e2), (where, k)
        t = Warehouse(wh).load(TABLE)
        assert t.snapshot_by_name(layout.night_tag("2025-11-22")).snapshot_id == \
            t.current_snapshot().snapshot_id, (where, k)


def test_manifests_do_not_pile_up_night_after_night(spark, tmp_path):
    """Six nights each change the state: a manifest whose files were all replaced is not
    listed again by the next snapshot (they would pile up a night, and every scan and
    every refresh would read them: the refresh would grow with history)."""
    wh = str(tmp_path / "wh")
    for n in range(6):
        log = Log(tmp_path / f"n{n}" / f"{TOPIC}-0")
        for k in range(n + 1):
            log.put(("k", f"v{k}"))
        log.close()
        decode_night(spark, tmp_path / f"n{n}", wh, f"r{n}", f"2025-11-{10 + n}")
    t = Warehouse(wh).load(TABLE)
    assert table_state(wh) == {"k": (5, "v5")}
    assert len(t.current_snapshot().manifests(t.io)) <= 2
