"""The demo's data for the per-key tables (issue 35 items 2-3): ``customers-0``, a compacted
topic, and ``dbserver1.inventory.customers-0``, a Debezium topic (demo.data, demo.cdc).

The snapshots are written here and decoded with ``kafkalog.decode``; where each key stands
after each night is replayed by this test's own fold (records in offset order, a
transaction's records held until its producer's COMMIT or ABORT marker; for the Debezium
topic the envelope's ``op`` read from the JSON as Debezium documents it, not with
spark_jobs.derive.debezium) and compared with the literal states below: the states the
``latest__customers`` and ``cdc__dbserver1_dot_inventory_dot_customers`` tables should hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kafkalog
from demo import cdc, data

from tests.runs import decode

CUSTOMERS = "customers-0"
DEBEZIUM = f"{cdc.TOPIC}-{cdc.PARTITION}"

#: key -> (offset, tier) of the latest committed record, after night 1 and after night 2
LATEST = (
    {"cust-0": (20, "gold"), "cust-1": (12, "gold"), "cust-2": (2, "silver"),
     "cust-3": (13, "silver"), "cust-5": (10, "gold"), "cust-6": (11, "gold"),
     "cust-7": (14, "bronze")},
    {"cust-0": (22, "silver"), "cust-1": (12, "gold"), "cust-2": (18, "gold"),
     "cust-5": (25, "platinum"), "cust-6": (11, "gold"), "cust-7": (14, "bronze"),
     "cust-8": (19, "silver"), "cust-9": (24, "bronze")},
)
#: id -> (op, email) of the source table's row, after night 1 and after night 2
CDC = (
    {1001: ("r", "sally.thomas@acme.com"), 1002: ("r", "gbailey@foobar.com"),
     1003: ("r", "ed@walker.com")},
    {1001: ("u", "sally.thomas@example.com"), 1003: ("r", "ed@walker.com"),
     1004: ("c", "annek@noanswer.org")},
)


@pytest.fixture(scope="module")
def nights(tmp_path_factory, demo_nights) -> list[Path]:
    return demo_nights(tmp_path_factory.mktemp("snapshots"))  # data.write_nights's


def decoded(folder: Path):
    """(batches, records, markers) of a partition folder's segments, in offset order."""
    batches, records, markers = [], [], []
    for log in sorted(folder.glob("*.log")):
        d = kafkalog.decode(log)
        assert d.findings.num_rows == 0, d.findings.to_pylist()
        batches += d.batches.to_pylist()
        records += d.records.to_pylist()
        markers += d.markers.to_pylist()
    return batches, records, markers


def latest(records, markers) -> dict:
    """Replay: key -> (offset, value) of the latest committed record (tombstones delete)."""
    entries = sorted([("r", r["offset"], r) for r in records] +
                     [("m", m["offset"], m) for m in markers], key=lambda e: e[1])
    state, held = {}, {}  # held: producer id -> its open transaction's records

    def apply(r):
        if r["value"] is None:
            state.pop(r["key"], None)
        else:
            state[r["key"]] = (r["offset"], r["value"])

    for kind, _, e in entries:
        if kind == "m":
            for r in held.pop(e["producer_id"], []):
                if e["control_type"] == "COMMIT":
                    apply(r)
        elif e["is_transactional"]:
            held.setdefault(e["producer_id"], []).append(e)
        else:
            apply(e)
    return state


def test_customers_is_compacted_as_the_cleaner_leaves_it_and_grows(nights):
    """The cleaner's evidence both nights: batches keeping their offsets with fewer records,
    a delete-horizon batch holding a tombstone, offsets no batch holds; night 2's segments
    start with night 1's bytes."""
    for night in nights:
        batches, records, _ = decoded(night / CUSTOMERS)
        fewer = [(b["base_offset"], b["last_offset"], b["record_count"]) for b in batches
                 if not b["is_control"]
                 and b["record_count"] < b["last_offset"] - b["base_offset"] + 1]
        assert fewer == [(0, 3, 2), (6, 8, 2)]
        horizon = [b for b in batches if b["has_delete_horizon"]]
        assert [(b["base_offset"], b["last_offset"]) for b in horizon] == [(9, 11)]
        assert any(r["value"] is None and horizon[0]["base_offset"] <= r["offset"]
                   <= horizon[0]["last_offset"] for r in records)
        held = {o for b in batches for o in range(b["base_offset"], b["last_offset"] + 1)}
        assert set(range(max(held) + 1)) - held == {4, 5}
    for log in sorted((nights[0] / CUSTOMERS).glob("*.log")):
        assert (nights[1] / CUSTOMERS / log.name).read_bytes().startswith(log.read_bytes())


def test_customers_latest_state_per_night(nights):
    """Night 1: producer 8100's aborted write (cust-1 platinum, cust-10) never shows, 8200's
    open one (cust-2 gold, cust-8) not yet; night 2: 8200's COMMIT shows it, cust-0 moves back
    to silver, cust-3's tombstone deletes it; cust-4's tombstone (segment 0) keeps it out."""
    markers_by_night = []
    for night, want in zip(nights, LATEST):
        _, records, markers = decoded(night / CUSTOMERS)
        got = {k.decode(): (o, json.loads(v)["tier"]) for k, (o, v) in
               latest(records, markers).items()}
        assert got == want
        assert all(json.loads(v)["customer"] == k.decode() for k, (_, v) in
                   latest(records, markers).items())
        markers_by_night.append([(m["offset"], m["control_type"], m["producer_id"])
                                 for m in markers])
    assert markers_by_night == [[(17, "ABORT", data.ABORTED_PRODUCER)],
                                [(17, "ABORT", data.ABORTED_PRODUCER),
                                 (21, "COMMIT", data.LATE_COMMIT_PRODUCER)]]


def test_debezium_topic_state_per_night(nights):
    """Every key and value in the JsonConverter's wrapper; the PostgreSQL source fields; the
    ops per night (r r r; u c d and the tombstone), replayed to the table's rows."""
    ops = []
    for night, want in zip(nights, CDC):
        batches, records, markers = decoded(night / DEBEZIUM)
        assert markers == [] and all(not b["is_transactional"] for b in batches)
        rows, night_ops = {}, []
        for r in records:
            key = json.loads(r["key"])
            assert set(key) == {"schema", "payload"} and key["schema"]["type"] == "struct"
            id_ = key["payload"]["id"]
            if r["value"] is None:
                night_ops.append(None)
                rows.pop(id_, None)
                continue
            value = json.loads(r["value"])
            assert set(value) == {"schema", "payload"}
            event = value["payload"]
            assert {"before", "after", "source", "op", "ts_ms", "transaction"} <= set(event)
            source = event["source"]
            assert (source["connector"], source["db"], source["schema"], source["table"]) == (
                "postgresql", "postgres", "inventory", "customers")
            assert isinstance(source["lsn"], int) and isinstance(source["txId"], int)
            assert source["ts_ms"] <= event["ts_ms"]
            night_ops.append(event["op"])
            if event["op"] == "d":
                assert event["after"] is None and event["before"]["id"] == id_
                rows.pop(id_, None)
            else:
                assert event["after"]["id"] == id_
                rows[id_] = (event["op"], event["after"]["email"])
        assert rows == want
        ops.append(night_ops)
    assert ops == [["r", "r", "r"], ["r", "r", "r", "u", "c", "d", None]]
    night_1 = next((nights[0] / DEBEZIUM).glob("*.log")).read_bytes()
    assert next((nights[1] / DEBEZIUM).glob("*.log")).read_bytes().startswith(night_1)


def test_the_job_builds_these_states_night_by_night(spark, nights, tmp_path):
    """The decode job over the two partitions, night by night: latest__customers and the
    cdc table hold the literal states above (the source's MicroTimestamp typed as a
    timestamp without zone, as Connect's schema says), and each night's tag reads that
    night's state."""
    import datetime as dt
    import shutil

    from spark_jobs import layout
    from spark_jobs.warehouse import Warehouse

    wh = str(tmp_path / "wh")
    for n, night in enumerate(nights):
        src = tmp_path / f"in{n}"
        for part in (CUSTOMERS, DEBEZIUM):
            shutil.copytree(night / part, src / part)
        decode(spark, src, wh, f"n{n}", night=data.NIGHTS[n])
    w = Warehouse(wh)
    latest, table = w.load("latest__customers"), w.load(layout.cdc_table_name(cdc.TOPIC))
    for n, night in enumerate(data.NIGHTS):
        tag = layout.night_tag(night)
        rows = latest.scan(snapshot_id=latest.snapshot_by_name(tag).snapshot_id).to_arrow()
        assert {r["key"].decode(): (r["offset"], json.loads(r["value"])["tier"])
                for r in rows.to_pylist()} == LATEST[n]
        rows = table.scan(snapshot_id=table.snapshot_by_name(tag).snapshot_id).to_arrow()
        assert {r["id"]: (r["op"], r["email"]) for r in rows.to_pylist()} == CDC[n]
        assert rows.schema.field("updated_at").type.tz is None
        assert all(isinstance(r["updated_at"], dt.datetime) for r in rows.to_pylist())
