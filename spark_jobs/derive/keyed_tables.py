"""Which per-key state tables a run refreshes, and each kind's changes (issue 35; the state
machine is :mod:`spark_jobs.derive.keyed`).

* ``latest__<topic>`` (:data:`~spark_jobs.layout.LATEST`): a topic the run wrote records of
  that is compacted — its batches in this run show the cleaner's work
  (:func:`~spark_jobs.derive.keyed.compacted_topics`; internal topics excepted) — or that
  ``--latest-topics`` names, or whose table exists already.
* ``cdc__<topic>`` (:data:`~spark_jobs.layout.CDC`): a topic whose values are Debezium
  envelopes (:func:`spark_jobs.derive.cdc.is_cdc`, on a sample of the run's records), or that
  ``--cdc-topics`` names, or whose table exists already.
"""

from __future__ import annotations

import pyarrow as pa

from spark_jobs import layout
from spark_jobs.derive import keyed
from spark_jobs.warehouse import branch_name

#: records a topic's Debezium detection reads, at most
SAMPLE = 20


def run_batches(wh, run_id: str) -> pa.Table:
    """The run's batches on its branch (the columns compaction shows in)."""
    from pyiceberg.expressions import EqualTo

    from spark_jobs.tables import read_arrow

    return read_arrow(wh, "batches", ref=branch_name(run_id), row_filter=EqualTo("run_id", run_id),
                      columns=("topic", "base_offset", "last_offset", "record_count",
                               "is_control", "has_delete_horizon"))


def sample(wh, run_id: str, topic: str, record_files: list[str]) -> pa.Table:
    """Up to :data:`SAMPLE` of the run's records of ``topic``: the first rows of one of its
    files, their ``value``/``value_json`` only (through the table's FileIO: the footer and
    those columns of the first row group are read, ranged on S3, not the whole file)."""
    import pyarrow.parquet as pq

    from spark_jobs.parquet import topic_of

    for path in record_files:
        if topic_of(path) == topic:
            with wh.table("records").io.new_input(path).open() as stream:
                batches = pq.ParquetFile(stream).iter_batches(
                    batch_size=SAMPLE, columns=["value", "value_json"])
                first = next(batches, None)
            return pa.Table.from_batches([first]) if first is not None else None
    return None


def plan(wh, args, bases: dict, partitions: dict, files: dict) -> list[keyed.Keyed]:
    """The keyed tables this submission refreshes (made or widened here), of the topics
    it wrote (``partitions``: ``{topic: partitions}``); ``files``: its data files by table."""
    from spark_jobs.derive import cdc

    if not partitions:
        return []
    existing = wh.table_names()
    latest_named = keyed.matcher(getattr(args, "latest_topics", None))
    cdc_named = keyed.matcher(getattr(args, "cdc_topics", None))
    compacted = None
    out = []
    for topic in sorted(partitions):
        name = layout.latest_table_name(topic)
        want = name in existing or latest_named(topic)
        if not want and keyed.is_auto_topic(topic):
            if compacted is None:
                compacted = keyed.compacted_topics(run_batches(wh, args.run_id))
            want = topic in compacted
        if want:
            schema = keyed.latest_schema(wh, topic)
            out.append(keyed.Keyed(layout.LATEST, topic, name, schema, new=name not in bases))
        name = layout.cdc_table_name(topic)
        want = name in existing or cdc_named(topic)
        if not want and keyed.is_auto_topic(topic):
            rows = sample(wh, args.run_id, topic, files.get("records", []))
            want = rows is not None and cdc.is_cdc(topic, rows, None)
        if want:
            table = wh.load(name)
            schema = cdc.table_schema([]) if table is None else keyed.table_columns(table)
            out.append(keyed.Keyed(layout.CDC, topic, name, schema, new=name not in bases))
    return out


__all__ = ["SAMPLE", "plan", "run_batches", "sample"]
