"""Replicas (spark_jobs/decode/replicas.py): copies of one partition under several
brokers' folders are matched batch by batch and decoded once.

The snapshot is built from kafka-python's record builder (``segments.kp_v2``, an
independent encoder): batch ``i`` of a partition holds offsets ``3i..3i+2`` whose
values say which partition and offset they are. The expected table of each case is
written down from those values, never read back with our decoder; the job's tables
are compared with it whole, counting offsets lost and duplicated. One decode run (and
one audit) covers every case, each its own partition.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path

import pytest

import kafkalog

from tests.runs import decode
from tests.paths import pure_python
from tests.segments import kp_legacy, kp_v2
from spark_jobs import tables
from spark_jobs.decode import replicas
from spark_jobs.decode.planning import Segment
from spark_jobs.findings import REPLICA_DIVERGENCE, REPLICA_DIVERGENCE_PREFIX

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z
PER = 3  # records per batch


def value(tp: str, offset: int, tag: str = "") -> bytes:
    return f"{tp}@{offset}{tag}".encode()


def batch(tp: str, i: int, tag: str = "", n: int = PER) -> bytes:
    """Batch ``i`` of partition ``tp``: offsets ``3i..3i+n-1`` (kafka-python's builder)."""
    first = PER * i
    return kp_v2(0, [value(tp, first + k, tag) for k in range(n)], base_offset=first,
                 timestamp=T0 + first * 1000)


def write_copy(root: Path, copy: str, tp: str, segments: list[list[bytes]]) -> None:
    """One broker's copy of ``tp``: a segment per list of batches, named by its base offset."""
    folder = root / copy / tp
    folder.mkdir(parents=True, exist_ok=True)
    for batches in segments:
        base = struct.unpack_from(">q", batches[0])[0]
        (folder / f"{base:020d}.log").write_bytes(b"".join(batches))


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


def expected(tp: str, offsets, tag_at=None) -> dict:
    """(topic, partition, offset) -> value, from the values the builder was given."""
    topic, _, part = tp.rpartition("-")
    tag_at = tag_at or {}
    return {(topic, int(part), o): value(tp, o, tag_at.get(o, "")) for o in offsets}


def snapshot(root: Path) -> dict:
    """Every case as its own partition, under brokers b1, b2 (and b3); returns the
    expected records of the whole snapshot."""
    want = {}
    six = range(6 * PER)
    # identical replicas
    for copy in ("b1", "b2"):
        write_copy(root, copy, "same-0", [[batch("same-0", i) for i in range(6)]])
    want.update(expected("same-0", six))
    # one replica behind: b2 has the first four batches only
    write_copy(root, "b1", "behind-0", [[batch("behind-0", i) for i in range(6)]])
    write_copy(root, "b2", "behind-0", [[batch("behind-0", i) for i in range(4)]])
    want.update(expected("behind-0", six))
    # a truncated tail: b1's first segment (rolled at offset 9) ends in half of batch
    # 2; b2 is behind (batches 0..3) but holds batch 2 whole: the other side of b1's
    # torn tail comes from b2, the rest from b1
    torn = [batch("torn-0", i) for i in range(6)]
    write_copy(root, "b1", "torn-0", [torn[:2] + [torn[2][:40]], torn[3:]])
    write_copy(root, "b2", "torn-0", [torn[:4]])
    want.update(expected("torn-0", six))
    # diverged: same offsets (12..14), different CRC; the primary copy (b1) is kept
    write_copy(root, "b1", "diverged-0", [[batch("diverged-0", i) for i in range(5)]])
    write_copy(root, "b2", "diverged-0", [[batch("diverged-0", i) for i in range(4)]
                                          + [batch("diverged-0", 4, tag="!")]])
    want.update(expected("diverged-0", range(5 * PER)))
    # diverged with offsets of its own: b1 (primary: it reaches 17) has a damaged
    # batch 4 (12..14, its CRC fails); b2's batch there holds 12..15 with other values.
    # 12..14 come from b2, the Spark dedupe keeps the first copy of 15 (b1's)
    ones = [batch("diverged-1", i) for i in range(6)]
    write_copy(root, "b1", "diverged-1", [ones[:4] + [flip(ones[4], 80), ones[5]]])
    write_copy(root, "b2", "diverged-1", [ones[:4] + [batch("diverged-1", 4, tag="!", n=4)]])
    want.update(expected("diverged-1", six, {o: "!" for o in range(12, 15)}))
    # segments split differently: b1 rolled at offset 6, b2 at offset 9 and 15
    split = [batch("split-0", i) for i in range(6)]
    write_copy(root, "b1", "split-0", [split[:2], split[2:]])
    write_copy(root, "b2", "split-0", [split[:3], split[3:5], split[5:]])
    want.update(expected("split-0", six))
    # three copies: b1 behind, b2 with a damaged batch 2 (CRC fails), b3 whole but
    # torn after batch 5: every batch from a copy that verifies
    three = [batch("three-0", i) for i in range(7)]
    write_copy(root, "b1", "three-0", [three[:3]])
    write_copy(root, "b2", "three-0", [three[:2] + [flip(three[2], 80)] + three[3:6]])
    write_copy(root, "b3", "three-0", [three[:6] + [three[6][:50]]])
    want.update(expected("three-0", six))
    return want


@pytest.mark.pipeline
def test_replicas_are_decoded_once_and_match_the_expected_tables(spark, tmp_path):
    from spark_jobs import check_quality

    want = snapshot(tmp_path / "snap")
    wh = tmp_path / "wh"
    s = decode(spark, tmp_path / "snap", wh, "r1")
    rec = tables.read_arrow(str(wh), "records", columns=("topic", "partition", "offset", "value"))
    got = Counter(zip(*(rec.column(c).to_pylist() for c in ("topic", "partition", "offset"))))
    lost = len(set(want) - set(got))
    duplicated = sum(n - 1 for n in got.values() if n > 1)
    extra = len(set(got) - set(want))
    assert (lost, duplicated, extra) == (0, 0, 0)
    values = dict(zip(zip(*(rec.column(c).to_pylist() for c in ("topic", "partition", "offset"))),
                      rec.column("value").to_pylist()))
    assert values == want

    # every replicated partition reconciled; only diverged-1 needed the Spark dedupe
    assert s["replicated_partitions"] == 7 and s["pending_partitions"] == 1
    ledger = tables.read_arrow(str(wh), "ledger").to_pylist()
    decoded = {(r["topic"], r["segment"].split("/snap/")[1].split("/")[0]) for r in ledger}
    # identical and split copies: one copy decoded, the other only framed
    assert {c for t, c in decoded if t == "same"} == {"b1"}
    assert {c for t, c in decoded if t == "split"} == {"b1"}
    # bytes read per partition: one copy's worth, plus what only the other copy holds
    read = Counter()
    for r in ledger:
        read[r["topic"]] += r["byte_end"] - r["byte_start"]
    one_copy = {tp: sum(len(batch(tp, i)) for i in range(6)) for tp in ("same-0", "split-0")}
    assert read["same"] == one_copy["same-0"] and read["split"] == one_copy["split-0"]
    # the batches table holds each batch once
    b = tables.read_arrow(str(wh), "batches", columns=("topic", "partition", "base_offset"))
    assert max(Counter(zip(*(b.column(c).to_pylist() for c in b.column_names))).values()) == 1

    # divergences: one finding per diverged batch, naming both copies, no record-level ones
    findings = tables.read_arrow(str(wh), "findings").to_pylist()
    div = sorted((f["topic"], f["base_offset"], f["last_offset"]) for f in findings
                 if f["kind"] == REPLICA_DIVERGENCE)
    assert div == [("diverged", 12, 14), ("diverged", 12, 15)]
    assert not [f for f in findings if f["kind"] == "divergence"]  # no record-level ones
    for f in findings:
        if f["kind"] == REPLICA_DIVERGENCE:
            assert f["message"].startswith(REPLICA_DIVERGENCE_PREFIX)
            assert "/b2/" in f["segment"] and "/b1/" + f["topic"] in f["message"]
    assert s["divergences"] == 2
    # the primary copy's torn tail is reported (its bytes are decoded); a framed copy's
    # torn tail is not (b3's in three-0: a follower copied mid-write)
    damage = sorted((f["topic"], f["kind"], f["segment"].split("/snap/")[1]) for f in findings
                    if f["kind"] in ("crc_mismatch", "truncated_tail"))
    assert damage == [("torn", "truncated_tail", "b1/torn-0/00000000000000000000.log")]
    # a copy's batch whose CRC fails, not decoded because another copy's was, is a
    # replica_crc_mismatch finding naming that copy, at its bytes: b1's batch 4 in
    # diverged-1, b2's batch 2 in three-0
    ones = [batch("diverged-1", i) for i in range(5)]
    three = [batch("three-0", i) for i in range(3)]
    seg0 = "00000000000000000000.log"
    damaged = sorted((f["topic"], f["partition"], f["segment"].split("/snap/")[1], f["position"],
                      f["end"], f["base_offset"], f["last_offset"]) for f in findings
                     if f["kind"] == replicas.DAMAGED_COPY)
    at = lambda bs: sum(len(b) for b in bs)
    assert damaged == [
        ("diverged", 1, f"b1/diverged-1/{seg0}", at(ones[:4]), at(ones), 12, 14),
        ("three", 0, f"b2/three-0/{seg0}", at(three[:2]), at(three), 6, 8)]
    assert all("fails its CRC: this copy is damaged" in f["message"] for f in findings
               if f["kind"] == replicas.DAMAGED_COPY)
    assert s["findings"] == len(findings)

    # the audit reports them as replica_divergence (and not again as divergence)
    assert check_quality.main(["--warehouse", str(wh), "--run-id", "r1", "--no-docs"],
                              spark=spark) == check_quality.EXIT_CHECKS_FAILED
    dq = tables.read_arrow(str(wh), "dq_results").to_pylist()
    bad = sorted((r["check"], r["topic"], r["partition"], r["failed"]) for r in dq
                 if r["status"] != "pass")
    # (diverged-1: b2's batch 12..15 lost offset 15 to b1's batch 15..17, so the batch
    # checks see a batch without all its records: the divergence's own evidence)
    # (decoder_findings: the damaged copies above, a warning each)
    assert bad == [("decoder_findings", "diverged", 1, 1), ("decoder_findings", "three", 0, 1),
                   ("max_timestamp", "diverged", 1, 1), ("record_count", "diverged", 1, 1),
                   ("replica_divergence", "diverged", 0, 1), ("replica_divergence", "diverged", 1, 1),
                   ("truncated_tail", "torn", 0, 1)]
    assert {r["status"] for r in dq if r["check"] == "decoder_findings"
            and r["status"] != "pass"} == {"warn"}
    item = json.loads(next(r["details"] for r in dq if r["check"] == "replica_divergence"
                           and r["status"] == "fail"))["items"][0]
    assert "/b1/" in item["message"] and "/b2/" in item["message"]


def seg(copy: str, base: int, data: bytes) -> Segment:
    return Segment(f"/s/{copy}/t-0/{base:020d}.log", "t", 0, base, len(data))


def test_reconcile_takes_each_batch_once_from_a_copy_that_verifies():
    whole = [batch("t-0", i) for i in range(4)]
    a = b"".join(whole)
    damaged = b"".join(whole[:1] + [flip(whole[1], 70)] + whole[2:])
    segs = [seg("b1", 0, damaged), seg("b2", 0, a[:len(whole[0]) + len(whole[1])]),
            seg("b2", 6, b"".join(whole[2:]))]
    framed = {s.uri: replicas.frame(data) for s, data in
              zip(segs, [damaged, a[:len(whole[0]) + len(whole[1])], b"".join(whole[2:])])}
    assert [e.valid for e in framed[segs[0].uri].entries] == [True, False, True, True]
    choice = replicas.reconcile(segs, framed)
    # b1 is primary (4 batches); its damaged batch 1 comes from b2, nothing is pending
    b0 = len(whole[0])
    assert choice.ranges == {segs[0].uri: [(0, b0), (b0 + len(whole[1]), len(a))],
                             segs[1].uri: [(b0, b0 + len(whole[1]))]}
    assert (choice.divergences, choice.pending, choice.primary) == ([], False, "/s/b1")
    # b1's damaged copy of batch 1 is not decoded: a finding of its own, at its bytes
    [d] = choice.damaged
    assert (d["kind"], d["segment"], d["position"], d["end"], d["base_offset"],
            d["last_offset"]) == (replicas.DAMAGED_COPY, segs[0].uri, b0, b0 + len(whole[1]),
                                  PER, 2 * PER - 1)
    # where no copy of a batch verifies, the damaged one is decoded (the decoder reports
    # its crc_mismatch) and is not a damaged copy
    alone = replicas.reconcile(segs[:1], {segs[0].uri: framed[segs[0].uri]})
    assert alone.ranges == {segs[0].uri: [(0, len(a))]} and alone.damaged == []


def test_framing_stops_where_entries_stop_and_says_whether_more_follow():
    data = b"".join(batch("t-0", i) for i in range(3))
    assert replicas.frame(data).end == len(data)
    torn = replicas.frame(data[:-5])
    assert (len(torn.entries), torn.end, torn.rest) == (2, len(data) - len(batch("t-0", 2)), False)
    # garbage between batches: framing stops there, a verifying entry follows
    hole = batch("t-0", 0) + b"\x01" * 30 + batch("t-0", 1)
    f = replicas.frame(hole)
    assert (len(f.entries), f.end, f.rest) == (1, len(batch("t-0", 0)), True)
    assert replicas.Framed.from_bytes(f.to_bytes()) == f  # how executors send it
    assert replicas.Framed.from_bytes(replicas.frame(b"").to_bytes()).entries == ()
    # a kept range is cut at entry positions about split_bytes apart
    whole = replicas.frame(data)
    cuts = [e.position for e in whole.entries] + [len(data)]
    assert replicas.split_range(whole, 0, len(data), 1) == list(zip(cuts, cuts[1:]))
    assert replicas.split_range(whole, cuts[1], len(data), 10**6) == [(cuts[1], len(data))]


def test_copies_that_agree_are_decided_on_arrays_as_batch_by_batch():
    # three copies: split differently, one behind; the array path and the batch-by-batch
    # path choose the same bytes; a diverged copy (or a damaged primary) leaves it to the
    # batch-by-batch path
    whole = [batch("t-0", i) for i in range(5)]
    a = b"".join(whole)
    cut = sum(map(len, whole[:2]))
    datas = {seg("b1", 0, a): a, seg("b2", 0, a[:cut]): a[:cut],
             seg("b2", 6, a[cut:]): a[cut:], seg("b3", 0, a[:cut]): a[:cut]}
    segs = list(datas)
    framed = {s.uri: replicas.frame(d) for s, d in datas.items()}
    ranges, primary = replicas._copies_agree(segs, framed)
    general = replicas._reconcile_entries(segs, framed)
    assert (ranges, primary) == (general[0], general[3]) == ({segs[0].uri: [[0, len(a)]]}, "/s/b1")
    assert general[1:3] == ([], False)
    other = b"".join(whole[:3]) + batch("t-0", 3, tag="x") + whole[4]
    framed[segs[0].uri] = replicas.frame(other)
    assert replicas._copies_agree(segs, framed) is None
    assert len(replicas.reconcile(segs, framed).divergences) == 1
    framed[segs[0].uri] = replicas.frame(flip(a, 70))
    assert replicas._copies_agree(segs, framed) is None


@pytest.mark.skipif(not kafkalog.ACCELERATED, reason="the compiled path is not built")
def test_compiled_framing_is_the_pure_framing():
    # runs of v2 batches are framed in C (kafkalog.frame, compiled), the rest in Python:
    # the same entries, end and rest on v2 runs around legacy entries, a damaged batch, a
    # batch whose last offset would leave int64 (its base offset is outside the CRC), a
    # torn tail and garbage
    v2s = [batch("t-0", i) for i in range(4)]
    near_top = bytearray(batch("t-0", 0))
    struct.pack_into(">q", near_top, 0, (1 << 63) - 1)
    inputs = [
        b"".join(v2s),
        kp_legacy(1, 0, [b"a", b"b"], offset=0) + b"".join(v2s[1:]) + kp_legacy(1, 1, [b"c" * 50] * 3, offset=12),
        flip(b"".join(v2s), 80),
        b"".join(v2s[:2]) + bytes(near_top) + v2s[3],
        b"".join(v2s)[:-7],
        v2s[0] + b"\x01" * 40 + v2s[1],
        b"",
    ]
    for data in inputs:
        with pure_python(True):
            pure = replicas.frame(data)
        with pure_python(False):
            fast = replicas.frame(data)
        assert fast == pure and fast.entries == pure.entries, data[:20]
    assert len(replicas.frame(inputs[1]).entries) == 2 + 3 + 1
    assert [e.valid for e in replicas.frame(inputs[2]).entries] == [False, True, True, True]
    assert len(replicas.frame(inputs[3]).entries) == 2  # framing stops at the impossible batch


@pytest.mark.pipeline
def test_the_audit_tells_replica_divergences_by_kind_and_older_rows_by_their_message(spark):
    """A ``replica_divergence`` finding, and one a run wrote before the kind existed (kind
    ``divergence``, message starting ``replica divergence:``; old warehouses keep them), are
    the ``replica_divergence`` check's; a record-level ``divergence`` stays ``divergence``'s,
    and neither replica row is counted again by ``finding_checks``."""
    import pyarrow as pa

    from spark_jobs import schemas
    from spark_jobs.audit import findings_checks as checks

    base = dict(topic="t", partition=0, position=0, end=10, base_offset=5, last_offset=6,
                bytes=10, raw=None, segment="s", segment_base_offset=0, run_id="r")
    rows = [dict(base, kind=REPLICA_DIVERGENCE, message=f"{REPLICA_DIVERGENCE_PREFIX} new"),
            dict(base, kind="divergence", message=f"{REPLICA_DIVERGENCE_PREFIX} old"),
            dict(base, kind="divergence", message="offset 5 of t-0 has two different contents")]
    findings = spark.createDataFrame(
        pa.Table.from_pylist(rows, schema=schemas.FINDINGS).to_pandas(),
        schema=schemas.spark_schema("findings"))
    newest = spark.createDataFrame([], "topic string, partition int, segment string")
    assert sorted(r.message for r in checks.replica_divergences(findings).collect()) == [
        f"{REPLICA_DIVERGENCE_PREFIX} new", f"{REPLICA_DIVERGENCE_PREFIX} old"]
    assert [r.check for r in checks.finding_checks(findings, newest).collect()] == ["divergence"]
