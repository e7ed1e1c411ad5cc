"""The checks of the audit, as pure transforms over the staged tables.

Every check returns *observations* with one schema (:data:`OBSERVATION_COLUMNS`):
one row per thing a user may want to look at — a CRC failure, a classified
offset gap, a timestamp step back, a decoder finding — with its ``class`` (the
explanation: ``compaction``, ``control_marker``, ``unexplained`` ...). The
policy (:func:`apply_policy`) then turns ``class`` into a ``status``. Explained
gaps stay in the output with status ``pass``: a verdict lists what it accepted.

Everything that runs in offset order is a window per Kafka partition,
``... OVER (PARTITION BY topic, partition ORDER BY offset)``, never one window
over the whole table. Inputs are the tables of docs/tables.md as read by
``spark_jobs.tables.read_table`` (records, batches, markers, findings, ledger).
The gap classification rules are documented in expectations/README.md.
"""

from __future__ import annotations

from . import schema_decode
from .policy import Policy

OBSERVATION_COLUMNS = (
    "check string, topic string, partition int, class string, first_offset bigint, "
    "last_offset bigint, offsets bigint, value bigint, segment string, position bigint, "
    "message string"
)
#: their names, in that order
OBSERVATION_NAMES = tuple(c.split(" ")[0] for c in OBSERVATION_COLUMNS.split(", "))

#: check name -> the unit its ``observed`` count is made of (see results.py)
CHECKS = {
    "crc": "batches",
    "offset_gaps": "batches",
    "record_gaps": "records",
    "record_count": "batches",
    "duplicate_offsets": "records",
    "log_append_time": "batches",
    "create_time": "records",
    "max_timestamp": "batches",
    "divergence": "segments",
    "replica_divergence": "segments",
    "truncated_tail": "segments",
    "decoder_findings": "segments",
    "schema_decode": "records",  # spark_jobs/audit/schema_decode.py
    "missing_partition": "partitions",  # what earlier nights held and this snapshot lacks
}
#: a topic-partition earlier nights held that this snapshot lacks (:func:`missing_partitions`)
MISSING_PARTITION = "missing_partition"
#: a night the run was to read whose snapshot prefix holds no segment: the DAG's plan writes
#: this result (one row per such night, topic and partition null) and decodes nothing
SNAPSHOT_MISSING = "snapshot_missing"
SNAPSHOT_MISSING_CLASS = "no_snapshot"
#: the missing_partition check's classes (:func:`missing_partitions`)
MISSING, TOPIC_DELETED = "missing", "topic_deleted"
#: the checks of Kafka's internal topics and state files (internal_checks.py): a partition
#: gets a result only where they apply (a committed offset, a .snapshot, a checkpoint)
INTERNAL_CHECKS = {
    "committed_offset_beyond_log_end": "committed offsets",
    "committed_offset_before_log_start": "committed offsets",
    "producer_snapshot": "producers",
    "leader_epoch_checkpoint": "checkpointed batches",
}
CHECKS.update(INTERNAL_CHECKS)
CHECKS[SNAPSHOT_MISSING] = "nights"
#: checks a partition gets a result of only where they apply: the internal topics' and state
#: files', ``missing_partition`` where the run read a named night (the job's ``--night``, the
#: DAG's manifests), ``snapshot_missing`` (the plan's, never a partition's)
OPTIONAL_CHECKS = frozenset(INTERNAL_CHECKS) | {MISSING_PARTITION, SNAPSHOT_MISSING}
#: their observations' classes (apply_policy)
INTERNAL_CLASSES = {
    "committed_offset_beyond_log_end": ["beyond_log_end"],
    "committed_offset_before_log_start": ["before_log_start"],
    "producer_snapshot": ["agrees", "disagrees", "not_in_run"],
    "leader_epoch_checkpoint": ["agrees", "disagrees", "before_first_entry"],
}

#: finding kinds that mean bytes of a segment did not decode into batches
UNREADABLE_KINDS = ("corrupt_batch", "skipped_bytes", "truncated_tail", "fetch_error")


def _sql(spark, query: str, **frames):
    return spark.sql(query, **frames)


def _select(df):
    return df.selectExpr(*OBSERVATION_NAMES)


def union_all(spark, frames):
    """The observations of every frame (each with :data:`OBSERVATION_COLUMNS`, by name) as
    one frame: one n-ary ``UNION ALL``. Pairwise ``unionByName`` analyses the growing
    union again at every step: ~8 s of the audit's driver time for 14 checks."""
    names = ", ".join(f"`{c}`" for c in OBSERVATION_NAMES)
    query = " UNION ALL ".join(f"SELECT {names} FROM {{p{i}}}" for i in range(len(frames)))
    return _sql(spark, query, **{f"p{i}": f for i, f in enumerate(frames)})


def dedup_batches(batches):
    """One batch per (topic, partition, base_offset): a CRC-valid copy first.

    Overlapping snapshots may hold the same batch twice; the offset checks look
    at each offset range once.
    """
    return _sql(batches.sparkSession, """
        SELECT * EXCEPT (_n) FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY topic, partition, base_offset
                                       ORDER BY crc_valid DESC, last_offset DESC, segment) AS _n
          FROM {b}) WHERE _n = 1""", b=batches)


# --------------------------------------------------------------------- CRC
def crc_failures(batches, findings):
    """Batches whose CRC does not verify, and CRC findings without such a batch
    (an inner v0/v1 message), with topic, partition, segment and position."""
    return _select(_sql(batches.sparkSession, """
        SELECT 'crc' AS check, topic, partition, 'crc_mismatch' AS class,
               base_offset AS first_offset, last_offset, 1L AS offsets, CAST(NULL AS bigint) AS value,
               segment, position,
               format_string('batch at position %d of %s (offsets %d..%d): stored crc 0x%08x, computed 0x%08x',
                             position, segment, base_offset, last_offset, crc, computed_crc) AS message
        FROM {b} WHERE NOT crc_valid
        UNION ALL
        SELECT 'crc', f.topic, f.partition, 'crc_mismatch', f.base_offset, f.last_offset, 1L, CAST(NULL AS bigint),
               f.segment, f.position, f.message
        FROM {f} f LEFT ANTI JOIN (SELECT * FROM {b} WHERE NOT crc_valid) b
          ON f.topic = b.topic AND f.partition = b.partition AND f.segment = b.segment
             AND f.position = b.position
        WHERE f.kind = 'crc_mismatch'""", b=batches, f=findings))


# ---------------------------------------------------------------- offsets
def _known(night_rule: str) -> str:
    return f"""CASE WHEN mine.first_night IS NOT NULL AND l.night IS NOT NULL THEN {night_rule}
                    ELSE mine.started IS NULL OR l.ingested_at < mine.started END"""


#: SQL: ledger row ``l`` is of a snapshot night before the audited run's nights (``mine``,
#: :data:`RUN_TIMES`), or, where either names no night, was ingested before the run first
#: did (a rerun keeps its first ingestion time)
BEFORE_THE_RUN = _known("l.night < mine.first_night")
#: SQL: ledger row ``l`` was known as of the audited run's last night: of that night or one
#: before (else, as above, ingested before the run first did)
AS_OF_THE_RUN = _known("l.night <= mine.last_night")
#: SQL: the audited run's ``mine`` row over its ledger ``{r}``
RUN_TIMES = """SELECT MIN(ingested_at) AS started, MIN(night) AS first_night,
                      MAX(night) AS last_night FROM {r}"""


def prior_ends(published_ledger, run_ledger, run_id: str):
    """Last offset of each partition in *other* runs' published ledger rows of the snapshot
    nights before this run's (:data:`BEFORE_THE_RUN`): the context of this run's first batch.
    By night, not by when the runs ran: a night audited again, or backfilled after later
    nights, sees what it saw in order."""
    return _sql(published_ledger.sparkSession, """
        WITH mine AS (""" + RUN_TIMES + """),
        other AS (
          SELECT l.* FROM {l} l CROSS JOIN mine
          WHERE l.run_id <> :run AND l.last_offset IS NOT NULL AND """ + BEFORE_THE_RUN + """),
        ranked AS (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY topic, partition
                                       ORDER BY last_offset DESC, ingested_at DESC) AS _n
          FROM other)
        SELECT topic, partition, last_offset AS prior_last_offset, segment AS prior_segment,
               segment_base_offset AS prior_segment_base_offset, run_id AS prior_run_id
        FROM ranked WHERE _n = 1""", l=published_ledger, r=run_ledger, args={"run": run_id})


def listed_segments(run_ledger, published_ledger=None, run_id: str | None = None):
    """Every segment this run listed (its ledger rows: decoded, resumed, unchanged,
    failed ...), one row per (topic, partition, segment), with ``carried_last``: for
    a segment the run skipped as ``unchanged`` or ``resumed``, the last offset the
    earlier runs ingested of it (their ledger rows since the last one that decoded
    it from byte 0, ingested before this run started), else null.

    The offsets of a skipped segment are in no table of this run: without them
    the audit would see a hole after the last segment it decoded, not after the
    segments still in the snapshot.
    """
    spark = run_ledger.sparkSession
    if published_ledger is None:
        published_ledger = run_ledger.limit(0)
    return _sql(spark, """
        WITH mine AS (SELECT MIN(ingested_at) AS started FROM {r}),
        run AS (
          SELECT topic, partition, segment, FIRST(segment_base_offset) AS segment_base_offset,
                 MAX(CASE WHEN action IN ('unchanged', 'resumed') THEN 1 ELSE 0 END) = 1 AS carried
          FROM {r} GROUP BY topic, partition, segment),
        other AS (
          SELECT l.* FROM {l} l CROSS JOIN mine
          WHERE l.run_id <> :run AND l.action <> 'failed'
            AND (mine.started IS NULL OR l.ingested_at < mine.started)),
        since AS (  -- the newest earlier run that decoded the segment from byte 0
          SELECT topic, partition, segment_base_offset, MAX(ingested_at) AS since FROM other
          WHERE byte_start = 0 AND action IN ('decoded', 'redecoded')
          GROUP BY topic, partition, segment_base_offset),
        earlier AS (
          SELECT o.topic, o.partition, o.segment_base_offset, MAX(o.last_offset) AS last_offset
          FROM other o JOIN since s ON s.topic = o.topic AND s.partition = o.partition
                                   AND s.segment_base_offset = o.segment_base_offset
          WHERE o.ingested_at >= s.since
          GROUP BY o.topic, o.partition, o.segment_base_offset)
        SELECT run.topic, run.partition, run.segment, run.segment_base_offset,
               CASE WHEN run.carried THEN e.last_offset END AS carried_last
        FROM run LEFT JOIN earlier e ON e.topic = run.topic AND e.partition = run.partition
                                    AND e.segment_base_offset = run.segment_base_offset""",
                r=run_ledger, l=published_ledger, args={"run": run_id or ""})


def offset_gaps(batches, markers, findings, prior=None, ledger=None, compacted_topics=()):
    """Gaps in the offsets of each partition, classified.

    The sequence is made of this run's batches and of every segment the run
    listed but did not decode (``ledger``: :func:`listed_segments`, whose
    ``carried_last`` says what earlier runs ingested of a skipped segment: it
    stands for offsets ``segment_base_offset .. carried_last``), after the
    point where the partition is known to start: the previous run's end
    (``prior``: :func:`prior_ends`) when the snapshot's log starts past it,
    else the base offset of its first listed segment. ``ledger`` may also be
    plain ledger rows (nothing carried): a listed segment in a hole that
    yielded no batches makes the hole ``unreadable_bytes``. ``compacted_topics``:
    topics the policy declares compacted. Classes, in the order they are tried:
    ``unreadable_bytes``, ``retention``, ``missing_segment``, ``aborted_txn``,
    ``compaction``, ``unexplained`` (expectations/README.md states each rule).
    """
    spark = batches.sparkSession
    if prior is None:
        prior = spark.createDataFrame([], "topic string, partition int, prior_last_offset bigint, "
                                          "prior_segment string, prior_segment_base_offset bigint, "
                                          "prior_run_id string")
    if ledger is None:
        ledger = spark.createDataFrame([], "topic string, partition int, segment string, "
                                           "segment_base_offset bigint, carried_last bigint")
    elif "carried_last" not in ledger.columns:
        ledger = ledger.selectExpr("topic", "partition", "segment", "segment_base_offset",
                                   "CAST(NULL AS bigint) AS carried_last")
    compacted = spark.createDataFrame([(t,) for t in compacted_topics] or [("\u0000",)],
                                      "topic string")
    # pseudo: 0 a batch of this run, 1 where the partition is known to start, 2 a listed
    # segment this run did not decode (its offsets from earlier runs)
    gaps = _sql(spark, """
        WITH b AS (SELECT * FROM {b}),
        listed AS (SELECT DISTINCT topic, partition, segment, segment_base_offset, carried_last FROM {l}),
        carried AS (
          SELECT topic, partition, segment_base_offset AS base_offset, carried_last AS last_offset,
                 segment, segment_base_offset, CAST(NULL AS bigint) AS position, 2 AS pseudo,
                 false AS from_prior
          FROM listed WHERE carried_last IS NOT NULL AND carried_last >= segment_base_offset),
        seg AS (
          SELECT topic, partition, segment, MIN(base_offset) AS seg_first,
                 MAX(CASE WHEN pseudo = 0 AND (has_delete_horizon
                           OR (NOT is_control AND record_count < last_offset - base_offset + 1))
                          THEN 1 ELSE 0 END) AS shows_compaction
          FROM (SELECT topic, partition, segment, base_offset, last_offset, record_count,
                       is_control, has_delete_horizon, 0 AS pseudo FROM b
                UNION ALL
                SELECT topic, partition, segment, base_offset, last_offset, 0, false, false, 2
                FROM carried)
          GROUP BY topic, partition, segment),
        starts AS (  -- the first segment listed (or decoded) of each partition
          SELECT *, ROW_NUMBER() OVER (PARTITION BY topic, partition
                                       ORDER BY segment_base_offset, segment) AS _n
          FROM (SELECT topic, partition, segment, segment_base_offset FROM b
                UNION SELECT topic, partition, segment, segment_base_offset FROM listed)),
        head AS (  -- where the partition's log is known to start: the prior run's end where
                   -- the snapshot's log starts past it, else its first listed segment
          SELECT topic, partition,
                 IF(from_prior, prior_last_offset, segment_base_offset - 1) AS base_offset,
                 IF(from_prior, prior_segment, segment) AS segment,
                 IF(from_prior, prior_segment_base_offset, segment_base_offset) AS segment_base_offset,
                 from_prior
          FROM (SELECT s.topic, s.partition, s.segment, s.segment_base_offset, pr.prior_last_offset,
                       pr.prior_segment, pr.prior_segment_base_offset,
                       COALESCE(s.segment_base_offset > pr.prior_last_offset, false) AS from_prior
                FROM starts s LEFT JOIN {prior} pr ON pr.topic = s.topic AND pr.partition = s.partition
                WHERE s._n = 1)),
        seq AS (
          SELECT topic, partition, base_offset, last_offset, segment, segment_base_offset, position,
                 0 AS pseudo, false AS from_prior FROM b
          UNION ALL
          SELECT * FROM carried
          UNION ALL
          SELECT topic, partition, base_offset, base_offset, segment, segment_base_offset, CAST(NULL AS bigint),
                 1, from_prior FROM head),
        w AS (
          SELECT *,
            MAX(last_offset) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
            LAG(segment) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC) AS prev_segment,
            LAG(position) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC) AS prev_position,
            LAG(pseudo) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC) AS prev_pseudo,
            LAG(from_prior) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC) AS prev_from_prior
          FROM seq)
        SELECT w.topic, w.partition, w.prev_end + 1 AS lo, w.base_offset - 1 AS hi,
               w.segment, w.segment_base_offset, w.position, w.prev_segment, w.prev_position,
               w.pseudo = 2 AS carried, w.prev_pseudo = 2 AS after_carried,
               w.prev_pseudo = 1 AND w.prev_from_prior AS after_prior,
               w.prev_pseudo = 1 AS at_head,
               w.base_offset = s.seg_first AND w.segment_base_offset > w.prev_end + 1
                 AND NOT (w.prev_pseudo = 1 AND NOT w.prev_from_prior) AS at_boundary,
               s.shows_compaction = 1 AS next_compacted,
               ps.shows_compaction = 1 AS prev_compacted
        FROM w
        JOIN seg s ON s.topic = w.topic AND s.partition = w.partition AND s.segment = w.segment
        LEFT JOIN seg ps ON ps.topic = w.topic AND ps.partition = w.partition AND ps.segment = w.prev_segment
        WHERE w.pseudo <> 1 AND w.prev_end IS NOT NULL AND w.base_offset > w.prev_end + 1
        """, b=batches, l=ledger, prior=prior).localCheckpoint()  # few rows, read four times below

    return _select(_sql(spark, """
        WITH g AS (SELECT * FROM {g}),
        unreadable AS (  -- bytes that did not decode, where the missing offsets would be
          SELECT g.topic, g.partition, g.lo, FIRST(f.kind) AS kind, FIRST(f.segment) AS f_segment,
                 FIRST(f.position) AS f_position, SUM(COALESCE(f.bytes, 0)) AS f_bytes
          FROM g JOIN {f} f ON f.topic = g.topic AND f.partition = g.partition
          WHERE f.kind IN (""" + ", ".join(f"'{k}'" for k in UNREADABLE_KINDS) + """)
            AND ((f.segment = g.segment AND (g.position IS NULL OR f.position < g.position)
                  AND (g.prev_segment <> g.segment OR g.prev_position IS NULL OR f.position > g.prev_position))
                 OR (f.segment = g.prev_segment AND g.prev_segment <> g.segment
                     AND (g.prev_position IS NULL OR f.position > g.prev_position))
                 OR (f.segment <> g.segment AND f.segment_base_offset BETWEEN g.lo AND g.hi))
          GROUP BY g.topic, g.partition, g.lo
          UNION ALL   -- a segment listed in the hole that yielded nothing (and was not skipped)
          SELECT g.topic, g.partition, g.lo, 'listed_segment', FIRST(l.segment), CAST(NULL AS bigint),
                 CAST(NULL AS bigint)
          FROM g JOIN {l} l ON l.topic = g.topic AND l.partition = g.partition
          LEFT ANTI JOIN (SELECT DISTINCT topic, partition, segment FROM {b}) d
            ON d.topic = l.topic AND d.partition = l.partition AND d.segment = l.segment
          WHERE l.segment_base_offset BETWEEN g.lo AND g.hi AND l.carried_last IS NULL
          GROUP BY g.topic, g.partition, g.lo),
        u AS (SELECT topic, partition, lo, FIRST(kind) AS kind, FIRST(f_segment) AS f_segment,
                     FIRST(f_position) AS f_position, SUM(f_bytes) AS f_bytes
              FROM unreadable GROUP BY topic, partition, lo),
        m AS (
          SELECT topic, partition, offset, producer_id,
                 LAG(offset) OVER (PARTITION BY topic, partition, producer_id ORDER BY offset) AS prev_marker,
                 control_type
          FROM {m} WHERE control_type IN ('COMMIT', 'ABORT')),
        a AS (  -- an ABORT whose transaction was open across the whole gap
          SELECT g.topic, g.partition, g.lo, MIN(m.offset) AS abort_offset, FIRST(m.producer_id) AS producer_id
          FROM g JOIN m ON m.topic = g.topic AND m.partition = g.partition
          WHERE m.control_type = 'ABORT' AND m.offset > g.hi
            AND (m.prev_marker IS NULL OR m.prev_marker < g.lo)
          GROUP BY g.topic, g.partition, g.lo),
        c AS (
          SELECT g.*, u.kind AS u_kind, u.f_segment, u.f_position, u.f_bytes,
                 a.abort_offset, a.producer_id,
                 ct.topic IS NOT NULL AS topic_compacted,
                 CASE WHEN g.segment_base_offset <= g.lo OR g.prev_segment IS NULL THEN g.next_compacted
                      ELSE g.prev_compacted END AS seg_compacted
          FROM g LEFT JOIN u ON u.topic = g.topic AND u.partition = g.partition AND u.lo = g.lo
          LEFT JOIN a ON a.topic = g.topic AND a.partition = g.partition AND a.lo = g.lo
          LEFT JOIN {ct} ct ON ct.topic = g.topic),
        k AS (
          SELECT *, CASE
              WHEN u_kind IS NOT NULL THEN 'unreadable_bytes'
              WHEN at_boundary AND after_prior THEN 'retention'
              WHEN at_boundary AND (COALESCE(prev_compacted, false) OR topic_compacted) THEN 'compaction'
              WHEN at_boundary THEN 'missing_segment'
              WHEN abort_offset IS NOT NULL THEN 'aborted_txn'
              WHEN COALESCE(seg_compacted, false) OR topic_compacted THEN 'compaction'
              ELSE 'unexplained' END AS class
          FROM c)
        SELECT 'offset_gaps' AS check, topic, partition, class, lo AS first_offset, hi AS last_offset,
               hi - lo + 1 AS offsets, CAST(NULL AS bigint) AS value, segment,
               -- a missing segment is a hole between two files, at no byte of either
               IF(class = 'missing_segment', CAST(NULL AS bigint), position) AS position,
               CASE class
                 WHEN 'unreadable_bytes' THEN CASE WHEN u_kind = 'listed_segment' THEN format_string(
                   'offsets %d..%d: segment %s lies in the hole but yielded no batches', lo, hi, f_segment)
                   ELSE format_string('offsets %d..%d lie in bytes that did not decode: %s in %s at position %s',
                   lo, hi, u_kind, f_segment, COALESCE(CAST(f_position AS string), '?')) END
                 WHEN 'retention' THEN format_string(
                   'offsets %d..%d: the previous run ended at %d in %s; this run starts at segment %s (base %d): the log start moved (retention or DeleteRecords)',
                   lo, hi, lo - 1, prev_segment, segment, segment_base_offset)
                 WHEN 'missing_segment' THEN format_string(
                   'offsets %d..%d of %s-%d are missing from the snapshot, between %s (ends at offset %d) and %s (%s): the segment file based at %d was not copied',
                   lo, hi, topic, partition, prev_segment, lo - 1, segment,
                   IF(hi + 1 > segment_base_offset,
                      format_string('based at offset %d, first batch at offset %d', segment_base_offset, hi + 1),
                      format_string('starts at offset %d', segment_base_offset)), lo)
                 WHEN 'aborted_txn' THEN format_string(
                   'offsets %d..%d: inside the transaction producer %d aborted at offset %d (aborted data cleaned away)',
                   lo, hi, producer_id, abort_offset)
                 WHEN 'compaction' THEN format_string(
                   'offsets %d..%d: removed by log compaction (%s)', lo, hi,
                   CASE WHEN topic_compacted THEN 'the policy declares the topic compacted'
                        WHEN NOT at_boundary AND segment_base_offset <= lo THEN format_string(
                          'the head of segment %s, based at %d, whose first batch starts at %d; it holds compacted batches',
                          segment, segment_base_offset, hi + 1)
                        ELSE 'the segment holds compacted batches' END)
                 ELSE format_string(
                   'offsets %d..%d are missing before %s; no compaction, transaction marker or segment boundary explains them',
                   lo, hi, CASE WHEN carried THEN format_string(
                     'segment %s (not decoded: unchanged since an earlier run)', segment)
                     ELSE format_string('the batch at position %d of %s', position, segment) END)
               END AS message
        FROM k""", g=gaps, f=findings, l=ledger, b=batches, m=markers, ct=compacted))


def batch_kinds(batches):
    """Deduplicated batches with ``kind`` (control | excluded | data), ``span``,
    ``compacted`` and cumulative offset counts per kind in offset order."""
    return _sql(batches.sparkSession, """
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
    (``batch_gap``, judged by :func:`offset_gaps`).
    """
    spark = records.sparkSession
    parts = _sql(spark, """
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
    return _select(_sql(spark, """
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
    return _select(_sql(records.sparkSession, """
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
    return _select(_sql(records.sparkSession, """
        SELECT 'duplicate_offsets' AS check, topic, partition, 'duplicate' AS class,
               offset AS first_offset, offset AS last_offset, COUNT(*) AS offsets,
               CAST(NULL AS bigint) AS value, FIRST(segment) AS segment, FIRST(batch_position) AS position,
               format_string('offset %d appears %d times in records (%s)', offset, COUNT(*),
                             array_join(array_distinct(collect_list(segment)), ', ')) AS message
        FROM {r} GROUP BY topic, partition, offset HAVING COUNT(*) > 1""", r=records))


# ------------------------------------------------------------- timestamps
def log_append_time_regressions(batches):
    """LogAppendTime batches whose max_timestamp (the broker's stamp, which
    every record takes) is below the previous LogAppendTime batch's."""
    return _select(_sql(batches.sparkSession, """
        WITH t AS (
          SELECT topic, partition, base_offset, last_offset, segment, position, max_timestamp,
                 LAG(max_timestamp) OVER (PARTITION BY topic, partition ORDER BY base_offset) AS prev_ts,
                 LAG(base_offset) OVER (PARTITION BY topic, partition ORDER BY base_offset) AS prev_base
          FROM {b}
          WHERE timestamp_type = 'LogAppendTime' AND NOT is_control AND crc_valid
            AND max_timestamp IS NOT NULL)
        SELECT 'log_append_time' AS check, topic, partition, 'regression' AS class,
               base_offset AS first_offset, last_offset, 1L AS offsets,
               unix_millis(prev_ts) - unix_millis(max_timestamp) AS value, segment, position,
               format_string('LogAppendTime went back %d ms: batch %d..%d stamped %s after batch at %d stamped %s',
                             unix_millis(prev_ts) - unix_millis(max_timestamp), base_offset, last_offset,
                             CAST(max_timestamp AS string), prev_base, CAST(prev_ts AS string)) AS message
        FROM t WHERE prev_ts > max_timestamp""", b=dedup_batches(batches)))


def create_time_regressions(records, tolerances=None):
    """CreateTime records whose timestamp is below the previous CreateTime
    record's, in offset order; ``value`` is the step back in ms. ``tolerances``
    (topic, tolerance_ms) makes steps beyond it class ``beyond_tolerance``."""
    spark = records.sparkSession
    if tolerances is None:
        tolerances = spark.createDataFrame([], "topic string, tolerance_ms bigint")
    return _select(_sql(spark, """
        WITH t AS (
          SELECT topic, partition, offset, segment, batch_position, timestamp,
                 LAG(timestamp) OVER (PARTITION BY topic, partition ORDER BY offset) AS prev_ts,
                 LAG(offset) OVER (PARTITION BY topic, partition ORDER BY offset) AS prev_offset
          FROM {r} WHERE timestamp_type = 'CreateTime' AND timestamp IS NOT NULL),
        s AS (SELECT t.*, unix_millis(prev_ts) - unix_millis(timestamp) AS step, tol.tolerance_ms
              FROM t LEFT JOIN {tol} tol ON tol.topic = t.topic
              WHERE prev_ts > timestamp)
        SELECT 'create_time' AS check, topic, partition,
               CASE WHEN tolerance_ms IS NOT NULL AND step > tolerance_ms THEN 'beyond_tolerance'
                    ELSE 'regression' END AS class,
               offset AS first_offset, offset AS last_offset, 1L AS offsets, step AS value,
               segment, batch_position AS position,
               format_string('CreateTime went back %d ms at offset %d (%s after %s at offset %d)%s',
                             step, offset, CAST(timestamp AS string), CAST(prev_ts AS string), prev_offset,
                             CASE WHEN tolerance_ms IS NULL THEN ''
                                  ELSE format_string(', tolerance %d ms', tolerance_ms) END) AS message
        FROM s""", r=records, tol=tolerances))


def max_timestamp_mismatches(records, batches):
    """Batches whose max_timestamp is not the largest of their records'
    timestamps (first_timestamp is never used: with the delete-horizon bit it
    holds the horizon, not a record time)."""
    return _select(_sql(records.sparkSession, """
        WITH d AS (SELECT * FROM {b} WHERE NOT is_control AND crc_valid AND status = 'ok' AND magic >= 1),
        r AS (SELECT topic, partition, batch_base_offset, MAX(timestamp) AS rmax, COUNT(*) AS n
              FROM {r} GROUP BY topic, partition, batch_base_offset)
        SELECT 'max_timestamp' AS check, d.topic, d.partition, 'mismatch' AS class,
               d.base_offset AS first_offset, d.last_offset, 1L AS offsets,
               unix_millis(d.max_timestamp) - unix_millis(r.rmax) AS value, d.segment, d.position,
               format_string('batch %d..%d: max_timestamp %s, largest record timestamp %s',
                             d.base_offset, d.last_offset, COALESCE(CAST(d.max_timestamp AS string), 'none'),
                             COALESCE(CAST(r.rmax AS string), 'none')) AS message
        FROM d JOIN r ON r.topic = d.topic AND r.partition = d.partition
                     AND r.batch_base_offset = d.base_offset
        WHERE NOT (d.max_timestamp <=> r.rmax)""", r=records, b=dedup_batches(batches)))


# --------------------------------------------------------------- findings
def finding_checks(findings, newest_segments):
    """Decoder and job findings: ``divergence``, ``truncated_tail`` (class
    ``active_segment`` in the partition's newest segment of the run, where a
    live broker was still writing) and ``decoder_findings`` (class = kind).
    ``crc_mismatch`` belongs to :func:`crc_failures`, ``value_decode_error`` to
    :mod:`schema_decode` (which counts them from ``records``). ``newest_segments``:
    (topic, partition, segment) of each partition's newest segment."""
    return _select(_sql(findings.sparkSession, """
        SELECT CASE WHEN f.kind IN ('divergence', 'truncated_tail') THEN f.kind
                    ELSE 'decoder_findings' END AS check,
               f.topic, f.partition,
               CASE WHEN f.kind = 'truncated_tail' AND n.segment IS NOT NULL THEN 'active_segment'
                    ELSE f.kind END AS class,
               f.base_offset AS first_offset, f.last_offset, 1L AS offsets,
               f.bytes AS value, f.segment, f.position,
               format_string('%s in %s at %d..%s: %s', f.kind, f.segment, f.position,
                             COALESCE(CAST(f.end AS string), '?'), f.message) AS message
        FROM {f} f LEFT JOIN {n} n ON n.topic = f.topic AND n.partition = f.partition
                                   AND n.segment = f.segment
        WHERE f.kind NOT IN ('crc_mismatch', 'value_decode_error') AND NOT """ + _REPLICA, f=findings, n=newest_segments))


def _replica_predicate() -> str:
    from spark_jobs.decode.replicas import DIVERGENCE_PREFIX

    return f"(f.kind = 'divergence' AND startswith(f.message, '{DIVERGENCE_PREFIX}'))"


#: a finding of two brokers' copies of a partition that differ (spark_jobs/decode/replicas.py)
_REPLICA = _replica_predicate()


def replica_divergences(findings):
    """``replica_divergence``: the decode job compared the copies of a partition that
    several brokers' folders hold batch by batch and found one holding other batches
    at the same offsets (an unclean leader election, a truncation): one observation per
    ``divergence`` finding it recorded, naming both copies (class ``divergence``).
    Record-level divergences (a copy against what the warehouse held) stay
    :func:`finding_checks`' ``divergence``."""
    return _select(_sql(findings.sparkSession, """
        SELECT 'replica_divergence' AS check, f.topic, f.partition, 'divergence' AS class,
               f.base_offset AS first_offset, f.last_offset,
               f.last_offset - f.base_offset + 1 AS offsets, f.bytes AS value, f.segment,
               f.position, f.message
        FROM {f} f WHERE """ + _REPLICA, f=findings))


# ----------------------------------------------------------------- absence
def missing_partitions(run_ledger, published_ledger, run_id: str, lookback: int = 1,
                       keep=None):
    """``missing_partition`` observations: the topic-partitions that the published ledger
    shows in the last ``lookback`` snapshot nights before this run's (other runs' rows) and
    that this run's ledger lacks (not listed at all: a listed segment, even one skipped as
    unchanged, is a present partition). ``keep``: a predicate over topics (the run's topic
    filter; default all). A partition of a topic that is still here is ``missing``; a topic
    none of whose partitions is here is one ``topic_deleted`` observation (partition null).
    Each names where and when the partition was last seen and the last offset ingested.
    Nothing where the run names no night (its nights are what "before" means)."""
    spark = run_ledger.sparkSession
    before = _sql(spark, """
        WITH mine AS (""" + RUN_TIMES + """)
        SELECT l.* FROM {l} l CROSS JOIN mine
        WHERE l.run_id <> :run AND l.topic IS NOT NULL AND l.partition IS NOT NULL
          AND l.night IS NOT NULL AND l.night < mine.first_night""",
                  r=run_ledger, l=published_ledger, args={"run": run_id})
    nights = sorted((r.night for r in before.select("night").distinct().collect()), reverse=True)
    if not nights:
        return spark.createDataFrame([], OBSERVATION_COLUMNS)
    rows = _sql(spark, """
        WITH here AS (SELECT DISTINCT topic, partition FROM {r} WHERE topic IS NOT NULL),
        expected AS (SELECT DISTINCT topic, partition FROM {before} WHERE night >= :since),
        seen AS (
          SELECT topic, partition, MAX(night) AS last_night, MAX(last_offset) AS last_offset,
                 MAX_BY(segment, struct(night, segment_base_offset)) AS last_segment
          FROM {before} GROUP BY topic, partition)
        SELECT e.topic, e.partition, s.last_night, s.last_offset, s.last_segment,
               t.topic IS NOT NULL AS topic_here
        FROM expected e JOIN seen s ON s.topic = e.topic AND s.partition = e.partition
        LEFT JOIN (SELECT DISTINCT topic FROM here) t ON t.topic = e.topic
        LEFT ANTI JOIN here h ON h.topic = e.topic AND h.partition = e.partition
        ORDER BY e.topic, e.partition""", r=run_ledger, before=before,
                args={"since": nights[:lookback][-1]}).collect()
    rows = [r for r in rows if keep is None or keep(r.topic)]
    out, deleted = [], {}
    for r in rows:
        if r.topic_here:
            out.append((MISSING_PARTITION, r.topic, r.partition, MISSING, r.last_offset,
                        r.last_offset, None, None, r.last_segment, None,
                        f"{r.topic}-{r.partition} is not in this snapshot: last seen on "
                        f"{r.last_night} ({_where(r.last_segment)}), ingested up to offset "
                        f"{_offset(r.last_offset)}"))
        else:
            deleted.setdefault(r.topic, []).append(r)
    for topic, parts in sorted(deleted.items()):
        last = max(parts, key=lambda r: (r.last_night, r.partition))
        out.append((MISSING_PARTITION, topic, None, TOPIC_DELETED, None, None, None,
                    len(parts), last.last_segment, None,
                    f"topic {topic}: none of its partitions "
                    f"({', '.join(str(r.partition) for r in parts)}) is in this snapshot, last "
                    f"seen on {last.last_night}: the topic was deleted, or every copy of it "
                    "is gone"))
    return spark.createDataFrame(out, OBSERVATION_COLUMNS)


def _where(uri: str | None) -> str:
    """The folder a partition was seen in: its segment's URI without the file name."""
    return uri.rsplit("/", 1)[0] + "/" if uri and "/" in uri else (uri or "?")


def _offset(value) -> str:
    return "?" if value is None else str(value)


def newest_segments(batches, ledger):
    return _sql(batches.sparkSession, """
        WITH s AS (SELECT topic, partition, segment, segment_base_offset FROM {b}
                   UNION SELECT topic, partition, segment, segment_base_offset FROM {l}),
        r AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY topic, partition
                                           ORDER BY segment_base_offset DESC, segment DESC) AS _n FROM s)
        SELECT topic, partition, segment FROM r WHERE _n = 1""", b=batches, l=ledger)


# ------------------------------------------------------------------ policy
def apply_policy(observations, policy: Policy, topics, finding_kinds=()):
    """``observations`` with ``severity`` and ``status`` from ``policy``
    (per check, class and topic)."""
    spark = observations.sparkSession
    rows = []
    classes = {
        "crc": ["crc_mismatch"],
        "offset_gaps": ["unreadable_bytes", "retention", "missing_segment", "aborted_txn",
                        "compaction", "unexplained"],
        "record_gaps": ["control_marker", "compaction", "excluded_batch", "batch_gap", "unexplained"],
        "record_count": ["count_exceeds_span", "records_missing", "records_extra",
                         "offset_outside_batch"],
        "duplicate_offsets": ["duplicate"],
        "log_append_time": ["regression"],
        "create_time": ["regression", "beyond_tolerance"],
        "max_timestamp": ["mismatch"],
        "divergence": ["divergence"],
        "replica_divergence": ["divergence"],
        "truncated_tail": ["truncated_tail", "active_segment"],
        schema_decode.CHECK: schema_decode.CLASSES,
        MISSING_PARTITION: [MISSING, TOPIC_DELETED],
        SNAPSHOT_MISSING: [SNAPSHOT_MISSING_CLASS],
        **INTERNAL_CLASSES,
    }
    kinds = set()
    for t in [*topics, None]:
        kinds |= set((policy.check(t, "decoder_findings").get("kinds") or {}))
    kinds |= set(finding_kinds)
    classes["decoder_findings"] = sorted(kinds - {"other"})
    for t in [*topics, None]:  # None: results about no topic (an object outside any partition)
        for check, names in classes.items():
            for name in names:
                rows.append((t, check, name, policy.severity(t, check, name)))
    table = spark.createDataFrame(rows, "topic string, check string, class string, severity string")
    return _sql(spark, """
        SELECT o.*, COALESCE(p.severity, 'fail') AS severity, COALESCE(p.severity, 'fail') AS status
        FROM {o} o LEFT JOIN {p} p ON p.topic <=> o.topic AND p.check = o.check AND p.class = o.class
        """, o=observations, p=table)


def tolerances(policy: Policy, topics):
    return [(t, policy.tolerance_ms(t)) for t in topics if policy.tolerance_ms(t) is not None]


def run_checks(tables: dict, policy: Policy, run_id: str, prior=None, listed=None,
               internal=None, absent=None):
    """All checks over one run's tables (``records``, ``batches``, ``markers``,
    ``findings``, ``ledger``): observations with severity and status. ``prior``:
    :func:`prior_ends`; ``listed``: :func:`listed_segments` (by default from the
    run's ledger alone: what skipped segments hold is then not known); ``internal``:
    the frames of :mod:`.internal_checks` (``consumer_lag``, ``producer_state``,
    ``leader_epochs``) where the run has them; ``absent``: :func:`missing_partitions`."""
    b, r, m, f, l = (tables[n] for n in ("batches", "records", "markers", "findings", "ledger"))
    spark = b.sparkSession
    topics = sorted(row[0] for row in b.select("topic").union(r.select("topic"))
                    .union(f.select("topic")).union(l.select("topic")).distinct().collect()
                    if row[0] is not None)
    if absent is not None:  # partitions this run lacks: their topics may have nothing else
        topics = sorted(set(topics) | {row[0] for row in absent.select("topic").distinct().collect()})
    compacted = [t for t in topics if policy.compacted(t)]
    tol = spark.createDataFrame(tolerances(policy, topics) or [("\u0000", 0)],
                                "topic string, tolerance_ms bigint")
    kinds = batch_kinds(b).cache()
    parts = [
        crc_failures(b, f),
        offset_gaps(b, m, f, prior=prior, compacted_topics=compacted,
                    ledger=listed_segments(l, run_id=run_id) if listed is None else listed),
        record_gaps(r, b, kinds),
        record_counts(r, b, kinds),
        duplicate_offsets(r),
        log_append_time_regressions(b),
        create_time_regressions(r, tol),
        max_timestamp_mismatches(r, b),
        finding_checks(f, newest_segments(b, l)),
        replica_divergences(f),
        schema_decode.schema_decode(r, schema_decode.share_frame(spark, policy, topics)),
    ]
    if internal:
        from .internal_checks import observations

        # only the run's partitions (a group may commit offsets of partitions not in it)
        mine = b.select("topic", "partition").union(l.select("topic", "partition")) \
            .union(f.select("topic", "partition")).distinct()
        parts += [o.join(mine, ["topic", "partition"], "left_semi")
                  for o in observations(internal, dedup_batches(b))]
    if absent is not None:
        parts.append(absent)
    out = union_all(spark, parts)
    finding_kinds = [row[0] for row in f.select("kind").distinct().collect()]
    return apply_policy(out, policy, topics, finding_kinds), topics
