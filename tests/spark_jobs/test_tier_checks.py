"""The tier audit's rules on hand-made rows (no Spark): the orphan grace from the policy, a
copy's age against its metadata partition (not another's), keys named by custom metadata,
plain copies (mgoblin/minio-rsm's keys) matched by start offset, overlaps and re-uploads kept
apart, and the report's wording of an item. The checks end to end (Spark, moto, the job):
test_tier_audit.py."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

from kafkalog.tiered.layout import group_segments
from spark_jobs.audit import tier
from spark_jobs.audit.policy import Policy
from spark_jobs.audit.results import Item

T0 = dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc)


def row(seg, partition, start, end, states, epochs=((0, None),), metadata_partition=0, **kw):
    """A remote_segments row; ``states``: ``[(state, minutes after T0)]``."""
    return {"segment_id": seg, "topic_id": "T" * 22, "topic": "orders", "partition": partition,
            "start_offset": start, "end_offset": end, "state": states[-1][0],
            "state_history": [{"state": s, "event_timestamp": T0 + dt.timedelta(minutes=m),
                               "broker_id": 1, "metadata_partition": metadata_partition,
                               "metadata_offset": i} for i, (s, m) in enumerate(states)],
            "segment_leader_epochs": [{"leader_epoch": e, "start_offset": o if o is not None
                                       else start} for e, o in epochs],
            "partition_delete_state": None, "object_prefix": None, "object_key": None, **kw}


S, F = tier.STARTED, tier.FINISHED


def policy(**orphans):
    doc = {"checks": {tier.ORPHANS: {"classes": {"orphan": "warn", "in_flight": "pass"},
                                     **orphans}}}
    return Policy(doc)


@pytest.mark.parametrize("grace, expected", [(None, "orphan"), (120, "in_flight")])
def test_an_orphan_is_a_copy_older_than_the_grace_against_its_own_metadata_partition(
        grace, expected):
    rows = [row("a", 0, 0, 9, [(S, 0)]),                       # 90 min before p0's latest
            row("b", 0, 10, 19, [(S, 10), (F, 90)]),
            row("c", 1, 0, 9, [(S, 85)], metadata_partition=1),  # alone in p1: age 0
            row("d", 1, 10, 19, [(S, 1000), (F, 1001)], metadata_partition=7)]
    got = tier.orphan_observations(rows, policy(**({} if grace is None else
                                                   {"grace_minutes": grace})))
    assert [(o[4], o[3], o[7]) for o in got] == [(0, expected, 90 * 60_000),
                                                 (0, "in_flight", 0)]


def test_missing_objects_follow_custom_metadata_and_plain_copies():
    main = "orders-" + "T" * 22 + "/0/00000000000000000000-" + "a" * 22
    moved = [f"moved/x{s}" for s in (".log", ".indexes", ".rsm-manifest")]
    listing = [(f"p/{main}.log", 1), (f"p/{main}.rsm-manifest", 1), *((k, 1) for k in moved)]
    listed, _ = group_segments(listing)
    keys = {k for k, _ in listing}
    rows = [row("a" * 22, 0, 0, 9, [(S, 0), (F, 1)]),  # its .indexes is gone
            row("b" * 22, 0, 10, 19, [(S, 0), (F, 1)], object_prefix="moved/",
                object_key="x"),  # objects where its custom metadata says: all there
            row("c" * 22, 0, 20, 29, [(S, 0), (F, 1)], object_prefix="old/")]  # none there
    got = tier.missing_observations(rows, listed, keys, "p/")
    assert [(o[8], o[3]) for o in got] == [("a" * 22, "missing_object"),
                                           ("c" * 22, "missing_object")]
    assert ".indexes" in got[0][10] and f"p/{main}.indexes" in got[0][10]
    c_main = "orders-" + "T" * 22 + "/0/00000000000000000020-" + "c" * 22
    assert f"old/{c_main}.log" in got[1][10]  # the plugin's key: the prefix it wrote under

    plain, _ = group_segments([("/orders-0/00000000000000000000.log", 5),
                               ("/orders-0/00000000000000000000.index", 5),
                               ("/orders-0/00000000000000000050.index", 5)])  # no .log
    rows = [row("a" * 22, 0, 0, 49, [(S, 0), (F, 1)]), row("b" * 22, 0, 50, 99, [(S, 0), (F, 1)])]
    got = tier.missing_observations(rows, plain, {"/orders-0/00000000000000000000.log"})
    assert [(o[8], o[10].split("lacks its ")[1]) for o in got] == [
        ("b" * 22, ".log (no object of it is listed)")]
    # and the plain copy of offset 0 is referenced (by its start offset); a deleted one is not
    assert tier.unreferenced_observations(rows, plain) == []
    deleted = [row("a" * 22, 0, 0, 49, [(S, 0), (F, 1), ("DELETE_SEGMENT_STARTED", 2)])]
    assert [o[3] for o in tier.unreferenced_observations(deleted, plain)] == ["deleted_segment"]


def test_reuploads_and_overlaps_are_told_apart():
    rows = [row("a", 0, 0, 9, [(S, 0), (F, 1)]),
            row("b", 0, 0, 9, [(S, 2), (F, 3)]),            # the same start offset: a re-upload
            row("c", 0, 5, 19, [(S, 4), (F, 5)], epochs=((1, None),)),  # overlaps 5..9
            row("d", 0, 20, 29, [(S, 6), (F, 7)], epochs=((0, None),)),  # epoch 0 after 1
            row("e", 0, 30, 39, [(S, 8)])]                  # not live: no gap after d
    assert [(o[3], o[4], o[5]) for o in tier.epoch_observations(rows)] == [
        ("offset_overlap", 5, 9), ("epoch_regression", 20, 29)]
    assert [(o[3], o[7]) for o in tier.reupload_observations(rows)] == [("reupload", 2)]


def test_an_item_reads_once_in_the_report():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))
    from kafkalog_quality import words

    obs = tier.epoch_observations([row("a", 3, 0, 9, [(S, 0), (F, 1)]),
                                   row("b", 3, 15, 19, [(S, 0), (F, 1)])])[0]
    item = Item("offset_gap", "fail", obs[4], obs[5], obs[6], obs[7], obs[8], obs[9], obs[10])
    assert words.item_line("orders", 3, item) == (
        "orders-3: remote segments a and b of orders-3: offsets 10..14 are in no remote segment")


def test_a_night_replays_what_the_nights_up_to_it_published():
    """remote_segments as of a night leaves out the records of runs of later nights (a night
    run again after them) and of runs whose night is not known only when none is asked."""
    import pyarrow as pa

    from spark_jobs.derive import remote

    ledger = pa.table({"run_id": ["n1", "n1", "n3", "x"], "night": ["2026-11-20", "2026-11-21",
                                                                     "2026-11-22", None]})
    assert remote.runs_after(ledger, "2026-11-21") == {"n3"}
    assert remote.runs_after(ledger, "2026-11-19") == {"n1", "n3"}
    assert remote.runs_after(ledger, None) == set()
