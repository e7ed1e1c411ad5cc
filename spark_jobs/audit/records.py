"""The record checks: what the records table holds against the batches it came from.

* ``record_gaps`` (:func:`record_gaps`): the offsets missing between consecutive data records
  of a partition, split by cause (control markers, compaction, excluded batches, batch gaps);
* ``record_count`` (:func:`record_counts`): each data batch's declared record count against
  its offset span and the records decoded;
* ``duplicate_offsets`` (:func:`duplicate_offsets`): an offset held twice.

:func:`batch_kinds` (each deduplicated batch's kind and running offset counts) is computed
once per audit for the first two.
"""

from __future__ import annotations

from .inputs import RunFrames
from .observations import as_observations, dedup_batches


def batch_kinds(batches):
    """Deduplicated batches with ``kind`` (control | excluded | data), ``span``,
    ``compacted`` and cumulative offset counts per kind in offset order."""
    return batches.sparkSession.sql("""
        WITH k AS (
          SELECT topic, partition, base_offset, last_offset, record_count, segment, position,
                 last_offset - base_offset + 1 AS span,
                 CASE WHEN is_control THEN 'control'
                      WHEN NOT crc_valid OR status <> 'ok' THEN 'excluded'
                      ELSE 'data' END AS kind,
                 record_count < last_offset - base_offset + 1 AS compacted
          FROM {b}),
        o AS (
          SELECT *,
            CASE WHEN kind = 'control' THEN span ELSE 0 END AS o_control,
            CASE WHEN kind = 'excluded' THEN span ELSE 0 END AS o_excluded,
            CASE WHEN kind = 'data' AND record_count = 0 THEN span ELSE 0 END AS o_empty,
            CASE WHEN kind = 'data' AND record_count > 0 THEN span ELSE 0 END AS o_data,
            span AS o_span
          FROM k)
        SELECT *,
          SUM(o_control) OVER w AS c_control, SUM(o_excluded) OVER w AS c_excluded,
          SUM(o_empty) OVER w AS c_empty, SUM(o_data) OVER w AS c_data, SUM(o_span) OVER w AS c_span
        FROM o
        WINDOW w AS (PARTITION BY topic, partition ORDER BY base_offset
                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)""", b=dedup_batches(batches))


def record_gaps(records, batches, kinds=None):
    """Gaps between consecutive data records of each partition, split by cause.

    A gap between records r1 (batch P) and r2 (batch N) is made of: the tail of
    P after r1 and the head of N before r2 (``compaction`` if that batch is
    compacted, else ``unexplained``); or, inside one batch, the offsets between
    them (same rule); and the batches strictly between P and N: control
    batches (``control_marker``), batches whose records are not in the table
    (``excluded_batch``), empty batches (``compaction``), data batches whose
    records are missing (``unexplained``), and offsets no batch holds
    (``batch_gap``, judged by :func:`.offsets.offset_gaps`).
    """
    spark = records.sparkSession
    parts = spark.sql("""
        WITH r AS (
          SELECT topic, partition, offset, batch_base_offset, segment, batch_position,
                 LAG(offset) OVER (PARTITION BY topic, partition ORDER BY offset) AS prev_offset,
                 LAG(batch_base_offset) OVER (PARTITION BY topic, partition ORDER BY offset) AS prev_bb
          FROM {r}),
        g AS (SELECT * FROM r WHERE prev_offset IS NOT NULL AND offset > prev_offset + 1),
        j AS (
          SELECT g.*, p.last_offset AS p_last, p.compacted AS p_compacted,
                 p.c_control AS p_control, p.c_excluded AS p_excluded, p.c_empty AS p_empty,
                 p.c_data AS p_data, p.c_span AS p_span,
                 n.base_offset AS n_base, n.compacted AS n_compacted,
                 n.c_control - n.o_control AS n_control, n.c_excluded - n.o_excluded AS n_excluded,
                 n.c_empty - n.o_empty AS n_empty, n.c_data - n.o_data AS n_data,
                 n.c_span - n.o_span AS n_span
          FROM g
          JOIN {k} p ON p.topic = g.topic AND p.partition = g.partition AND p.base_offset = g.prev_bb
          JOIN {k} n ON n.topic = g.topic AND n.partition = g.partition AND n.base_offset = g.batch_base_offset)
        SELECT topic, partition, prev_offset + 1 AS lo, offset - 1 AS hi, segment, batch_position, part, n
        FROM j LATERAL VIEW INLINE(CASE WHEN prev_bb = batch_base_offset THEN array(
              named_struct('part', CASE WHEN n_compacted THEN 'compaction' ELSE 'unexplained' END,
                           'n', offset - prev_offset - 1))
            ELSE array(
              named_struct('part', CASE WHEN p_compacted THEN 'compaction' ELSE 'unexplained' END,
                           'n', p_last - prev_offset),
              named_struct('part', CASE WHEN n_compacted THEN 'compaction' ELSE 'unexplained' END,
                           'n', offset - n_base),
              named_struct('part', 'control_marker', 'n', n_control - p_control),
              named_struct('part', 'excluded_batch', 'n', n_excluded - p_excluded),
              named_struct('part', 'compaction', 'n', n_empty - p_empty),
              named_struct('part', 'unexplained', 'n', n_data - p_data),
              named_struct('part', 'batch_gap', 'n', (n_base - p_last - 1) - (n_span - p_span)))
            END) t
        """, r=records, k=batch_kinds(batches) if kinds is None else kinds)
    return as_observations(spark.sql("""
        SELECT 'record_gaps' AS check, topic, partition, part AS class, lo AS first_offset,
               hi AS last_offset, SUM(n) AS offsets, CAST(NULL AS bigint) AS value,
               FIRST(segment) AS segment, FIRST(batch_position) AS position,
               format_string('records %d..%d missing: %d %s', lo, hi, SUM(n), CASE part
                 WHEN 'control_marker' THEN 'offset(s) taken by control batches (transaction markers)'
                 WHEN 'compaction' THEN 'offset(s) removed by compaction'
                 WHEN 'excluded_batch' THEN 'offset(s) in batches whose records are not in the table (CRC or decoding failed)'
                 WHEN 'batch_gap' THEN 'offset(s) held by no batch (see offset_gaps)'
                 ELSE 'offset(s) a batch that was not compacted should hold' END) AS message
        FROM {p} WHERE n > 0
        GROUP BY topic, partition, lo, hi, part""", p=parts))


def record_counts(records, batches, kinds=None):
    """Per data batch: record_count within lastOffsetDelta + 1, the records
    table holding exactly record_count distinct offsets, all inside the batch."""
    return as_observations(records.sparkSession.sql("""
        WITH d AS (SELECT * FROM {k} WHERE kind = 'data'),
        r AS (SELECT topic, partition, batch_base_offset, COUNT(DISTINCT offset) AS n,
                     MIN(offset) AS lo, MAX(offset) AS hi
              FROM {r} GROUP BY topic, partition, batch_base_offset),
        j AS (SELECT d.*, COALESCE(r.n, 0) AS n, r.lo, r.hi FROM d
              LEFT JOIN r ON r.topic = d.topic AND r.partition = d.partition
                         AND r.batch_base_offset = d.base_offset),
        v AS (
          SELECT *, 'count_exceeds_span' AS class, record_count - span AS excess,
                 format_string('batch %d..%d declares %d records but spans %d offsets (lastOffsetDelta + 1)',
                               base_offset, last_offset, record_count, span) AS message
          FROM j WHERE record_count > span
          UNION ALL
          SELECT *, CASE WHEN n < record_count THEN 'records_missing' ELSE 'records_extra' END,
                 abs(record_count - n),
                 format_string('batch %d..%d declares %d records; the records table holds %d',
                               base_offset, last_offset, record_count, n)
          FROM j WHERE n <> record_count
          UNION ALL
          SELECT *, 'offset_outside_batch', 1L,
                 format_string('records at offsets %d..%d lie outside their batch %d..%d', lo, hi,
                               base_offset, last_offset)
          FROM j WHERE lo < base_offset OR hi > last_offset)
        SELECT 'record_count' AS check, topic, partition, class, base_offset AS first_offset, last_offset,
               excess AS offsets, CAST(NULL AS bigint) AS value, segment, position, message
        FROM v""", r=records, k=batch_kinds(batches) if kinds is None else kinds))


def duplicate_offsets(records):
    """Offsets a partition's records hold more than once (one observation per offset)."""
    return as_observations(records.sparkSession.sql("""
        SELECT 'duplicate_offsets' AS check, topic, partition, 'duplicate' AS class,
               offset AS first_offset, offset AS last_offset, COUNT(*) AS offsets,
               CAST(NULL AS bigint) AS value, FIRST(segment) AS segment, FIRST(batch_position) AS position,
               format_string('offset %d appears %d times in records (%s)', offset, COUNT(*),
                             array_join(array_distinct(collect_list(segment)), ', ')) AS message
        FROM {r} GROUP BY topic, partition, offset HAVING COUNT(*) > 1""", r=records))


def observe_record_gaps(run: RunFrames):
    """The ``record_gaps`` observations of ``run``."""
    return record_gaps(run.records, run.batches, run.kinds)


def observe_record_counts(run: RunFrames):
    """The ``record_count`` observations of ``run``."""
    return record_counts(run.records, run.batches, run.kinds)


def observe_duplicates(run: RunFrames):
    """The ``duplicate_offsets`` observations of ``run``."""
    return duplicate_offsets(run.records)
