"""Where the audited run stands among the nights: what the ledgers say around its own rows.

A run's tables hold only what it decoded. The checks also need what came before it and
what it skipped, which only the ledgers tell:

* when the run is (:data:`RUN_TIMES`) and which other runs' ledger rows it may know of
  (:data:`BEFORE_THE_RUN`, :data:`AS_OF_THE_RUN`): by snapshot night, not by when the runs
  ran, so a night audited again, or backfilled after later nights, sees what it saw in order;
* where each partition stood before the run (:func:`prior_ends`);
* every segment the run listed, with what earlier runs ingested of those it skipped
  (:func:`listed_segments`), and each partition's newest segment (:func:`newest_segments`).

Inputs are the ``ledger`` table as ``spark_jobs.tables.read_table`` reads it: the run's own
rows (``run_ledger``) and the published ones (``published_ledger``).
"""

from __future__ import annotations

#: the columns of :func:`prior_ends`
PRIOR_COLUMNS = ("topic string, partition int, prior_last_offset bigint, prior_segment string, "
                 "prior_segment_base_offset bigint, prior_run_id string")
#: the columns of :func:`listed_segments`
LISTED_COLUMNS = ("topic string, partition int, segment string, segment_base_offset bigint, "
                  "carried_last bigint")

#: SQL: the audited run's ``mine`` row over its ledger ``{r}``
RUN_TIMES = """SELECT MIN(ingested_at) AS started, MIN(night) AS first_night,
                      MAX(night) AS last_night FROM {r}"""


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


def prior_ends(published_ledger, run_ledger, run_id: str):
    """Last offset of each partition in *other* runs' published ledger rows of the snapshot
    nights before this run's (:data:`BEFORE_THE_RUN`): the context of this run's first batch.
    By night, not by when the runs ran: a night audited again, or backfilled after later
    nights, sees what it saw in order."""
    return published_ledger.sparkSession.sql("""
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
    return spark.sql("""
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


def newest_segments(batches, ledger):
    """(topic, partition, segment) of each partition's newest segment: of the run's batches
    and ledger rows, the one with the greatest base offset."""
    return batches.sparkSession.sql("""
        WITH s AS (SELECT topic, partition, segment, segment_base_offset FROM {b}
                   UNION SELECT topic, partition, segment, segment_base_offset FROM {l}),
        r AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY topic, partition
                                           ORDER BY segment_base_offset DESC, segment DESC) AS _n FROM s)
        SELECT topic, partition, segment FROM r WHERE _n = 1""", b=batches, l=ledger)
