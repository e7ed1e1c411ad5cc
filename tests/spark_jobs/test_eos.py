"""Idempotent and transactional producers checked from the log (issue 45): the
``producer_transactions`` table against the generator's own account of what it wrote, and
the audit's exactly-once checks on a trace with one zombie write, one double commit and one
duplicated idempotent batch (tests/eos_trace.py: batches from tests/segments.py, offset
commits and transaction state from Kafka's 4.3.0 specs by tests/kafka_messages.py)."""

from __future__ import annotations

import json

import pytest

from tests.eos_trace import APP_PID, GROUP, IDEMPOTENT_PID, Trace
from spark_jobs import decode as job
from spark_jobs import tables
from spark_jobs.audit import registry
from spark_jobs.derive import producer_txns

pytestmark = pytest.mark.pipeline


def run(spark, src, out, run_id, *extra) -> dict:
    return job.main(["--input", str(src), "--output", str(out), "--run-id", run_id, *extra],
                    spark=spark)


def replay(trace: Trace, night: int) -> list[tuple]:
    """Every transaction the generator wrote whose batches night ``night`` holds, as of
    that night: its pieces, the markers the night has, the offsets it committed."""
    out = []
    for t in trace.txns:
        if t.label in ("T3", "T5", "zombie") and night == 1:
            continue
        pieces, ended = [], True
        for (topic, partition), (first, last, marker) in sorted(t.pieces.items()):
            known = marker is not None and trace.marker_in(topic, partition, marker, night)
            ended &= known
            pieces.append((topic, partition, first, last, marker if known else None))
        out.append((t.producer_id, t.epoch, "committed" if ended else "open", tuple(pieces),
                    tuple(sorted({GROUP} if t.commits else ())),
                    tuple(sorted((GROUP, tp, p, o) for tp, p, o in t.commits)),
                    t.label == "zombie"))
    return sorted(out)


def derived(wh) -> list[tuple]:
    rows = producer_txns.current(tables.read_arrow(str(wh), "producer_transactions")).to_pylist()
    return sorted((r["producer_id"], r["producer_epoch"], r["outcome"],
                   tuple((p["topic"], p["partition"], p["first_offset"], p["last_offset"],
                          p["marker_offset"]) for p in r["partitions"]),
                   tuple(r["groups"]),
                   tuple(sorted((c["group"], c["topic"], c["partition"], c["committed_offset"])
                                for c in r["offset_commits"])),
                   r["fenced"]) for r in rows)


#: the exactly-once checks (spark_jobs/audit/eos.py, issue 45)
EOS_CHECKS = tuple(c.name for c in registry.EOS_CHECKS)


def audit(spark, wh, run_id) -> list[tuple]:
    """The night's exactly-once findings (items not passed): (check, class, topic,
    partition, first offset, last offset, message)."""
    from spark_jobs import check_quality

    check_quality.main(["--warehouse", str(wh), "--run-id", run_id, "--no-docs"], spark=spark)
    out = []
    for r in tables.read_arrow(str(wh), "dq_results").to_pylist():
        if r["run_id"] != run_id or r["check"] not in EOS_CHECKS:
            continue
        for i in json.loads(r["details"])["items"]:
            if i["status"] != "pass":
                out.append((r["check"], i["class"], r["topic"], r["partition"],
                            i["first_offset"], i["last_offset"], i["message"]))
    return sorted(out)


@pytest.fixture(scope="module")
def nights(spark, tmp_path_factory):
    """Each trace's two nights decoded (night 1 published, night 2 on its branch), with
    ``producer_transactions`` after each and the audits: night 1's of the faulty trace
    only (the clean one's night 1 is published unaudited), night 2's of both."""
    from spark_jobs.publish import publish_run
    from spark_jobs.warehouse import Warehouse

    tmp = tmp_path_factory.mktemp("eos")
    out = {}
    for faults in (True, False):
        trace = Trace(faults)
        name = "faults" if faults else "clean"
        n1, n2 = trace.night(tmp / name / "n1", 1), trace.night(tmp / name / "n2", 2)
        wh = tmp / name / "wh"
        got = {"trace": trace, "summary": run(spark, n1, wh, "night-1", "--no-publish")}
        got["audit-1"] = audit(spark, wh, "night-1") if faults else None
        publish_run(Warehouse(str(wh)), "night-1")
        got["txns-1"] = derived(wh)
        run(spark, n2, wh, "night-2", "--no-publish")
        got["audit-2"] = audit(spark, wh, "night-2")
        publish_run(Warehouse(str(wh)), "night-2")
        got["txns-2"] = derived(wh)
        got["rows"] = producer_txns.current(
            tables.read_arrow(str(wh), "producer_transactions")).to_pylist()
        out[name] = got
    return out


def test_the_replay_holds_each_case():
    trace = Trace(True)
    one, two = replay(trace, 1), replay(trace, 2)
    assert [r[2] for r in one] == ["committed", "open"]  # T2's late marker
    assert [r[2] for r in two].count("committed") == 5 and any(r[6] for r in two)


@pytest.mark.parametrize("name", ["faults", "clean"])
def test_producer_transactions_equal_the_replay_over_two_nights(nights, name):
    got = nights[name]
    trace = got["trace"]
    assert got["summary"]["producer_transactions"] == 2
    assert got["txns-1"] == replay(trace, 1)
    assert got["txns-2"] == replay(trace, 2)  # T2 committed by its late marker
    rows = got["rows"]
    assert {r["transactional_id"] for r in rows} == {"app-1"}
    assert all(r["producer_id"] != IDEMPOTENT_PID for r in rows)
    t1 = min(rows, key=lambda r: r["start_time"])
    assert t1["producer_id"] == APP_PID and t1["duration_ms"] == 2 and t1["offsets_committed"]


def test_the_faults_are_exactly_the_three_findings(nights):
    got = nights["faults"]
    trace = got["trace"]
    assert got["audit-1"] == []  # the faults are night 2's
    zombie, t3, t5 = (next(t for t in trace.txns if t.label == x) for x in ("zombie", "T3", "T5"))
    z_first, z_last, _ = zombie.pieces[("out", 0)]
    commit = t5.pieces[("__consumer_offsets", 0)][0]  # T5's offset commit (one record)
    two = got["audit-2"]
    assert [f[:6] for f in two] == sorted([
        ("double_consumption", "double_consumption", "__consumer_offsets", 0, commit, commit),
        ("duplicate_sequence", "duplicate", "events", 0, 6, 8),
        ("zombie_write", "fenced_write", "out", 0, z_first, z_last),
    ]), two
    messages = {f[0]: f[-1] for f in two}
    assert "producer 2000 epoch 0 wrote sequences 3..5 at offset 6, overlapping its batch " \
           "at offset 3" in messages["duplicate_sequence"]
    assert f"producer {APP_PID} (transactional.id app-1)" in messages["zombie_write"] \
        and f"with epoch {zombie.epoch}" in messages["zombie_write"]
    assert "offsets 4..6 of in-1" in messages["double_consumption"]
    assert f"producer {APP_PID} epoch {t3.epoch}" in messages["double_consumption"]
    assert f"epoch {t5.epoch}" in messages["double_consumption"]


def test_the_clean_trace_gives_none(nights):
    assert nights["clean"]["audit-2"] == []


def test_sequence_gap_fires_only_where_nothing_explains_the_skip(spark, tmp_path):
    """``sequence_gap`` on one partition's batches, written by tests/segments.py (the v2
    grammar of apache/kafka ``DefaultRecordBatch``: baseSequence, lastOffsetDelta) and
    decoded by ``kafkalog``. An idempotent producer's sequences count its own records in the
    partition (``ProducerStateEntry``: the next batch's base sequence is the last one's + 1),
    so another producer's batches between two of its batches are no gap (the demo's
    ``orders-0`` wrote its base sequence from the partition's offsets before, skipping the
    other producer's 4 offsets: an unexplained gap, which is what the check is for)."""
    import kafkalog
    from tests import segments as seg

    from spark_jobs.audit import eos

    def batch(base, n, pid, epoch, seq):
        return seg.batch_v2([seg.record(k) for k in range(n)], base_offset=base,
                            producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    log = tmp_path / f"{0:020d}.log"
    log.write_bytes(b"".join([
        batch(0, 2, 10, 0, 0), batch(2, 3, 99, 0, 0),  # another producer between ...
        batch(5, 2, 10, 0, 2),                          # ... and 10 goes on at 2: no gap
        batch(7, 2, 10, 0, 7),                          # 4..6 skipped, offsets 7.. follow 6
        batch(9, 2, 20, 0, 0), batch(14, 2, 20, 0, 5),  # offsets 11..13 gone (retention, cleaner)
        batch(16, 1, 30, 2, 0), batch(17, 1, 30, 2, 3),  # the .snapshot saw sequence 2
    ]))
    decoded = kafkalog.decode(log).batches
    columns = ("base_offset", "last_offset", "producer_id", "producer_epoch", "base_sequence",
               "last_sequence", "position", "magic", "is_control")
    batches = spark.createDataFrame(
        [("p", 0, str(log), *(r[c] for c in columns)) for r in decoded.to_pylist()],
        "topic string, partition int, segment string, base_offset bigint, last_offset bigint, "
        "producer_id bigint, producer_epoch smallint, base_sequence int, last_sequence int, "
        "position bigint, magic tinyint, is_control boolean")
    state = spark.createDataFrame(
        [("p", 0, 30, 2, 2)], "topic string, partition int, producer_id bigint, "
                              "producer_epoch smallint, last_sequence int")
    got = sorted((r["class"], r["value"], r["first_offset"], r["last_offset"], r["offsets"])
                 for r in eos.sequence_gaps(batches, state).collect())
    # (class, producer, the hole's offsets or the skipping batch's, sequences missing)
    assert got == [("offset_hole", 20, 11, 13, 3), ("snapshot_agrees", 30, 17, 17, 2),
                   ("unexplained", 10, 7, 8, 3)], got
    # without the snapshot, producer 30's skip is unexplained too
    assert sorted(r["class"] for r in eos.sequence_gaps(batches).collect()) == [
        "offset_hole", "unexplained", "unexplained"]
