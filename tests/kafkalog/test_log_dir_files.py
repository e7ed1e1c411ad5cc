"""The readers of a log directory's own files and names (kafkalog.folders, kafkalog.log_dir,
kafkalog.kraft) on inputs written here from Kafka's source: what the seven real
directories (test_log_dirs.py) do not hold, syntax corners, and every fault as a finding."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from kafkalog.folders import DELETE, FUTURE, LIVE, STRAY, parse_partition_folder
from kafkalog.internal.share_group_state import read_share_group_state
from kafkalog.kraft import (METADATA_SNAPSHOT, QUORUM_STATE, read_metadata_snapshot,
                            read_quorum_state, snapshot_id)
from kafkalog.log_dir import (CLEAN_SHUTDOWN, META_PROPERTIES, OFFSET_CHECKPOINT, READERS,
                              file_kind, parse_properties, read_clean_shutdown,
                              read_meta_properties, read_offset_checkpoint)
from kafkalog.model import FINDING_KINDS, STATE_FINDING_KINDS
from kafkalog.state_files import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, PRODUCER_SNAPSHOT
from kafkalog.writer import WriteRecord, encode_v2_batch

from tests.kafkalog.broker_files import checkpoint_as_kafka_writes, properties_as_kafka_writes
from tests.segments import flip_bit
from tests.share_group_state import SHARE_RECORDS, share_segment


# -- partition folder names, made as Kafka's LocalLog makes them ------------------------------

def _kafka_dir_name(topic: str, partition: int, suffix: str, capped: bool) -> str:
    """LocalLog.logDirNameWithSuffixCappedLength (-delete, -stray: the topic cut so that the
    name fits in 255 characters) and logDirNameWithSuffix (-future)."""
    unique_id = str(uuid.uuid4()).replace("-", "")  # java.util.UUID.randomUUID, dashes removed
    full_suffix = f"-{partition}.{unique_id}{suffix}"
    if capped:
        return topic[:min(len(topic), 255 - len(full_suffix))] + full_suffix
    return f"{topic}-{partition}.{unique_id}{suffix}"


@pytest.mark.parametrize("topic", ["orders", "my.topic-v2_x", "__consumer_offsets", "a" * 249])
@pytest.mark.parametrize("partition", [0, 12, 2147483647])
def test_partition_folder_names_as_kafka_makes_them(topic, partition):
    assert parse_partition_folder(f"{topic}-{partition}") == (topic, partition, LIVE)
    future = _kafka_dir_name(topic, partition, "-future", capped=False)
    assert parse_partition_folder(future) == (topic, partition, FUTURE)
    for suffix, state in (("-delete", DELETE), ("-stray", STRAY)):
        name = _kafka_dir_name(topic, partition, suffix, capped=True)
        assert len(name) <= 255
        got = parse_partition_folder(name)
        assert (got.partition, got.state) == (partition, state) and topic.startswith(got.topic)
        # Kafka cuts only topics too long for 255 characters
        assert (got.topic == topic) == (len(topic) + len(name) - len(got.topic) <= 255)


def test_a_long_topic_is_cut_in_delete_and_stray_names():
    name = _kafka_dir_name("t" * 249, 3, "-delete", capped=True)
    # "-3." + 32 hex digits + "-delete" = 42 characters: 213 left for the topic
    assert len(name) == 255 and parse_partition_folder(name) == ("t" * 213, 3, DELETE)
    assert parse_partition_folder("/data/kafka/orders-3/") == ("orders", 3, LIVE)  # a path


@pytest.mark.parametrize("name", [
    "orders", "orders-", "-3", "orders-x", "orders-3-delete", "orders-3.-delete",
    "orders-3.0c4f9a3e5b7d41e2a8c6f0b1d2e3f40-delete",     # 31 hex digits
    "orders-3.0C4F9A3E5B7D41E2A8C6F0B1D2E3F405-delete",    # Kafka writes lower case
    "orders-3.0c4f9a3e5b7d41e2a8c6f0b1d2e3f405-deleted",
    "orders-3.0c4f9a3e5b7d41e2a8c6f0b1d2e3f405",
    "or ders-3", "ord/ers-3x", ".-3", "..-3", "orders-2147483648", "t" * 250 + "-0",
    "meta.properties", "00000000000000000000.log", "",
])
def test_names_that_are_no_partition_folder(name):
    assert parse_partition_folder(name) is None


# -- meta.properties: Java properties, as java.util.Properties.load reads them -----------------


def test_meta_properties_as_kafka_writes_them():
    data = properties_as_kafka_writes({"node.id": "3", "directory.id": "7JmH4YiRA0Bg4MtqR69GOg",
                                        "version": "1", "cluster.id": "a:b=c#d!e f"},
                                       "Fri Apr 11 13:50:25 UTC 2025")
    assert b"cluster.id=a\\:b\\=c\\#d\\!e f\n" in data
    state = read_meta_properties(data)
    assert state.findings == () and state.kind == META_PROPERTIES
    assert state.header == {"version": 1, "cluster_id": "a:b=c#d!e f", "node_id": 3,
                            "directory_id": "7JmH4YiRA0Bg4MtqR69GOg"}
    assert [r["key"] for r in state.rows] == ["node.id", "directory.id", "version", "cluster.id"]


def test_java_properties_syntax():
    text = (b"# a comment\r\n"
            b"! also a comment\n"
            b"   # an indented comment\n"
            b"\n"
            b"   \t\n"
            b"equals=1\n"
            b"colon:2\n"
            b"space 3\n"
            b"spaced   =   4  \n"                   # the value keeps its trailing spaces
            b"  indented=5\n"
            b"continued=first, \\\n"
            b"      second, \\\n"
            b"   # not a comment here\n"
            b"escapes=a\\tb\\u0041\\=c\\q\n"          # \t, \u0041, \= and \q (a q)
            b"ke\\ y\\:x=6\n"                        # an escaped space and colon in the key
            b"empty\n"
            b"both := 7\n"                           # the first of = and : separates
            b"two\\\\\n"                              # an even number of backslashes: no
            b"latin=caf\xe9\r"                       # continuation; ISO-8859-1; a bare CR
            b"dup=1\n"
            b"dup=2\n"
            b"last=\\")                              # a backslash at the end of the file
    entries, findings = parse_properties(text)
    assert findings == []
    assert [(k, v) for k, v, _, _ in entries] == [
        ("equals", "1"), ("colon", "2"), ("space", "3"), ("spaced", "4  "), ("indented", "5"),
        ("continued", "first, second, # not a comment here"), ("escapes", "a\tbA=cq"),
        ("ke y:x", "6"), ("empty", ""), ("both", "= 7"), ("two\\", ""), ("latin", "café"),
        ("dup", "1"), ("dup", "2"), ("last", "")]
    start, end = entries[5][2:]  # a continued entry spans its three lines
    assert text[start:end] == b"continued=first, \\\n      second, \\\n   # not a comment here"
    entries, findings = parse_properties(b"ok=1\nbad=\\u00G1\nalso=2\n")
    assert [k for k, _, _, _ in entries] == ["ok", "also"]
    assert [(f.kind, f.position, f.end) for f in findings] == [("state_file_corrupt", 5, 15)]
    assert "malformed \\uxxxx escape 'u00G1'" in findings[0].message


@pytest.mark.parametrize("text, header, words", [
    ("broker.id=4\n", {"version": 0, "cluster_id": None, "node_id": 4, "directory_id": None},
     None),  # no version: 0 (MetaPropertiesVersion's default)
    ("version=0\n", {"version": 0, "cluster_id": None, "node_id": None, "directory_id": None},
     None),  # a version 0 directory before the broker first started may lack broker.id
    ("version=0\nnode.id=4\n", {"version": 0, "cluster_id": None, "node_id": None,
                                "directory_id": None}, None),  # v0 reads broker.id only
    ("version= 1 \nnode.id=2\ncluster.id=c\n", {"version": 1, "cluster_id": "c", "node_id": 2,
                                                  "directory_id": None}, None),  # version trimmed
    ("version=1\ncluster.id=c\n", None, "version 1 without node.id"),
    ("version=1\nnode.id=2\n", None, "version 1 without cluster.id"),
    ("version=2\nnode.id=2\ncluster.id=c\n", None, "version '2'; Kafka knows 0 and 1"),
    ("version=one\n", None, "version 'one'"),
    ("version=1\nnode.id=2 \ncluster.id=c\n", None, "node.id '2 ' is not a base-10 int"),
    ("version=0\nbroker.id=x\n", None, "broker.id 'x' is not a base-10 int"),
    ("version=1\nnode.id=2\ncluster.id=c\ndirectory.id=abc\n", None,
     "directory.id: not a Kafka UUID"),
])
def test_meta_properties_versions_and_faults(text, header, words):
    state = read_meta_properties(text.encode())
    if words is None:
        assert state.findings == () and state.header == header
    else:
        assert [f.kind for f in state.findings] == ["state_file_corrupt"]
        assert words in state.findings[0].message, state.findings


# -- .kafka_cleanshutdown (CleanShutdownFileHandler) -------------------------------------------

@pytest.mark.parametrize("data, header, words", [
    (b"", {"version": None, "broker_epoch": None}, None),            # Kafka before 3.7
    (b'{"version":0,"brokerEpoch":7}', {"version": 0, "broker_epoch": 7}, None),
    (b'{"brokerEpoch":7,"later":true}', {"version": 0, "broker_epoch": 7}, None),  # ignored
    (b'{"version":0,"brokerEpoch":9223372036854775807}',
     {"version": 0, "broker_epoch": 9223372036854775807}, None),
    (b"clean", None, "not JSON"),
    (b"[7]", None, "JSON list, not an object"),
    (b'{"version":0}', None, "brokerEpoch None is not a long"),
    (b'{"version":0,"brokerEpoch":"7"}', None, "brokerEpoch '7' is not a long"),
    (b'{"version":0,"brokerEpoch":9223372036854775808}', None, "is not a long"),
    (b'{"version":"x","brokerEpoch":1}', None, "version 'x' is not an int"),
])
def test_clean_shutdown(data, header, words):
    state = read_clean_shutdown(data)
    assert state.kind == CLEAN_SHUTDOWN and state.rows == ()
    if words is None:
        assert state.findings == () and state.header == header
    else:
        assert [f.kind for f in state.findings] == ["state_file_corrupt"]
        assert words in state.findings[0].message and ".kafka_cleanshutdown" in \
            state.findings[0].message


# -- offset checkpoints (OffsetCheckpointFile) -------------------------------------------------


def test_offset_checkpoint(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(checkpoint_as_kafka_writes([("orders", 0, 5), ("my.topic-x", 12, 2**63 - 1)]))
    state = read_offset_checkpoint(path)
    assert state.findings == () and state.kind == OFFSET_CHECKPOINT
    assert state.header == {"checkpoint": "replication-offset-checkpoint", "version": 0,
                            "entry_count": 2}
    assert state.rows == ({"topic": "orders", "partition": 0, "offset": 5},
                          {"topic": "my.topic-x", "partition": 12, "offset": 2**63 - 1})
    assert read_offset_checkpoint(b"").header == {"checkpoint": None, "version": None,
                                                  "entry_count": None}
    for text, words in [("0\n1\norders x 5\n", "offset checkpoint line 3: 'orders x 5' is not "
                                               "'topic partition offset'"),
                        ("0\n1\norders 0\n", "is not 'topic partition offset'"),
                        ("0\n1\n 0 5\n", "' 0 5' is not"),  # Java's split: an empty topic
                        ("0\n1\norders 0 9223372036854775808\n", "is not"),
                        ("0\n2\norders 0 5\n", "declares 2 entries, holds 1"),
                        ("1\n0\n", "version 1; Kafka reads only version 0")]:
        found = read_offset_checkpoint(text.encode()).findings
        assert [f.kind for f in found] == ["state_file_corrupt"], text
        assert words in found[0].message, (text, found)


# -- quorum-state (FileQuorumStateStore) -------------------------------------------------------

def test_quorum_state_faults():
    v0 = b'{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,' \
         b'"currentVoters":[{"voterId":1},{"voterId":3}],"data_version":0}'
    state = read_quorum_state(v0 + b"\nKafka reads the first line only")
    assert state.findings == () and state.rows == ({"voter_id": 1}, {"voter_id": 3})
    assert read_quorum_state(v0.replace(b'[{"voterId":1},{"voterId":3}]', b"null")).rows == ()
    for data, words in [
            (b"", "no JSON on the first line"),
            (b"\n" + v0, "no JSON on the first line"),
            (b"{", "the first line is not JSON"),
            (b"[1]", "not a JSON object"),
            (v0.replace(b',"data_version":0', b""), "data_version None; Kafka reads 0-1"),
            (v0.replace(b'"data_version":0', b'"data_version":2'), "data_version 2"),
            (v0.replace(b'"clusterId":"",', b""),
             "no 'clusterId', which is mandatory in version 0"),
            (v0.replace(b'"leaderEpoch":2', b'"leaderEpoch":"2"'),
             "QuorumStateData.leaderEpoch: expected an integer, got a string")]:
        state = read_quorum_state(data)
        assert [f.kind for f in state.findings] == ["state_file_corrupt"], data
        assert words in state.findings[0].message, (data, state.findings)


# -- KRaft snapshots: a real one, cut and reordered --------------------------------------------

REAL_SNAPSHOT = (Path(__file__).parents[1] / "data" / "broker-dirs" / "qkrckstjq+spring-kafka"
                 / "__cluster_metadata-0" / "00000000000000014406-0000000001.checkpoint")


def test_snapshot_faults():
    data = REAL_SNAPSHOT.read_bytes()  # batches at 0 (header), 83 (4 records), 427 (footer)
    assert len(data) == 502 and read_metadata_snapshot(data).findings == ()
    header, records, footer = data[:83], data[83:427], data[427:]
    for damaged, words in [
            (header + records, "without its SNAPSHOT_FOOTER: it ends after offset 4"),
            (records + footer, "the first record (offset 1) is FEATURE_LEVEL_RECORD, not a "
                               "SNAPSHOT_HEADER"),
            (header + header + records + footer, "offset 0 is a second SNAPSHOT_HEADER"),
            (data + records + footer, "offset 1 is FEATURE_LEVEL_RECORD after the SNAPSHOT_FOOTER"),
            (b"", "snapshot of 0 bytes without a record")]:
        state = read_metadata_snapshot(damaged)
        corrupt = [f.message for f in state.findings if f.kind == "state_file_corrupt"]
        assert len(corrupt) == 1 and words in corrupt[0], (words, state.findings)
        # offsets that go back are the batch decoder's own finding as well
        assert {f.kind for f in state.findings} <= {"state_file_corrupt", "offset_regression"}
    cut = read_metadata_snapshot(data[:450])  # inside the footer batch
    assert [f.kind for f in cut.findings] == ["truncated_tail", "state_file_corrupt"]
    assert cut.header["record_count"] == 4 and len(cut.rows) == 5
    # a metadata record that does not decode (frame version 0), in a sound batch
    bad = encode_v2_batch(1, [WriteRecord(None, b"\x00\x0c\x00\x00")], partition_leader_epoch=1)
    state = read_metadata_snapshot(header + bad + footer)
    assert [(f.kind, f.base_offset) for f in state.findings] == [("internal_record_error", 1)]
    assert "frame version 0" in state.findings[0].message
    assert state.rows[1] == {"offset": 1, "batch_position": 83, "control": False,
                             "record_type": None, "version": None, "data": None}
    # a control type Kafka does not know is kept and not decoded (Kafka skips it)
    odd = encode_v2_batch(1, [WriteRecord(b"\x00\x00\x00\x09", b"")], control=True)
    state = read_metadata_snapshot(header + odd + footer)
    assert state.findings == () and state.rows[1]["record_type"] == "UNKNOWN(9)"


def test_snapshot_ids_from_names():
    assert snapshot_id("/x/00000000000000243115-0000000030.checkpoint") == (243115, 30, False)
    assert snapshot_id("00000000000000007207-0000000001.checkpoint.deleted") == (7207, 1, True)
    assert snapshot_id("bootstrap.checkpoint") == (None, None, False)
    assert snapshot_id(b"bytes") == (None, None, False)


# -- which reader reads which file ------------------------------------------------------------

@pytest.mark.parametrize("name, kind", [
    ("meta.properties", META_PROPERTIES), (".kafka_cleanshutdown", CLEAN_SHUTDOWN),
    ("recovery-point-offset-checkpoint", OFFSET_CHECKPOINT),
    ("replication-offset-checkpoint", OFFSET_CHECKPOINT),
    ("log-start-offset-checkpoint", OFFSET_CHECKPOINT),
    ("cleaner-offset-checkpoint", OFFSET_CHECKPOINT),
    ("quorum-state", QUORUM_STATE), ("bootstrap.checkpoint", METADATA_SNAPSHOT),
    ("00000000000000243115-0000000030.checkpoint", METADATA_SNAPSHOT),
    ("00000000000000007207-0000000001.checkpoint.deleted", METADATA_SNAPSHOT),
    ("00000000000000000011.snapshot", PRODUCER_SNAPSHOT),
    ("00000000000000000011.snapshot.deleted", PRODUCER_SNAPSHOT),
    ("leader-epoch-checkpoint", LEADER_EPOCH_CHECKPOINT),
    ("partition.metadata", PARTITION_METADATA),
    ("00000000000000000000.log", None), ("00000000000000000000.index.deleted", None),
    (".lock", None), ("quorum-state.tmp", None), ("0-1.checkpoint", None),
    ("00000000000000007207-0000000001-123.checkpoint.part", None),
])
def test_file_kinds(name, kind):
    assert file_kind(f"/data/kafka/x-0/{name}") == kind
    if kind is not None:
        assert set(READERS) >= {kind}


def test_damaged_log_dir_files_are_findings_never_exceptions(tmp_path):
    rng = random.Random(36)
    share = share_segment(tmp_path, SHARE_RECORDS).read_bytes()
    samples = [
        (read_share_group_state, share),
        (read_meta_properties, properties_as_kafka_writes(
            {"node.id": "1", "version": "1", "cluster.id": "c"}, "today")),
        (read_clean_shutdown, b'{"version":0,"brokerEpoch":11}'),
        (read_offset_checkpoint, checkpoint_as_kafka_writes([("a", 0, 1), ("b", 1, 2)])),
        (read_quorum_state, b'{"leaderId":1,"leaderEpoch":1,"votedId":-1,'
                            b'"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}'),
        (read_metadata_snapshot, REAL_SNAPSHOT.read_bytes()),
    ]
    kinds = set(STATE_FINDING_KINDS) | set(FINDING_KINDS) | {"internal_record_error"}
    for read, good in samples:
        damaged = [good[:i] for i in range(len(good))]
        damaged += [flip_bit(good, rng) for _ in range(80)]
        damaged += [bytes(rng.randrange(256) for _ in range(rng.randrange(120)))
                    for _ in range(40)]
        found = 0
        for data in damaged:
            state = read(data)  # anything but a StateFile (or an exception) fails the test
            assert state.size == len(data) and {f.kind for f in state.findings} <= kinds
            found += bool(state.findings)
        assert found > 0, read.__name__  # and many a damaged file still reads
