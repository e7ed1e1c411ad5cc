"""The decode job over a tier (issue 34 item 4; spark_jobs/decode/tier.py): remote segments
read from a moto S3 server, beside a local tail that overlaps the last remote one.

Independent evidence throughout: batches from kafka-python's builder (``segments.kp_v2``),
batch ``i`` of a partition holding offsets ``3i..3i+2`` whose values name the partition and
offset; tier objects from ``tiered_encoder`` (written from Aiven's plugin's Java code);
``__remote_log_metadata`` records hand-packed from Kafka's specs' field order (also in
``tiered_encoder``); the
``.index`` of each remote segment packed here from Kafka's format (relative offset, position).
The expected tables are written down from those inputs and compared whole, counting offsets
lost and duplicated.

The tier (``s3://<bucket>/tiered/``) holds, for topic ``orders`` partition 0:

- A: offsets 0..29 (batches 0..9), plain (no compression, no encryption), uploaded under the
  prefix ``moved/``: only its custom metadata's ``object_prefix`` finds it;
- B: offsets 30..59 (batches 10..19), zstd-compressed and AES-GCM encrypted with ``key-b``
  (the second key of a two-key ring), chunks of 300 bytes;
- an orphan (COPY_SEGMENT_STARTED, never finished: objects present) and a deleted segment
  (finished, then DELETE_SEGMENT_STARTED): neither is read.

The local tail ``snap/b1/orders-0/00000000000000000045.log`` holds batches 15..24 (offsets
45..74): it overlaps B's batches 15..19, and its batch 16 (offsets 48..50) was planted with
other values. Bad tier input, each its own partition of topic ``bad``: a truncated ``.log``
(short chunk), a segment wrapped with a key id the ring does not hold, one wrapped with the
wrong key under the right id, one with a flipped ciphertext byte (GCM tag), and a live segment
whose objects are missing.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections import Counter

import boto3
import pytest

from tests import tiered_data
from tests import tiered_encoder as enc
from tests.segments import kp_v2
from spark_jobs import decode as job
from spark_jobs import layout, tables
from spark_jobs.findings import TIER_DIVERGENCE

T0 = 1_763_683_200_000
PER = 3
TOPIC_IDS = {"orders": "lZ6vvmajTWKDBUTV6SQAtQ", "bad": "AAECAwQFBgcICQoLDA0ODw"}


def value(tp: str, offset: int, tag: str = "") -> bytes:
    return f"{tp}@{offset}{tag}".encode()


def batch(tp: str, i: int, tag: str = "") -> bytes:
    first = PER * i
    return kp_v2(0, [value(tp, first + k, tag) for k in range(PER)], base_offset=first,
                 timestamp=T0 + first * 1000)


def offset_index(batches: list[bytes], base: int) -> bytes:
    """Kafka's .index: (int32 offset - base, int32 position) per batch, big-endian."""
    out, pos = bytearray(), 0
    for b in batches:
        out += struct.pack(">ii", struct.unpack_from(">q", b)[0] - base, pos)
        pos += len(b)
    return bytes(out)


def sid(n: int) -> str:
    """A segment id as Kafka prints a UUID (22 characters of URL-safe base64)."""
    return base64.urlsafe_b64encode(bytes([n]) * 16).decode().rstrip("=")


class Tier:
    """The tier's objects (written to S3) and the metadata records naming them."""

    def __init__(self, s3, bucket: str, ring: dict):
        self.s3, self.bucket, self.ring = s3, bucket, ring
        self.records: list[bytes] = []
        self.manifests: dict[str, str] = {}  # name -> manifest URI

    def upload(self, name, topic, partition, segment, batches, *, finish=True, prefix="tiered/",
               key_id=None, compression=False, chunk_size=256, damage=None,
               extra_state=None):
        log = b"".join(batches)
        start = struct.unpack_from(">q", batches[0])[0]
        end = start + PER * len(batches) - 1
        public = self.ring[key_id].public_key() if key_id else None
        up = enc.upload(log, chunk_size=chunk_size, compression=compression, key_id=key_id,
                        public_key=public, indexes={"offset": offset_index(batches, start)},
                        prefix=prefix, topic=topic, topic_id=TOPIC_IDS[topic],
                        partition=partition, start_offset=start, end_offset=end,
                        segment_id=segment)
        for key, data in up.objects.items():
            if damage == "missing":
                continue
            if damage is not None and key.endswith(".log"):
                data = damage(data)
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
        self.manifests[name] = f"s3://{self.bucket}/{up.key('rsm-manifest')}"
        tid = TOPIC_IDS[topic]
        self.records.append(enc.segment_metadata_record(
            topic, tid, partition, segment, start, end, len(log),
            max_timestamp_ms=T0 + end * 1000, event_timestamp_ms=T0))
        if finish:
            self.records.append(enc.segment_update_record(
                topic, tid, partition, segment, enc.COPY_SEGMENT_FINISHED, up.custom_metadata))
        if extra_state is not None:
            self.records.append(enc.segment_update_record(topic, tid, partition, segment,
                                                          extra_state))
        return up


def write_segment(folder, batches):
    folder.mkdir(parents=True, exist_ok=True)
    base = struct.unpack_from(">q", batches[0])[0]
    (folder / f"{base:020d}.log").write_bytes(b"".join(batches))


@pytest.fixture(scope="module")
def tier_run(spark, tmp_path_factory, s3_endpoint):
    """One run (r1) over the tier and the local tail, shared by the tests of this module."""
    tmp_path = tmp_path_factory.mktemp("tier")
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    bucket = f"tier-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    keys = tmp_path / "keys"
    keys.mkdir()
    # key-w.pem holds key-x's private key: a wrong key under the right id
    tiered_data.key_files(keys, "key-a", "key-b", "key-w", swap={"key-w": "key-x"})
    ring = {k: tiered_data.private_key(k) for k in ("key-a", "key-b", "key-w", "key-c")}
    env = pytest.MonkeyPatch()
    env.setenv(layout.TIER_KEYS_ENV, str(keys))
    tier = Tier(s3, bucket, ring)
    o = [batch("orders-0", i) for i in range(25)]
    tier.upload("A", "orders", 0, sid(1), o[0:10], prefix="moved/")
    tier.upload("B", "orders", 0, sid(2), o[10:20], key_id="key-b", compression=True,
                chunk_size=300)
    tier.upload("orphan", "orders", 0, sid(3), o[20:22], finish=False)
    tier.upload("deleted", "orders", 0, sid(4), o[20:23], extra_state=enc.DELETE_SEGMENT_STARTED)
    b = {p: [batch(f"bad-{p}", i) for i in range(2)] for p in range(5)}  # < --split-bytes
    tier.upload("short", "bad", 0, sid(5), b[0], damage=lambda d: d[:-7])
    tier.upload("unknown key", "bad", 1, sid(6), b[1], key_id="key-c")
    tier.upload("wrong key", "bad", 2, sid(7), b[2], key_id="key-w")
    tier.upload("flipped", "bad", 3, sid(8), b[3], key_id="key-a",
                damage=lambda d: d[:40] + bytes([d[40] ^ 1]) + d[41:])
    tier.upload("missing", "bad", 4, sid(9), b[4], damage="missing")
    snap = tmp_path / "snap"
    tail = o[15:25]
    tail[1] = batch("orders-0", 16, tag="!")  # the planted disagreement: offsets 48..50
    write_segment(snap / "b1" / "orders-0", tail)
    write_segment(snap / "b1" / f"{layout.REMOTE_LOG_METADATA_TOPIC}-0",
                  [kp_v2(0, [r], base_offset=i, timestamp=T0 + i)
                   for i, r in enumerate(tier.records)])
    wh = tmp_path / "wh"
    argv = ["--input", str(snap), "--output", str(wh), layout.TIERED_STORAGE_FLAG,
            f"s3://{bucket}/tiered/", "--split-bytes", "300"]
    first = job.main([*argv, "--run-id", "r1"], spark=spark)
    yield tier, wh, argv, first
    env.undo()


def records(wh) -> list[tuple]:
    rec = tables.read_arrow(str(wh), "records",
                            columns=("topic", "partition", "offset", "value", "segment"))
    return list(zip(*(rec.column(c).to_pylist() for c in rec.column_names)))


def test_a_run_over_tier_and_local_tail_lands_each_offset_once(tier_run):
    tier, wh, argv, s = tier_run
    want = {("orders", 0, o): value("orders-0", o, "!" if o in (48, 49, 50) else "")
            for o in range(75)}
    rows = records(wh)
    got = Counter((t, p, o) for t, p, o, _, _ in rows if t == "orders")
    lost = len(set(want) - set(got))
    duplicated = sum(n - 1 for n in got.values() if n > 1)
    assert (lost, duplicated, len(set(got) - set(want))) == (0, 0, 0)
    assert {(t, p, o): v for t, p, o, v, _ in rows if t == "orders"} == want
    # lineage: offsets 0..29 from A's manifest, 30..44 from B's, the tail's from the local file
    by_segment = Counter((seg.rsplit("/", 1)[-1] if seg.startswith("s3://") else "local")
                         for t, p, o, _, seg in rows if t == "orders")
    a_name = tier.manifests["A"].rsplit("/", 1)[-1]
    b_name = tier.manifests["B"].rsplit("/", 1)[-1]
    assert by_segment == {a_name: 30, b_name: 15, "local": 30}
    assert tier.manifests["A"].startswith(f"s3://{tier.bucket}/moved/")  # custom metadata's prefix
    # the planted disagreement: exactly one tier_divergence, on B's batch 48..50
    findings = tables.read_arrow(str(wh), "findings").to_pylist()
    div = [f for f in findings if f["kind"] == TIER_DIVERGENCE]
    assert [(f["base_offset"], f["last_offset"], f["segment"]) for f in div] == [
        (48, 50, tier.manifests["B"])]
    assert div[0]["message"].startswith("tier divergence:") and "/b1/orders-0/" in div[0]["message"]
    assert s["divergences"] == 1
    # A remote segment bigger than the split is several tasks, each its own ledger row,
    # chained byte ranges covering it
    ledger = tables.read_arrow(str(wh), "ledger").to_pylist()
    a_rows = sorted((r["byte_start"], r["byte_end"]) for r in ledger
                    if r["segment"] == tier.manifests["A"])
    assert len(a_rows) >= 3 and a_rows[0][0] == 0
    assert all(x[1] == y[0] for x, y in zip(a_rows, a_rows[1:]))
    assert a_rows[-1][1] == sum(len(batch("orders-0", i)) for i in range(10))
    # the orphan and the deleted segment were not read
    read = {r["segment"] for r in ledger}
    assert tier.manifests["orphan"] not in read and tier.manifests["deleted"] not in read


def test_bad_tier_input_is_a_finding_naming_the_object_and_never_rows(tier_run):
    tier, wh, argv, s = tier_run
    assert not [r for r in records(wh) if r[0] == "bad"]
    findings = [f for f in tables.read_arrow(str(wh), "findings").to_pylist()
                if f["topic"] == "bad"]
    by_partition = {f["partition"]: f for f in findings}
    assert sorted(by_partition) == [0, 1, 2, 3, 4] and len(findings) == 5
    assert {f["kind"] for f in findings} == {"fetch_error"}
    log = lambda name: tier.manifests[name].replace(".rsm-manifest", ".log")  # noqa: E731
    assert "short chunk" in by_partition[0]["message"]
    assert log("short") in by_partition[0]["message"]
    assert "'key-c', which the key ring does not hold" in by_partition[1]["message"]
    assert "does not unwrap the data key" in by_partition[2]["message"]
    assert log("flipped") in by_partition[3]["message"] and "tag" in by_partition[3]["message"]
    assert tier.manifests["missing"] in by_partition[4]["message"]
    assert "no such object" in by_partition[4]["message"]
    ledger = [r for r in tables.read_arrow(str(wh), "ledger").to_pylist() if r["topic"] == "bad"]
    assert sorted((r["partition"], r["action"]) for r in ledger) == [
        (0, "failed"), (1, "failed"), (2, "failed"), (3, "failed")]


def test_a_rerun_adds_nothing(spark, tier_run):
    tier, wh, argv, s = tier_run
    before = Counter(records(wh))
    again = job.main([*argv, "--run-id", "r2"], spark=spark)
    assert Counter(records(wh)) == before
    assert again["records"] == 0
    ledger = tables.read_arrow(str(wh), "ledger").to_pylist()
    mine = {r["segment"]: r["action"] for r in ledger if r["run_id"] == "r2"}
    # the remote segments ingested are unchanged (their last batch checked through the tier)
    assert mine[tier.manifests["A"]] == mine[tier.manifests["B"]] == "unchanged"
    findings = tables.read_arrow(str(wh), "findings").to_pylist()
    assert sum(1 for f in findings if f["kind"] == TIER_DIVERGENCE) == 1


def test_a_local_tier_folder_and_the_key_ring_setting(tmp_path):
    """No Spark: a tier in a local folder is discovered and read like one on S3; the key
    ring's folder is checked when the job starts."""
    from kafkalog.errors import KeyRingError
    from spark_jobs.decode import planning, tier

    batches = [batch("local-0", i) for i in range(4)]
    up = enc.upload(b"".join(batches), chunk_size=40, compression=True, key_id="key-a",
                    public_key=tiered_data.private_key("key-a").public_key(),
                    indexes={"offset": offset_index(batches, 0)}, topic="orders",
                    topic_id=TOPIC_IDS["orders"], partition=0, start_offset=0, end_offset=11,
                    segment_id=sid(1))
    up.write_to(tmp_path / "tier")
    meta = tmp_path / "snap" / f"{layout.REMOTE_LOG_METADATA_TOPIC}-0"
    write_segment(meta, [kp_v2(0, [r], base_offset=i) for i, r in enumerate([
        enc.segment_metadata_record("orders", TOPIC_IDS["orders"], 0, sid(1), 0, 11, 1),
        enc.segment_update_record("orders", TOPIC_IDS["orders"], 0, sid(1),
                                  enc.COPY_SEGMENT_FINISHED, up.custom_metadata)])])
    listed, _ = planning.discover(str(tmp_path / "snap"))
    keys = tmp_path / "keys"
    keys.mkdir()
    tiered_data.key_files(keys, "key-a")
    access = tier.access_from_env(str(tmp_path / "tier"), {layout.TIER_KEYS_ENV: str(keys)})
    assert "PRIVATE" not in repr(access) and "key-a" in repr(access)
    [seg], found = tier.discover(access, listed, None)
    assert found == [] and seg.uri.endswith(".rsm-manifest") and seg.remote.end_offset == 11
    assert tier.read(seg, access, None, 0, seg.size) == b"".join(batches)
    positions = tier.split_positions([seg], access, None)[seg.uri]
    assert positions == [sum(len(b) for b in batches[:i]) for i in range(4)]
    with pytest.raises(tier.TierReadError, match="a private key is needed"):
        tier.read(seg, tier.TierAccess(access.uri), None, 0, 10)
    (keys / "bad.pem").write_bytes(b"not a key")
    with pytest.raises(KeyRingError, match="bad.pem"):
        tier.access_from_env(access.uri, {layout.TIER_KEYS_ENV: str(keys)})
    with pytest.raises(KeyRingError, match="cannot list"):
        tier.access_from_env(access.uri, {layout.TIER_KEYS_ENV: str(tmp_path / "none")})
    # a task's chunks: one read of the .log per window of chunks, a short last chunk an error
    from kafkalog.tiered import LocalObjects

    seen = []
    real = LocalObjects.read
    LocalObjects.read = lambda self, key, a, b: seen.append((key, a, b)) or real(self, key, a, b)
    try:
        tier._OPEN.clear()
        whole = tier.read(seg, access, None, 5, seg.size)  # (manifest read again: cache cleared)
    finally:
        LocalObjects.read = real
    assert whole == b"".join(batches)[5:]
    logs = [r for r in seen if r[0].endswith(".log")]
    chunk_count = -(-seg.size // 40)
    window = 2 * tier.READ_THREADS
    assert chunk_count > window and len(logs) == -(-chunk_count // window)
    log_path = tmp_path / "tier" / up.key("log")
    log_path.write_bytes(log_path.read_bytes()[:-3])
    with pytest.raises(tier.TierReadError, match="short chunk"):
        tier.read(seg, access, None, 0, seg.size)
