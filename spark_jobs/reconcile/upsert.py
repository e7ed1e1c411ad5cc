"""The reconciliation of an upsert sink (``mode: upsert``): the sink's row per key against
the latest committed value per key as of the night — the ``latest__<topic>`` table
(:mod:`spark_jobs.derive.keyed`: deletes leave it; aborted and open records are no change),
read at its ``night-YYYY-MM-DD`` tag, else ``main`` — and, for the keys it no longer holds,
the log's own last visible record of the key (a tombstone: the key was deleted).

Classes (items name the log's offset of the key's latest record):

* ``missing_key``: a key the log holds a live value of, absent from the sink;
* ``stale_value``: the sink holds the key with another value than the latest;
* ``deleted_key_present``: the key's latest record is a tombstone, the sink still holds it;
* ``duplicate``: the sink holds a key more than once;
* ``beyond_log``: a key of the sink the log never held.
"""

from __future__ import annotations

from spark_jobs.audit.observations import as_observations

from .classes import CHECK
from .compare import DELIVERABLE_RECORD
LATEST_COLUMNS = "topic string, partition int, key binary, value binary, offset bigint"

QUERY = """
    WITH s AS (SELECT topic, upsert_key AS key, COUNT(*) AS copies, FIRST(value, true) AS value,
                      COUNT(DISTINCT value) AS vals, FIRST(partition, true) AS s_partition
               FROM {s} GROUP BY topic, upsert_key),
    l AS (SELECT * FROM {l}),
    last AS (SELECT topic, partition, key, offset, value IS NULL AS tombstone FROM (
               SELECT topic, partition, key, offset, value,
                      ROW_NUMBER() OVER (PARTITION BY topic, key ORDER BY offset DESC) AS _n
               FROM {r} WHERE key IS NOT NULL
                 AND """ + DELIVERABLE_RECORD + """) WHERE _n = 1),
    o AS (
      SELECT l.topic, l.partition, 'missing_key' AS class, l.offset, l.key, 1 AS n
      FROM l LEFT ANTI JOIN s ON s.topic = l.topic AND s.key = l.key
      UNION ALL
      SELECT l.topic, l.partition, 'stale_value', l.offset, l.key, 1
      FROM l JOIN s ON s.topic = l.topic AND s.key = l.key
      WHERE s.vals > 1 OR NOT (s.value <=> l.value)
      UNION ALL
      SELECT s.topic, COALESCE(t.partition, s.s_partition),
             IF(t.tombstone, 'deleted_key_present', 'beyond_log'), t.offset, s.key, 1
      FROM s LEFT ANTI JOIN l ON l.topic = s.topic AND l.key = s.key
      LEFT JOIN last t ON t.topic = s.topic AND t.key = s.key
      WHERE t.key IS NULL OR t.tombstone
      UNION ALL
      SELECT s.topic, COALESCE(l.partition, s.s_partition), 'duplicate', l.offset, s.key,
             s.copies - 1
      FROM s LEFT JOIN l ON l.topic = s.topic AND l.key = s.key WHERE s.copies > 1)
    SELECT :check AS check, topic, partition, class, offset AS first_offset,
           offset AS last_offset, n AS offsets, CAST(NULL AS bigint) AS value,
           CAST(NULL AS string) AS segment, CAST(NULL AS bigint) AS position,
           format_string('key %s of %s: %s', COALESCE(CAST(key AS string), 'null'), topic, CASE class
             WHEN 'missing_key' THEN format_string('the latest value (offset %d) is not in sink %s', offset, :sink)
             WHEN 'stale_value' THEN format_string('sink %s holds another value than the latest (offset %d)', :sink, offset)
             WHEN 'deleted_key_present' THEN format_string('deleted by the tombstone at offset %d, still in sink %s', offset, :sink)
             WHEN 'duplicate' THEN format_string('held %d extra time(s) in sink %s', n, :sink)
             ELSE format_string('in sink %s, but the log holds no committed record of the key', :sink) END) AS message
    FROM o"""


def reconcile_upsert(sink_rows, latest, records, *, sink: str):
    """The observations of an upsert sink: ``sink_rows`` (:data:`.sink_read.SINK_COLUMNS`),
    ``latest`` (:data:`LATEST_COLUMNS`, the latest tables of its topics as of the night),
    ``records`` of its topics (key, value, offset, txn_state)."""
    spark = sink_rows.sparkSession
    return as_observations(spark.sql(QUERY, s=sink_rows, l=latest, r=records,
                                     args={"check": CHECK, "sink": sink}))
