"""The ``remote_segments`` table and the tier audit (issue 34 items 3 and 5).

Two snapshot nights hold eight partitions of ``orders`` (a local tail each) and
``__remote_log_metadata-0``, whose records are packed here from Kafka's message specs
(``RemoteLogSegmentMetadataRecord`` / ``…UpdateRecord`` v0, framed as RemoteLogMetadataSerde
does: not with kafkalog's decoder or spec reader); the tier's objects are written to a moto S3
server by ``tests/tiered_encoder.py`` (the plugin's own upload). Night 2's metadata segment is
night 1's plus more events (an overlapping snapshot): a copy finished, a segment deleted.

* ``remote_segments`` equals this file's own replay of the events it wrote (a state machine
  written here, not kafkalog.internal.remote_log.segment_rows) for each night, and again
  after a rerun of night 2.
* Each partition but the clean one plants one tier anomaly; each is flagged exactly once,
  by its own check, and nothing else is flagged but night 2's one undecodable metadata record
  (an ``internal_record_error`` finding, found once, a rerun included).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import struct

import pytest

from tests.runs import decode
from tests import tiered_encoder as enc
from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs import tables
from spark_jobs.warehouse import Warehouse, branch_name

pytestmark = pytest.mark.pipeline

TOPIC = "orders"
T0 = 1_763_596_800_000  # 2025-11-20T00:00:00Z
MIN = 60_000
NIGHTS = ("2025-11-20", "2025-11-21")
PREFIX = "tiered/"
#: the tier audit's checks and the one partition each should flag (None: none)
PLANTED = {"tier_copy_orphans": 1, "tier_missing_objects": 2, "tier_unreferenced_objects": 3,
           "tier_reuploads": 4, "tier_leader_epochs": 5, "tier_divergence": 6}
PLANTED_EPOCH_REGRESSION = 7  # tier_leader_epochs' second class, a partition of its own


def kafka_uuid(name: str) -> tuple[str, bytes]:
    """A Kafka Uuid (16 bytes) and its toString (URL-safe base64, no padding)."""
    raw = hashlib.sha256(name.encode()).digest()[:16]
    return base64.urlsafe_b64encode(raw).decode().rstrip("="), raw


TOPIC_ID, TOPIC_ID_RAW = kafka_uuid("orders")


# ----------------------------------------------------------------- the specs, packed by hand

uv = enc.uvarint
NO_TAGS = uv(0)


def compact_string(s: str) -> bytes:
    return uv(len(s.encode()) + 1) + s.encode()


def compact_bytes(b: bytes | None) -> bytes:
    return uv(0) if b is None else uv(len(b) + 1) + b


def segment_id_entry(partition: int, seg_raw: bytes) -> bytes:
    """RemoteLogSegmentIdEntry: TopicIdPartitionEntry (Name, Id, Partition, tags), Id, tags."""
    return (compact_string(TOPIC) + TOPIC_ID_RAW + struct.pack(">i", partition) + NO_TAGS
            + seg_raw + NO_TAGS)


def framed(api_key: int, body: bytes) -> bytes:
    """RemoteLogMetadataSerde: frame version 1, api key, record version 0, the record."""
    return uv(1) + uv(api_key) + uv(0) + body


def metadata_record(partition, seg_raw, start, end, epochs, size, ts) -> bytes:
    """RemoteLogSegmentMetadataRecord v0 (COPY_SEGMENT_STARTED, broker 1)."""
    body = (segment_id_entry(partition, seg_raw) + struct.pack(">qqiqq", start, end, 1,
                                                               ts - 1000, ts)
            + uv(len(epochs) + 1)
            + b"".join(struct.pack(">iq", e, o) + NO_TAGS for e, o in epochs)
            + struct.pack(">i", size) + compact_bytes(None) + b"\x00" + NO_TAGS)
    return framed(0, body)


def update_record(partition, seg_raw, state, ts, custom=None) -> bytes:
    """RemoteLogSegmentMetadataUpdateRecord v0 (broker 1)."""
    return framed(1, segment_id_entry(partition, seg_raw) + struct.pack(">iq", 1, ts)
                  + compact_bytes(custom) + bytes([state]) + NO_TAGS)


STATES = {0: "COPY_SEGMENT_STARTED", 1: "COPY_SEGMENT_FINISHED", 2: "DELETE_SEGMENT_STARTED",
          3: "DELETE_SEGMENT_FINISHED"}


# ----------------------------------------------------------------- the story


class Seg:
    def __init__(self, name, partition, start, end, epochs):
        self.name, self.partition, self.start, self.end, self.epochs = (
            name, partition, start, end, epochs)
        self.id, self.raw = kafka_uuid(name)
        self.upload = enc.upload(b"\x00" * 300 + name.encode(), chunk_size=128, prefix=PREFIX,
                                 topic=TOPIC, topic_id=TOPIC_ID, partition=partition,
                                 start_offset=start, end_offset=end, segment_id=self.id)
        self.size = 300 + len(name)


SEGS = {s.name: s for s in [
    Seg("A0", 0, 0, 99, [(0, 0)]), Seg("A1", 0, 100, 199, [(0, 100), (1, 150)]),
    Seg("A2", 0, 200, 299, [(1, 200)]),
    Seg("B0", 1, 0, 99, [(0, 0)]), Seg("B1", 1, 100, 199, [(0, 100)]),
    Seg("C0", 2, 0, 99, [(0, 0)]),
    Seg("D0", 3, 0, 99, [(0, 0)]), Seg("Dghost", 3, 100, 199, [(0, 100)]),
    Seg("E1", 4, 0, 99, [(0, 0)]), Seg("E2", 4, 0, 99, [(1, 0)]),
    Seg("F0", 5, 0, 99, [(0, 0)]), Seg("F1", 5, 150, 199, [(0, 150)]),
    Seg("H0", 6, 0, 99, [(0, 0)]),
    Seg("G0", 7, 0, 99, [(3, 0)]), Seg("G1", 7, 100, 199, [(2, 100)]),
]}
#: (segment, state) in the order of __remote_log_metadata-0; a state 0 is the metadata record
NIGHT1 = [("A0", 0), ("A0", 1), ("A1", 0), ("B0", 0), ("B0", 1), ("B1", 0), ("C0", 0),
          ("C0", 1), ("D0", 0), ("D0", 1), ("E1", 0), ("E1", 1), ("F0", 0), ("F0", 1),
          ("F1", 0), ("F1", 1), ("H0", 0), ("H0", 1), ("G0", 0), ("G0", 1), ("G1", 0), ("G1", 1)]
#: night 2: A1's copy finished, E1 deleted and copied again as E2, A2's copy under way
NIGHT2 = [("A1", 1), ("E1", 2), ("E1", 3), ("E2", 0), ("E2", 1), ("A2", 0)]


def event_times(events) -> list[int]:
    """Night 1's events a minute apart from T0, night 2's from T0 + 3 h: A2's copy starts last
    (in flight, not an orphan), B1's started ~3 h before it (an orphan)."""
    out = []
    for i, (name, _) in enumerate(events):
        t = T0 + i * MIN if i < len(NIGHT1) else T0 + 180 * MIN + (i - len(NIGHT1)) * MIN
        out.append(t)
    return out


def records(events) -> list[tuple[bytes, int]]:
    out = []
    for (name, state), ts in zip(events, event_times(events)):
        s = SEGS[name]
        if state == 0:
            out.append((metadata_record(s.partition, s.raw, s.start, s.end, s.epochs, s.size,
                                        ts), ts))
        else:
            custom = s.upload.custom_metadata if state == 1 else None
            out.append((update_record(s.partition, s.raw, state, ts, custom), ts))
    return out


#: a record of an api key __remote_log_metadata does not have (night 2's last): a finding
UNDECODABLE = framed(7, b"")


def write_snapshot(root, events, undecodable=False):
    for p in range(8):
        with SegmentWriter(root / f"{TOPIC}-{p}", 1000) as w:
            w.append([WriteRecord(b"k", b"v%d" % i, timestamp=T0 + i) for i in range(2)])
    with SegmentWriter(root / "__remote_log_metadata-0", 0) as w:
        for value, ts in records(events):
            w.append([WriteRecord(None, value, timestamp=ts)])
        if undecodable:
            w.append([WriteRecord(None, UNDECODABLE, timestamp=ts)])


def replay(events, night, run_id) -> list[dict]:
    """remote_segments as this test reads its own story (no problems planted)."""
    rows: dict = {}
    for offset, ((name, state), ts) in enumerate(zip(events, event_times(events))):
        s = SEGS[name]
        if state == 0:
            rows[name] = {
                "segment_id": s.id, "topic_id": TOPIC_ID, "topic": TOPIC, "partition": s.partition,
                "start_offset": s.start, "end_offset": s.end, "max_timestamp": _ts(ts - 1000),
                "broker_id": 1, "segment_size_in_bytes": s.size,
                "segment_leader_epochs": [{"leader_epoch": e, "start_offset": o}
                                          for e, o in s.epochs],
                "state_history": [], "custom_metadata": None, "remote_size": None,
                "object_prefix": None, "object_key": None, "partition_delete_state": None,
                "problems": [], "night": night, "run_id": run_id}
        row = rows[name]
        row["state"] = STATES[state]
        row["state_history"].append({"state": STATES[state], "event_timestamp": _ts(ts),
                                     "broker_id": 1, "metadata_partition": 0,
                                     "metadata_offset": offset})
        if state == 1:
            row.update(custom_metadata=s.upload.custom_metadata,
                       remote_size=sum(len(v) for v in s.upload.objects.values()),
                       object_prefix=PREFIX, object_key=s.upload.main)
    return sorted(rows.values(), key=lambda r: r["segment_id"])


def _ts(ms):
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def put_tier(client, bucket):
    """The tier as the night-2 story leaves it, with its planted faults."""
    for name, s in SEGS.items():
        for key, data in s.upload.objects.items():
            if name in ("A2", "E1"):
                continue  # A2's copy has uploaded nothing yet; E1's objects were deleted
            if name == "B1" and not key.endswith(".log"):
                continue  # the orphan copy left its .log only
            if name == "C0" and key.endswith(".indexes"):
                continue  # a live segment's .indexes gone
            client.put_object(Bucket=bucket, Key=key, Body=data)


def remote_rows(w, ref, run_id):
    got = tables.read_arrow(Warehouse(w), "remote_segments", ref=ref).to_pylist()
    return sorted((r for r in got if r["run_id"] == run_id), key=lambda r: r["segment_id"])


def test_remote_segments_and_the_tier_audit(spark, tmp_path, s3_endpoint, s3_bucket, capsys):
    import boto3

    from spark_jobs import check_quality, findings
    from spark_jobs.decode.writing import make_context, write_driver_table

    client = boto3.client("s3", endpoint_url=s3_endpoint)
    put_tier(client, s3_bucket)
    W = str(tmp_path / "w")
    snaps = []
    for night, events in zip(NIGHTS, (NIGHT1, NIGHT1 + NIGHT2)):
        snap = tmp_path / night
        write_snapshot(snap, events, undecodable=night == NIGHTS[1])
        snaps.append(snap)

    # night 1, published; night 2 over an overlapping snapshot, staged
    decode(spark, snaps[0], W, "n1", night=NIGHTS[0])
    assert remote_rows(W, "main", "n1") == replay(NIGHT1, NIGHTS[0], "n1")
    decode(spark, snaps[1], W, "n2", "--no-publish", night=NIGHTS[1])
    expected2 = replay(NIGHT1 + NIGHT2, NIGHTS[1], "n2")
    assert remote_rows(W, branch_name("n2"), "n2") == expected2
    assert {r["segment_id"]: r["state"] for r in expected2}[SEGS["E1"].id] == \
        "DELETE_SEGMENT_FINISHED"

    # the tier reconciliation's finding ("tier"'s decode job), written on the run's branch
    wh = Warehouse(W)
    ctx = make_context(wh, "n2", "x", chunk_id="tier")
    h0 = SEGS["H0"]
    found = findings.table([findings.Finding(
        kind=findings.TIER_DIVERGENCE, topic=TOPIC, partition=6, position=0, end=0,
        base_offset=40, last_offset=49, segment=f"s3://{s3_bucket}/{h0.upload.key('log')}",
        message="offsets 40..49: the remote copy and the local tail differ", run_id="n2")])
    wh.commit_files("findings", "n2", write_driver_table(ctx, "findings", found, "tier"),
                    chunk_id="tier")

    def audit(*extra, docs=False):
        code = check_quality.main(["--warehouse", W, "--run-id", "n2", "--s3-endpoint",
                                   s3_endpoint, *extra, *(() if docs else ("--no-docs",))],
                                  spark=spark)
        return code, [r for r in tables.read_arrow(wh, "dq_results").to_pylist()
                      if r["run_id"] == "n2"]

    # a tier that cannot be listed: one line, exit 2
    code, _ = audit("--tiered-storage", "s3://no-such-bucket/tiered/")
    assert code == 2
    assert "--tiered-storage s3://no-such-bucket/tiered/" in capsys.readouterr().err

    # without a tier: the metadata checks only
    code, dq = audit()
    assert code == check_quality.EXIT_CHECKS_FAILED  # the offset gap, the divergence
    assert {r["check"] for r in dq if r["check"].startswith("tier_")} == set(PLANTED) - {
        "tier_missing_objects", "tier_unreferenced_objects"}

    # with the tier, and the Data Docs (their suites must agree with dq_results)
    code, dq = audit("--tiered-storage", f"s3://{s3_bucket}/{PREFIX}", docs=True)
    assert code == check_quality.EXIT_CHECKS_FAILED
    tier_rows = [r for r in dq if r["check"].startswith("tier_")]
    # every flag of the whole audit is a planted one, each found once by its own check
    # (and the undecodable metadata record: one internal_record_error finding, a warning)
    flagged = {(r["check"], r["topic"], r["partition"], r["failed"]) for r in dq
               if r["status"] != "pass"}
    assert flagged == {(c, TOPIC, p, 1) for c, p in PLANTED.items()} | {
        ("tier_leader_epochs", TOPIC, PLANTED_EPOCH_REGRESSION, 1),
        ("decoder_findings", "__remote_log_metadata", 0, 1)}
    assert [f["kind"] for f in tables.read_arrow(wh, "findings", ref=branch_name("n2"))
            .to_pylist() if f["topic"] == "__remote_log_metadata"] == ["internal_record_error"]
    classes = {(r["check"], r["partition"]): r["details"] for r in tier_rows}
    assert '"orphan"' in classes[("tier_copy_orphans", 1)]
    assert '"in_flight"' in classes[("tier_copy_orphans", 0)]  # A2, 5 min old: passes
    assert '"offset_gap"' in classes[("tier_leader_epochs", 5)]
    assert '"epoch_regression"' in classes[("tier_leader_epochs", 7)]
    # every tiered partition has a result of each check (all 8 have metadata and objects)
    assert {(r["check"], r["partition"]) for r in tier_rows} == {
        (c, p) for c in PLANTED for p in range(8)}

    # a rerun of night 2 changes nothing
    decode(spark, snaps[1], W, "n2", "--no-publish", night=NIGHTS[1])
    assert remote_rows(W, branch_name("n2"), "n2") == expected2
    assert [f["kind"] for f in tables.read_arrow(wh, "findings", ref=branch_name("n2"))
            .to_pylist() if f["topic"] == "__remote_log_metadata"] == ["internal_record_error"]
