"""What the fault tests count with: a process that dies at a catalog commit
(``crash_at_commit``: pyiceberg's ``Table._do_commit``, which every catalog write goes
through, raises ``Crash`` at the n-th call), and the (topic, partition, offset) keys a
snapshot's segments hold (``truth``, decoded with ``kafkalog.decode`` alone) against those
the published ``records`` table holds (``published``), lost and duplicated; a run staged
on its branch without Spark (``staged_run``)."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

import pyarrow as pa

import kafkalog
from spark_jobs import schemas, tables
from spark_jobs.warehouse import Warehouse, run_files_prefix


class Crash(BaseException):
    """The process died here (a BaseException: no ``except Exception`` swallows it)."""


@contextlib.contextmanager
def around_commits(hook):
    """While active, every catalog commit (pyiceberg's ``Table._do_commit``, which every
    catalog write goes through) is ``hook(commit, table, updates, requirements)``, where
    ``commit(table, updates, requirements)`` is pyiceberg's own."""
    from pyiceberg.table import Table

    original = Table._do_commit

    def do_commit(self, updates, requirements):
        return hook(original, self, updates, requirements)

    Table._do_commit = do_commit
    try:
        yield
    finally:
        Table._do_commit = original


@contextlib.contextmanager
def crash_at_commit(n: int | None, *, delay: float = 0.0):
    """The ``n``-th catalog commit from now (0-based) dies before it reaches the
    catalog; every commit first sleeps ``delay`` seconds. Yields the commit count."""
    count = [0]

    def hook(commit, table, updates, requirements):
        i = count[0]
        count[0] += 1
        if i == n:
            raise Crash(f"killed at catalog commit {n}")
        if delay:
            import time

            time.sleep(delay)
        return commit(table, updates, requirements)

    with around_commits(hook):
        yield count


def truth(*roots: Path) -> set[tuple]:
    """Every (topic, partition, offset) the snapshots' segments hold (CRC-valid records)."""
    out = set()
    for root in roots:
        for log in root.rglob("*.log"):
            topic, _, partition = log.parent.name.rpartition("-")
            r = kafkalog.decode(str(log)).records
            for off, ok in zip(r.column("offset").to_pylist(), r.column("crc_valid").to_pylist()):
                if ok:
                    out.add((topic, int(partition), off))
    return out


def published(wh) -> Counter:
    t = tables.read_arrow(str(wh), "records", columns=("topic", "partition", "offset"))
    return Counter(zip(*(t.column(c).to_pylist() for c in ("topic", "partition", "offset"))))


def lost_and_duplicated(want: set, got: Counter) -> tuple[int, int]:
    return len(want - set(got)), sum(n - 1 for n in got.values() if n > 1)


def staged_run(wh: Warehouse, run_id: str, rows_by_partition: dict[int, range]) -> None:
    """Commit a run's records (and a ledger row per partition) to its branch, as the job
    would, without Spark."""
    import pyarrow.parquet as pq

    wh.begin_run(run_id, reset=True)
    for name in ("records", "ledger"):
        uris = []
        for p, offsets in rows_by_partition.items():
            n = len(offsets)
            cols = {f.name: pa.nulls(n, f.type) for f in schemas.TABLES[name]}
            cols.update(topic=pa.array(["orders"] * n), partition=pa.array([p] * n, pa.int32()),
                        run_id=pa.array([run_id] * n))
            if name == "records":
                cols.update(offset=pa.array(list(offsets), pa.int64()), dt=pa.array(["none"] * n))
                folder = "topic=orders/dt=none/"
            else:
                cols = {k: v[:1] for k, v in cols.items()}
                cols.update(first_offset=pa.array([offsets[0]], pa.int64()),
                            last_offset=pa.array([offsets[-1]], pa.int64()),
                            action=pa.array(["decoded"]))
                folder = ""
            uri = f"{wh.data_root(name)}/{folder}{run_files_prefix(run_id)}p{p}.parquet"
            path = uri[len("file://"):]
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table(cols, schema=schemas.TABLES[name]), path)
            uris.append(uri)
        wh.commit_files(name, run_id, uris)
