"""Two nights of a compacted topic (``shop.customers``) written with kafkalog's writer, and
the independent replay of what they hold (issue 35, item 2): each record ``(offset, key,
value, producer)`` and each marker in offset order, a transaction's records held until its
producer's marker (COMMIT shows them, ABORT drops them, none yet: not shown), the latest
visible record per key winning and a tombstone removing its key. Nothing of
spark_jobs.derive is used for it. Shared by the latest__ tables' tests
(test_latest_tables, test_keyed_executors, test_lost_commits)."""

from __future__ import annotations

from pathlib import Path

from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs import layout
from spark_jobs.warehouse import Warehouse

from tests.runs import decode

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z


TOPIC = "shop.customers"


TABLE = layout.latest_table_name(TOPIC)


class Log:
    """One partition's log as the test writes it, and what it wrote (for the replay)."""

    def __init__(self, directory: Path, base: int = 0):
        self.w = SegmentWriter(directory, base, index_interval_bytes=200)
        self.entries: list[tuple] = []  # ("rec", offset, key, value, pid) / ("end", pid, commit)

    def put(self, *pairs, pid: int | None = None, epoch: int = 0, seq: int = 0):
        first = self.w.next_offset
        recs = [WriteRecord(k.encode(), None if v is None else v.encode(),
                            timestamp=T0 + (first + i) * 1000) for i, (k, v) in enumerate(pairs)]
        if pid is None:
            self.w.append(recs)
        else:
            self.w.append(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                          transactional=True)
        for i, (k, v) in enumerate(pairs):
            self.entries.append(("rec", first + i, k, v, pid))

    def end(self, pid: int, commit: bool, epoch: int = 0):
        self.w.append_marker(producer_id=pid, producer_epoch=epoch, commit=commit,
                             coordinator_epoch=1, timestamp=T0)
        self.entries.append(("end", pid, commit))

    def close(self):
        self.w.close()


def replay(entries) -> dict:
    """{key: (offset, value)} as of the end of ``entries`` (see the module's text)."""
    state, held = {}, {}
    visible = []
    for e in entries:
        if e[0] == "rec":
            _, offset, key, value, pid = e
            if pid is None:
                visible.append((offset, key, value))
            else:
                held.setdefault(pid, []).append((offset, key, value))
        else:
            _, pid, commit = e
            if commit:
                visible.extend(held.get(pid, []))
            held.pop(pid, None)
    for offset, key, value in sorted(visible):
        if value is None:
            state.pop(key, None)
        else:
            state[key] = (offset, value)
    return state


def table_state(wh: str, partition: int = 0, snapshot: int | None = None,
                table: str = TABLE) -> dict:
    w = Warehouse(wh)
    t = w.load(table)
    rows = t.scan(snapshot_id=snapshot).to_arrow().to_pylist() if snapshot else \
        t.scan().to_arrow().to_pylist()
    out = {}
    for r in rows:
        if r["partition"] == partition:
            assert r["key"].decode() not in out, "a key twice"
            out[r["key"].decode()] = (r["offset"], r["value"].decode())
    return out


def write_nights(tmp: Path):
    """Night 1: a key moving between values, a tombstone, an aborted transaction, one
    left open (its COMMIT comes on night 2), a tombstone of a key after its open write, a
    transaction left open whose ABORT comes on night 2. Night 2 (its snapshot holds night
    1's bytes and more): the COMMIT and the ABORT, more updates, a transaction that deletes
    a key and is aborted."""
    n2 = tmp / "n2" / f"{TOPIC}-0"
    log = Log(n2)
    log.put(("a", "a1"), ("b", "b1"), ("c", "c1"))
    log.put(("a", "a2"))
    log.put(("b", None))  # tombstone
    log.put(("c", "c-aborted"), pid=7)
    log.end(7, commit=False)
    log.put(("d", "d-late"), ("e", "e-late"), pid=8)  # its COMMIT is on night 2
    log.put(("e", None))  # a later tombstone: e stays deleted after the late commit
    log.put(("f", "f1"))
    log.put(("f", "f-never"), pid=10)  # its ABORT is on night 2: f stays f1
    night1_cut, night1_entries = log.w.position, list(log.entries)
    log.end(8, commit=True)
    log.end(10, commit=False)
    log.put(("a", "a3"), ("b", "b2"))
    log.put(("c", None), pid=9)
    log.end(9, commit=False)
    log.close()
    n1 = tmp / "n1" / f"{TOPIC}-0"
    n1.mkdir(parents=True)
    name = "00000000000000000000.log"
    (n1 / name).write_bytes((n2 / name).read_bytes()[:night1_cut])
    return tmp / "n1", tmp / "n2", night1_entries, log.entries


def decode_night(spark, src, out, run_id, night, *extra) -> dict:
    """The decode job (tests/runs.py) as night ``night``, ``latest__`` tables for ``shop.*``."""
    return decode(spark, src, out, run_id, "--latest-topics", r"shop\..*", *extra, night=night)
