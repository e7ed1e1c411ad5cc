"""The per-key state tables fold on the executors, and a warehouse on S3 works
(spark_jobs/derive/keyed_tasks.py).

The nights and the expectation are tests/spark_jobs/keyed_nights.py's (``write_nights`` and
the independent ``replay``). The driver's own copies of the state machine's folding and file
functions are made to fail: the tables still come out equal to the replay, so the folding
and the state files' reading and writing ran in the executors' Python workers.
"""

from __future__ import annotations

import pytest

from spark_jobs import layout, storage
from spark_jobs.derive import keyed
from spark_jobs.warehouse import Warehouse

from tests.spark_jobs.keyed_nights import TABLE, decode_night, replay, write_nights


def state(w: Warehouse, snapshot: int | None = None) -> dict:
    """{key: (offset, value)} of partition 0 of the latest table (a key at most once)."""
    t = w.load(TABLE)
    rows = (t.scan(snapshot_id=snapshot) if snapshot else t.scan()).to_arrow().to_pylist()
    out = {}
    for r in rows:
        assert r["partition"] == 0
        assert r["key"].decode() not in out, "a key twice"
        out[r["key"].decode()] = (r["offset"], r["value"].decode())
    return out


@pytest.mark.pipeline
def test_latest_on_an_s3_warehouse_folds_on_the_executors_and_equals_the_replay(
        spark, tmp_path, s3_bucket, s3_endpoint, s3_catalog, monkeypatch):
    n1, n2, e1, e2 = write_nights(tmp_path)

    def not_on_the_driver(*_a, **_k):
        raise AssertionError("the driver folded a partition")

    for name in ("apply", "read_state", "write_state", "latest_changes"):
        monkeypatch.setattr(keyed, name, not_on_the_driver)
    wh = f"s3://{s3_bucket}/wh"

    def run(src, run_id, night):
        return decode_night(spark, src, wh, run_id, night, "--catalog", s3_catalog)

    assert run(n1, "night-1", "2025-11-21")["keyed"][TABLE] > 0
    w = Warehouse(wh, s3_catalog, s3=storage.S3Config.from_env(s3_endpoint))
    assert state(w) == replay(e1)
    night1 = w.load(TABLE).snapshot_by_name(layout.night_tag("2025-11-21")).snapshot_id
    run(n2, "night-2", "2025-11-22")  # a late COMMIT and ABORT: partition 0 read again
    w = Warehouse(wh, s3_catalog, s3=storage.S3Config.from_env(s3_endpoint))
    assert state(w) == replay(e2)
    assert state(w, night1) == replay(e1)
    files = [t.file.file_path for t in w.load(TABLE).scan().plan_files()]
    assert len(files) == 1 and files[0].startswith(f"s3://{s3_bucket}/")
    before = state(w)
    run(n2, "night-2", "2025-11-22")  # a rerun changes nothing
    assert state(Warehouse(wh, s3_catalog, s3=storage.S3Config.from_env(s3_endpoint))) == before
