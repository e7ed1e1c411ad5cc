"""The ``schema_decode`` check: values in Schema Registry's wire format that did not decode.

One observation per such value (``records.value_error`` not null: ``unknown_schema_id``,
``malformed``; the decode job also left a ``value_decode_error`` finding with its bytes),
its class the error, or ``beyond_max_share`` where the share of undecodable values among
the partition's wire-format values exceeds the topic's ``max_share``
(expectations/policy.yaml; null: never). ``value`` is the schema id, the message gives
the partition's share. Values not in the wire format are not counted at all.
"""

from __future__ import annotations

from .inputs import RunFrames
from .observations import as_observations

CHECK = "schema_decode"
_SHARE_SCHEMA = "topic string, max_share double"


def max_shares(policy, topics) -> list[tuple[str, float]]:
    """``(topic, max_share)`` where the policy sets one."""
    out = []
    for t in topics:
        share = policy.check(t, CHECK).get("max_share")
        if share is not None:
            out.append((t, float(share)))
    return out


def schema_decode(records, shares=None):
    """Observations (:data:`.observations.OBSERVATION_COLUMNS`) of undecodable wire-format
    values; ``shares``: a DataFrame ``(topic, max_share)`` (:func:`max_shares`)."""
    spark = records.sparkSession
    if shares is None:
        shares = spark.createDataFrame([], _SHARE_SCHEMA)
    return as_observations(spark.sql("""
        WITH w AS (
          SELECT topic, partition, offset, segment, batch_position, value_schema_id, value_error,
                 COUNT(*) OVER (PARTITION BY topic, partition) AS wire,
                 COUNT(value_error) OVER (PARTITION BY topic, partition) AS bad
          FROM {r} WHERE value_schema_id IS NOT NULL OR value_error IS NOT NULL),
        s AS (SELECT w.*, t.max_share FROM w LEFT JOIN {t} t ON t.topic = w.topic
              WHERE w.value_error IS NOT NULL)
        SELECT 'schema_decode' AS check, topic, partition,
               CASE WHEN max_share IS NOT NULL AND bad / wire > max_share THEN 'beyond_max_share'
                    ELSE value_error END AS class,
               offset AS first_offset, offset AS last_offset, 1L AS offsets,
               CAST(value_schema_id AS bigint) AS value, segment, batch_position AS position,
               format_string('offset %d: value (schema id %s) is %s; %d of %d values in the wire '
                             'format of this partition did not decode (%.1f%%%s)',
                             offset, COALESCE(CAST(value_schema_id AS string), '?'), value_error,
                             bad, wire, CAST(100.0 * bad / wire AS double),
                             CASE WHEN max_share IS NULL THEN ''
                                  ELSE format_string(', max_share %.1f%%', CAST(100.0 * max_share AS double))
                             END) AS message
        FROM s""", r=records, t=shares))


def share_frame(spark, policy, topics):
    """:func:`max_shares` as the frame :func:`schema_decode` takes."""
    return spark.createDataFrame(max_shares(policy, topics) or [("\u0000", 0.0)], _SHARE_SCHEMA)


def observe(run: RunFrames):
    """The ``schema_decode`` observations of ``run``, with its topics' ``max_share``."""
    return schema_decode(run.records, share_frame(run.spark, run.policy, run.topics))
