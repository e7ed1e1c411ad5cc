"""The timestamp checks, in offset order per partition.

* ``log_append_time`` (:func:`log_append_time_regressions`): a LogAppendTime batch stamped
  before the previous one;
* ``create_time`` (:func:`create_time_regressions`): a CreateTime record before the previous
  one (class ``regression``, or ``beyond_tolerance`` past the topic's ``tolerance_ms``);
* ``max_timestamp`` (:func:`max_timestamp_mismatches`): a batch whose max_timestamp is not
  its largest record timestamp.
"""

from __future__ import annotations

from .inputs import RunFrames
from .observations import as_observations, dedup_batches
from .policy import Policy

#: the columns of the ``tolerances`` frame :func:`create_time_regressions` takes
TOLERANCE_COLUMNS = "topic string, tolerance_ms bigint"


def log_append_time_regressions(batches):
    """LogAppendTime batches whose max_timestamp (the broker's stamp, which
    every record takes) is below the previous LogAppendTime batch's."""
    return as_observations(batches.sparkSession.sql("""
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
        tolerances = spark.createDataFrame([], TOLERANCE_COLUMNS)
    return as_observations(spark.sql("""
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
    return as_observations(records.sparkSession.sql("""
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


def tolerance_rows(policy: Policy, topics):
    """``(topic, tolerance_ms)`` of the ``topics`` whose policy sets a create_time tolerance."""
    return [(t, policy.tolerance_ms(t)) for t in topics if policy.tolerance_ms(t) is not None]


def observe_log_append_time(run: RunFrames):
    """The ``log_append_time`` observations of ``run``."""
    return log_append_time_regressions(run.batches)


def observe_create_time(run: RunFrames):
    """The ``create_time`` observations of ``run``, with its topics' tolerances."""
    tol = run.spark.createDataFrame(tolerance_rows(run.policy, run.topics) or [("\u0000", 0)],
                                    TOLERANCE_COLUMNS)
    return create_time_regressions(run.records, tol)


def observe_max_timestamp(run: RunFrames):
    """The ``max_timestamp`` observations of ``run``."""
    return max_timestamp_mismatches(run.records, run.batches)
