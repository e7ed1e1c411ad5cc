"""cdc__<topic> tables through the decode job against an independent replay (issue 35,
item 3).

Two Debezium topics, written with kafkalog's writer as a Kafka Connect worker leaves them:
PostgreSQL change events with the JsonConverter's schema wrapper (found by their shape), and
MySQL ones without it (named by ``--cdc-topics``). The expectation is
``tests/spark_jobs/cdc_replay.py`` (Debezium's documented semantics) over the committed
records the test wrote, in offset order; a transaction's records count once their
producer's COMMIT is written, never after an ABORT.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs import layout
from spark_jobs.warehouse import Warehouse

from tests.runs import decode
from tests.spark_jobs.cdc_envelopes import (ANNE, BOB, mysql_key, mysql_value, pg_key, pg_value,
                                           typed_expected, untyped_expected)
from tests.spark_jobs.cdc_replay import replay

pytestmark = pytest.mark.pipeline

T0 = 1_763_683_200_000
PG, MYSQL = "dbserver1.inventory.customers", "mysql1.shop.customers"


class Topic:
    """A partition's log and the committed events written to it, for the replay."""

    def __init__(self, folder: Path):
        self.w = SegmentWriter(folder, 0)
        self.committed: list[tuple] = []
        self.held: dict[int, list] = {}

    def put(self, key: str, value: str | None, pid: int | None = None):
        offset = self.w.next_offset
        rec = WriteRecord(key.encode(), None if value is None else value.encode(),
                          timestamp=T0 + offset)
        if pid is None:
            self.w.append([rec])
            self.committed.append((offset, key, value))
        else:
            self.w.append([rec], producer_id=pid, producer_epoch=0,
                          base_sequence=len(self.held.get(pid, [])), transactional=True)
            self.held.setdefault(pid, []).append((offset, key, value))

    def end(self, pid: int, commit: bool):
        self.w.append_marker(producer_id=pid, producer_epoch=0, commit=commit,
                             coordinator_epoch=1, timestamp=T0)
        events = self.held.pop(pid, [])
        if commit:
            self.committed = sorted(self.committed + events)


def write(tmp: Path):
    """Night 1 (a prefix of night 2's bytes): snapshot reads, an update, an aborted update,
    a create left open. Night 2: its COMMIT, a delete and its tombstone, an update."""
    pg = Topic(tmp / "n2" / f"{PG}-0")
    my = Topic(tmp / "n2" / f"{MYSQL}-0")
    carl = {**BOB, "id": 3, "first_name": "Carl"}
    pg.put(pg_key(1), pg_value("r", None, ANNE, T0, 500, 1000))
    pg.put(pg_key(2), pg_value("r", None, BOB, T0, 500, 1000))
    pg.put(pg_key(1), pg_value("u", ANNE, {**ANNE, "email": "anne@new.org"}, T0 + 1, 501, 1100))
    pg.put(pg_key(2), pg_value("u", BOB, {**BOB, "first_name": "Bobby"}, T0 + 2, 502, 1200),
           pid=40)
    pg.end(40, commit=False)
    pg.put(pg_key(3), pg_value("c", None, carl, T0 + 3, 503, 1300), pid=41)
    m1 = {"id": 1004, "first_name": "Anne", "email": None, "tags": ["a"]}
    my.put(mysql_key(1004), mysql_value("c", None, m1, 154))
    my.put(mysql_key(1005), mysql_value("c", None, {**m1, "id": 1005}, 300))
    cuts = {PG: (pg.w.position, list(pg.committed)), MYSQL: (my.w.position, list(my.committed))}
    pg.end(41, commit=True)
    pg.put(pg_key(2), pg_value("d", BOB, None, T0 + 4, 504, 1400))
    pg.put(pg_key(2), None)  # the delete's tombstone
    pg.put(pg_key(3), pg_value("u", carl, {**carl, "email": "carl@x.org"}, T0 + 5, 505, 1500))
    my.put(mysql_key(1004), mysql_value("u", m1, {**m1, "tags": []}, 484, gtid="g:23"))
    my.put(mysql_key(1005), mysql_value("d", {**m1, "id": 1005}, None, 805))
    my.put(mysql_key(1005), None)
    for t in (pg, my):
        t.w.close()
    name = "00000000000000000000.log"
    for topic, (cut, _) in cuts.items():
        folder = tmp / "n1" / f"{topic}-0"
        folder.mkdir(parents=True)
        (folder / name).write_bytes((tmp / "n2" / f"{topic}-0" / name).read_bytes()[:cut])
    night1 = {t: replay(events) for t, (_, events) in cuts.items()}
    night2 = {PG: replay(pg.committed), MYSQL: replay(my.committed)}
    return tmp / "n1", tmp / "n2", night1, night2


def state(wh: str, topic: str, snapshot: int | None = None) -> dict:
    t = Warehouse(wh).load(layout.cdc_table_name(topic))
    rows = (t.scan(snapshot_id=snapshot) if snapshot else t.scan()).to_arrow().to_pylist()
    out = {}
    for r in rows:
        assert r["key"] not in out
        out[r["key"]] = r
    return out


def same(got: dict, want: dict, typed: bool) -> None:
    assert sorted(got) == sorted(want)
    for key, row in want.items():
        expect = typed_expected(row) if typed else untyped_expected(row)
        assert {c: got[key][c] for c in expect} == expect, key


def run(spark, src, wh, run_id, night) -> dict:
    return decode(spark, src, wh, run_id, "--cdc-topics", r"mysql1\..*", night=night)


def test_cdc_tables_equal_the_replay_over_nights_reruns_and_overlaps(spark, tmp_path):
    from tests.duckdb_engine import compare_refs, compare_warehouse

    n1, n2, night1, night2 = write(tmp_path)
    assert sorted(night2[PG]) == ['{"id":1}', '{"id":3}']  # Bob deleted, Carl committed late
    wh = str(tmp_path / "wh")
    out = run(spark, n1, wh, "n1", "2025-11-21")
    assert set(out["keyed"]) == {layout.cdc_table_name(PG), layout.cdc_table_name(MYSQL)}
    same(state(wh, PG), night1[PG], typed=True)
    same(state(wh, MYSQL), night1[MYSQL], typed=False)
    run(spark, n2, wh, "n2", "2025-11-22")
    for again in ("n2", "n3"):  # a rerun, then an overlapping snapshot (night 2's bytes again)
        run(spark, n2, wh, again, "2025-11-22" if again == "n2" else "2025-11-23")
        same(state(wh, PG), night2[PG], typed=True)
        same(state(wh, MYSQL), night2[MYSQL], typed=False)
    carl = state(wh, PG)['{"id":3}']
    assert (carl["op"], carl["lsn"], carl["txId"], carl["night"]) == ("u", 1500, 505, "2025-11-22")
    anne = state(wh, MYSQL)['{"id":1004}']
    assert (anne["op"], anne["pos"], anne["gtid"], anne["file"]) == \
        ("u", 484, "g:23", "mysql-bin.000003")
    t = Warehouse(wh).load(layout.cdc_table_name(PG))
    tag = t.snapshot_by_name(layout.night_tag("2025-11-21")).snapshot_id
    same(state(wh, PG, snapshot=tag), night1[PG], typed=True)
    w = Warehouse(wh)
    counts = compare_warehouse(w)
    assert counts[layout.cdc_table_name(PG)] == 2 and counts[layout.cdc_table_name(MYSQL)] == 1
    assert compare_refs(w)[(layout.cdc_table_name(PG), layout.night_tag("2025-11-21"))] == 2
    assert json.loads(anne["tags"]) == []


def test_debeziums_own_events_make_tables_equal_to_the_replay(spark, tmp_path):
    """Debezium's own events through the job (tests/data/debezium, debezium_events), each
    topic found by its shape: the tutorial's products table (MySQL, a DOUBLE ``weight``:
    every event with the JsonConverter's "double"), the SQL Server, Oracle and MongoDB pages'
    create and update, the Debezium Server page's SQL Server DECIMAL/DATETIME row, and a
    products update whose ``weight`` cannot be typed: its row lands with ``weight`` null and
    one finding names the column and the offset."""
    import datetime as dt

    from tests.spark_jobs import debezium_events as dbz_events
    from tests.spark_jobs.cdc_envelopes import emp_snapshot, unscaled

    from spark_jobs import findings

    values = dbz_events.products()
    bad = json.loads(values[9])  # the update of 106
    bad["payload"]["after"]["weight"] = "heavy"
    products = [(dbz_events.product_key(v), v) for v in values] + [
        (dbz_events.product_key(values[9]), json.dumps(bad))]
    topics = {"dbserver1.inventory.products": products,
              "server1.dbo.customers": dbz_events.connector_events("sqlserver")[:2],
              "server1.DEBEZIUM.CUSTOMERS": dbz_events.connector_events("oracle")[:2],
              "fulfillment.inventory.customers": dbz_events.connector_events("mongodb")[:2],
              "redislabs.dbo.emp": [emp_snapshot()]}
    want = {}
    for topic, pairs in topics.items():
        w = SegmentWriter(tmp_path / "in" / f"{topic}-0", 0)
        for key, value in pairs:
            w.append([WriteRecord(key.encode(), value.encode(), timestamp=T0 + w.next_offset)])
        w.close()
        want[topic] = replay([(i, k, v) for i, (k, v) in enumerate(pairs)])
    wh = str(tmp_path / "wh")
    out = decode(spark, tmp_path / "in", wh, "d1", night="2025-11-21")
    assert set(out["keyed"]) == {layout.cdc_table_name(t) for t in topics}
    for topic, rows in want.items():
        got = state(wh, topic)
        assert sorted(got) == sorted(rows), topic
        for key, row in rows.items():
            if topic == "redislabs.dbo.emp":
                row = {**row, "sal": unscaled(row["sal"], 4), "comm": unscaled(row["comm"], 4),
                       "hiredate": dt.datetime(1970, 1, 1)
                       + dt.timedelta(milliseconds=row["hiredate"])}
            if topic == "dbserver1.inventory.products" and key == '{"id":106}':
                row = {**row, "weight": None}  # the last change's weight could not be typed
            assert {c: got[key][c] for c in row} == row, (topic, key)
    found = Warehouse(wh).load("findings").scan().to_arrow().to_pylist()
    cdc = [(f["kind"], f["topic"], f["base_offset"]) for f in found if f["kind"].startswith("cdc")]
    assert cdc == [(findings.CDC_VALUE_ERROR, "dbserver1.inventory.products", 16)]
    message = next(f["message"] for f in found if f["kind"] == findings.CDC_VALUE_ERROR)
    assert "column weight" in message and "offset 16" in message and "'heavy'" in message
