"""Idempotent and transactional producers checked from the log (issue 45): the
``producer_transactions`` table against the generator's own account of what it wrote, and
the audit's exactly-once checks on a trace with one zombie write, one double commit and one
duplicated idempotent batch (tests/eos_trace.py: batches from tests/segments.py, offset
commits and transaction state from Kafka's 4.3.0 specs by tests/kafka_messages.py)."""

from __future__ import annotations

import pytest

from eos_trace import APP_PID, GROUP, IDEMPOTENT_PID, Trace
from spark_jobs import decode as job
from spark_jobs import tables
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


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eos")
    out = {}
    for faults in (True, False):
        trace = Trace(faults)
        name = "faults" if faults else "clean"
        out[name] = (trace, trace.night(tmp / name / "n1", 1), trace.night(tmp / name / "n2", 2),
                     tmp / name / "wh")
    return out


def test_the_replay_holds_each_case(nights):
    trace, *_ = nights["faults"]
    one, two = replay(trace, 1), replay(trace, 2)
    assert [r[2] for r in one] == ["committed", "open"]  # T2's late marker
    assert [r[2] for r in two].count("committed") == 5 and any(r[6] for r in two)


def test_producer_transactions_equal_the_replay_over_two_nights(spark, nights):
    trace, n1, n2, wh = nights["faults"]
    s1 = run(spark, n1, wh, "night-1")
    assert s1["producer_transactions"] == 2
    assert derived(wh) == replay(trace, 1)
    run(spark, n2, wh, "night-2")
    assert derived(wh) == replay(trace, 2)  # T2 committed by its late marker
    rows = producer_txns.current(tables.read_arrow(str(wh), "producer_transactions")).to_pylist()
    assert {r["transactional_id"] for r in rows} == {"app-1"}
    assert all(r["producer_id"] != IDEMPOTENT_PID for r in rows)
    t1 = min(rows, key=lambda r: r["start_time"])
    assert t1["producer_id"] == APP_PID and t1["duration_ms"] == 2 and t1["offsets_committed"]
