"""Every record of Kafka 4.3.0's coordinators and metadata log, as the derived tables' rows
(no Spark: :func:`spark_jobs.derive.internal.rows_of_file` and the tables' Arrow schemas, as
the executors use them). Records are encoded from the vendored 4.3.0 specs by the independent
writer tests/kafka_messages.py (see tests/kafkalog/test_kafka_43_records.py)."""

from __future__ import annotations

import json
import struct
from importlib import resources

import pyarrow as pa
import pytest

from tests import kafka_messages as km
from spark_jobs import schemas
from spark_jobs.derive.internal import rows_of_file

SPECS = resources.files("kafkalog.internal").joinpath("specs")
TOPICS = {"group-coordinator": "__consumer_offsets", "share-coordinator": "__share_group_state",
          "transaction-coordinator": "__transaction_state", "metadata": "__cluster_metadata"}


def _release() -> dict[str, dict]:
    paths = [line.split(maxsplit=1)[1] for line in
             SPECS.joinpath("SHA256SUMS").read_text().splitlines()]
    return {p: km.load(SPECS.joinpath(p).read_text()) for p in paths
            if p.startswith("4.3.0/") and p.split("/")[1] in TOPICS}


def _records(kind: str) -> dict[str, list[tuple[bytes | None, bytes | None, str]]]:
    """topic -> (key, value, what) of every record type x version of the release."""
    docs = _release()
    keys = {(p.split("/")[1], d["apiKey"]): d for p, d in docs.items()
            if d["type"] == "coordinator-key"}
    out: dict[str, list] = {}
    for path, doc in docs.items():
        module = path.split("/")[1]
        for v in km.versions(doc["validVersions"]):
            value = km.encode(doc, v, km.samples(doc, v)[kind])
            what = f"{doc['name']} v{v}"
            if module == "metadata":
                framed = km.uvarint(1) + km.uvarint(doc["apiKey"]) + km.uvarint(v) + value
                out.setdefault(TOPICS[module], []).append((None, framed, what))
            elif doc["type"] == "coordinator-value":
                key_doc = keys[(module, doc["apiKey"])]
                key = (struct.pack(">h", doc["apiKey"])
                       + km.encode(key_doc, 0, km.samples(key_doc, 0)["set"]))
                out.setdefault(TOPICS[module], []).append(
                    (key, struct.pack(">h", v) + value, what))
                out[TOPICS[module]].append((key, None, what + " tombstone"))
    return out


def _records_table(topic: str, records: list) -> pa.Table:
    n = len(records)
    return pa.table({"topic": [topic] * n, "partition": [0] * n, "offset": list(range(n)),
                     "timestamp": [1_700_000_000_000] * n, "batch_position": [0] * n,
                     "key": [k for k, _, _ in records], "value": [v for _, v, _ in records],
                     "segment": ["00000000000000000000.log"] * n,
                     "segment_base_offset": [0] * n, "run_id": ["r"] * n})


@pytest.mark.parametrize("kind", km.KINDS)
def test_every_43_record_becomes_a_row_of_its_table(kind):
    seen: dict[str, int] = {}
    for topic, records in _records(kind).items():
        rows, findings = rows_of_file(_records_table(topic, records))
        assert findings == [], [f["message"] for f in findings]
        for table, rs in rows.items():
            pa.Table.from_pylist(rs, schema=schemas.TABLES[table])  # the rows fit the table
            seen[table] = seen.get(table, 0) + len(rs)
    # 30 group values (+ tombstones), 2 share, 2 transaction, 37 metadata record versions
    assert seen == {"consumer_offsets": 2 * 6, "group_metadata": 2 * 24,
                    "share_group_state": 2 * 2, "transactions": 2 * 2, "cluster_metadata": 37}


def test_streams_group_records_land_with_the_other_group_records():
    rows, _ = rows_of_file(_records_table("__consumer_offsets",
                                          _records("set")["__consumer_offsets"]))
    by_record = {}
    for r in rows["group_metadata"]:
        by_record.setdefault(r["record"], []).append(r)
    assert sorted(n for n in by_record if n.startswith("Streams")) == [
        "StreamsGroupCurrentMemberAssignment", "StreamsGroupMemberMetadata",
        "StreamsGroupMetadata", "StreamsGroupTargetAssignmentMember",
        "StreamsGroupTargetAssignmentMetadata", "StreamsGroupTopology"]
    assert "ConsumerGroupRegularExpression" in by_record
    topology = next(r for r in by_record["StreamsGroupTopology"] if not r["tombstone"])
    assert topology["record_type"] == 23 and topology["group"] == json.loads(
        topology["key_json"])["groupId"]
    assert "subtopologies" in json.loads(topology["value_json"])
    legacy = [r for r in rows["consumer_offsets"] if r["record_type"] == 0]
    assert legacy and all(r["committed_offset"] is not None for r in legacy if not r["tombstone"])
