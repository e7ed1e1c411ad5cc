"""What the demo's nights (demo.data) hold and what a warehouse holds after them, read
independently of the pipeline: every segment of a night by the snapshot grammar, the data
records whose batch CRC is valid (decoded here with ``kafkalog.decode``), and a table's rows
on ``main`` read with pyarrow; a night of one partition with a CRC mismatch, uploaded
(``upload_crc_night``). Shared by the DAG tests (test_dags_e2e, test_backfill, test_dags,
test_lineage)."""

from __future__ import annotations

from pathlib import Path


# ------------------------------------------------------------------ expectations
def demo_segments(night: Path) -> list[tuple[Path, str, int]]:
    """(path, topic, partition) of every segment of a demo night, at any depth (night 2 has a
    second broker's log directory: demo.data.BROKER_2), by the snapshot grammar
    (spark_jobs.layout.SEGMENT_KEY)."""
    from spark_jobs import layout

    return [(log, m["topic"], int(m["partition"])) for log in sorted(night.rglob("*.log"))
            if (m := layout.SEGMENT_KEY.search(log.relative_to(night).as_posix()))]


def expected_records(root: Path, dates) -> dict[str, set]:
    """topic -> {(partition, offset)} of the data records in the snapshots of ``dates``."""
    import kafkalog

    out: dict[str, set] = {}
    for date in dates:
        for log, topic, partition in demo_segments(root / date):
            t = kafkalog.decode(log).records
            for offset, ok in zip(t.column("offset").to_pylist(), t.column("crc_valid").to_pylist()):
                if ok:
                    out.setdefault(topic, set()).add((int(partition), offset))
    return out


def warehouse_rows(warehouse: Path, name: str, columns=None) -> list[dict]:
    """Rows of table ``name`` on ``main`` (the embedded catalog under ``warehouse``)."""
    from spark_jobs.schemas import PARTITIONS
    from spark_jobs.tables import read_arrow

    if columns:  # partition columns too, as the Hive folders gave them before
        columns = tuple(columns) + tuple(c for c in PARTITIONS[name] if c not in columns)
    return read_arrow(str(warehouse), name, columns=columns or None).to_pylist()


def record_keys(warehouse: Path) -> list[tuple]:
    return [(r["topic"], r["partition"], r["offset"])
            for r in warehouse_rows(warehouse, "records", ["topic", "partition", "offset"])]


def upload_crc_night(tmp_path: Path, pipeline: dict, night: str, topic: str, t0: int) -> None:
    """One segment of 3 gzip batches of 5 records (timestamps from ``t0``) in
    ``nightly/<night>/<topic>-0/`` of the pipeline's bucket, a byte in its middle flipped (a
    CRC mismatch)."""
    import boto3

    from kafkalog.writer import SegmentWriter, WriteRecord

    folder = tmp_path / night / f"{topic}-0"
    with SegmentWriter(folder, 0) as w:
        for n in range(3):
            w.append([WriteRecord(b"k", f"v{n}-{i}".encode(), timestamp=t0 + i)
                      for i in range(5)], codec="gzip")
        log = Path(w.path)
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x01
    log.write_bytes(bytes(data))
    client = boto3.client("s3", endpoint_url=pipeline["endpoint"])
    for f in folder.iterdir():
        client.upload_file(str(f), pipeline["bucket"], f"nightly/{night}/{topic}-0/{f.name}")
