"""The ``offset_gaps`` check: holes in each partition's offsets, and what explains each one.

Two steps, each one SQL query built of named common table expressions (CTEs), in the order
the query reads them:

1. :func:`find_gaps` — the partition's offset *sequence*: this run's batches (pseudo 0), where
   the partition is known to start (pseudo 1: the previous run's end where the snapshot's
   log starts past it, else its first listed segment), and every segment the run listed but
   did not decode (pseudo 2: the offsets earlier runs ingested of it); in offset order, a
   gap is a row whose base offset is past the largest last offset before it.
2. :func:`classify_gaps` — each gap's class, in the order they are tried:
   ``unreadable_bytes``, ``log_start_moved`` (a gap at the partition's head that ends where
   its ``log-start-offset-checkpoint`` says the log starts), ``retention``,
   ``missing_segment``, ``aborted_txn``, ``compaction``, ``unexplained`` (expectations/README.md states each rule), and its message.
"""

from __future__ import annotations

from .context import LISTED_COLUMNS, PRIOR_COLUMNS
from .inputs import RunFrames
from .log_dir_checks import LOG_START_COLUMNS, LOG_START_MOVED, log_starts
from .observations import as_observations

#: finding kinds that mean bytes of a segment did not decode into batches
UNREADABLE_KINDS = ("corrupt_batch", "skipped_bytes", "truncated_tail", "fetch_error")


def with_ctes(*ctes: str) -> str:
    """``WITH`` and the named CTEs (each ``name AS (...)``), in order."""
    return "WITH " + ",\n".join(ctes)


# --------------------------------------------------------- step 1: the gaps
#: the run's batches
BATCHES = "b AS (SELECT * FROM {b})"
#: the segments the run listed (:func:`.context.listed_segments`)
LISTED = """listed AS (SELECT DISTINCT topic, partition, segment, segment_base_offset, carried_last FROM {l})"""
#: pseudo-batches (pseudo 2) of the listed segments the run skipped: what earlier runs ingested
CARRIED = """carried AS (
          SELECT topic, partition, segment_base_offset AS base_offset, carried_last AS last_offset,
                 segment, segment_base_offset, CAST(NULL AS bigint) AS position, 2 AS pseudo,
                 false AS from_prior
          FROM listed WHERE carried_last IS NOT NULL AND carried_last >= segment_base_offset)"""
#: per segment: its first offset, and whether a batch of it shows compaction
SEGMENTS = """seg AS (
          SELECT topic, partition, segment, MIN(base_offset) AS seg_first,
                 MAX(CASE WHEN pseudo = 0 AND (has_delete_horizon
                           OR (NOT is_control AND record_count < last_offset - base_offset + 1))
                          THEN 1 ELSE 0 END) AS shows_compaction
          FROM (SELECT topic, partition, segment, base_offset, last_offset, record_count,
                       is_control, has_delete_horizon, 0 AS pseudo FROM b
                UNION ALL
                SELECT topic, partition, segment, base_offset, last_offset, 0, false, false, 2
                FROM carried)
          GROUP BY topic, partition, segment)"""
#: each partition's segments in offset order (the first: ``_n = 1``)
STARTS = """starts AS (  -- the first segment listed (or decoded) of each partition
          SELECT *, ROW_NUMBER() OVER (PARTITION BY topic, partition
                                       ORDER BY segment_base_offset, segment) AS _n
          FROM (SELECT topic, partition, segment, segment_base_offset FROM b
                UNION SELECT topic, partition, segment, segment_base_offset FROM listed))"""
#: where each partition is known to start (pseudo 1): the prior run's end (``{prior}``) or
#: the offset before its first segment
HEAD = """head AS (  -- where the partition's log is known to start: the prior run's end where
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
                WHERE s._n = 1))"""
#: the sequence: batches, carried segments and heads
SEQUENCE = """seq AS (
          SELECT topic, partition, base_offset, last_offset, segment, segment_base_offset, position,
                 0 AS pseudo, false AS from_prior FROM b
          UNION ALL
          SELECT * FROM carried
          UNION ALL
          SELECT topic, partition, base_offset, base_offset, segment, segment_base_offset, CAST(NULL AS bigint),
                 1, from_prior FROM head)"""
#: each element of the sequence with the end of everything before it and its predecessor
WINDOWED = """w AS (
          SELECT *,
            MAX(last_offset) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
            LAG(segment) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC) AS prev_segment,
            LAG(position) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC) AS prev_position,
            LAG(pseudo) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC) AS prev_pseudo,
            LAG(from_prior) OVER (PARTITION BY topic, partition ORDER BY base_offset, pseudo DESC) AS prev_from_prior
          FROM seq)"""
#: the gaps (``lo..hi``) with what borders them
GAPS = """
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
        """

# ------------------------------------------------------ step 2: their class
#: the gaps of step 1
GAP_ROWS = "g AS (SELECT * FROM {g})"
#: per gap: bytes that did not decode where its offsets would be (``{f}``), or a segment
#: listed in the hole that yielded nothing and was not skipped (``{l}`` against ``{b}``)
UNREADABLE = """unreadable AS (  -- bytes that did not decode, where the missing offsets would be
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
          GROUP BY g.topic, g.partition, g.lo)"""
#: one unreadable row per gap
UNREADABLE_PER_GAP = """u AS (SELECT topic, partition, lo, FIRST(kind) AS kind, FIRST(f_segment) AS f_segment,
                     FIRST(f_position) AS f_position, SUM(f_bytes) AS f_bytes
              FROM unreadable GROUP BY topic, partition, lo)"""
#: the transaction markers (``{m}``), each with its producer's previous one
MARKERS = """m AS (
          SELECT topic, partition, offset, producer_id,
                 LAG(offset) OVER (PARTITION BY topic, partition, producer_id ORDER BY offset) AS prev_marker,
                 control_type
          FROM {m} WHERE control_type IN ('COMMIT', 'ABORT'))"""
#: per gap: an ABORT after it whose transaction was open across the whole gap
ABORTED = """a AS (  -- an ABORT whose transaction was open across the whole gap
          SELECT g.topic, g.partition, g.lo, MIN(m.offset) AS abort_offset, FIRST(m.producer_id) AS producer_id
          FROM g JOIN m ON m.topic = g.topic AND m.partition = g.partition
          WHERE m.control_type = 'ABORT' AND m.offset > g.hi
            AND (m.prev_marker IS NULL OR m.prev_marker < g.lo)
          GROUP BY g.topic, g.partition, g.lo)"""
#: per gap at a partition's head: a log-start-offset-checkpoint (``{ls}``) whose log start
#: is the offset after it
LOG_START = """ls AS (
          SELECT g.topic, g.partition, g.lo, MIN(s.file) AS ls_file
          FROM g JOIN {ls} s ON s.topic = g.topic AND s.partition = g.partition
                            AND s.log_start_offset = g.hi + 1
          WHERE g.at_head GROUP BY g.topic, g.partition, g.lo)"""
#: each gap with every explanation found (``{ct}``: the topics the policy declares compacted)
EVIDENCE = """c AS (
          SELECT g.*, u.kind AS u_kind, u.f_segment, u.f_position, u.f_bytes,
                 a.abort_offset, a.producer_id, ls.ls_file,
                 ct.topic IS NOT NULL AS topic_compacted,
                 CASE WHEN g.segment_base_offset <= g.lo OR g.prev_segment IS NULL THEN g.next_compacted
                      ELSE g.prev_compacted END AS seg_compacted
          FROM g LEFT JOIN u ON u.topic = g.topic AND u.partition = g.partition AND u.lo = g.lo
          LEFT JOIN a ON a.topic = g.topic AND a.partition = g.partition AND a.lo = g.lo
          LEFT JOIN ls ON ls.topic = g.topic AND ls.partition = g.partition AND ls.lo = g.lo
          LEFT JOIN {ct} ct ON ct.topic = g.topic)"""
#: the first explanation that holds, in the order of the module docstring
CLASSIFIED = """k AS (
          SELECT *, CASE
              WHEN u_kind IS NOT NULL THEN 'unreadable_bytes'
              WHEN ls_file IS NOT NULL THEN '""" + LOG_START_MOVED + """'
              WHEN at_boundary AND after_prior THEN 'retention'
              WHEN at_boundary AND (COALESCE(prev_compacted, false) OR topic_compacted) THEN 'compaction'
              WHEN at_boundary THEN 'missing_segment'
              WHEN abort_offset IS NOT NULL THEN 'aborted_txn'
              WHEN COALESCE(seg_compacted, false) OR topic_compacted THEN 'compaction'
              ELSE 'unexplained' END AS class
          FROM c)"""
#: SQL: the message of a classified gap (a row of ``k``)
GAP_MESSAGE = """CASE class
                 WHEN 'unreadable_bytes' THEN CASE WHEN u_kind = 'listed_segment' THEN format_string(
                   'offsets %d..%d: segment %s lies in the hole but yielded no batches', lo, hi, f_segment)
                   ELSE format_string('offsets %d..%d lie in bytes that did not decode: %s in %s at position %s',
                   lo, hi, u_kind, f_segment, COALESCE(CAST(f_position AS string), '?')) END
                 WHEN '""" + LOG_START_MOVED + """' THEN format_string(
                   'offsets %d..%d of %s-%d: %s says the log starts at %d (DeleteRecords or retention moved it)',
                   lo, hi, topic, partition, ls_file, hi + 1)
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
               END"""
#: the observations of the classified gaps
OBSERVATIONS = """
        SELECT 'offset_gaps' AS check, topic, partition, class, lo AS first_offset, hi AS last_offset,
               hi - lo + 1 AS offsets, CAST(NULL AS bigint) AS value, segment,
               -- a missing segment is a hole between two files, at no byte of either
               IF(class = 'missing_segment', CAST(NULL AS bigint), position) AS position,
               """ + GAP_MESSAGE + """ AS message
        FROM k"""


def offset_gaps(batches, markers, findings, prior=None, ledger=None, compacted_topics=(),
                log_start=None):
    """Gaps in the offsets of each partition, classified (see the module docstring).

    ``ledger``: :func:`.context.listed_segments`, whose ``carried_last`` says what earlier
    runs ingested of a skipped segment (it stands for offsets ``segment_base_offset ..
    carried_last``); it may also be plain ledger rows (nothing carried): a listed segment in
    a hole that yielded no batches makes the hole ``unreadable_bytes``. ``prior``:
    :func:`.context.prior_ends`. ``compacted_topics``: topics the policy declares compacted.
    ``log_start``: :func:`.log_dir_checks.log_starts` (None: none known).
    """
    spark = batches.sparkSession
    if prior is None:
        prior = spark.createDataFrame([], PRIOR_COLUMNS)
    listed = as_listed(spark, ledger)
    compacted = spark.createDataFrame([(t,) for t in compacted_topics] or [("\u0000",)],
                                      "topic string")
    if log_start is None:
        log_start = spark.createDataFrame([], LOG_START_COLUMNS)
    gaps = find_gaps(batches, listed, prior).localCheckpoint()  # few rows, read five times below
    return classify_gaps(gaps, batches, markers, findings, listed, compacted, log_start)


def as_listed(spark, ledger):
    """``ledger`` with :data:`.context.LISTED_COLUMNS` (``carried_last`` null where it has
    none); none listed where it is None."""
    if ledger is None:
        return spark.createDataFrame([], LISTED_COLUMNS)
    if "carried_last" not in ledger.columns:
        return ledger.selectExpr("topic", "partition", "segment", "segment_base_offset",
                                 "CAST(NULL AS bigint) AS carried_last")
    return ledger


def find_gaps(batches, listed, prior):
    """Step 1: every gap of each partition's offset sequence, with what borders it."""
    query = with_ctes(BATCHES, LISTED, CARRIED, SEGMENTS, STARTS, HEAD, SEQUENCE, WINDOWED) + GAPS
    return batches.sparkSession.sql(query, b=batches, l=listed, prior=prior)


def classify_gaps(gaps, batches, markers, findings, listed, compacted, log_start):
    """Step 2: the observations of the ``gaps`` of :func:`find_gaps`, classified."""
    query = with_ctes(GAP_ROWS, UNREADABLE, UNREADABLE_PER_GAP, MARKERS, ABORTED, LOG_START,
                      EVIDENCE, CLASSIFIED) + OBSERVATIONS
    return as_observations(gaps.sparkSession.sql(query, g=gaps, f=findings, l=listed, b=batches,
                                                 m=markers, ct=compacted, ls=log_start))


def observe(run: RunFrames):
    """The ``offset_gaps`` observations of ``run`` (its listed segments and prior ends, the
    topics its policy declares compacted)."""
    return offset_gaps(run.batches, run.markers, run.findings, prior=run.prior,
                       ledger=run.listed,
                       compacted_topics=[t for t in run.topics if run.policy.compacted(t)],
                       log_start=log_starts(run.internal))
