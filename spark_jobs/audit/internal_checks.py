"""The audit's checks of Kafka's internal topics and the partitions' state files (issue 19),
and the ``consumer_lag`` table they share; pure ``DataFrame -> DataFrame`` transforms.

* ``consumer_lag`` (:func:`consumer_lag`): for each group x topic-partition, the latest
  committed offset known as of this snapshot's night — of ``consumer_offsets`` as the audit
  reads it (the run's branch: ``main``, which may hold later nights' commits, plus the run's
  own), the commits at offsets of ``__consumer_offsets`` that the nights up to the run's knew
  (:data:`.context.AS_OF_THE_RUN`), the newest by record timestamp, then source offset; a
  tombstone deletes it —
  against the partition's log start and end offsets that this snapshot's ledger shows:
  start = the base offset of its first listed segment, end = one past the last offset of
  its segments (decoded now, or carried from earlier runs for skipped ones).
* ``committed_offset_beyond_log_end`` / ``committed_offset_before_log_start``: a lag row
  whose committed offset is past the log end (the consumer will reset or skip) or before
  the log start (retention removed data the group never read).
* ``producer_snapshot``: each producer of a ``.snapshot`` against the log: the newest data
  batch of that producer below the snapshot's offset must be the entry's (last offset,
  producer epoch, last sequence). Producers whose batches are not in the run: ``not_in_run``.
* ``leader_epoch_checkpoint``: each batch's partition leader epoch against the checkpoint's
  epoch for its base offset (the entry with the greatest start offset at or below it).

The results are attributed to the topic-partition the row is about (the committed-to
partition, the state file's partition), and a partition without such rows gets no result
for these checks (:func:`.rows.build_results`: :data:`.registry.OPTIONAL_CHECKS`).
"""

from __future__ import annotations

from .context import AS_OF_THE_RUN, RUN_TIMES
from .inputs import RunFrames
from .observations import as_observations, dedup_batches
from .units import CHECKPOINTED_BATCHES, COMMITTED_OFFSETS, PRODUCERS


def consumer_lag(offsets, run_ledger, listed, run_id: str, published_ledger=None):
    """The ``consumer_lag`` rows of run ``run_id`` (schemas.CONSUMER_LAG, without the
    status' policy): ``offsets`` the consumer_offsets table as audited, ``run_ledger`` the
    run's ledger rows, ``listed`` :func:`.context.listed_segments`, ``published_ledger``
    the published ledger (which nights knew which offsets of ``__consumer_offsets``: a
    commit of a later night than the run's is not known as of its night)."""
    if published_ledger is None:
        published_ledger = run_ledger.limit(0)
    return offsets.sparkSession.sql("""
        WITH mine AS (""" + RUN_TIMES + """),
        known AS (  -- how far each partition of __consumer_offsets was known as of the night
          SELECT topic, partition, MAX(last_offset) AS last_offset FROM (
            SELECT topic, partition, last_offset FROM {r}
            UNION ALL SELECT topic, partition, carried_last FROM {s}
            UNION ALL SELECT l.topic, l.partition, l.last_offset FROM {p} l CROSS JOIN mine
                      WHERE l.run_id <> :run AND """ + AS_OF_THE_RUN + """)
          GROUP BY topic, partition),
        ranked AS (
          SELECT o.*, ROW_NUMBER() OVER (PARTITION BY o.`group`, o.topic, o.partition
                                         ORDER BY o.timestamp DESC, o.source_offset DESC) AS _n
          FROM {o} o JOIN known k ON k.topic = o.source_topic AND k.partition = o.source_partition
          WHERE o.source_offset <= k.last_offset),
        latest AS (SELECT * FROM ranked WHERE _n = 1 AND NOT tombstone),
        decoded AS (SELECT topic, partition, MIN(segment_base_offset) AS log_start,
                           MAX(last_offset) AS last_offset FROM {l} GROUP BY topic, partition),
        carried AS (SELECT topic, partition, MIN(segment_base_offset) AS log_start,
                           MAX(carried_last) AS last_offset FROM {s} GROUP BY topic, partition),
        log AS (
          SELECT COALESCE(d.topic, c.topic) AS topic, COALESCE(d.partition, c.partition) AS partition,
                 LEAST(d.log_start, c.log_start) AS log_start,
                 GREATEST(d.last_offset, c.last_offset) + 1 AS log_end
          FROM decoded d FULL OUTER JOIN carried c
            ON d.topic = c.topic AND d.partition = c.partition)
        SELECT :run AS run_id, l.`group`, l.topic, l.partition, l.committed_offset,
               l.commit_timestamp, g.log_start AS log_start_offset, g.log_end AS log_end_offset,
               g.log_end - l.committed_offset AS lag,
               CASE WHEN g.topic IS NULL THEN 'not_in_snapshot'
                    WHEN l.committed_offset > g.log_end THEN 'beyond_log_end'
                    WHEN l.committed_offset < g.log_start THEN 'before_log_start'
                    ELSE 'ok' END AS status,
               l.run_id AS source_run_id, l.source_offset
        FROM latest l LEFT JOIN log g ON g.topic = l.topic AND g.partition = l.partition""",
                o=offsets, l=run_ledger, r=run_ledger, s=listed, p=published_ledger,
                args={"run": run_id})


def committed_offset_checks(lag):
    """``committed_offset_beyond_log_end`` and ``committed_offset_before_log_start``
    observations of the lag rows (one per group x partition whose commit is outside the log)."""
    return as_observations(lag.sparkSession.sql("""
        SELECT 'committed_offset_beyond_log_end' AS check, topic, partition,
               'beyond_log_end' AS class, log_end_offset AS first_offset,
               committed_offset - 1 AS last_offset, committed_offset - log_end_offset AS offsets,
               committed_offset AS value, CAST(NULL AS string) AS segment,
               CAST(NULL AS bigint) AS position,
               format_string('group %s committed offset %d of %s-%d, %d past its log end %d: '
                             'the consumer will reset (auto.offset.reset) or skip',
                             `group`, committed_offset, topic, partition,
                             committed_offset - log_end_offset, log_end_offset) AS message
        FROM {l} WHERE status = 'beyond_log_end'
        UNION ALL
        SELECT 'committed_offset_before_log_start', topic, partition, 'before_log_start',
               committed_offset, log_start_offset - 1, log_start_offset - committed_offset,
               committed_offset, CAST(NULL AS string), CAST(NULL AS bigint),
               format_string('group %s committed offset %d of %s-%d, before its log start %d: '
                             'retention removed %d offsets the group never read',
                             `group`, committed_offset, topic, partition, log_start_offset,
                             log_start_offset - committed_offset)
        FROM {l} WHERE status = 'before_log_start'""", l=lag))


def producer_snapshot_checks(producer_state, batches):
    """``producer_snapshot`` observations: one per producer entry of a ``.snapshot``
    (class ``agrees``, ``disagrees`` or ``not_in_run``)."""
    return as_observations(producer_state.sparkSession.sql("""
        WITH s AS (SELECT DISTINCT topic, partition, snapshot_offset, producer_id, producer_epoch,
                          last_sequence, last_offset, file FROM {p}),
        data AS (SELECT DISTINCT topic, partition, producer_id, producer_epoch, last_sequence,
                        base_offset, last_offset, segment, position
                 FROM {b} WHERE magic = 2 AND NOT is_control AND producer_id >= 0),
        matched AS (
          SELECT s.*, d.producer_epoch AS log_epoch, d.last_sequence AS log_sequence,
                 d.last_offset AS log_last_offset, d.segment AS log_segment,
                 d.position AS log_position,
                 ROW_NUMBER() OVER (PARTITION BY s.topic, s.partition, s.file, s.producer_id
                                    ORDER BY d.last_offset DESC NULLS LAST) AS _n
          FROM s LEFT JOIN data d
            ON d.topic = s.topic AND d.partition = s.partition AND d.producer_id = s.producer_id
               AND d.last_offset < s.snapshot_offset)
        SELECT 'producer_snapshot' AS check, topic, partition,
               CASE WHEN log_last_offset IS NULL THEN 'not_in_run'
                    WHEN log_last_offset = last_offset AND log_epoch = producer_epoch
                         AND log_sequence = last_sequence THEN 'agrees'
                    ELSE 'disagrees' END AS class,
               last_offset AS first_offset, last_offset, 1L AS offsets, producer_id AS value,
               COALESCE(log_segment, file) AS segment, log_position AS position,
               CASE WHEN log_last_offset IS NULL
                    THEN format_string('%s: producer %d (epoch %d, last sequence %d at offset %d): '
                                       'none of its batches below offset %d is in this run',
                                       file, producer_id, producer_epoch, last_sequence,
                                       last_offset, snapshot_offset)
                    ELSE format_string('%s: producer %d has epoch %d, last sequence %d at offset '
                                       '%d; its last batch in the log below offset %d has epoch '
                                       '%d, last sequence %d at offset %d', file, producer_id,
                                       producer_epoch, last_sequence, last_offset,
                                       snapshot_offset, log_epoch, log_sequence,
                                       log_last_offset) END AS message
        FROM matched WHERE _n = 1""", p=producer_state, b=batches))


def leader_epoch_checks(leader_epochs, batches):
    """``leader_epoch_checkpoint`` observations: one per batch of a partition with a
    checkpoint (class ``agrees``, ``disagrees``, or ``before_first_entry`` for a batch
    below the checkpoint's first start offset)."""
    return as_observations(leader_epochs.sparkSession.sql("""
        WITH e AS (SELECT DISTINCT topic, partition, epoch, start_offset FROM {e}),
        b AS (SELECT DISTINCT x.topic, x.partition, x.base_offset, x.last_offset,
                     x.partition_leader_epoch, x.segment, x.position
              FROM {b} x LEFT SEMI JOIN (SELECT DISTINCT topic, partition FROM e) k
                ON k.topic = x.topic AND k.partition = x.partition
              WHERE x.magic = 2),
        m AS (
          SELECT b.*, e.epoch AS expected, e.start_offset,
                 ROW_NUMBER() OVER (PARTITION BY b.topic, b.partition, b.base_offset
                                    ORDER BY e.start_offset DESC NULLS LAST) AS _n
          FROM b LEFT JOIN e ON e.topic = b.topic AND e.partition = b.partition
                             AND e.start_offset <= b.base_offset)
        SELECT 'leader_epoch_checkpoint' AS check, topic, partition,
               CASE WHEN expected IS NULL THEN 'before_first_entry'
                    WHEN expected = partition_leader_epoch THEN 'agrees'
                    ELSE 'disagrees' END AS class,
               base_offset AS first_offset, last_offset, last_offset - base_offset + 1 AS offsets,
               CAST(partition_leader_epoch AS bigint) AS value, segment, position,
               CASE WHEN expected IS NULL
                    THEN format_string('batch %d..%d (leader epoch %d) is below the '
                                       'leader-epoch-checkpoint''s first start offset',
                                       base_offset, last_offset, partition_leader_epoch)
                    ELSE format_string('batch %d..%d has leader epoch %d; the '
                                       'leader-epoch-checkpoint says epoch %d from offset %d',
                                       base_offset, last_offset, partition_leader_epoch,
                                       expected, start_offset) END AS message
        FROM m WHERE _n = 1""", e=leader_epochs, b=batches))


def leader_epoch_observations(internal: dict, batches):
    """:func:`leader_epoch_checks` of ``internal``'s ``leader_epochs`` against the run's
    deduplicated ``batches``, computed once per audit and kept in ``internal`` (the
    results' unit counts and the observations both read it: one scan of the batches)."""
    if "leader_epoch_checkpoint" not in internal:
        internal["leader_epoch_checkpoint"] = leader_epoch_checks(
            internal["leader_epochs"], batches).localCheckpoint()
    return internal["leader_epoch_checkpoint"]


def units(internal: dict, batches) -> dict:
    """(topic, partition) -> ``{unit: n}`` for the checks above (:mod:`.units`)."""
    out: dict = {}

    def add(unit, rows):
        for r in rows:
            out.setdefault((r.topic, r.partition), {})[unit] = r.n

    if "consumer_lag" in internal:
        add(COMMITTED_OFFSETS, internal["consumer_lag"].where("status <> 'not_in_snapshot'")
            .groupBy("topic", "partition").count().withColumnRenamed("count", "n").collect())
    if "producer_state" in internal:
        add(PRODUCERS, internal["producer_state"].select(
            "topic", "partition", "file", "producer_id").distinct()
            .groupBy("topic", "partition").count().withColumnRenamed("count", "n").collect())
    if "leader_epochs" in internal:
        add(CHECKPOINTED_BATCHES, leader_epoch_observations(internal, batches)
            .groupBy("topic", "partition").count().withColumnRenamed("count", "n").collect())
    return out


def load(spark, wh, run_id: str, snapshots: dict, run_ledger, listed,
         published_ledger=None) -> dict:
    """The frames of the checks above for run ``run_id``, from the tables the warehouse has
    (``snapshots``: :func:`.inputs.audited_snapshots`): ``consumer_lag`` (computed, cached),
    the run's ``producer_state`` and ``leader_epochs``, every ``producer_transactions`` row
    (read by :mod:`.eos`). Empty where it has none of them."""
    from spark_jobs.tables import read_table

    out = {}
    if "consumer_offsets" in snapshots:
        offsets = read_table(spark, wh, "consumer_offsets", snapshot=snapshots["consumer_offsets"][1])
        out["consumer_lag"] = consumer_lag(offsets, run_ledger, listed, run_id,
                                           published_ledger).localCheckpoint()
    for name in ("producer_state", "leader_epochs"):
        if name in snapshots:
            out[name] = read_table(spark, wh, name, snapshot=snapshots[name][1], run_id=run_id)
    if "producer_transactions" in snapshots:  # every night's, as of the run (:mod:`.eos`)
        out["producer_transactions"] = read_table(spark, wh, "producer_transactions",
                                                  snapshot=snapshots["producer_transactions"][1])
    return out


def write_lag(wh, run_id: str, internal: dict) -> int | None:
    """Replace run ``run_id``'s ``consumer_lag`` rows (on ``main``, like dq_results: the
    audit's table); the number of rows, None where the warehouse has no consumer_offsets."""
    if "consumer_lag" not in internal:
        return None
    from spark_jobs import schemas

    rows = internal["consumer_lag"].toArrow()
    wh.replace_run_rows("consumer_lag", run_id, rows.select(schemas.CONSUMER_LAG.names))
    return rows.num_rows


def observe_committed_offsets(run: RunFrames):
    """The ``committed_offset_beyond_log_end`` and ``committed_offset_before_log_start``
    observations of ``run`` (None where the warehouse has no consumer_offsets)."""
    if "consumer_lag" in run.internal:
        return _of_the_run(run, committed_offset_checks(run.internal["consumer_lag"]))
    return None


def observe_producer_snapshots(run: RunFrames):
    """The ``producer_snapshot`` observations of ``run`` (None: no producer_state)."""
    if "producer_state" in run.internal:
        return _of_the_run(run, producer_snapshot_checks(run.internal["producer_state"],
                                                         dedup_batches(run.batches)))
    return None


def observe_leader_epochs(run: RunFrames):
    """The ``leader_epoch_checkpoint`` observations of ``run`` (None: no leader_epochs)."""
    if "leader_epochs" in run.internal:
        return _of_the_run(run, leader_epoch_observations(run.internal,
                                                          dedup_batches(run.batches)))
    return None


def _of_the_run(run: RunFrames, observations):
    """Only the ``observations`` of the run's partitions (a group may commit offsets of
    partitions not in it)."""
    mine = run.batches.select("topic", "partition").union(run.ledger.select("topic", "partition")) \
        .union(run.findings.select("topic", "partition")).distinct()
    return observations.join(mine, ["topic", "partition"], "left_semi")
