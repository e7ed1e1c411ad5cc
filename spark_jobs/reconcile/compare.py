"""The reconciliation of one append sink against the log, per (topic, partition), in Spark
(issue 44, docs/sinks.md "What is checked").

**The window** of a partition: from the later of the log start (the first batch's base
offset the warehouse holds) and the sink's earliest offset, up to the sink's position: the
committed offset of its consumer group as of the night where the profile has one
(exclusive, as Kafka commits the next offset to read), else one past its highest offset.

**Deliverable** records: the records table's rows (control records are not in it) outside
transactions or committed (``records.txn_state``). Offsets the log cleaner removed are not
in the records table: which ranges it removed is what the audit's own gap rules say
(:func:`spark_jobs.audit.offsets.offset_gaps` between batches, :func:`spark_jobs.audit.records.record_gaps`
inside them, their class ``compaction``), reused here, not restated.

**Classes** (severities in ``expectations/policy.yaml`` under ``sink_reconcile``), each an
observation naming an offset range (:data:`spark_jobs.audit.observations.OBSERVATION_NAMES`):

* ``missing``: deliverable offsets inside the window the sink lacks (a range runs over the
  deliverable offsets: a control marker or compacted offset inside it does not split it);
* ``duplicate``: offsets the sink holds more than once (``offsets``: the extra copies);
* ``aborted_leak``: offsets of aborted or still-open transactional records in the sink;
* ``beyond_log``: offsets the sink holds that the log never held as a record, and that no
  compaction gap explains (past the log end, a control marker's offset, a hole);
* ``value_mismatch`` (``compare: key`` / ``key_value``): the sink's key (and value) bytes
  differ from the log's record at that offset;
* ``not_yet_delivered``: deliverable offsets past the window (the sink's lag);
* ``compacted_away``: the compaction ranges inside the window;
* ``before_log_start``: offsets the sink holds below the log start (retention removed them).
"""

from __future__ import annotations

from spark_jobs.audit.observations import as_observations
from spark_jobs.audit.offsets import offset_gaps
from spark_jobs.audit.records import record_gaps
from spark_jobs.schemas import TXN_ENDS, TXN_OPEN

from .classes import CHECK

POSITION_COLUMNS = "topic string, partition int, committed_offset bigint"
#: a log record a sink is to hold, control records and compaction aside (a SQL predicate on
#: ``records.txn_state``): outside any transaction, or in a committed one (not aborted, not open)
DELIVERABLE_RECORD = f"(txn_state IS NULL OR txn_state = '{TXN_ENDS['COMMIT']}')"


def compaction_ranges(records, batches, markers, findings):
    """(topic, partition, lo, hi) of the offsets the log cleaner removed, by the audit's
    rules (``offset_gaps`` and ``record_gaps``, class ``compaction``)."""
    gaps = offset_gaps(batches, markers, findings).where("class = 'compaction'")
    inside = record_gaps(records, batches).where("class = 'compaction'")
    return gaps.selectExpr("topic", "partition", "first_offset AS lo", "last_offset AS hi") \
        .unionByName(inside.selectExpr("topic", "partition", "first_offset AS lo",
                                       "last_offset AS hi"))


#: the windows: per partition of the log's or the sink's, its log start and end, the sink's
#: earliest and highest offsets and position, ``lo``..``hi`` the auditable offsets
WINDOWS = """
    WITH lg AS (SELECT topic, partition, MIN(base_offset) AS log_start,
                       MAX(last_offset) + 1 AS log_end FROM {b} GROUP BY topic, partition),
    sb AS (SELECT topic, partition, MIN(offset) AS s_min, MAX(offset) AS s_max
           FROM {s} GROUP BY topic, partition),
    tp AS (SELECT topic, partition FROM lg UNION SELECT topic, partition FROM sb)
    SELECT /*+ BROADCAST(lg, sb, p) */ tp.topic, tp.partition, lg.log_start, lg.log_end,
           sb.s_min, sb.s_max, p.committed_offset,
           GREATEST(COALESCE(lg.log_start, sb.s_min), COALESCE(sb.s_min, lg.log_start)) AS lo,
           COALESCE(p.committed_offset, sb.s_max + 1,
                    GREATEST(COALESCE(lg.log_start, 0), 0)) - 1 AS hi
    FROM tp LEFT JOIN lg ON lg.topic = tp.topic AND lg.partition = tp.partition
    LEFT JOIN sb ON sb.topic = tp.topic AND sb.partition = tp.partition
    LEFT JOIN {p} p ON p.topic = tp.topic AND p.partition = tp.partition"""

#: one pass over the sink's rows and the log's records together (one shuffle, by partition,
#: one aggregate in a hash table, no sort): per offset, the sink's copies (its keys' and
#: values' least and greatest: two differing copies are a ``value_mismatch``), whether the log
#: holds a record there and whether it is deliverable; out of it, only what is observed: a
#: row per offset of a class (``seq``: the offset; ``n``: the offsets it counts).
#: ``beyond_log`` here is before the compaction ranges are taken out (:data:`OFFSETS`).
#: ``%(bytes)s``: :data:`BYTES` where the keys and values are compared, else :data:`NO_BYTES`
#: (no bytes in the aggregate's buffer: Spark aggregates fixed-width buffers in a hash table,
#: others by sorting every row first); ``txn_state`` goes through the aggregate as a number.
CLASSIFY_TEMPLATE = """
    WITH u AS (
      SELECT topic, partition, offset, 1 AS s_n, key AS s_key, value AS s_value,
             false AS r_in, false AS r_del, CAST(NULL AS binary) AS r_key,
             CAST(NULL AS binary) AS r_value, CAST(NULL AS int) AS txn
      FROM {s}
      UNION ALL
      SELECT topic, partition, offset, 0, CAST(NULL AS binary), CAST(NULL AS binary), true,
             %(deliverable)s, key, value,
             CASE txn_state WHEN '%(committed)s' THEN 1 WHEN '%(aborted)s' THEN 2
                            WHEN '%(open)s' THEN 3 END
      FROM {r}),
    g AS (
      SELECT topic, partition, offset, SUM(s_n) AS copies, %(bytes)s,
             BOOL_OR(r_in) AS in_log, BOOL_OR(r_del) AS deliverable,
             element_at(array('%(committed)s', '%(aborted)s', '%(open)s'), MAX(txn)) AS txn_state
      FROM (SELECT * FROM u DISTRIBUTE BY topic, partition)
      GROUP BY topic, partition, offset),
    k AS (
      SELECT /*+ BROADCAST(w) */ g.*, w.lo, w.hi, w.log_start, w.log_end
      FROM g JOIN {w} w ON w.topic = g.topic AND w.partition = g.partition),
    e AS (
      SELECT topic, partition, offset, inline(filter(array(
        named_struct(
          'class', CASE
            WHEN copies > 0 THEN CASE
              WHEN offset < log_start THEN 'before_log_start'
              WHEN in_log AND NOT deliverable THEN 'aborted_leak'
              WHEN in_log AND :compare <> 'none'
                   AND (kmin <> kmax OR NOT (kmin <=> r_key)
                        OR (:compare = 'key_value' AND (vmin <> vmax OR NOT (vmin <=> r_value))))
                   THEN 'value_mismatch'
              WHEN in_log THEN NULL
              ELSE 'beyond_log' END
            WHEN deliverable AND offset >= lo THEN IF(offset <= hi, 'missing', 'not_yet_delivered')
            END,
          'seq', CAST(offset AS bigint), 'n', CAST(1 AS bigint),
          'txn_state', IF(copies > 0, txn_state, CAST(NULL AS string)),
          'log_end', IF(copies > 0, log_end, CAST(NULL AS bigint))),
        named_struct('class', IF(copies > 1, 'duplicate', CAST(NULL AS string)),
                     'seq', CAST(offset AS bigint), 'n', CAST(copies - 1 AS bigint),
                     'txn_state', CAST(NULL AS string), 'log_end', CAST(NULL AS bigint))
      ), x -> x.class IS NOT NULL))
      FROM k)
    SELECT * FROM e"""

#: the log's deliverable offsets as bit masks: per (topic, partition, word ``b``: offsets
#: ``b * 64`` .. ``b * 64 + 63``), ``mask`` bit ``i`` set where offset ``b * 64 + i`` is a
#: deliverable record, and ``before`` the deliverable offsets of the partition's words before
#: it (a window over 1/64th of the records: the rank of a deliverable offset is ``before`` and
#: the bits of its word up to it, no sort of the records)
DELIVERABLE = """
    SELECT topic, partition, b, mask,
           COALESCE(SUM(bit_count(mask)) OVER (PARTITION BY topic, partition ORDER BY b
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
    FROM (SELECT topic, partition, offset DIV 64 AS b,
                 BIT_OR(shiftleft(1L, CAST(offset % 64 AS int))) AS mask
          FROM {r} WHERE """ + DELIVERABLE_RECORD + """
          GROUP BY topic, partition, offset DIV 64)"""

BYTES = ("MIN(s_key) AS kmin, MAX(s_key) AS kmax, MIN(s_value) AS vmin, MAX(s_value) AS vmax, "
         "FIRST(r_key, true) AS r_key, FIRST(r_value, true) AS r_value")
NO_BYTES = ", ".join(f"CAST(NULL AS binary) AS {c}"
                     for c in ("kmin", "kmax", "vmin", "vmax", "r_key", "r_value"))

#: the observed offsets (of :data:`CLASSIFY_TEMPLATE`'s rows): ``beyond_log`` only where no
#: compaction range explains the offset; ``missing`` and ``not_yet_delivered`` ranked among
#: the partition's deliverable offsets (:data:`DELIVERABLE`): their ranges run over the
#: deliverable offsets (a control marker or compacted offset inside one does not split it)
OFFSETS = """
    SELECT topic, partition, offset, seq, n, class, txn_state, log_end FROM {f}
    WHERE class NOT IN ('beyond_log', 'missing', 'not_yet_delivered')
    UNION ALL
    SELECT f.topic, f.partition, f.offset,
           d.before + bit_count(d.mask & shiftrightunsigned(-1L, 63 - CAST(f.offset % 64 AS int))),
           f.n, f.class, f.txn_state, f.log_end
    FROM (SELECT * FROM {f} WHERE class IN ('missing', 'not_yet_delivered')) f
    JOIN {d} d ON d.topic = f.topic AND d.partition = f.partition AND d.b = f.offset DIV 64
    UNION ALL
    SELECT f.topic, f.partition, f.offset, f.seq, f.n, f.class, f.txn_state, f.log_end
    FROM (SELECT * FROM {f} WHERE class = 'beyond_log') f
    LEFT ANTI JOIN {c} c ON c.topic = f.topic AND c.partition = f.partition
                         AND f.offset BETWEEN c.lo AND c.hi"""

#: the observations: islands of consecutive ``seq`` per class, and the compaction ranges
#: inside each window
OBSERVATIONS = """
    WITH o AS (SELECT *, seq - ROW_NUMBER() OVER (PARTITION BY topic, partition, class
                                                  ORDER BY seq) AS grp FROM {o}),
    isl AS (SELECT topic, partition, class, MIN(offset) AS lo, MAX(offset) AS hi, SUM(n) AS n,
                   MAX(n) + 1 AS copies, FIRST(txn_state, true) AS txn_state,
                   FIRST(log_end, true) AS log_end
            FROM o GROUP BY topic, partition, class, grp),
    cw AS (SELECT c.topic, c.partition, 'compacted_away' AS class, GREATEST(c.lo, w.lo) AS lo,
                  LEAST(c.hi, w.hi) AS hi, LEAST(c.hi, w.hi) - GREATEST(c.lo, w.lo) + 1 AS n,
                  CAST(NULL AS bigint) AS copies, CAST(NULL AS string) AS txn_state,
                  CAST(NULL AS bigint) AS log_end
           FROM (SELECT DISTINCT * FROM {c}) c
           JOIN {w} w ON w.topic = c.topic AND w.partition = c.partition
           WHERE c.hi >= w.lo AND c.lo <= w.hi),
    a AS (SELECT * FROM isl UNION ALL SELECT * FROM cw)
    SELECT :check AS check, topic, partition, class, lo AS first_offset, hi AS last_offset,
           n AS offsets, IF(class = 'duplicate', copies, CAST(NULL AS bigint)) AS value,
           CAST(NULL AS string) AS segment, CAST(NULL AS bigint) AS position,
           CASE class
             WHEN 'missing' THEN format_string(
               'offsets %d..%d of %s-%d: %d committed record(s) of the log that sink %s lacks',
               lo, hi, topic, partition, n, :sink)
             WHEN 'duplicate' THEN format_string(
               'offsets %d..%d of %s-%d: held more than once in sink %s (%d extra copies, up to %d of one offset)',
               lo, hi, topic, partition, :sink, n, copies)
             WHEN 'aborted_leak' THEN format_string(
               'offsets %d..%d of %s-%d: records of a transaction that is %s in the log, in sink %s',
               lo, hi, topic, partition, COALESCE(txn_state, :aborted), :sink)
             WHEN 'beyond_log' THEN format_string(
               'offsets %d..%d of %s-%d: in sink %s, but the log never held a record there (%s)',
               lo, hi, topic, partition, :sink,
               IF(lo >= log_end, format_string('past the log end %d', log_end),
                  'no compaction explains them'))
             WHEN 'value_mismatch' THEN format_string(
               'offsets %d..%d of %s-%d: sink %s holds another key or value than the log',
               lo, hi, topic, partition, :sink)
             WHEN 'not_yet_delivered' THEN format_string(
               'offsets %d..%d of %s-%d: %d committed record(s) past the position of the sink',
               lo, hi, topic, partition, n)
             WHEN 'compacted_away' THEN format_string(
               'offsets %d..%d of %s-%d: removed by the log cleaner; not expected in the sink',
               lo, hi, topic, partition)
             ELSE format_string(
               'offsets %d..%d of %s-%d: in sink %s, before the log start (retention removed them from the log)',
               lo, hi, topic, partition, :sink) END AS message
    FROM a"""

#: per window: the deliverable records in it (the bits of :data:`DELIVERABLE`'s words
#: between ``lo`` and ``hi``; the sink's share is this less its ``missing`` offsets: no second
#: join with the sink)
COUNTS = """
    WITH n AS (
      SELECT /*+ BROADCAST(w) */ d.topic, d.partition,
             SUM(bit_count(d.mask & shiftleft(
               shiftrightunsigned(-1L, CAST(63 - (LEAST(w.hi - d.b * 64, 63)
                                                  - GREATEST(w.lo - d.b * 64, 0)) AS int)),
               CAST(GREATEST(w.lo - d.b * 64, 0) AS int)))) AS n
      FROM {d} d JOIN {w} w ON w.topic = d.topic AND w.partition = d.partition
      WHERE w.lo <= w.hi AND d.b BETWEEN w.lo DIV 64 AND w.hi DIV 64
      GROUP BY d.topic, d.partition)
    SELECT /*+ BROADCAST(n) */ w.topic, w.partition, w.lo, w.hi, w.committed_offset,
           w.log_start, w.log_end, w.s_min, w.s_max, COALESCE(n.n, 0) AS deliverable
    FROM {w} w LEFT JOIN n ON n.topic = w.topic AND n.partition = w.partition"""


def reconcile(sink_rows, records, batches, compacted, positions, *, sink: str,
              compare: str = "none"):
    """(observations, windows with counts) of one append sink: ``sink_rows``
    (:data:`.sink_read.SINK_COLUMNS`), the log's ``records`` and ``batches`` of the sink's
    topics, ``compacted`` :func:`compaction_ranges`, ``positions``
    (:data:`POSITION_COLUMNS`: the sink's committed offsets; none: highest offsets)."""
    spark = sink_rows.sparkSession
    windows = spark.sql(WINDOWS, b=batches, s=sink_rows, p=positions).localCheckpoint()
    # the one pass over the sink and the log: what it keeps is small (observed offsets)
    classify = CLASSIFY_TEMPLATE % {"bytes": NO_BYTES if compare == "none" else BYTES,
                                   "deliverable": DELIVERABLE_RECORD,
                                   "committed": TXN_ENDS["COMMIT"], "aborted": TXN_ENDS["ABORT"],
                                   "open": TXN_OPEN}
    flagged = spark.sql(classify, s=sink_rows, r=records, w=windows,
                        args={"compare": compare}).localCheckpoint()
    # the deliverable offsets' bit masks: 1/64th of the records, kept for ranks and counts
    deliverable = spark.sql(DELIVERABLE, r=records).localCheckpoint()
    offsets = spark.sql(OFFSETS, f=flagged, c=compacted, d=deliverable)
    obs = spark.sql(OBSERVATIONS, o=offsets, c=compacted, w=windows,
                    args={"check": CHECK, "sink": sink, "aborted": TXN_ENDS["ABORT"]})
    counts = spark.sql(COUNTS, d=deliverable, w=windows)
    return as_observations(obs), counts
