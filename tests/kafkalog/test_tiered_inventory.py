"""A tier's inventory (kafkalog/tiered/inventory.py): the live set replayed from
``__remote_log_metadata`` batches framed by tests/segments.py (v2 batches as
DefaultRecordBatch.java lays them out; the records' values packed by
tests/tiered_encoder.py from the specs of apache/kafka
``storage/src/main/resources/message/RemoteLogSegmentMetadata*Record.json``, Aiven's custom
metadata as its SegmentCustomMetadataSerde writes it), the keys of the plugin's
ObjectKeyFactory, and a listing's segments matched to metadata rows."""

from __future__ import annotations

import pytest

from kafkalog.internal.remote_log import read_events
from kafkalog.tiered import inventory

from tests import tiered_encoder as enc
from tests.segments import batch_v2, record

TOPIC_ID = "lZ6vvmajTWKDBUTV6SQAtQ"  # Kafka's Uuid.toString of a topic id
A, B, C = "adh9f8BMS4anaUnD8KWfWg", "Bdh9f8BMS4anaUnD8KWfWg", "Cdh9f8BMS4anaUnD8KWfWg"
MOVED = enc.custom_metadata_bytes({0: 100, 1: "old/"})  # uploaded under another key.prefix


def _log(values) -> bytes:
    """A metadata segment of one batch, key null as Kafka writes them."""
    return batch_v2([record(i, i, None, v) for i, v in enumerate(values)])


@pytest.fixture(scope="module")
def events():
    """Metadata partition 0 copied on two nights (the second repeats the first's records and
    adds B's deletion), and partition 1 holding C, never finished."""
    first = [enc.segment_metadata_record("orders", TOPIC_ID, 0, A, 0, 9, 10),
             enc.segment_update_record("orders", TOPIC_ID, 0, A, enc.COPY_SEGMENT_FINISHED,
                                       MOVED),
             enc.segment_metadata_record("orders", TOPIC_ID, 0, B, 10, 19, 10),
             enc.segment_update_record("orders", TOPIC_ID, 0, B, enc.COPY_SEGMENT_FINISHED)]
    second = first + [enc.segment_update_record("orders", TOPIC_ID, 0, B,
                                                enc.DELETE_SEGMENT_STARTED)]
    other = [enc.segment_metadata_record("orders", TOPIC_ID, 1, C, 0, 4, 5)]
    out = []
    for partition, values in [(0, first), (1, other), (0, second)]:  # nights 1, 1 and 2
        out += read_events(_log(values), metadata_partition=partition)
    return out


def test_the_live_set_replays_each_offset_once_in_order(events):
    assert len(events) == 4 + 1 + 5
    live = inventory.replay(events)
    assert [r["segment_id"] for r in live] == [A]  # B's deletion started on the second night
    assert live[0]["object_prefix"] == "old/"
    # without the second night's copy B is live: each offset counted once, not twice
    assert [r["segment_id"] for r in inventory.replay(events[:5])] == [A, B]
    # the order the copies come in does not matter
    assert inventory.replay(list(reversed(events))) == live


def test_once_in_order_keeps_the_first_copy_of_a_place():
    got = inventory.once_in_order([("b", 2, "x"), ("a", 1, "y"), ("b", 2, "z")],
                                  lambda t: (t[0], t[1]))
    assert got == [("a", 1, "y"), ("b", 2, "x")]


def test_keys_as_the_plugin_finds_them(events):
    row = inventory.replay(events)[0]
    main = f"orders-{TOPIC_ID}/0/{0:020d}-{A}"
    assert inventory.has_custom_keys(row)
    assert inventory.segment_keys(row, "tiered/") == {
        ".log": f"old/{main}.log", ".indexes": f"old/{main}.indexes",
        ".rsm-manifest": f"old/{main}.rsm-manifest"}
    plain = {**row, "object_prefix": None}
    assert not inventory.has_custom_keys(plain)
    assert inventory.segment_keys(plain, "tiered/")[".log"] == f"tiered/{main}.log"


def test_listing_matches_rows_by_id_or_plain_offset(events):
    rows = inventory.replay(events[:5])
    a_key = f"old/orders-{TOPIC_ID}/0/{0:020d}-{A}"
    segments, keys = inventory.listing([
        (a_key + ".log", 10), (a_key + ".indexes", 2), (a_key + ".rsm-manifest", 3),
        ("/orders-0/00000000000000000010.log", 7),  # a plain copy of B (minio-rsm)
        ("/orders-0/00000000000000000050.log", 7),  # a plain copy no row names
        ("README", 1)])
    assert len(keys) == 6 and [s.start_offset for s in segments] == [0, 10, 50]
    listed = inventory.index_listing(segments)
    assert [inventory.find_listed(r, listed).base for r in rows] == [
        a_key, "/orders-0/00000000000000000010"]
    by_row = inventory.index_rows(rows)
    assert [(r or {}).get("segment_id") for r in
            (inventory.find_row(s, by_row) for s in segments)] == [A, B, None]
