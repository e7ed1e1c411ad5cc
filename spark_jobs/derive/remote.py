"""The ``remote_segments`` table (issue 34; columns: :data:`spark_jobs.schemas.REMOTE_SEGMENTS`,
docs/tables.md): one row per remote (tiered-storage) segment id, its state as of the night,
replayed from ``__remote_log_metadata`` (:mod:`kafkalog.internal.remote_log`).

A segment's state is its whole history, not one night's records: the decode job's dedupe
keeps only the records the warehouse does not hold yet, so the replay reads each metadata
partition's records *as of the run* — those ``main`` held when the run began (of runs whose
night is not after this one's; never the run's own earlier rows) and the run's own
deduplicated ones — in offset order (every record of one topic partition goes to one
metadata partition: :func:`~kafkalog.internal.remote_log.segment_rows`; each offset once:
:func:`kafkalog.tiered.inventory.once_in_order`). Each night's rows
are then the full state as of that night; a rerun replaces the run's rows, and an overlapping
snapshot adds no record twice, so neither changes them.

The replay covers the metadata partitions the submission lists (a partition stays in one
chunk). The topic holds one small record per state change, so the driver reads and replays
it (pyiceberg, no Spark). A record of the run's own that does not decode is an
``internal_record_error`` finding (:data:`.internal.RECORD_ERROR`); published records were
reported by the run that wrote them.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from kafkalog.internal import REMOTE_LOG_METADATA, TOPIC_DECODERS, MessageError
from kafkalog.internal.remote_log import MetadataEvent, decode_remote_log_metadata, segment_rows
from kafkalog.tiered.inventory import once_in_order
from spark_jobs import layout, schemas
from spark_jobs.derive.internal import RECORD_ERROR
from spark_jobs.derive.step import Output, Submission
from spark_jobs.findings import Finding
from spark_jobs.findings import table as findings_table
from spark_jobs.parquet import PartWriter, partition_path, topic_of

#: the table this module fills
TABLE = "remote_segments"
#: the internal topic it is replayed from
TOPIC = next(t for t, d in TOPIC_DECODERS.items() if d == REMOTE_LOG_METADATA)
#: the records columns the replay reads
COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "batch_position",
           "segment", "segment_base_offset", "run_id")


def _ts(ms):
    """A Kafka millisecond time as the table's timestamp (None for none, or Kafka's -1)."""
    if ms is None or ms < 0:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def events(records: pa.Table, run_id: str | None = None) -> tuple[list[MetadataEvent], list]:
    """The decoded events of ``__remote_log_metadata`` records (:data:`COLUMNS`), in
    (metadata partition, offset) order, one per offset; and the ``internal_record_error``
    findings of those of run ``run_id`` that do not decode (others are skipped: reported
    when they were published)."""
    rows = once_in_order(records.select(list(COLUMNS)).to_pylist(),
                         lambda r: (r["partition"], r["offset"]))
    out, found = [], []
    for r in rows:
        try:
            d = decode_remote_log_metadata(r["key"], r["value"])
        except MessageError as err:
            if r["run_id"] == run_id:
                found.append(Finding(
                    topic=r["topic"], partition=r["partition"], kind=RECORD_ERROR,
                    position=r["batch_position"], end=r["batch_position"],
                    base_offset=r["offset"], last_offset=r["offset"],
                    message=f"{REMOTE_LOG_METADATA} record at offset {r['offset']} (batch at "
                            f"position {r['batch_position']}) does not decode: {err}",
                    segment=r["segment"], segment_base_offset=r["segment_base_offset"],
                    run_id=run_id))
            continue
        ts = r["timestamp"]
        out.append(MetadataEvent(r["partition"], r["offset"],
                                 int(ts.timestamp() * 1000) if ts is not None else None,
                                 d["type"], d["version"], d["data"], d.get("customMetadata")))
    return out, found


def table_rows(rows: list[dict], night: str | None, run_id: str) -> pa.Table:
    """:func:`~kafkalog.internal.remote_log.segment_rows`' rows as the table's rows: times as
    timestamps, custom metadata as bytes, the night and run."""
    import base64

    out = []
    for r in rows:
        out.append({
            **{k: r[k] for k in ("segment_id", "topic_id", "topic", "partition", "start_offset",
                                 "end_offset", "broker_id", "segment_size_in_bytes",
                                 "segment_leader_epochs", "state", "remote_size",
                                 "object_prefix", "object_key", "partition_delete_state",
                                 "problems")},
            "max_timestamp": _ts(r["max_timestamp_ms"]),
            "state_history": [{"state": h["state"], "event_timestamp": _ts(h["event_timestamp_ms"]),
                               "broker_id": h["broker_id"],
                               "metadata_partition": h["metadata_partition"],
                               "metadata_offset": h["metadata_offset"]}
                              for h in r["state_history"]],
            "custom_metadata": base64.b64decode(r["custom_metadata"])
            if r["custom_metadata"] is not None else None,
            schemas.NIGHT: night, "run_id": run_id})
    return pa.Table.from_pylist(out, schema=schemas.REMOTE_SEGMENTS)


def runs_after(ledger: pa.Table, night: str | None) -> set[str]:
    """The runs of ``ledger`` whose first night is after ``night``: what they published is
    not known as of it (None: no night, every run counts)."""
    if night is None or ledger.num_rows == 0:
        return set()
    first: dict = {}
    for run, n in zip(ledger.column("run_id").to_pylist(),
                      ledger.column(schemas.NIGHT).to_pylist()):
        if n is not None:
            first[run] = min(first.get(run, n), n)
    return {run for run, n in first.items() if n > night}


def as_of_run(wh, snapshot: int, ledger: pa.Table, run_files: list[str], partitions: set[int],
              run_id: str, night: str | None, s3=None) -> pa.Table:
    """The ``__remote_log_metadata`` records of ``partitions`` as of run ``run_id``: ``main``
    at ``snapshot`` (other runs', of nights up to ``night``) and the run's records files
    ``run_files``."""
    from pyiceberg.expressions import And, EqualTo, In

    from spark_jobs.tables import read_arrow, read_file

    published = read_arrow(wh, "records", snapshot=snapshot, columns=COLUMNS,
                           row_filter=And(EqualTo("topic", TOPIC), In("partition", partitions)))
    later = runs_after(ledger, night) | {run_id}
    keep = [r not in later for r in published.column("run_id").to_pylist()]
    parts = [published.filter(pa.array(keep, pa.bool_()))]
    for path in run_files:
        t = read_file(path, "records", s3).select(list(COLUMNS))
        parts.append(t.filter(pa.array([p in partitions for p in t.column("partition").to_pylist()],
                                       pa.bool_())))
    return pa.concat_tables([p.cast(parts[0].schema) for p in parts])


def derive(sub: Submission) -> Output:
    """``remote_segments``' data files (and findings, under ``findings``) of the submission
    whose listing holds ``sub.segments`` (:class:`~spark_jobs.decode.planning.Segment`),
    written into the tables' data folders: ``({table: files}, {table: rows})``. Nothing where
    the listing has no ``__remote_log_metadata`` segment."""
    ctx, wh, segments, run_id, night = sub.ctx, sub.wh, sub.segments, sub.run_id, sub.night
    partitions = {s.partition for s in segments if s.topic == TOPIC}
    if not partitions:
        return {}, {}
    night = layout.run_night((s.night for s in segments if s.topic == TOPIC), night)
    records = as_of_run(wh, sub.bases["records"], sub.ledger,
                        [p for p in sub.records if topic_of(p) == TOPIC], partitions, run_id,
                        night, ctx.s3)
    evs, found = events(records, run_id)
    rows = table_rows(segment_rows(evs), night, run_id)
    roots = {TABLE: wh.data_root(TABLE), "findings": ctx.roots["findings"]}
    writer = PartWriter(ctx, "remote", roots)
    writer.write(TABLE, "", rows)
    if found:
        writer.write("findings", partition_path(TOPIC), findings_table(found))
    files = writer.commit()
    files.setdefault(TABLE, [])  # no segment yet: the table is made, its rows replaced by none
    return files, {TABLE: rows.num_rows, "findings": len(found)}


__all__ = ["COLUMNS", "TABLE", "TOPIC", "as_of_run", "derive", "events", "runs_after",
           "table_rows"]
