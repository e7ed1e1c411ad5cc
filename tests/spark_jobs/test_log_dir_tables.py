"""A broker log directory's own files as tables, ``__share_group_state`` as a table and
Kafka's renamed partition folders as records (issue 36 parts 1-2).

The seven real log directories of tests/data/broker-dirs are copied into one night folder
beside a log directory this test writes (a ``__share_group_state`` partition from the
hand-packed records of tests/kafkalog/test_internal_topics, a live ``orders-0`` with a
``-future`` copy of it, a ``-delete`` and a ``-stray`` folder) and read by the decode job.
The expected values are read here from the bytes, by this test's own small readers (the
checkpoint text, the record batch headers of the KRaft snapshots), or written down from
the README of broker-dirs; none is read back from the job's code path.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs import layout, tables
from spark_jobs.warehouse import branch_name

from tests.snapshots import upload
from tests.runs import decode
from tests.share_group_state import SHARE_RECORDS

BROKER_DIRS = Path(__file__).parents[1] / "data" / "broker-dirs"
DIRS = ("AdiletBatyrbayev0520+air_analyzer",
        "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions",
        "KAIPASUBHASH+kafka-logs", "Niloufar1171+LDI-POC", "VolodymyrZee+kafka",
        "qkrckstjq+spring-kafka", "ronem123+rupia-transaction-service")
NIGHT = "2026-11-20"
T0 = 1_763_683_200_000
UNIQUE = "5f0c2a9e1b7d4c3e8a6f0b1d2e3f4a5b"  # a folder's unique id, as Kafka's UUID without dashes

#: log dir -> (cluster.id, node id, directory.id, meta version, clean shutdown, broker epoch),
#: as broker-dirs/README.md and each directory's meta.properties / .kafka_cleanshutdown say
BROKERS = {
    "AdiletBatyrbayev0520+air_analyzer": ("jhCzCarDSyqr9FkZhIbmYQ", 1, "7JmH4YiRA0Bg4MtqR69GOg",
                                          1, False, None),
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions": (
        "MkU3OEVBNTcwNTJENDM2Qk", 1, "ROP8qUaSlk7r55i85yz4Cg", 1, True, 53326),
    "KAIPASUBHASH+kafka-logs": (None, 0, None, 0, False, None),
    "Niloufar1171+LDI-POC": ("q1w2e3r4t5y6u7i8o9p0", 1, "XHhkr4tkSsD900pOQ8pPfg", 1, False, None),
    "VolodymyrZee+kafka": ("lRaQCIBoRh2xRKLuP9CAQg", 0, None, 0, True, None),
    "qkrckstjq+spring-kafka": ("5L6g3nShT-eMCtK--X86sw", 1, "xqJgskt667iXfxljqOCMkA", 1, False,
                               None),
    "ronem123+rupia-transaction-service": ("0wHLXdrKStejkyBzi8qBEw", 1, "yYuMrFRVQVSX0VVQPcMSrA",
                                           1, True, 11),
}
#: log dir -> (data_version, leader id, leader epoch, voted id, current voters) of quorum-state
QUORUM = {
    "AdiletBatyrbayev0520+air_analyzer": (0, 1, 2, -1, [1]),
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions": (0, 1, 25, -1, [1]),
    "Niloufar1171+LDI-POC": (0, 1, 1, -1, [1]),
    "qkrckstjq+spring-kafka": (0, 1, 30, -1, [1]),
    "ronem123+rupia-transaction-service": (1, 1, 1, -1, None),
}
CHECKPOINTS = {"recovery-point-offset-checkpoint": "recovery_point",
               "replication-offset-checkpoint": "high_watermark",
               "log-start-offset-checkpoint": "log_start_offset",
               "cleaner-offset-checkpoint": "cleaner_offset"}


def checkpoint_entries(path: Path) -> dict[tuple[str, int], int]:
    """An offset checkpoint as text: version line, count line, ``topic partition offset``
    lines (an empty file: none)."""
    lines = path.read_text().splitlines()
    if not lines:
        return {}
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, path
    return {(t, int(p)): int(o) for t, p, o in (line.split(" ") for line in lines[2:])}


def snapshot_counts(path: Path) -> tuple[int, int]:
    """``(records, control records)`` of a KRaft snapshot, from its v2 batch headers alone:
    baseOffset int64, length int32 at 8, attributes int16 at 21 (bit 5: control),
    recordCount int32 at 57."""
    data, pos, records, control = path.read_bytes(), 0, 0, 0
    while pos + 61 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        (count,) = struct.unpack_from(">i", data, pos + 57)
        records += count
        control += count if attributes & 0x20 else 0
        pos += 12 + length
    assert pos == len(data), path
    return records, control


def write_extra_log_dir(root: Path) -> None:
    """A log directory of this test's own: __share_group_state-7, orders-0 and its -future
    copy (the first batch of the same bytes: a disk move catching up), gone-0 renamed
    -delete, lost-1 renamed -stray."""
    share = root / "__share_group_state-7"
    share.mkdir(parents=True)
    with SegmentWriter(share, 0) as w:
        for key, value, _ in SHARE_RECORDS:
            w.append([WriteRecord(key, value, timestamp=T0)])
    batches = [[WriteRecord(b"k", b"v%d" % i, timestamp=T0 + i) for i in range(3)],
               [WriteRecord(b"k", b"v%d" % i, timestamp=T0 + i) for i in range(3, 5)]]
    for folder, n in (("orders-0", 2), (f"orders-0.{UNIQUE}-future", 1)):
        (root / folder).mkdir()
        with SegmentWriter(root / folder, 0) as w:
            for b in batches[:n]:
                w.append(b)
    for folder, count in ((f"gone-0.{UNIQUE}-delete", 3), (f"lost-1.{UNIQUE}-stray", 1)):
        (root / folder).mkdir()
        with SegmentWriter(root / folder, 0) as w:
            w.append([WriteRecord(None, b"x%d" % i, timestamp=T0) for i in range(count)])
    live = (root / "orders-0" / "00000000000000000000.log").read_bytes()
    future = (root / f"orders-0.{UNIQUE}-future" / "00000000000000000000.log").read_bytes()
    assert live.startswith(future) and len(future) < len(live)  # a copy of the first batch


def night_folder(tmp_path: Path) -> Path:
    snap = tmp_path / "snap" / NIGHT
    for d in DIRS:
        shutil.copytree(BROKER_DIRS / d, snap / d)
    write_extra_log_dir(snap / "extra-broker")
    return snap


def rows(w, name, ref=None, drop=("run_id",)):
    return sorted(({k: v for k, v in r.items() if k not in drop}
                   for r in tables.read_arrow(w, name, ref=ref).to_pylist()),
                  key=lambda r: json.dumps(r, default=str, sort_keys=True))


@pytest.mark.pipeline
def test_seven_real_log_directories_through_the_job(spark, tmp_path):
    from spark_jobs import decode as job

    snap = night_folder(tmp_path)
    W, run = str(tmp_path / "w"), "night-1"
    out = decode(spark, snap, W, run, "--no-publish", night=NIGHT)
    ref = branch_name(run)
    dirs = {str(snap / d): d for d in DIRS}

    # broker_state: one row per log directory, as its files say
    assert {dirs[r["log_dir"]]: (r["cluster_id"], r["node_id"], r["directory_id"],
                                 r["meta_version"], r["clean_shutdown"], r["broker_epoch"])
            for r in rows(W, "broker_state", ref)} == BROKERS
    assert {(r["night"], r["file"]) for r in rows(W, "broker_state", ref)} == {
        (NIGHT, str(snap / d / "meta.properties")) for d in DIRS}

    # partition_checkpoints: every partition any checkpoint names, each value with its file
    expected = {}
    for d in DIRS:
        for name, column in CHECKPOINTS.items():
            for (topic, partition), offset in checkpoint_entries(snap / d / name).items():
                row = expected.setdefault((d, topic, partition), {
                    c: None for col in CHECKPOINTS.values() for c in (col, f"{col}_file")})
                row.update({column: offset, f"{column}_file": str(snap / d / name)})
    got = {(dirs[r.pop("log_dir")], r.pop("topic"), r.pop("partition")): r
           for r in rows(W, "partition_checkpoints", ref, drop=("run_id", "night"))}
    assert got == expected
    adilet = "AdiletBatyrbayev0520+air_analyzer"  # unclean: recovery points lag the HW
    assert [(got[(adilet, "__consumer_offsets", p)]["recovery_point"],
             got[(adilet, "__consumer_offsets", p)]["high_watermark"]) for p in (40, 9)] == \
        [(67, 69), (6925, 6929)]
    assert got[("qkrckstjq+spring-kafka", "__consumer_offsets", 12)]["high_watermark"] == 20

    # quorum_state
    assert {dirs[r["log_dir"]]: (r["data_version"], r["leader_id"], r["leader_epoch"],
                                 r["voted_id"], r["current_voters"])
            for r in rows(W, "quorum_state", ref)} == QUORUM

    # kraft_snapshots: every record of every snapshot and bootstrap.checkpoint, counted
    # from the batch headers; the ids from the names
    snapshots = {}
    for r in rows(W, "kraft_snapshots", ref):
        n = snapshots.setdefault(r["file"], [0, 0])
        n[0] += 1
        n[1] += r["control"]
    files = sorted(p for d in DIRS for p in (snap / d).rglob("*")
                   if layout.parse_log_dir_key(str(p)) and p.name.endswith(
                       (".checkpoint", ".checkpoint.deleted")))
    assert {str(p): list(snapshot_counts(p)) for p in files} == snapshots
    assert len(files) == 20 and snapshots[str(
        snap / "qkrckstjq+spring-kafka/__cluster_metadata-0/00000000000000014406-0000000001.checkpoint"
    )] == [6, 2]  # 502 bytes: SNAPSHOT_HEADER, 4 metadata records, SNAPSHOT_FOOTER
    qk = [r for r in rows(W, "kraft_snapshots", ref) if r["file"].endswith(
        "00000000000000007207-0000000001.checkpoint.deleted")]
    assert {(r["snapshot_offset"], r["snapshot_epoch"], r["deleted"], r["bootstrap"])
            for r in qk} == {(7207, 1, True, False)}
    boot = [r for r in rows(W, "kraft_snapshots", ref)
            if r["bootstrap"] and dirs[r["log_dir"]].startswith("ronem123")]
    assert {json.loads(r["data_json"])["featureLevel"] for r in boot
            if r["type"] == "FEATURE_LEVEL_RECORD" and json.loads(r["data_json"])["name"]
            == "metadata.version"} == {27}  # README: metadata.version=27 (4.1-IV1)

    # no finding names a log directory's or a partition's state file
    findings = tables.read_arrow(W, "findings", ref=ref).to_pylist()
    assert [f for f in findings if f["kind"] == "state_file_corrupt"
            or not (f["segment"] or "").endswith(".log")] == []

    # share_group_state, from the hand-packed records
    share = rows(W, "share_group_state", ref)
    by_offset = {r["source_offset"]: r for r in share}
    assert [(r["record"], r["tombstone"], r["start_offset"]) for _, r in sorted(
        by_offset.items())] == [("snapshot", False, 100), ("update", False, None),
                                ("snapshot", True, None)]
    assert by_offset[0]["state_batches"] == [
        {"first_offset": 100, "last_offset": 104, "delivery_state": 2,
         "delivery_state_name": "ACKNOWLEDGED", "delivery_count": 1},
        {"first_offset": 105, "last_offset": 109, "delivery_state": 0,
         "delivery_state_name": "AVAILABLE", "delivery_count": 3}]
    assert {r["group_id"] for r in share} == {"sg"} and len(share) == 3

    # renamed folders: read as their topic, folder_state says which; the -future copy of
    # orders-0 adds no offset twice
    recs = [r for r in tables.read_arrow(W, "records", ref=ref).to_pylist()
            if r["topic"] in ("orders", "gone", "lost")]
    assert sorted((r["topic"], r["partition"], r["offset"], r["folder_state"]) for r in recs) \
        == [("gone", 0, o, "delete") for o in range(3)] + [("lost", 1, 0, "stray")] + \
        [("orders", 0, o, None) for o in range(5)]

    # the same run again from a manifest listing the same files: nothing added
    before = {n: rows(W, n, ref) for n in ("broker_state", "partition_checkpoints",
                                           "kraft_snapshots", "quorum_state",
                                           "share_group_state")}
    listed = {"segments": [], "state": [], "log_dirs": []}
    for p in sorted(snap.rglob("*")):
        if p.is_file() and layout.parse_segment_key(str(p)):
            listed["segments"].append(str(p))
        elif p.is_file() and layout.parse_state_key(str(p)):
            listed["state"].append(str(p))
        elif p.is_file() and layout.parse_log_dir_key(str(p)):
            listed["log_dirs"].append({"uri": str(p), "night": NIGHT})
    manifest = tmp_path / "chunk.json"
    manifest.write_bytes(layout.manifest(listed["segments"], state_files=listed["state"],
                                         log_dir_files=listed["log_dirs"]))
    again = decode(spark, manifest, W, run)
    assert again["internal"] == out["internal"] and again["published"]
    assert {n: rows(W, n) for n in before} == before
    assert out["internal"]["broker_state"] == 7 and out["internal"]["quorum_state"] == 5


def test_a_damaged_file_is_one_finding_naming_it_and_the_rest_is_kept(tmp_path):
    """log_dir_tables on the driver: a damaged replication checkpoint, a quorum-state that
    is not JSON, a snapshot cut short and a meta.properties listed and then gone are each
    a finding naming the file; every other file's rows are kept, of the damaged ones what
    reads."""
    from spark_jobs.derive import log_dirs

    d = "ronem123+rupia-transaction-service"
    root = tmp_path / d
    shutil.copytree(BROKER_DIRS / d, root)
    entries = [{"uri": str(p), "night": NIGHT} for p in sorted(root.rglob("*"))
               if p.is_file() and layout.parse_log_dir_key(str(p))]
    whole = log_dirs.log_dir_tables(entries, None, "r1")
    assert "findings" not in whole
    hw = root / "replication-offset-checkpoint"
    lines = hw.read_text().splitlines()
    hw.write_text("\n".join(lines[:2] + ["__consumer_offsets x 5"] + lines[3:]) + "\n")
    damaged = log_dirs.log_dir_tables(entries, None, "r1")
    found = damaged["findings"].to_pylist()
    assert [(f["kind"], f["segment"], f["topic"]) for f in found] == [
        ("state_file_corrupt", str(hw), None)]
    assert found[0]["message"].startswith(f"{hw}: ")
    # the other lines of the damaged file, and every other file, are kept
    lost = tuple(lines[2].split(" ")[:2])
    assert len(damaged["partition_checkpoints"]) == len(whole["partition_checkpoints"])
    hws = {(r["topic"], str(r["partition"])): r["high_watermark"]
           for r in damaged["partition_checkpoints"].to_pylist()}
    assert hws.pop(lost) is None and \
        hws == {(r["topic"], str(r["partition"])): r["high_watermark"]
                for r in whole["partition_checkpoints"].to_pylist()
                if (r["topic"], str(r["partition"])) != lost}
    for name in ("broker_state", "kraft_snapshots", "quorum_state"):
        assert damaged[name] == whole[name]

    (root / "meta.properties").unlink()  # listed, then gone
    (root / "__cluster_metadata-0" / "quorum-state").write_text("{not json\n")
    snapshot = root / "__cluster_metadata-0" / "00000000000001734780-0000000001.checkpoint"
    snapshot.write_bytes(snapshot.read_bytes()[:-40])  # cut inside the footer's batch
    worse = log_dirs.log_dir_tables(entries, None, "r1")
    kinds = {(f["segment"], f["kind"]) for f in worse["findings"].to_pylist()}
    assert {s for s, _ in kinds} == {str(hw), str(root / "meta.properties"),
                                     str(root / "__cluster_metadata-0" / "quorum-state"),
                                     str(snapshot)}
    # the broker row is still there (from .kafka_cleanshutdown), without meta.properties'
    assert [(r["cluster_id"], r["clean_shutdown"], r["broker_epoch"], r["file"])
            for r in worse["broker_state"].to_pylist()] == [(None, True, 11, None)]
    assert len(worse["kraft_snapshots"]) < len(whole["kraft_snapshots"])
    assert {r["file"] for r in worse["kraft_snapshots"].to_pylist()} == \
        {r["file"] for r in whole["kraft_snapshots"].to_pylist()}


def test_each_log_directorys_files_go_to_one_chunk():
    """The planner: a log directory's files all go to the first chunk holding one of its
    segments (else chunk 0), so many chunks read each file once."""
    from kafkalog_pipeline.snapshots import Segment, plan_chunks

    segs = [Segment(t, p, NIGHT, 0, f"s3://b/{NIGHT}/{broker}/{t}-{p}/00000000000000000000.log",
                    size) for broker, t, p, size in (("b1", "a", 0, 100), ("b1", "b", 0, 90),
                                                     ("b2", "c", 0, 80), ("b2", "d", 0, 70))]
    files = [(NIGHT, f"s3://b/{NIGHT}/{b}/{name}") for b in ("b1", "b2", "b3")
             for name in ("meta.properties", "__cluster_metadata-0/quorum-state")]
    chunks = plan_chunks(segs, target_bytes=50, max_chunks=4, log_dir_files=files)
    assert len(chunks) == 4
    where = {e["uri"]: c.chunk_id for c in chunks for e in c.log_dir_files}
    assert sorted(where) == sorted(uri for _, uri in files)
    for b in ("b1", "b2"):
        holding = {c.chunk_id for c in chunks for s in c.segments if f"/{b}/" in s.uri}
        assert {where[u] for u in where if f"/{b}/" in u} == {min(holding)}
    assert {where[u] for u in where if "/b3/" in u} == {0}
    doc = json.loads(chunks[0].manifest())
    assert {"uri": f"s3://b/{NIGHT}/b3/meta.properties", "night": NIGHT} in doc["log_dir_files"]
    assert layout.read_manifest_log_dir_files(chunks[0].manifest(), "m") == doc["log_dir_files"]


def test_the_grammar_agrees_with_kafkalog():
    """layout's names of a log directory's files and of renamed partition folders are the
    ones kafkalog reads (kafkalog.log_dir, kafkalog.kraft, kafkalog.folders)."""
    from kafkalog import folders, kraft, log_dir

    assert set(layout.RENAMED_SUFFIXES) == set(folders.FOLDER_SUFFIXES)
    assert set(layout.LOG_DIR_TOP_FILES) == {
        log_dir.META_PROPERTIES_NAME, log_dir.CLEAN_SHUTDOWN_NAME,
        *log_dir.OFFSET_CHECKPOINT_NAMES, kraft.BOOTSTRAP_CHECKPOINT_NAME}
    names = [p.relative_to(BROKER_DIRS / d).as_posix() for d in DIRS
             for p in (BROKER_DIRS / d).rglob("*") if p.is_file()]
    for name in names:
        kind = log_dir.file_kind(name)
        top = "/" not in name or name.startswith(layout.CLUSTER_METADATA_FOLDER + "/")
        ours = layout.parse_log_dir_key(name) is not None
        theirs = top and kind in (log_dir.META_PROPERTIES, log_dir.CLEAN_SHUTDOWN,
                                  log_dir.OFFSET_CHECKPOINT, kraft.QUORUM_STATE,
                                  kraft.METADATA_SNAPSHOT)
        assert ours == theirs, name
    for name, state in ((f"orders-3.{UNIQUE}-delete", "delete"), (f"a.b-0.{UNIQUE}-future",
                                                                   "future"),
                        (f"x-12.{UNIQUE}-stray", "stray"), ("orders-3", "live"),
                        (f"orders-3.{UNIQUE}-moved", None), (f"orders-3.{UNIQUE[:-1]}-delete",
                                                              None)):
        parsed = folders.parse_partition_folder(name)
        assert (parsed.state if parsed else None) == state
        assert layout.parse_partition_dir(name) == ((parsed.topic, parsed.partition)
                                                    if parsed else None), name
        assert layout.parse_segment_key(f"n/b/{name}/00000000000000000007.log") == (
            (parsed.topic, parsed.partition, 7) if parsed else None)


@pytest.mark.pipeline
def test_log_dir_files_under_an_s3_prefix(tmp_path, s3_endpoint, s3_bucket):
    """Two real log directories on the local S3 server: the job's listing finds their own
    files beside the partition folders, and they read over S3 into the rows the local
    folders give (the URIs aside); the planner's listing hands them on with their night."""
    import boto3

    from kafkalog_pipeline.snapshots import list_segments
    from spark_jobs import storage
    from spark_jobs.decode import discover
    from spark_jobs.derive import log_dirs

    client = boto3.client("s3", endpoint_url=s3_endpoint)
    local = {}
    for d in ("qkrckstjq+spring-kafka", "VolodymyrZee+kafka"):
        local.update({f"s3://{s3_bucket}/{key}": str(p) for key, p in
                      upload(BROKER_DIRS / d, s3_bucket, f"snap/{NIGHT}/{d}", client).items()})
    config = storage.S3Config.from_env(s3_endpoint)
    found: list[dict] = []
    discover(f"s3://{s3_bucket}/snap/{NIGHT}", config, log_dir_files=found, night=NIGHT)
    expected = sorted(u for u in local if layout.parse_log_dir_key(u))
    assert sorted(e["uri"] for e in found) == expected and len(expected) == 6 + 12  # Volodymyr: 6, qkrckstjq: 12
    assert {e["night"] for e in found} == {NIGHT}

    def same(found_rows, rename):
        return {n: sorted(json.dumps({k: rename(v) if k in ("file", "log_dir") or
                                      k.endswith("_file") else v for k, v in r.items()},
                                     default=str, sort_keys=True) for r in t.to_pylist())
                for n, t in found_rows.items()}

    s3_dir = {f"s3://{s3_bucket}/snap/{NIGHT}/{d}": str(BROKER_DIRS / d)
              for d in ("qkrckstjq+spring-kafka", "VolodymyrZee+kafka")}
    over_s3 = log_dirs.log_dir_tables(found, config, "r1")
    assert "findings" not in over_s3
    assert same(over_s3, lambda v: local.get(v, s3_dir.get(v, v))) == same(
        log_dirs.log_dir_tables([{"uri": local[e["uri"]], "night": NIGHT} for e in found],
                                None, "r1"), lambda v: v)

    listed: list = []
    list_segments(s3_bucket, {NIGHT: f"snap/{NIGHT}/"}, None, client=client,
                  log_dir_files=listed)
    assert sorted(listed) == [(NIGHT, u) for u in expected]
