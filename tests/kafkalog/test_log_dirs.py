"""Seven whole real broker log directories (tests/data/broker-dirs: Kafka 3.7 to 4.1,
ZooKeeper and KRaft, clean and unclean shutdowns), vendored byte for byte: each file is the
one its README names, each state file reads to the values a person reads from its bytes,
and each directory read whole gives no false finding."""

from __future__ import annotations

import hashlib
import re
import struct
from collections import Counter
from pathlib import Path

import pytest

import kafkalog
from kafkalog import kraft, log_dir, state_files
from kafkalog.folders import parse_partition_folder
from kafkalog.indexes import (read_offset_index, read_time_index, read_txn_index,
                              verify_offset_index, verify_time_index, verify_txn_index)
from kafkalog.internal import MessageError, decode, decoder_for_path
from kafkalog.internal.share_group_state import read_share_group_state
from kafkalog.model import Finding
from kafkalog.writer import SegmentWriter, WriteRecord

from tests.kafkalog.broker_files import checkpoint_as_kafka_writes, properties_as_kafka_writes
from tests.share_group_state import SHARE_RECORDS
from tests.tiered_encoder import uvarint

BROKER_DIRS = Path(__file__).parents[1] / "data" / "broker-dirs"
#: the seven directories (a literal list: missing data fails the tests, never skips them)
DIRS = (
    "AdiletBatyrbayev0520+air_analyzer",
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions",
    "KAIPASUBHASH+kafka-logs",
    "Niloufar1171+LDI-POC",
    "VolodymyrZee+kafka",
    "qkrckstjq+spring-kafka",
    "ronem123+rupia-transaction-service",
)
#: the corpus's own description files, and ours (VENDORED.md)
DOCS = ("README.md", "SEGMENTS.md", "state-files-manifest.tsv", "VENDORED.md")

_SEGMENT_LINE = re.compile(r"^- `(?P<path>[^`]+)` <- `(?P<source>[^`]+)` \| (?P<size>\d+) B \| "
                           r"(?P<sha>[0-9a-f]{64}) \|")


def _listed() -> dict[str, tuple[str, int, str]]:
    """local path -> (source, bytes, sha256), from the manifest, SEGMENTS.md and VENDORED.md."""
    out: dict[str, tuple[str, int, str]] = {}
    lines = (BROKER_DIRS / "state-files-manifest.tsv").read_text().splitlines()
    assert lines[0].split("\t") == ["local_path", "source", "bytes", "sha256", "kind"]
    for line in lines[1:]:
        path, source, size, sha, _kind = line.split("\t")
        assert path not in out, path
        out[path] = (source, int(size), sha)
    for doc in ("SEGMENTS.md", "VENDORED.md"):
        for line in (BROKER_DIRS / doc).read_text().splitlines():
            m = _SEGMENT_LINE.match(line)
            if m:
                assert m["path"] not in out, m["path"]
                out[m["path"]] = (m["source"], int(m["size"]), m["sha"])
    return out


def test_the_seven_directories_are_here():
    assert sorted(p.name for p in BROKER_DIRS.iterdir() if p.is_dir()) == list(DIRS), \
        f"expected the vendored broker directories under {BROKER_DIRS}"


def test_every_file_is_the_one_its_readme_names():
    listed = _listed()
    files = {str(p.relative_to(BROKER_DIRS)) for p in BROKER_DIRS.rglob("*") if p.is_file()}
    assert files - set(DOCS) == set(listed)
    assert len(listed) == 1445  # 1,408 state and index files, 21 + 16 segments
    for path, (source, size, sha) in listed.items():
        owner_repo = path.split("/", 1)[0].replace("+", "/", 1)
        assert source.startswith(owner_repo + "@"), (path, source)
        data = (BROKER_DIRS / path).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, sha), path


# -- each kind of state file, read to what its bytes say ---------------------------------------

#: the manifest's kind of each state file -> the kind kafkalog.log_dir gives it (None: no
#: state file: indexes and the .lock)
MANIFEST_KINDS = {
    "meta.properties": log_dir.META_PROPERTIES,
    "clean-shutdown marker": log_dir.CLEAN_SHUTDOWN,
    "recovery-point-offset-checkpoint": log_dir.OFFSET_CHECKPOINT,
    "replication-offset-checkpoint": log_dir.OFFSET_CHECKPOINT,
    "log-start-offset-checkpoint": log_dir.OFFSET_CHECKPOINT,
    "cleaner-offset-checkpoint": log_dir.OFFSET_CHECKPOINT,
    "quorum-state": kraft.QUORUM_STATE,
    "KRaft bootstrap checkpoint": kraft.METADATA_SNAPSHOT,
    "KRaft snapshot": kraft.METADATA_SNAPSHOT,
    "KRaft snapshot, renamed for deletion": kraft.METADATA_SNAPSHOT,
    "leader-epoch-checkpoint": state_files.LEADER_EPOCH_CHECKPOINT,
    "partition.metadata": state_files.PARTITION_METADATA,
    "producer-state snapshot": state_files.PRODUCER_SNAPSHOT,
    "lock file": None, "offset index": None, "time index": None,
    "offset index, renamed for deletion": None, "time index, renamed for deletion": None,
}


def test_every_state_file_is_the_kind_the_manifest_says():
    lines = (BROKER_DIRS / "state-files-manifest.tsv").read_text().splitlines()[1:]
    seen = Counter()
    for line in lines:
        path, _, _, _, kind = line.split("\t")
        assert log_dir.file_kind(path) == MANIFEST_KINDS[kind], (path, kind)
        seen[MANIFEST_KINDS[kind]] += 1
    assert seen == Counter({
        state_files.LEADER_EPOCH_CHECKPOINT: 472, state_files.PARTITION_METADATA: 365,
        None: 464, state_files.PRODUCER_SNAPSHOT: 44, log_dir.OFFSET_CHECKPOINT: 28,
        kraft.METADATA_SNAPSHOT: 20, log_dir.META_PROPERTIES: 7, kraft.QUORUM_STATE: 5,
        log_dir.CLEAN_SHUTDOWN: 3})


def _read(relative: str):
    state = log_dir.read_file(BROKER_DIRS / relative)
    assert state.findings == (), (relative, state.findings)
    return state


META_PROPERTIES = {  # what each meta.properties says, in the file's own words
    "AdiletBatyrbayev0520+air_analyzer": (1, "jhCzCarDSyqr9FkZhIbmYQ", 1, "7JmH4YiRA0Bg4MtqR69GOg"),
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions":
        (1, "MkU3OEVBNTcwNTJENDM2Qk", 1, "ROP8qUaSlk7r55i85yz4Cg"),
    "KAIPASUBHASH+kafka-logs": (0, None, 0, None),            # version=0, broker.id=0
    "Niloufar1171+LDI-POC": (1, "q1w2e3r4t5y6u7i8o9p0", 1, "XHhkr4tkSsD900pOQ8pPfg"),
    "VolodymyrZee+kafka": (0, "lRaQCIBoRh2xRKLuP9CAQg", 0, None),
    "qkrckstjq+spring-kafka": (1, "5L6g3nShT-eMCtK--X86sw", 1, "xqJgskt667iXfxljqOCMkA"),
    "ronem123+rupia-transaction-service":
        (1, "0wHLXdrKStejkyBzi8qBEw", 1, "yYuMrFRVQVSX0VVQPcMSrA"),
}


@pytest.mark.parametrize("directory", DIRS)
def test_meta_properties(directory):
    state = _read(f"{directory}/meta.properties")
    assert state.kind == log_dir.META_PROPERTIES
    version, cluster_id, node_id, directory_id = META_PROPERTIES[directory]
    assert state.header == {"version": version, "cluster_id": cluster_id, "node_id": node_id,
                            "directory_id": directory_id}
    if directory == "KAIPASUBHASH+kafka-logs":  # "#\n#Wed Dec 15 10:50:29 IST 2021\n" first
        assert state.rows == ({"key": "version", "value": "0"},
                              {"key": "broker.id", "value": "0"})


def test_clean_shutdown_markers():
    present = {d for d in DIRS if (BROKER_DIRS / d / ".kafka_cleanshutdown").exists()}
    assert present == {"ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions",
                       "VolodymyrZee+kafka", "ronem123+rupia-transaction-service"}
    for directory, header in [
            ("ronem123+rupia-transaction-service", {"version": 0, "broker_epoch": 11}),
            ("ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions",
             {"version": 0, "broker_epoch": 53326}),
            ("VolodymyrZee+kafka", {"version": None, "broker_epoch": None})]:  # 0 bytes
        state = _read(f"{directory}/.kafka_cleanshutdown")
        assert (state.kind, state.header, state.rows) == (log_dir.CLEAN_SHUTDOWN, header, ())


#: per directory and checkpoint: (entries, the entries whose offset is not 0)
OFFSET_CHECKPOINTS = {
    "AdiletBatyrbayev0520+air_analyzer": {
        "recovery-point-offset-checkpoint": (55, {
            ("__consumer_offsets", 9, 6925), ("i105", 0, 1), ("f103", 0, 1),
            ("hall", 0, 158199), ("__consumer_offsets", 40, 67), ("i111", 0, 3497)}),
        "replication-offset-checkpoint": (55, {
            ("hall", 0, 158199), ("i111", 0, 3497), ("i105", 0, 1),
            ("__consumer_offsets", 40, 69), ("f103", 0, 1), ("__consumer_offsets", 9, 6929)}),
        "cleaner-offset-checkpoint": (2, {("__consumer_offsets", 9, 6925),
                                          ("__consumer_offsets", 40, 67)})},
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions": {
        name: (139, {("__consumer_offsets", 29, 45), ("__consumer_offsets", 37, 44),
                     ("docker-connect-configs", 0, 10),
                     ("_confluent-ksql-default__command_topic", 0, 2), ("_schemas", 0, 42),
                     ("__transaction_state", 44, 4)})
        for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint")},
    "KAIPASUBHASH+kafka-logs": {
        "recovery-point-offset-checkpoint": (53, set()),  # unclean: every recovery point 0
        "replication-offset-checkpoint": (53, {
            ("__consumer_offsets", 46, 8), ("subhash", 0, 3), ("__consumer_offsets", 2, 3),
            ("__consumer_offsets", 26, 8)})},
    "Niloufar1171+LDI-POC": {
        "recovery-point-offset-checkpoint": (54, set()),
        "replication-offset-checkpoint": (54, {("__consumer_offsets", 6, 13),
                                               ("TestTopicPatient", 0, 3)})},
    "VolodymyrZee+kafka": {
        name: (54, {("first_topic", 2, 18), ("new_topic", 0, 2), ("__consumer_offsets", 33, 3),
                    ("first_topic", 1, 12), ("__consumer_offsets", 18, 499),
                    ("first_topic", 0, 11), ("__consumer_offsets", 17, 3),
                    ("__consumer_offsets", 12, 470), ("__consumer_offsets", 32, 50)})
        for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint")},
    "qkrckstjq+spring-kafka": {
        "recovery-point-offset-checkpoint": (62, {
            ("test-topic", 2, 3), ("__consumer_offsets", 34, 72), ("__consumer_offsets", 12, 14),
            ("test-topic", 1, 1), ("test-topic", 0, 3)}),
        "replication-offset-checkpoint": (62, {  # newer than the data copied beside it
            ("test-topic", 1, 1), ("__consumer_offsets", 12, 20), ("__consumer_offsets", 48, 8),
            ("test-topic", 0, 3), ("test-topic", 2, 3), ("__consumer_offsets", 34, 72)})},
    "ronem123+rupia-transaction-service": {
        name: (51, {("__consumer_offsets", 44, 11), ("topic_transactions", 0, 5),
                    ("__consumer_offsets", 31, 5)})
        for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint")}
    | {"cleaner-offset-checkpoint": (2, {("__consumer_offsets", 31, 3),
                                         ("__consumer_offsets", 44, 9)})},
}
#: 0 bytes: created by Kafka and never written (no entries); "0\n0\n": written with none
EMPTY_CLEANER = ("ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions",
                 "KAIPASUBHASH+kafka-logs", "Niloufar1171+LDI-POC", "qkrckstjq+spring-kafka")


@pytest.mark.parametrize("directory", DIRS)
def test_offset_checkpoints(directory):
    expected = {"log-start-offset-checkpoint": (0, set()),  # all seven: "0\n0\n"
                "cleaner-offset-checkpoint": (0, set()), **OFFSET_CHECKPOINTS[directory]}
    for name in log_dir.OFFSET_CHECKPOINT_NAMES:
        state = _read(f"{directory}/{name}")
        count, nonzero = expected[name]
        empty = name == "cleaner-offset-checkpoint" and directory in EMPTY_CLEANER
        assert state.header == {"checkpoint": name, "version": None if empty else 0,
                                "entry_count": None if empty else count}, name
        rows = [(r["topic"], r["partition"], r["offset"]) for r in state.rows]
        assert len(rows) == count and {r for r in rows if r[2] != 0} == nonzero, name


QUORUM_STATES = {  # kraft.version 0 files hold the voters; Kafka 4.1's (kraft.version 1) not
    "AdiletBatyrbayev0520+air_analyzer": (0, "", 1, 2, -1, None, 0),
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions": (0, "", 1, 25, -1, None, 0),
    "Niloufar1171+LDI-POC": (0, "", 1, 1, -1, None, 0),
    "qkrckstjq+spring-kafka": (0, "", 1, 30, -1, None, 0),
    "ronem123+rupia-transaction-service": (1, None, 1, 1, -1, "AAAAAAAAAAAAAAAAAAAAAA", None),
}


def test_quorum_states():
    for directory, values in QUORUM_STATES.items():
        state = _read(f"{directory}/__cluster_metadata-0/quorum-state")
        assert state.header == dict(zip(
            ("data_version", "cluster_id", "leader_id", "leader_epoch", "voted_id",
             "voted_directory_id", "applied_offset"), values)), directory
        assert state.rows == (() if values[0] == 1 else ({"voter_id": 1},))


#: file -> (end offset, epoch, deleted, last contained log timestamp, metadata records,
#: control records); every one is 3 batches: header batch, records, footer batch
SNAPSHOTS = {
    "AdiletBatyrbayev0520+air_analyzer/__cluster_metadata-0/"
    "00000000000002361015-0000000001.checkpoint.deleted": (2361015, 1, True, 1745589709302, 69, 2),
    "AdiletBatyrbayev0520+air_analyzer/__cluster_metadata-0/"
    "00000000000003008763-0000000001.checkpoint.deleted": (3008763, 1, True, 1745918814149, 69, 2),
    "AdiletBatyrbayev0520+air_analyzer/__cluster_metadata-0/"
    "00000000000003021716-0000000002.checkpoint": (3021716, 2, False, 1746534510791, 69, 2),
    "AdiletBatyrbayev0520+air_analyzer/__cluster_metadata-0/"
    "00000000000003079308-0000000002.checkpoint": (3079308, 2, False, 1746565895796, 69, 2),
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions/__cluster_metadata-0/"
    "00000000000000007364-0000000001.checkpoint": (7364, 1, False, 1728565330138, 163, 2),
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions/__cluster_metadata-0/"
    "00000000000000021265-0000000006.checkpoint": (21265, 6, False, 1728572956844, 163, 2),
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions/__cluster_metadata-0/"
    "00000000000000060500-0000000025.checkpoint": (60500, 25, False, 1728594221482, 169, 2),
    "qkrckstjq+spring-kafka/__cluster_metadata-0/"
    "00000000000000007207-0000000001.checkpoint.deleted": (7207, 1, True, 1740134033990, 4, 2),
    "qkrckstjq+spring-kafka/__cluster_metadata-0/"
    "00000000000000014406-0000000001.checkpoint": (14406, 1, False, 1740137634340, 4, 2),
    "qkrckstjq+spring-kafka/__cluster_metadata-0/"
    "00000000000000177273-0000000010.checkpoint": (177273, 10, False, 1740637671074, 9, 2),
    "qkrckstjq+spring-kafka/__cluster_metadata-0/"
    "00000000000000197576-0000000025.checkpoint": (197576, 25, False, 1740649702408, 17, 2),
    "qkrckstjq+spring-kafka/__cluster_metadata-0/"
    "00000000000000243115-0000000030.checkpoint": (243115, 30, False, 1740740314531, 75, 2),
    # kraft.version 1 (Kafka 4.1): KRAFT_VERSION and KRAFT_VOTERS beside the header
    "ronem123+rupia-transaction-service/__cluster_metadata-0/"
    "00000000000000852953-0000000001.checkpoint": (852953, 1, False, 1766484200285, 64, 4),
    "ronem123+rupia-transaction-service/__cluster_metadata-0/"
    "00000000000001727631-0000000001.checkpoint": (1727631, 1, False, 1767080811441, 64, 4),
    "ronem123+rupia-transaction-service/__cluster_metadata-0/"
    "00000000000001734780-0000000001.checkpoint": (1734780, 1, False, 1767084411992, 64, 4),
}
#: each bootstrap.checkpoint's FEATURE_LEVEL_RECORDs (kafka-storage format's features)
BOOTSTRAP_FEATURES = {
    "AdiletBatyrbayev0520+air_analyzer": [("metadata.version", 25), ("group.version", 1),
                                          ("transaction.version", 2)],
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions": [("metadata.version", 19)],
    "Niloufar1171+LDI-POC": [("metadata.version", 19)],
    "qkrckstjq+spring-kafka": [("metadata.version", 21)],
    "ronem123+rupia-transaction-service": [
        ("metadata.version", 27), ("eligible.leader.replicas.version", 1),
        ("group.version", 1), ("transaction.version", 2)],
}


def test_kraft_snapshots():
    found = {str(p.relative_to(BROKER_DIRS)) for p in BROKER_DIRS.rglob("*.checkpoint*")
             if p.name != "bootstrap.checkpoint"}
    assert found == set(SNAPSHOTS)
    for path, (end, epoch, deleted, timestamp, records, controls) in SNAPSHOTS.items():
        state = _read(path)
        assert state.header == {"end_offset": end, "epoch": epoch, "deleted": deleted,
                                "last_contained_log_timestamp": timestamp, "batch_count": 3,
                                "record_count": records, "control_count": controls}, path
        assert [r["offset"] for r in state.rows] == list(range(records + controls))
        assert state.rows[0]["record_type"] == "SNAPSHOT_HEADER"
        assert state.rows[-1] == {"offset": records + controls - 1,
                                  "batch_position": state.size - 75, "control": True,
                                  "record_type": "SNAPSHOT_FOOTER", "version": 0,
                                  "data": {"version": 0}}


def test_a_kraft_version_1_snapshot_holds_its_voters():
    rows = _read("ronem123+rupia-transaction-service/__cluster_metadata-0/"
                 "00000000000001734780-0000000001.checkpoint").rows
    assert rows[:3] == (
        {"offset": 0, "batch_position": 0, "control": True, "record_type": "SNAPSHOT_HEADER",
         "version": 0, "data": {"version": 0, "lastContainedLogTimestamp": 1767084411992}},
        {"offset": 1, "batch_position": 0, "control": True, "record_type": "KRAFT_VERSION",
         "version": 0, "data": {"version": 0, "kRaftVersion": 1}},
        {"offset": 2, "batch_position": 0, "control": True, "record_type": "KRAFT_VOTERS",
         "version": 0, "data": {"version": 0, "voters": [{
             "voterId": 1, "voterDirectoryId": "yYuMrFRVQVSX0VVQPcMSrA",  # meta.properties'
             "endpoints": [{"name": "CONTROLLER", "host": "localhost", "port": 9093}],
             "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1}}]}})
    types = Counter(r["record_type"] for r in rows[3:-1])
    assert types == Counter({"PARTITION_RECORD": 51, "FEATURE_LEVEL_RECORD": 4,
                             "CONFIG_RECORD": 4, "TOPIC_RECORD": 2, "REGISTER_BROKER_RECORD": 1,
                             "REGISTER_CONTROLLER_RECORD": 1, "PRODUCER_IDS_RECORD": 1})
    broker = next(r for r in rows if r["record_type"] == "REGISTER_BROKER_RECORD")
    assert broker["data"]["logDirs"] == ["yYuMrFRVQVSX0VVQPcMSrA"]  # tag "0", read since 2380f01


def test_bootstrap_checkpoints():
    for directory, features in BOOTSTRAP_FEATURES.items():
        state = _read(f"{directory}/bootstrap.checkpoint")
        assert state.header == {"end_offset": None, "epoch": None, "deleted": False,
                                "last_contained_log_timestamp": 0, "batch_count": 3,
                                "record_count": len(features), "control_count": 2}, directory
        assert [(r["data"]["name"], r["data"]["featureLevel"]) for r in state.rows[1:-1]] == \
            features
        assert {r["record_type"] for r in state.rows[1:-1]} == {"FEATURE_LEVEL_RECORD"}


def test_producer_snapshots():
    # qkrckstjq test-topic-0: version 1, crc 0x15938f01, 3 entries of 46 bytes, three
    # idempotent producers, one record each, no transaction (-1, -1)
    state = _read("qkrckstjq+spring-kafka/test-topic-0/00000000000000000003.snapshot")
    assert state.header == {"version": 1, "crc": 0x15938F01, "computed_crc": 0x15938F01,
                            "crc_valid": True, "snapshot_offset": 3, "entry_count": 3}
    assert [(r["producer_id"], r["last_offset"], r["timestamp"]) for r in state.rows] == [
        (1000, 0, 1740574266593), (3000, 1, 1740649732458), (3004, 2, 1740655972130)]
    assert {(r["producer_epoch"], r["last_sequence"], r["offset_delta"],
             r["coordinator_epoch"], r["current_txn_first_offset"]) for r in state.rows} == {
        (0, 0, 0, -1, -1)}
    # the ksql command topic's transactional producer: coordinator epoch 0, committed
    state = _read("ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions/"
                  "_confluent-ksql-default__command_topic-0/00000000000000000002.snapshot")
    assert state.header["crc"] == 0x0EA0D37A and state.rows == (
        {"producer_id": 0, "producer_epoch": 0, "first_sequence": 0, "last_sequence": 0,
         "last_offset": 0, "offset_delta": 0, "timestamp": 1728561475581,
         "coordinator_epoch": 0, "current_txn_first_offset": -1},)


def test_leader_epoch_checkpoints_and_partition_metadata():
    empty = [p for p in (BROKER_DIRS / "KAIPASUBHASH+kafka-logs").glob("*/leader-epoch-checkpoint")
             if p.stat().st_size == 0]
    assert len(empty) == 49  # partitions never written: Kafka created the file, wrote nothing
    for p in empty:
        state = _read(str(p.relative_to(BROKER_DIRS)))
        assert (state.header, state.rows) == ({"version": None, "entry_count": None}, ())
    state = _read("qkrckstjq+spring-kafka/__cluster_metadata-0/leader-epoch-checkpoint")
    assert state.header == {"version": 0, "entry_count": 30}
    assert state.rows[0] == {"epoch": 1, "start_offset": 14406}
    assert state.rows[-2:] == ({"epoch": 29, "start_offset": 230394},
                               {"epoch": 30, "start_offset": 235850})
    assert _read("qkrckstjq+spring-kafka/test-topic-0/leader-epoch-checkpoint").rows == (
        {"epoch": 10, "start_offset": 0}, {"epoch": 40, "start_offset": 1},
        {"epoch": 50, "start_offset": 3})
    assert _read("qkrckstjq+spring-kafka/test-topic-0/partition.metadata").header == {
        "version": 0, "topic_id": "BaXztRSlQQKyk-Jx4a15Ng"}
    for directory in QUORUM_STATES:  # the metadata log's fixed topic id
        assert _read(f"{directory}/__cluster_metadata-0/partition.metadata").header[
            "topic_id"] == "AAAAAAAAAAAAAAAAAAAAAQ"


# -- each directory read whole ----------------------------------------------------------------

INDEX_FILES = {".index": (read_offset_index, verify_offset_index),
               ".timeindex": (read_time_index, verify_time_index),
               ".txnindex": (read_txn_index, verify_txn_index)}
DELETED = ".deleted"


def read_whole(root: Path) -> tuple[Counter, list[tuple[str, Finding]]]:
    """Every file of a broker log directory read with kafkalog: segments with the decoder
    (and the internal topics' records with theirs), index files (checked against their
    segment where it is there), every state file with its reader. ``(what was read, by
    kind; every finding with its file)``; a file nothing reads fails the test."""
    counts: Counter = Counter()
    findings: list[tuple[str, Finding]] = []
    for folder in sorted(p for p in root.rglob("*") if p.is_dir()):
        assert folder.parent == root and parse_partition_folder(folder.name), folder
        counts[f"folder {parse_partition_folder(folder.name).state}"] += 1
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = str(path.relative_to(root))
        base = path.name.removesuffix(DELETED)
        suffix = Path(base).suffix
        if base == ".lock":
            counts["lock"] += 1
        elif suffix == ".log":
            counts["segment"] += 1
            findings += [(rel, f) for f in kafkalog.findings(path)]
            decoder = decoder_for_path(str(path))
            for batch in kafkalog.iter_batches(path) if decoder else ():
                for r in () if batch.is_control else batch.records:
                    counts[f"{decoder} record"] += 1
                    try:
                        decode(decoder, r.key, r.value, expand=True)
                    except MessageError as err:
                        findings.append((rel, Finding("internal_record_error", batch.position,
                                                      batch.end, f"offset {r.offset}: {err}")))
        elif suffix in INDEX_FILES:
            read, verify = INDEX_FILES[suffix]
            counts[suffix + (DELETED if path.name.endswith(DELETED) else "")] += 1
            index = read(path)
            log = path.with_name(Path(base).stem + ".log" + path.name[len(base):])
            findings += [(rel, f) for f in (verify(index, log) if log.exists()
                                            else index.findings)]
        else:
            kind = log_dir.file_kind(path)
            assert kind is not None, f"{rel}: no reader for it"
            counts[kind] += 1
            findings += [(rel, f) for f in log_dir.READERS[kind](path).findings]
    return counts, findings


#: what each directory holds, as read whole (folders, segments and the internal topics' records
#: decoded, index files, state files by kind; the counts the corpus's READMEs give)
WHOLE = {
    "AdiletBatyrbayev0520+air_analyzer": {".index": 2, ".index.deleted": 5, ".timeindex": 2,
        ".timeindex.deleted": 5, "folder live": 56, "leader_epoch_checkpoint": 56, "lock": 1,
        "meta_properties": 1, "metadata_snapshot": 5, "offset_checkpoint": 4, "offsets record": 12,
        "partition_metadata": 56, "producer_snapshot": 7, "quorum_state": 1, "segment": 4},
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions": {".index": 139, ".timeindex":
        139, "clean_shutdown": 1, "folder live": 140, "leader_epoch_checkpoint": 140, "lock": 1,
        "meta_properties": 1, "metadata_snapshot": 4, "offset_checkpoint": 4, "offsets record": 89,
        "partition_metadata": 140, "producer_snapshot": 12, "quorum_state": 1, "segment": 6,
        "transaction-log record": 4},
    "KAIPASUBHASH+kafka-logs": {"folder live": 53, "leader_epoch_checkpoint": 53, "lock": 1,
        "meta_properties": 1, "offset_checkpoint": 4, "offsets record": 19, "segment": 4},
    "Niloufar1171+LDI-POC": {".index": 30, ".timeindex": 29, "cluster-metadata record": 4928,
        "folder live": 54, "leader_epoch_checkpoint": 54, "meta_properties": 1,
        "metadata_snapshot": 1, "offset_checkpoint": 4, "offsets record": 13, "partition_metadata":
        54, "producer_snapshot": 1, "quorum_state": 1, "segment": 3},
    "VolodymyrZee+kafka": {"clean_shutdown": 1, "folder live": 54, "leader_epoch_checkpoint": 54,
        "lock": 1, "meta_properties": 1, "offset_checkpoint": 4, "offsets record": 1025,
        "producer_snapshot": 9, "segment": 9},
    "qkrckstjq+spring-kafka": {"cluster-metadata record": 12618, "folder live": 63,
        "leader_epoch_checkpoint": 63, "lock": 1, "meta_properties": 1, "metadata_snapshot": 6,
        "offset_checkpoint": 4, "offsets record": 89, "partition_metadata": 63,
        "producer_snapshot": 7, "quorum_state": 1, "segment": 6},
    "ronem123+rupia-transaction-service": {".index": 54, ".timeindex": 54, "clean_shutdown": 1,
        "cluster-metadata record": 12156, "folder live": 52, "leader_epoch_checkpoint": 52,
        "meta_properties": 1, "metadata_snapshot": 4, "offset_checkpoint": 4, "offsets record": 7,
        "partition_metadata": 52, "producer_snapshot": 8, "quorum_state": 1, "segment": 5},
}


@pytest.mark.parametrize("directory", DIRS)
def test_each_directory_reads_whole_without_a_false_finding(directory):
    counts, findings = read_whole(BROKER_DIRS / directory)
    assert findings == []
    assert counts == Counter(WHOLE[directory])


# -- what the seven do not hold, written here from Kafka's specs and source ------------------

UNIQUE = "0c4f9a3e5b7d41e2a8c6f0b1d2e3f405"  # a UUID as LocalLog writes it: 32 hex digits
#: AbortedTxn (storage/.../AbortedTxn.java): version int16 0, producerId, firstOffset,
#: lastOffset, lastStableOffset int64, 34 bytes an entry
ABORTED_TXN = struct.Struct(">hqqqq")


def _remote_log_segment_metadata() -> bytes:
    """A __remote_log_metadata value (RemoteLogMetadataSerde over AbstractApiMessageSerde:
    unsigned varints frame version 1, api key 0 = RemoteLogSegmentMetadataRecord, version
    0, then the flexible record of storage/src/main/resources/message/)."""
    topic_id, segment_id = bytes(range(16)), bytes(range(16, 32))
    id_entry = (uvarint(len(b"orders") + 1) + b"orders" + topic_id + struct.pack(">i", 0) + uvarint(0)
                + segment_id + uvarint(0))  # TopicIdPartition {Name, Id, Partition}, Id
    return (uvarint(1) + uvarint(0) + uvarint(0) + id_entry
            + struct.pack(">qqiqq", 0, 3, 1, 1700000000000, 1700000005000)  # offsets, broker,
            + uvarint(2) + struct.pack(">iq", 0, 0) + uvarint(0)                    # times; epochs
            + struct.pack(">i", 4096) + uvarint(0) + struct.pack(">b", 1) + uvarint(0))  # size, null
    # custom metadata, state COPY_SEGMENT_FINISHED, no tagged fields


def _segment(folder: Path, records: list[tuple[bytes | None, bytes | None]], **options) -> Path:
    folder.mkdir(exist_ok=True)
    with SegmentWriter(folder, 0) as w:
        for key, value in records:
            w.append([WriteRecord(key, value, timestamp=1700000000000)], **options)
    return folder / "00000000000000000000.log"


def test_a_directory_of_what_the_seven_lack_reads_whole(tmp_path):
    root = tmp_path / "kafka-logs"
    root.mkdir()
    (root / "meta.properties").write_bytes(properties_as_kafka_writes(
        {"cluster.id": "5L6g3nShT-eMCtK--X86sw", "directory.id": "xqJgskt667iXfxljqOCMkA",
         "node.id": "1", "version": "1"}, "Fri Feb 21 09:33:52 GMT 2025"))
    (root / ".kafka_cleanshutdown").write_bytes(b'{"version":0,"brokerEpoch":7}')
    (root / ".lock").write_bytes(b"")
    hw = [("orders", 0, 4), ("__share_group_state", 0, 3), ("__remote_log_metadata", 0, 1)]
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        (root / name).write_bytes(checkpoint_as_kafka_writes(hw))
    (root / "log-start-offset-checkpoint").write_bytes(checkpoint_as_kafka_writes([]))
    (root / "cleaner-offset-checkpoint").write_bytes(b"")

    # orders-0: a transaction of producer 7 aborted at offset 2, then a plain record
    orders = root / "orders-0"
    orders.mkdir()
    with SegmentWriter(orders, 0) as w:
        w.append([WriteRecord(b"k", b"v0"), WriteRecord(b"k", b"v1")], transactional=True,
                 producer_id=7, producer_epoch=0, base_sequence=0)
        assert w.append_marker(producer_id=7, producer_epoch=0, commit=False) == 2
        w.append([WriteRecord(b"k", b"v3")])
    # ProducerStateManager: the aborted transaction's last stable offset is the offset after
    # its marker (no other transaction open)
    assert (orders / "00000000000000000000.txnindex").read_bytes() == ABORTED_TXN.pack(
        0, 7, 0, 2, 3)
    (orders / "leader-epoch-checkpoint").write_bytes(b"0\n1\n0 0\n")
    (orders / "partition.metadata").write_bytes(b"version: 0\ntopic_id: BaXztRSlQQKyk-Jx4a15Ng\n")
    # the three renamed states of a partition folder
    for partition, suffix in ((1, "-delete"), (0, "-future"), (2, "-stray")):
        folder = root / f"orders-{partition}.{UNIQUE}{suffix}"
        _segment(folder, [(b"k", b"v")])
        (folder / "leader-epoch-checkpoint").write_bytes(b"0\n1\n0 0\n")
    _segment(root / "__share_group_state-0", [(k, v) for k, v, _ in SHARE_RECORDS])
    _segment(root / "__remote_log_metadata-0", [(None, _remote_log_segment_metadata())])
    metadata = root / "__cluster_metadata-0"
    metadata.mkdir()
    (metadata / "quorum-state").write_bytes(
        b'{"leaderId":1,"leaderEpoch":1,"votedId":-1,'
        b'"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}')
    snapshot = BROKER_DIRS / "qkrckstjq+spring-kafka/__cluster_metadata-0"
    for name in ("00000000000000014406-0000000001.checkpoint",
                 "00000000000000007207-0000000001.checkpoint.deleted", "partition.metadata"):
        (metadata / name).write_bytes((snapshot / name).read_bytes())

    counts, findings = read_whole(root)
    assert findings == []
    assert counts == Counter({
        "folder live": 4, "folder delete": 1, "folder future": 1, "folder stray": 1,
        "segment": 6, ".index": 6, ".timeindex": 6, ".txnindex": 1,
        "share-group-state record": 3, "remote-log-metadata record": 1,
        "leader_epoch_checkpoint": 4, "partition_metadata": 2, "meta_properties": 1, "clean_shutdown": 1, "offset_checkpoint": 4, "lock": 1,
        "quorum_state": 1, "metadata_snapshot": 2})
    rows = read_share_group_state(root / "__share_group_state-0" / "00000000000000000000.log")
    assert rows.findings == () and [r["record"] for r in rows.rows] == [
        "snapshot", "update", "snapshot"]
    # a damaged .txnindex entry, and the whole read says where
    txn = orders / "00000000000000000000.txnindex"
    txn.write_bytes(ABORTED_TXN.pack(0, 7, 0, 1, 3))  # says the ABORT is at offset 1
    _, findings = read_whole(root)
    assert [(path, f.kind) for path, f in findings] == [
        ("orders-0/00000000000000000000.txnindex", "index_mismatch")]
