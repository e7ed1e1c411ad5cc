"""``streams_groups`` (issue 45): a Kafka Streams group's records, encoded from the vendored
4.3.0 specs by the independent writer tests/kafka_messages.py and framed as
``GroupCoordinatorRecordSerde`` frames them (int16 key version = the key's apiKey, int16 value
version), decoded into ``group_metadata`` rows by the executors' own function
(:func:`spark_jobs.derive.internal.rows_of_file`), then replayed
(:func:`spark_jobs.derive.streams_groups.build`). No Spark."""

from __future__ import annotations

import json
import struct
from importlib import resources

import pyarrow as pa
import pytest

from tests import kafka_messages as km
from spark_jobs import schemas
from spark_jobs.derive import streams_groups
from spark_jobs.derive.internal import rows_of_file

SPECS = resources.files("kafkalog.internal").joinpath("specs").joinpath("4.3.0").joinpath(
    "group-coordinator")


def _doc(name: str) -> dict:
    return km.load(SPECS.joinpath(f"{name}.json").read_text())


def _record(name: str, key: dict, value: dict | None) -> tuple[bytes, bytes | None]:
    key_doc, value_doc = _doc(name + "Key"), _doc(name + "Value")
    k = km.struct_default(key_doc["fields"], 0)
    k.update(key)
    key_bytes = struct.pack(">h", key_doc["apiKey"]) + km.encode(key_doc, 0, k)
    if value is None:
        return key_bytes, None
    v = km.struct_default(value_doc["fields"], 0)
    v.update(value)
    return key_bytes, struct.pack(">h", 0) + km.encode(value_doc, 0, v)


def _table(records) -> pa.Table:
    n = len(records)
    return pa.table({"topic": ["__consumer_offsets"] * n, "partition": [3] * n,
                     "offset": list(range(n)), "timestamp": [1_700_000_000_000] * n,
                     "batch_position": [0] * n, "key": [k for k, _ in records],
                     "value": [v for _, v in records], "segment": ["0.log"] * n,
                     "segment_base_offset": [0] * n, "run_id": ["r"] * n})


def test_a_streams_group_as_its_records_leave_it():
    tasks = [{"subtopologyId": "0", "partitions": [0, 1]}]
    records = [
        _record("StreamsGroupMetadata", {"groupId": "wordcount"}, {"epoch": 3}),
        _record("StreamsGroupTopology", {"groupId": "wordcount"}, {
            "epoch": 2, "subtopologies": [{"subtopologyId": "0", "sourceTopics": ["lines"]}]}),
        _record("StreamsGroupMemberMetadata", {"groupId": "wordcount", "memberId": "m-a"},
                {"clientId": "app-a", "clientHost": "/10.0.0.1", "processId": "p-a",
                 "topologyEpoch": 2}),
        _record("StreamsGroupCurrentMemberAssignment", {"groupId": "wordcount", "memberId": "m-a"},
                {"memberEpoch": 3, "previousMemberEpoch": 2, "state": 0, "activeTasks": tasks}),
        _record("StreamsGroupMemberMetadata", {"groupId": "wordcount", "memberId": "m-b"},
                {"clientId": "app-b", "topologyEpoch": 2}),
        _record("StreamsGroupMemberMetadata", {"groupId": "wordcount", "memberId": "m-b"}, None),
        _record("StreamsGroupMetadata", {"groupId": "wordcount"}, {"epoch": 4}),
    ]
    rows, findings = rows_of_file(_table(records))
    assert findings == []
    gm = pa.Table.from_pylist(rows["group_metadata"], schema=schemas.TABLES["group_metadata"])
    out = streams_groups.build(gm, "2026-11-21", "r").to_pylist()
    assert len(out) == 1
    g = out[0]
    assert (g["group"], g["epoch"], g["topology_epoch"]) == ("wordcount", 4, 2)
    assert json.loads(g["topology_json"])[0]["sourceTopics"] == ["lines"]
    assert [(m["member_id"], m["client_id"], m["member_epoch"], json.loads(m["active_tasks"]))
            for m in g["members"]] == [("m-a", "app-a", 3, tasks)]  # m-b left (tombstone)
    assert (g["night"], g["run_id"]) == ("2026-11-21", "r")


@pytest.mark.pipeline
def test_the_decode_job_writes_the_groups_as_of_the_night(spark, tmp_path):
    from spark_jobs import decode as job
    from spark_jobs import tables

    from tests import segments as seg

    def night(folder, records):
        d = folder / "__consumer_offsets-3"
        d.mkdir(parents=True)
        (d / "00000000000000000000.log").write_bytes(seg.batch_v2(
            [seg.record(i, 0, k, v) for i, (k, v) in enumerate(records)]))
        return folder

    first = [_record("StreamsGroupMetadata", {"groupId": "wordcount"}, {"epoch": 1}),
             _record("StreamsGroupMemberMetadata", {"groupId": "wordcount", "memberId": "m-a"},
                     {"clientId": "app-a"})]
    wh = tmp_path / "wh"
    s = job.main(["--input", str(night(tmp_path / "n1", first)), "--output", str(wh),
                  "--run-id", "n1", "--night", "2026-11-21"], spark=spark)
    assert s["streams_groups"] == 1
    got = tables.read_arrow(str(wh), "streams_groups").to_pylist()
    assert [(g["group"], g["epoch"], [m["member_id"] for m in g["members"]], g["night"])
            for g in got] == [("wordcount", 1, ["m-a"], "2026-11-21")]
