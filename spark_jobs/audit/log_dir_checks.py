"""The audit's checks of a broker log directory's own files (issue 36): the offset
checkpoints, ``meta.properties`` and ``.kafka_cleanshutdown`` (the ``broker_state`` and
``partition_checkpoints`` tables), and the transactions they leave open; pure
``DataFrame -> DataFrame`` transforms.

A row of those tables names its ``log_dir``: the URI of the folder holding the partition
folders, as listed; a segment's log directory is its URI up to its partition folder
(:data:`spark_jobs.layout.LOG_DIR_OF_FILE`). A file is compared with the batches of its own
log directory only: two brokers' copies of a partition have two high watermarks.

* ``beyond_high_watermark``: batches of a partition at or past the high watermark its log
  directory's ``replication-offset-checkpoint`` names (class ``beyond_high_watermark``, one
  item per log directory and partition: the offsets written but never known replicated; an
  unclean leader election may drop them). A checkpoint past the log end the run read is class
  ``checkpoint_ahead`` (a checkpoint written after the segments were copied: no finding).
* ``mixed_cluster``: the log directories of one snapshot night belong to more than one
  ``cluster.id`` (``meta.properties``): one item per log directory, about no partition.
* ``hanging_transaction``: each open transaction of a producer-state ``.snapshot`` (its
  ``current_txn_first_offset``), class ``closed`` where a COMMIT or ABORT marker of its
  producer follows that offset (in the run, or in the warehouse as of it: a segment an earlier
  night decoded; the ``.txnindex`` lists the aborted ones, and the decode job checks it
  against those markers), ``hanging`` where it was open at the snapshot
  for longer than its transaction timeout, ``open`` otherwise. Its age: the snapshot's time
  (the latest ``max_timestamp`` of the partition's batches in the run, else the end of the
  run's night, UTC) minus its start (the first timestamp of the batch at its first offset,
  else ``__transaction_state``'s start time of the producer's transaction, else the
  ``.snapshot``'s last append time: an age never overstated). Its timeout: the producer's
  ``transaction.timeout.ms`` in ``__transaction_state`` (the ``transactions`` table, the
  producer id's latest row), else :data:`DEFAULT_TRANSACTION_TIMEOUT_MS`. Each item names the
  last stable offset the partition's open transactions pin (the oldest one's first offset).

Two other checks read these tables (:func:`unclean_tails`, :func:`log_starts`): a
``truncated_tail`` after an unclean shutdown past the recovery point is class
``unclean_shutdown`` (:mod:`.findings_checks`), and a gap at a partition's head that ends where
``log-start-offset-checkpoint`` says the log starts is ``offset_gaps``' ``log_start_moved``
(:mod:`.offsets`).
"""

from __future__ import annotations

from spark_jobs.layout import LOG_DIR_OF_FILE

from .inputs import RunFrames, materialize
from .observations import as_observations, dedup_batches
from .policy import UNCLEAN_SHUTDOWN
from .units import HIGH_WATERMARKS, LOG_DIRS, OPEN_TRANSACTIONS

BEYOND_HIGH_WATERMARK = "beyond_high_watermark"
CHECKPOINT_AHEAD = "checkpoint_ahead"
MIXED_CLUSTER = "mixed_cluster"
HANGING_TRANSACTION = "hanging_transaction"
HANGING, OPEN, CLOSED = "hanging", "open", "closed"
#: ``offset_gaps``' class for a head gap the log-start-offset-checkpoint explains
LOG_START_MOVED = "log_start_moved"
#: the producer's ``transaction.timeout.ms`` default (ProducerConfig), where
#: ``__transaction_state`` does not say
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
#: the tables these checks read, as the audit loads them (:func:`load`)
TABLES = ("broker_state", "partition_checkpoints", "transactions")

UNCLEAN_COLUMNS = ("topic string, partition int, segment string, position bigint, "
                   "log_dir string, tail_offset bigint, recovery_point bigint")
LOG_START_COLUMNS = "topic string, partition int, log_start_offset bigint, file string"


def beyond_high_watermark_checks(checkpoints, batches):
    """``beyond_high_watermark`` observations: per log directory and partition with a high
    watermark, its batches at or past it (``beyond_high_watermark``), or a high watermark past
    all of them (``checkpoint_ahead``)."""
    return as_observations(checkpoints.sparkSession.sql("""
        WITH c AS (SELECT DISTINCT log_dir, topic, partition, high_watermark, high_watermark_file
                   FROM {c} WHERE high_watermark IS NOT NULL),
        b AS (SELECT topic, partition, base_offset, last_offset, segment, position,
                     regexp_extract(segment, :re, 1) AS log_dir FROM {b}),
        j AS (SELECT c.log_dir, c.topic, c.partition, c.high_watermark AS hw,
                     c.high_watermark_file AS file, MAX(b.last_offset) AS log_last,
                     MIN_BY(b.segment, IF(b.last_offset >= c.high_watermark, b.base_offset, NULL))
                       AS segment,
                     MIN_BY(b.position, IF(b.last_offset >= c.high_watermark, b.base_offset, NULL))
                       AS position,
                     COUNT(IF(b.last_offset >= c.high_watermark, 1, NULL)) AS beyond
              FROM c JOIN b ON b.log_dir = c.log_dir AND b.topic = c.topic
                           AND b.partition = c.partition
              GROUP BY c.log_dir, c.topic, c.partition, c.high_watermark, c.high_watermark_file)
        SELECT :check AS check, topic, partition,
               IF(beyond > 0, :beyond, :ahead) AS class,
               IF(beyond > 0, hw, log_last + 1) AS first_offset,
               IF(beyond > 0, log_last, hw - 1) AS last_offset,
               IF(beyond > 0, log_last - hw + 1, hw - log_last - 1) AS offsets,
               hw AS value, IF(beyond > 0, segment, file) AS segment,
               IF(beyond > 0, position, CAST(NULL AS bigint)) AS position,
               IF(beyond > 0,
                  format_string('offsets %d..%d of %s-%d in %s are past the high watermark %d '
                                '(%s): written, never known replicated; an unclean leader '
                                'election may drop them', hw, log_last, topic, partition,
                                log_dir, hw, file),
                  format_string('%s: high watermark %d of %s-%d is past the log end %d this '
                                'run read (the checkpoint is newer than the copied segments)',
                                file, hw, topic, partition, log_last + 1)) AS message
        FROM j WHERE beyond > 0 OR log_last + 1 < hw""", c=checkpoints, b=batches,
        args={"re": LOG_DIR_OF_FILE, "check": BEYOND_HIGH_WATERMARK,
              "beyond": BEYOND_HIGH_WATERMARK, "ahead": CHECKPOINT_AHEAD}))


def mixed_cluster_checks(broker_state):
    """``mixed_cluster`` observations: every log directory of a night whose log directories
    name more than one ``cluster.id`` (about no topic-partition)."""
    return as_observations(broker_state.sparkSession.sql("""
        WITH s AS (SELECT DISTINCT night, log_dir, cluster_id, node_id, file FROM {s}
                   WHERE cluster_id IS NOT NULL),
        n AS (SELECT night, COUNT(DISTINCT log_dir) AS dirs,
                     array_join(array_sort(collect_set(cluster_id)), ', ') AS ids,
                     COUNT(DISTINCT cluster_id) AS clusters
              FROM s GROUP BY night)
        SELECT :check AS check, CAST(NULL AS string) AS topic, CAST(NULL AS int) AS partition,
               :check AS class, CAST(NULL AS bigint) AS first_offset,
               CAST(NULL AS bigint) AS last_offset, CAST(NULL AS bigint) AS offsets,
               CAST(s.node_id AS bigint) AS value, s.log_dir AS segment,
               CAST(NULL AS bigint) AS position,
               format_string('log directory %s (node %s) belongs to cluster.id %s; the %d log '
                             'directories of night %s belong to %d clusters: %s', s.log_dir,
                             COALESCE(CAST(s.node_id AS string), '?'), s.cluster_id, n.dirs,
                             COALESCE(s.night, '?'), n.clusters, n.ids) AS message
        FROM s JOIN n ON n.night <=> s.night WHERE n.clusters > 1""", s=broker_state,
        args={"check": MIXED_CLUSTER}))


def hanging_transaction_checks(producer_state, batches, markers, transactions, ledger):
    """``hanging_transaction`` observations: one per open transaction of a ``.snapshot``
    (see the module docstring); ``transactions``: the ``transactions`` table (None: none),
    ``ledger``: the run's ledger (its night)."""
    spark = producer_state.sparkSession
    if transactions is None:
        transactions = spark.createDataFrame(
            [], "producer_id bigint, transactional_id string, timeout_ms int, state string, "
                "start_timestamp timestamp, timestamp timestamp, source_offset bigint")
    return as_observations(spark.sql("""
        WITH p AS (SELECT topic, partition, producer_id, current_txn_first_offset AS first_offset,
                          MAX(producer_epoch) AS epoch, MAX(timestamp) AS last_append,
                          MAX(file) AS file
                   FROM {p} WHERE current_txn_first_offset >= 0
                   GROUP BY topic, partition, producer_id, current_txn_first_offset),
        closing AS (SELECT p.topic, p.partition, p.producer_id, p.first_offset,
                           MIN(m.offset) AS marker_offset, MIN_BY(m.control_type, m.offset) AS marker
                    FROM p JOIN {m} m ON m.topic = p.topic AND m.partition = p.partition
                                     AND m.producer_id = p.producer_id AND m.offset > p.first_offset
                    WHERE m.control_type IN ('COMMIT', 'ABORT')
                    GROUP BY p.topic, p.partition, p.producer_id, p.first_offset),
        started AS (SELECT topic, partition, producer_id, base_offset,
                           MIN(first_timestamp) AS first_timestamp
                    FROM {b} GROUP BY topic, partition, producer_id, base_offset),
        snap AS (SELECT topic, partition, unix_millis(MAX(max_timestamp)) AS at FROM {b}
                 GROUP BY topic, partition),
        night AS (SELECT unix_millis(to_timestamp(MAX(night))) + 86400000 AS at FROM {l}),
        coord AS (SELECT * FROM (
                    SELECT producer_id, transactional_id, timeout_ms, state, start_timestamp,
                           ROW_NUMBER() OVER (PARTITION BY producer_id
                                              ORDER BY timestamp DESC, source_offset DESC) AS _n
                    FROM {t}) WHERE _n = 1),
        j AS (SELECT p.*, c.marker_offset, c.marker, co.transactional_id, co.state,
                     COALESCE(co.timeout_ms, :default_timeout) AS timeout_ms,
                     co.timeout_ms IS NULL AS default_timeout,
                     unix_millis(COALESCE(s.first_timestamp, co.start_timestamp, p.last_append))
                       AS started_at,
                     COALESCE(sn.at, night.at) AS snapshot_at, sn.at IS NULL AS at_night_end
              FROM p CROSS JOIN night
              LEFT JOIN closing c ON c.topic = p.topic AND c.partition = p.partition
                   AND c.producer_id = p.producer_id AND c.first_offset = p.first_offset
              LEFT JOIN started s ON s.topic = p.topic AND s.partition = p.partition
                   AND s.producer_id = p.producer_id AND s.base_offset = p.first_offset
              LEFT JOIN coord co ON co.producer_id = p.producer_id
              LEFT JOIN snap sn ON sn.topic = p.topic AND sn.partition = p.partition),
        lso AS (SELECT topic, partition, MIN(first_offset) AS lso FROM j
                WHERE marker_offset IS NULL GROUP BY topic, partition),
        k AS (SELECT j.*, lso.lso, snapshot_at - started_at AS age_ms,
                     CASE WHEN marker_offset IS NOT NULL THEN :closed
                          WHEN snapshot_at - started_at > timeout_ms THEN :hanging
                          ELSE :open END AS class
              FROM j LEFT JOIN lso ON lso.topic = j.topic AND lso.partition = j.partition)
        SELECT :check AS check, topic, partition, class, first_offset,
               COALESCE(marker_offset, first_offset) AS last_offset, 1L AS offsets,
               age_ms AS value, file AS segment, CAST(NULL AS bigint) AS position,
               CASE WHEN class = :closed THEN format_string(
                      '%s: producer %d''s transaction from offset %d is closed by the %s marker '
                      'at offset %d', file, producer_id, first_offset, marker, marker_offset)
                    ELSE format_string(
                      '%s: producer %d (transactional id %s, epoch %d) has had a transaction '
                      'open since offset %d for %s ms at the snapshot (%s), %s its transaction '
                      'timeout %d ms%s; no COMMIT or ABORT follows (coordinator state %s). It '
                      'pins the last stable offset of %s-%d at %d: read_committed consumers '
                      'stop there', file, producer_id, COALESCE(transactional_id, '?'), epoch,
                      first_offset, COALESCE(CAST(age_ms AS string), '?'),
                      IF(at_night_end, 'the end of the night', 'its latest batch time'),
                      IF(class = :hanging, 'longer than', 'within'), timeout_ms,
                      IF(default_timeout, ' (the default: not in __transaction_state)', ''),
                      COALESCE(state, 'unknown'), topic, partition, lso) END AS message
        FROM k""", p=producer_state, m=markers, b=batches, t=transactions, l=ledger,
        args={"check": HANGING_TRANSACTION, "closed": CLOSED, "open": OPEN, "hanging": HANGING,
              "default_timeout": DEFAULT_TRANSACTION_TIMEOUT_MS}))


def unclean_tails(internal: dict, findings, batches):
    """The ``truncated_tail`` findings Kafka's log recovery cuts off: in a log directory
    whose broker did not shut down cleanly (``broker_state.clean_shutdown`` false), at an
    offset at or past the partition's recovery point (``recovery-point-offset-checkpoint``;
    a partition it does not name recovers from 0, as Kafka's LogManager does). The offset
    of a tail: its finding's base offset, else one past the segment's last batch, else the
    segment's base offset. Columns :data:`UNCLEAN_COLUMNS`; none without ``broker_state``."""
    spark = findings.sparkSession
    if "broker_state" not in internal:
        return spark.createDataFrame([], UNCLEAN_COLUMNS)
    checkpoints = internal.get("partition_checkpoints")
    if checkpoints is None:
        checkpoints = spark.createDataFrame(
            [], "log_dir string, topic string, partition int, recovery_point bigint")
    return spark.sql("""
        WITH s AS (SELECT DISTINCT log_dir FROM {s} WHERE NOT clean_shutdown),
        cp AS (SELECT log_dir, topic, partition, MIN(recovery_point) AS recovery_point FROM {c}
               WHERE recovery_point IS NOT NULL GROUP BY log_dir, topic, partition),
        ends AS (SELECT segment, MAX(last_offset) AS last_offset FROM {b} GROUP BY segment),
        f AS (SELECT f.topic, f.partition, f.segment, f.position,
                     regexp_extract(f.segment, :re, 1) AS log_dir,
                     COALESCE(f.base_offset, e.last_offset + 1, f.segment_base_offset) AS tail_offset
              FROM {f} f LEFT JOIN ends e ON e.segment = f.segment
              WHERE f.kind = 'truncated_tail')
        SELECT f.topic, f.partition, f.segment, f.position, f.log_dir, f.tail_offset,
               COALESCE(cp.recovery_point, 0) AS recovery_point
        FROM f JOIN s ON s.log_dir = f.log_dir
        LEFT JOIN cp ON cp.log_dir = f.log_dir AND cp.topic = f.topic AND cp.partition = f.partition
        WHERE f.tail_offset >= COALESCE(cp.recovery_point, 0)""",
                     s=internal["broker_state"], c=checkpoints, b=batches, f=findings,
                     args={"re": LOG_DIR_OF_FILE})


def log_starts(internal: dict):
    """(topic, partition, log_start_offset, file) of every ``log-start-offset-checkpoint``
    entry of the run (columns :data:`LOG_START_COLUMNS`); None without them."""
    checkpoints = internal.get("partition_checkpoints")
    if checkpoints is None:
        return None
    return checkpoints.where("log_start_offset IS NOT NULL").selectExpr(
        "topic", "partition", "log_start_offset", "log_start_offset_file AS file").distinct()


def units(internal: dict) -> dict:
    """(topic, partition) -> ``{unit: n}`` of the checks above (:mod:`.units`); the log
    directories of ``broker_state`` count at (None, None), the place about no partition. One
    query."""
    parts, frames = [], {}
    if internal.get("partition_checkpoints") is not None:
        frames["c"] = internal["partition_checkpoints"]
        parts.append(f"SELECT '{HIGH_WATERMARKS}' AS unit, topic, partition, COUNT(*) AS n FROM "
                     "(SELECT DISTINCT topic, partition, log_dir FROM {c} "
                     "WHERE high_watermark IS NOT NULL) GROUP BY topic, partition")
    if "producer_state" in internal:
        frames["p"] = internal["producer_state"]
        parts.append(f"SELECT '{OPEN_TRANSACTIONS}', topic, partition, COUNT(*) FROM "
                     "(SELECT DISTINCT topic, partition, producer_id, current_txn_first_offset "
                     "FROM {p} WHERE current_txn_first_offset >= 0) GROUP BY topic, partition")
    if "broker_state" in internal:
        frames["s"] = internal["broker_state"]
        parts.append(f"SELECT '{LOG_DIRS}', CAST(NULL AS string), CAST(NULL AS int), "
                     "COUNT(*) FROM (SELECT DISTINCT log_dir FROM {s}) HAVING COUNT(*) > 0")
    out: dict = {}
    if parts:
        spark = next(iter(frames.values())).sparkSession
        found = spark.sql(" UNION ALL ".join(parts), **frames).collect()
        for r in found:
            if r.unit != LOG_DIRS:
                out.setdefault((r.topic, r.partition), {})[r.unit] = r.n
        for r in found:
            if r.unit == LOG_DIRS:
                out[(None, None)] = {LOG_DIRS: r.n}
    return out


def load(spark, wh, run_id: str, snapshots: dict, internal: dict) -> dict:
    """The run's ``broker_state`` and ``partition_checkpoints`` rows and the whole
    ``transactions`` table (a transaction's state may be an earlier night's), as of
    ``snapshots`` (:func:`.inputs.audited_snapshots`); only those the warehouse has. Where
    ``internal``'s ``producer_state`` holds open transactions, also ``txn_markers``: every
    COMMIT/ABORT marker of those partitions the warehouse holds as of the run (one that
    closes a transaction may lie in a segment an earlier night decoded and this one skipped)."""
    from spark_jobs.tables import read_table

    from .as_of import row_filter

    out = {}
    for name in TABLES:
        if name in snapshots:
            out[name] = materialize(read_table(
                spark, wh, name, snapshot=snapshots[name][1],
                run_id=None if name == "transactions" else run_id))
    if "producer_state" in internal and "markers" in snapshots:
        open_at = [(r[0], r[1], None, None) for r in internal["producer_state"]
                   .where("current_txn_first_offset >= 0").select("topic", "partition")
                   .distinct().collect()]
        if open_at:
            markers = read_table(spark, wh, "markers", snapshot=snapshots["markers"][1],
                                 row_filter=row_filter(open_at))
            out["txn_markers"] = markers.join(
                spark.createDataFrame([r[:2] for r in open_at], "topic string, partition int"),
                ["topic", "partition"], "left_semi")
    return out


def observe_beyond_high_watermark(run: RunFrames):
    """The ``beyond_high_watermark`` observations of ``run`` (None: no checkpoints)."""
    if "partition_checkpoints" in run.internal:
        return beyond_high_watermark_checks(run.internal["partition_checkpoints"],
                                            dedup_batches(run.batches))
    return None


def observe_mixed_cluster(run: RunFrames):
    """The ``mixed_cluster`` observations of ``run`` (None: no broker_state)."""
    if "broker_state" in run.internal:
        return mixed_cluster_checks(run.internal["broker_state"])
    return None


def observe_hanging_transactions(run: RunFrames):
    """The ``hanging_transaction`` observations of ``run`` (None: no producer_state)."""
    if "producer_state" in run.internal:
        markers = run.markers.select("topic", "partition", "offset", "producer_id",
                                     "control_type")
        if "txn_markers" in run.internal:
            markers = markers.unionByName(run.internal["txn_markers"].select(*markers.columns))
        return hanging_transaction_checks(run.internal["producer_state"],
                                          dedup_batches(run.batches), markers.distinct(),
                                          run.internal.get("transactions"), run.ledger)
    return None
