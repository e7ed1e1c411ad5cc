"""The demo's tiered topic (issue 34, docs/tiered.md): ``events-0``, whose older segments are
in a tiered-storage tier as Aiven's plugin uploads them and whose recent tail is in the nightly
copy of the broker's log directory.

* The tier (:func:`write_tier`, uploaded to ``s3://kafka-snapshots/tiered/`` by
  :func:`upload`): segment ``A`` (offsets 0..19) and ``B`` (20..39), each compressed (zstd) and
  encrypted (AES-256-GCM, the data key wrapped with RSA): ``A`` under key ``key-a``, ``B``
  under ``key-b``. The key ring is ``<out>/tier-keys/key-a.pem`` and ``key-b.pem`` (PKCS#8,
  made once and kept, so a rerun writes the same objects); the runs get that folder through
  the ``KAFKALOG_TIER_KEYS`` setting (:func:`settings_env`), never a command line.
* The planted orphan ``X``: the broker's first copy of offsets 20..39 started (its three
  objects are all in the tier) and never finished; the copy was retried as ``B``. The tier
  audit's ``tier_copy_orphans`` warns about it (``orphan``: it started more than the policy's
  grace of 60 minutes before the metadata's latest event).
* In each night's snapshot (:func:`write_local`): ``events-0``, the local tail from offset 30
  (its first batch, offsets 30..39, is ``B``'s last batch byte for byte: the job reconciles
  them and lands each offset once), growing by a batch on night 2; and
  ``__remote_log_metadata-0``, the events of the three copies (COPY_SEGMENT_STARTED /
  COPY_SEGMENT_FINISHED records encoded with Kafka's specs by :func:`kafkalog.writer.internal_record`).

So the tiered topic holds offsets 0..49 on night 1 and 0..59 on night 2, each once in
``records``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import tempfile
from pathlib import Path

from kafkalog.internal.remote_log import (SEGMENT_METADATA, SEGMENT_STATES, SEGMENT_UPDATE,
                                          LIVE)
from kafkalog.internal.topics import REMOTE_LOG_METADATA
from kafkalog.tiered.writer import segment_objects
from kafkalog.writer import (SegmentWriter, WriteRecord, internal_record,
                             leader_epoch_checkpoint_text)
from spark_jobs.layout import TIER_KEYS_ENV

TOPIC, PARTITION = "events", 0
#: the tier's bucket is the snapshots' (demo.servers.BUCKET); its key prefix, the plugin's
#: ``key.prefix``
TIER_PREFIX = "tiered/"
TIER_FOLDER = "tier"  # <out>/tier: the objects before they are uploaded
KEYS_FOLDER = "tier-keys"  # <out>/tier-keys: the key ring
KEY_IDS = ("key-a", "key-b")
CHUNK_SIZE = 256  # the plugin's chunk.size, small: each segment is several chunks
T0 = 1_795_132_800_000  # 2026-11-20T00:00:00Z (demo.data.T0)
MIN = 60_000
BATCH = 10  # records per batch
STARTED = next(k for k, v in SEGMENT_STATES.items() if v == "COPY_SEGMENT_STARTED")
FINISHED = next(k for k, v in SEGMENT_STATES.items() if v == LIVE)


def kafka_uuid(name: str) -> str:
    """A fixed Kafka Uuid for ``name``, as Kafka prints it (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(hashlib.sha256(name.encode()).digest()[:16]).decode()[:22]


TOPIC_ID = kafka_uuid("events")
#: name -> (start, end offset, key id, minutes after T0 its copy started, finished or None)
SEGMENTS = {"A": (0, 19, "key-a", 60, 61), "X": (20, 39, "key-b", 120, None),
            "B": (20, 39, "key-b", 210, 211)}
ORPHAN = "X"
#: offsets of the local tail: from B's last batch on, one more batch on night 2
LOCAL_START = 30


def _batch(base: int) -> list[WriteRecord]:
    return [WriteRecord(f"device-{o % 3}".encode(),
                        json.dumps({"event": o, "kind": ("view", "click", "buy")[o % 3]}).encode(),
                        timestamp=T0 + 5 * MIN * o) for o in range(base, base + BATCH)]


def _write_segment(directory: Path, start: int, end: int) -> Path:
    """Offsets ``start..end`` in batches of :data:`BATCH` (zstd), as one segment file."""
    with SegmentWriter(directory, start, index_interval_bytes=256) as w:
        for base in range(start, end + 1, BATCH):
            w.append(_batch(base), codec="zstd")
        return Path(w.path)


def remote_segment(name: str) -> tuple[bytes, dict]:
    """Segment ``name``'s ``.log`` bytes and its indexes as the plugin is handed them."""
    start, end = SEGMENTS[name][:2]
    with tempfile.TemporaryDirectory() as tmp:
        log = _write_segment(Path(tmp), start, end)
        return log.read_bytes(), {
            "offset": log.with_suffix(".index").read_bytes(),
            "timestamp": log.with_suffix(".timeindex").read_bytes(),
            "producerSnapshot": b"",
            "leaderEpoch": leader_epoch_checkpoint_text([(0, start)]).encode()}


def key_ring(out: Path) -> dict:
    """key id -> private key, made once under ``out/tier-keys`` (PKCS#8 PEM) and kept."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    folder = out / KEYS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    ring = {}
    for key_id in KEY_IDS:
        path = folder / f"{key_id}.pem"
        if not path.exists():
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        ring[key_id] = serialization.load_pem_private_key(path.read_bytes(), password=None)
    return ring


def write_tier(out: Path) -> int:
    """The tier's objects under ``out/tier`` (their keys as paths); how many."""
    ring = key_ring(out)
    folder = out / TIER_FOLDER
    n = 0
    for name, (start, end, key_id, _, _) in SEGMENTS.items():
        data, indexes = remote_segment(name)
        objects = segment_objects(
            data, indexes, prefix=TIER_PREFIX, topic=TOPIC, topic_id=TOPIC_ID,
            partition=PARTITION, start_offset=start, end_offset=end,
            segment_id=kafka_uuid(name), chunk_size=CHUNK_SIZE, compression=True,
            key_id=key_id, public_key=ring[key_id].public_key(),
            random_bytes=random.Random(f"demo-tier-{name}").randbytes)  # the same each run
        for key, body in objects.items():
            path = folder / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            n += 1
    return n


def _segment_id(name: str) -> dict:
    return {"topicIdPartition": {"name": TOPIC, "id": TOPIC_ID, "partition": PARTITION},
            "id": kafka_uuid(name)}


def metadata_events() -> list[tuple[int, dict]]:
    """(time, decoded record) of each copy's events, in time order."""
    events = []
    for name, (start, end, _, started, finished) in SEGMENTS.items():
        at = T0 + started * MIN
        events.append((at, {"type": SEGMENT_METADATA, "version": 0, "data": {
            "remoteLogSegmentId": _segment_id(name), "startOffset": start, "endOffset": end,
            "brokerId": 1, "maxTimestampMs": T0 + 5 * MIN * end, "eventTimestampMs": at,
            "segmentLeaderEpochs": [{"leaderEpoch": 0, "offset": start}],
            "segmentSizeInBytes": len(remote_segment(name)[0]), "customMetadata": None,
            "remoteLogSegmentState": STARTED}}))
        if finished is not None:
            at = T0 + finished * MIN
            events.append((at, {"type": SEGMENT_UPDATE, "version": 0, "data": {
                "remoteLogSegmentId": _segment_id(name), "brokerId": 1,
                "eventTimestampMs": at, "customMetadata": None,
                "remoteLogSegmentState": FINISHED}}))
    return sorted(events, key=lambda e: e[0])


def write_local(night_dir: Path, night: int) -> None:
    """``events-0`` (the local tail) and ``__remote_log_metadata-0`` of snapshot ``night``."""
    tail = night_dir / f"{TOPIC}-{PARTITION}"
    _write_segment(tail, LOCAL_START, local_end(night))
    (tail / "leader-epoch-checkpoint").write_text(leader_epoch_checkpoint_text([(0, 0)]))
    with SegmentWriter(night_dir / "__remote_log_metadata-0", 0) as w:
        for at, record in metadata_events():
            w.append([internal_record(REMOTE_LOG_METADATA, record, timestamp=at)])


def local_end(night: int) -> int:
    """The tiered topic's last offset on snapshot ``night``."""
    return LOCAL_START + (night + 2) * BATCH - 1


def tier_uri(bucket: str) -> str:
    """The DAG's ``tiered_storage`` param: the tier's bucket and the plugin's key prefix."""
    return f"s3://{bucket}/{TIER_PREFIX}"


def has_key_ring(out: Path) -> bool:
    """Whether ``out`` holds the demo's tier key ring (the demo wrote its tier)."""
    return (out / KEYS_FOLDER).is_dir()


def settings_env(out: Path) -> dict[str, str]:
    """The runs' key-ring setting (the folder of PEM files)."""
    return {TIER_KEYS_ENV: str(out / KEYS_FOLDER)}


def upload(out: Path, bucket: str, client) -> int:
    """Put ``out/tier``'s objects in ``bucket`` at their keys; the object count."""
    folder = out / TIER_FOLDER
    n = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, path.relative_to(folder).as_posix())
        n += 1
    return n
