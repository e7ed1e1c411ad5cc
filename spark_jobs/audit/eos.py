"""Exactly once, checked from the log (issue 45): idempotent producers' sequences,
transactions' fencing and read-process-write applications' offset commits.

* ``duplicate_sequence`` (``duplicate``): two data batches of one producer id and epoch in
  one partition whose sequence ranges overlap — a retry the broker should have
  de-duplicated (``ProducerStateEntry``/``DUPLICATE_SEQUENCE_NUMBER``) written twice. One
  observation per later batch, naming both offsets.
* ``sequence_gap``: consecutive batches of a producer id and epoch in a partition whose
  sequences skip (base sequence > last sequence + 1, no wrap past ``Integer.MAX_VALUE``):
  ``offset_hole`` where the partition's batches between them do not cover every offset
  (retention or compaction removed batches), ``snapshot_agrees`` where a producer-state
  ``.snapshot`` of the run names the producer at that epoch with the last sequence right
  before the gap's end (the broker saw the missing batch), else ``unexplained``. The
  observation's offsets are the hole's, else the batch whose sequence skips.
* ``zombie_write``: ``fenced_write``, the pieces of a ``producer_transactions`` row that
  is ``fenced`` (its epoch is below one its producer id used before it began), in this
  run's batches; ``stale_marker``, a COMMIT/ABORT marker whose epoch is below the epoch of
  its producer's data batches before it in the partition: KIP-1228's rule (the broker's
  ``ProducerAppendInfo.checkProducerEpoch``: a marker's epoch must be at least the
  producer's, strictly above it with transaction version 2) broken.
* ``double_consumption`` (``double_consumption``): a group whose offsets are committed in
  transactions; ordered by their place in ``__consumer_offsets``, each committed
  transaction's commit of a partition claims the input from the group's previous
  committed offset up to its own; a commit at or below an offset already committed by an
  earlier committed transaction, in a transaction that wrote output, re-claims input that
  transaction had claimed: the range from the start of the earlier claim that reached it
  to the new commit was processed twice. The place is the ``__consumer_offsets`` partition
  of the later commit, which names the input partition and range.
* ``output_without_offset_commit`` (``no_offset_commit``): a committed, unfenced
  transaction that wrote output but no offset commit, by a producer id that commits
  offsets in its other transactions (a read-process-write application).
* ``long_transaction``: ``long`` where a transaction lasted longer than the policy's
  ``max_ms`` (default the broker's ``transaction.max.timeout.ms``, 900000), else ``within``.
* ``empty_transaction`` (``empty``, counted): a COMMIT/ABORT marker with no data batch of
  its producer id in the partition since the producer's previous marker (klog's empty
  transaction).

Where a check's evidence is only in other nights (a fenced write of an earlier night), the
observation belongs to the run holding the batch or commit it names, so a night is not
charged with an earlier night's findings again.
"""

from __future__ import annotations

from .inputs import RunFrames, materialize
from .observations import as_observations, dedup_batches, observation_frame

DUPLICATE_SEQUENCE, SEQUENCE_GAP, ZOMBIE_WRITE = "duplicate_sequence", "sequence_gap", "zombie_write"
DOUBLE_CONSUMPTION = "double_consumption"
OUTPUT_WITHOUT_OFFSET_COMMIT = "output_without_offset_commit"
LONG_TRANSACTION, EMPTY_TRANSACTION = "long_transaction", "empty_transaction"
#: the broker's default transaction.max.timeout.ms: the default bound of long_transaction
DEFAULT_MAX_MS = 900_000
OFFSETS_TOPIC = "__consumer_offsets"
#: the table this module reads beside the run's (:func:`load`)
TABLE = "producer_transactions"

_DATA = """SELECT DISTINCT topic, partition, base_offset, last_offset, producer_id, producer_epoch,
                  base_sequence, last_sequence, segment, position
           FROM {b} WHERE magic = 2 AND NOT is_control AND producer_id >= 0
                 AND base_sequence >= 0 AND last_sequence >= base_sequence"""


def duplicate_sequences(batches):
    return as_observations(batches.sparkSession.sql("""
        WITH d AS (""" + _DATA + """),
        pairs AS (
          SELECT b.*, a.base_offset AS first_copy,
                 ROW_NUMBER() OVER (PARTITION BY b.topic, b.partition, b.base_offset
                                    ORDER BY a.base_offset) AS _n
          FROM d b JOIN d a
            ON a.topic = b.topic AND a.partition = b.partition AND a.producer_id = b.producer_id
               AND a.producer_epoch = b.producer_epoch AND a.base_offset < b.base_offset
               AND a.base_sequence <= b.last_sequence AND b.base_sequence <= a.last_sequence)
        SELECT 'duplicate_sequence' AS check, topic, partition, 'duplicate' AS class,
               base_offset AS first_offset, last_offset, last_offset - base_offset + 1 AS offsets,
               producer_id AS value, segment, position,
               format_string('producer %d epoch %d wrote sequences %d..%d at offset %d, '
                             'overlapping its batch at offset %d: a duplicate the broker '
                             'should have refused', producer_id, producer_epoch, base_sequence,
                             last_sequence, base_offset, first_copy) AS message
        FROM pairs WHERE _n = 1""", b=batches))


def sequence_gaps(batches, producer_state=None):
    spark = batches.sparkSession
    if producer_state is None:
        producer_state = spark.createDataFrame(
            [], "topic string, partition int, producer_id bigint, producer_epoch smallint, "
                "last_sequence int")
    return as_observations(spark.sql("""
        WITH d AS (""" + _DATA + """),
        seq AS (SELECT *, LAG(last_sequence) OVER w AS prev_last, LAG(last_offset) OVER w AS prev_offset
                FROM d WINDOW w AS (PARTITION BY topic, partition, producer_id, producer_epoch
                                    ORDER BY base_offset)),
        gaps AS (SELECT * FROM seq WHERE prev_last IS NOT NULL AND base_sequence > prev_last + 1),
        covered AS (
          SELECT g.topic, g.partition, g.base_offset,
                 COALESCE(SUM(x.last_offset - x.base_offset + 1), 0) AS held
          FROM gaps g LEFT JOIN (SELECT DISTINCT topic, partition, base_offset, last_offset FROM {b}) x
            ON x.topic = g.topic AND x.partition = g.partition
               AND x.base_offset > g.prev_offset AND x.last_offset < g.base_offset
          GROUP BY g.topic, g.partition, g.base_offset),
        snap AS (SELECT DISTINCT topic, partition, producer_id, producer_epoch, last_sequence FROM {s})
        SELECT 'sequence_gap' AS check, g.topic, g.partition,
               CASE WHEN c.held < g.base_offset - g.prev_offset - 1 THEN 'offset_hole'
                    WHEN s.producer_id IS NOT NULL THEN 'snapshot_agrees'
                    ELSE 'unexplained' END AS class,
               -- the hole's offsets; else the batch whose sequence skips
               CASE WHEN c.held < g.base_offset - g.prev_offset - 1 THEN g.prev_offset + 1
                    ELSE g.base_offset END AS first_offset,
               CASE WHEN c.held < g.base_offset - g.prev_offset - 1 THEN g.base_offset - 1
                    ELSE g.last_offset END AS last_offset,
               g.base_sequence - g.prev_last - 1 AS offsets, g.producer_id AS value,
               g.segment, g.position,
               format_string('producer %d epoch %d: sequence %d follows %d (offsets %d and %d): '
                             '%d sequences missing', g.producer_id, g.producer_epoch,
                             g.base_sequence, g.prev_last, g.prev_offset, g.base_offset,
                             g.base_sequence - g.prev_last - 1) AS message
        FROM gaps g JOIN covered c
          ON c.topic = g.topic AND c.partition = g.partition AND c.base_offset = g.base_offset
        LEFT JOIN snap s ON s.topic = g.topic AND s.partition = g.partition
             AND s.producer_id = g.producer_id AND s.producer_epoch = g.producer_epoch
             AND s.last_sequence = g.base_sequence - 1""", b=batches, s=producer_state))


def current_transactions(table):
    """Each producer id's ``producer_transactions`` rows of its latest ``as_of``
    (:func:`spark_jobs.derive.producer_txns.current`, in SQL)."""
    return table.sparkSession.sql("""
        SELECT * EXCEPT (_latest) FROM (
          SELECT *, MAX(as_of) OVER (PARTITION BY producer_id) AS _latest FROM {t})
        WHERE as_of <=> _latest""", t=table)


def fenced_writes(txns, batches):
    return as_observations(txns.sparkSession.sql("""
        WITH pieces AS (SELECT transactional_id, producer_id, producer_epoch, p.*
                        FROM {t} LATERAL VIEW explode(partitions) e AS p WHERE fenced),
        mine AS (SELECT p.*, b.segment, b.position,
                        ROW_NUMBER() OVER (PARTITION BY p.topic, p.partition, p.first_offset
                                           ORDER BY b.base_offset) AS _n
                 FROM pieces p JOIN {b} b
                   ON b.topic = p.topic AND b.partition = p.partition
                      AND b.producer_id = p.producer_id
                      AND b.base_offset BETWEEN p.first_offset AND p.last_offset)
        SELECT 'zombie_write' AS check, topic, partition, 'fenced_write' AS class,
               first_offset, last_offset, last_offset - first_offset + 1 AS offsets,
               producer_id AS value, segment, position,
               format_string('producer %d (transactional.id %s) wrote offsets %d..%d with epoch '
                             '%d after it had used a higher epoch: a fenced producer''s write',
                             producer_id, COALESCE(transactional_id, 'unknown'), first_offset,
                             last_offset, producer_epoch) AS message
        FROM mine WHERE _n = 1""", t=txns, b=batches))


def stale_markers(batches, markers):
    return as_observations(batches.sparkSession.sql("""
        WITH m AS (SELECT DISTINCT topic, partition, offset, producer_id, producer_epoch,
                          control_type, segment, batch_position
                   FROM {m} WHERE control_type IN ('COMMIT', 'ABORT')),
        before AS (
          SELECT m.*, MAX(b.producer_epoch) AS data_epoch
          FROM m JOIN {b} b ON b.topic = m.topic AND b.partition = m.partition
               AND b.producer_id = m.producer_id AND NOT b.is_control AND b.last_offset < m.offset
          GROUP BY m.topic, m.partition, m.offset, m.producer_id, m.producer_epoch,
                   m.control_type, m.segment, m.batch_position)
        SELECT 'zombie_write' AS check, topic, partition, 'stale_marker' AS class,
               offset AS first_offset, offset AS last_offset, 1L AS offsets, producer_id AS value,
               segment, batch_position AS position,
               format_string('%s marker of producer %d at offset %d has epoch %d, below the '
                             'epoch %d of its data before it (KIP-1228: a marker''s epoch is at '
                             'least the producer''s)', control_type, producer_id, offset,
                             producer_epoch, data_epoch) AS message
        FROM before WHERE producer_epoch < data_epoch""", b=batches, m=markers))


def empty_transactions(batches, markers):
    return as_observations(batches.sparkSession.sql("""
        WITH events AS (
          SELECT topic, partition, producer_id, offset, 1 AS is_marker, control_type,
                 producer_epoch, segment, batch_position AS position
          FROM (SELECT DISTINCT topic, partition, producer_id, offset, control_type,
                       producer_epoch, segment, batch_position
                FROM {m} WHERE control_type IN ('COMMIT', 'ABORT'))
          UNION ALL
          SELECT DISTINCT topic, partition, producer_id, base_offset, 0, NULL, producer_epoch,
                 segment, position
          FROM {b} WHERE is_transactional AND NOT is_control),
        ordered AS (SELECT *, LAG(is_marker) OVER (PARTITION BY topic, partition, producer_id
                                                   ORDER BY offset) AS prev FROM events)
        SELECT 'empty_transaction' AS check, topic, partition, 'empty' AS class,
               offset AS first_offset, offset AS last_offset, 1L AS offsets, producer_id AS value,
               segment, position,
               format_string('%s marker of producer %d epoch %d at offset %d ends no data batch',
                             control_type, producer_id, producer_epoch, offset) AS message
        FROM ordered WHERE is_marker = 1 AND (prev IS NULL OR prev = 1)""", b=batches, m=markers))


def _in_run(run_ranges: dict, topic: str, partition: int, offset: int) -> bool:
    return any(lo <= offset <= hi for lo, hi in run_ranges.get((topic, partition), ()))


def transaction_observations(rows: list[dict], run_ranges: dict, max_ms: int) -> list[tuple]:
    """``double_consumption``, ``output_without_offset_commit`` and ``long_transaction``
    observations (tuples in :data:`.observations.OBSERVATION_NAMES`' order) of the current
    ``producer_transactions`` rows; ``run_ranges``: (topic, partition) -> the run's batches'
    (base, last) offsets: only what the run holds is observed."""
    out = []
    committed = [r for r in rows if r["outcome"] == "committed"]
    # double consumption: every committed offset commit, in __consumer_offsets order
    claims: dict = {}
    commits = sorted(((c["source_partition"], c["source_offset"], c, r) for r in committed
                      for c in r["offset_commits"] or ()), key=lambda x: x[:2])
    for _, _, c, r in commits:
        key = (c["group"], c["topic"], c["partition"])
        earlier = claims.setdefault(key, [])
        wrote = any(p["topic"] != OFFSETS_TOPIC for p in r["partitions"])
        reached = [e for e in earlier if e[1] >= c["committed_offset"]]
        if reached and wrote and _in_run(run_ranges, OFFSETS_TOPIC, c["source_partition"],
                                         c["source_offset"]):
            start, end, other = reached[0]
            if start < c["committed_offset"]:
                out.append((
                    DOUBLE_CONSUMPTION, OFFSETS_TOPIC, c["source_partition"], "double_consumption",
                    c["source_offset"], c["source_offset"], c["committed_offset"] - start,
                    r["producer_id"],
                    None, None,
                    f"group {c['group']}: offsets {start}..{c['committed_offset'] - 1} of "
                    f"{c['topic']}-{c['partition']} were claimed by two committed transactions: "
                    f"producer {other['producer_id']} epoch {other['producer_epoch']} "
                    f"({other['txn_key']}) and producer {r['producer_id']} epoch "
                    f"{r['producer_epoch']} ({r['txn_key']}), whose commit at "
                    f"{OFFSETS_TOPIC}-{c['source_partition']} offset {c['source_offset']} "
                    f"set {c['committed_offset']} again"))
        previous = max((e[1] for e in earlier), default=None)
        start = previous if previous is not None and previous < c["committed_offset"] \
            else c["committed_offset"]  # the first commit's start is not known: none claimed
        earlier.append((start, c["committed_offset"], r))
    # a read-process-write application's transaction without its offset commit
    apps = {r["producer_id"] for r in rows if r["offsets_committed"]}
    for r in committed:
        first = r["partitions"][0]
        if not _in_run(run_ranges, first["topic"], first["partition"], first["first_offset"]):
            continue
        outputs = [p for p in r["partitions"] if p["topic"] != OFFSETS_TOPIC]
        if r["producer_id"] in apps and outputs and not r["offsets_committed"] and not r["fenced"]:
            p = outputs[0]
            out.append((OUTPUT_WITHOUT_OFFSET_COMMIT, p["topic"], p["partition"],
                        "no_offset_commit", p["first_offset"], p["last_offset"],
                        p["last_offset"] - p["first_offset"] + 1, r["producer_id"], None, None,
                        f"producer {r['producer_id']} epoch {r['producer_epoch']} committed "
                        f"output at {p['topic']}-{p['partition']} offsets {p['first_offset']}.."
                        f"{p['last_offset']} with no offset commit in the transaction, though "
                        "it commits its input offsets in others"))
    for r in rows:
        if r["duration_ms"] is None:
            continue
        p = r["partitions"][0]
        if not _in_run(run_ranges, p["topic"], p["partition"], p["first_offset"]):
            continue
        long = r["duration_ms"] > max_ms
        out.append((LONG_TRANSACTION, p["topic"], p["partition"], "long" if long else "within",
                    p["first_offset"], p["last_offset"], p["last_offset"] - p["first_offset"] + 1,
                    r["duration_ms"], None, None,
                    f"transaction {r['txn_key']} of producer {r['producer_id']} lasted "
                    f"{r['duration_ms']} ms" + (f", over the bound {max_ms} ms" if long else "")))
    return out


def load(spark, wh, snapshots: dict) -> dict:
    """``{TABLE: every night's producer_transactions as of the run}``, read once
    (``snapshots``: :func:`.inputs.audited_snapshots`); empty where the warehouse has none."""
    if TABLE not in snapshots:
        return {}
    from spark_jobs.tables import read_table

    return {TABLE: materialize(read_table(spark, wh, TABLE, snapshot=snapshots[TABLE][1]))}


def observe(run: RunFrames):
    """Every observation of this module's checks (see the module's text)."""
    spark = run.spark
    batches = dedup_batches(run.batches)
    parts = [duplicate_sequences(batches),
             sequence_gaps(batches, run.internal.get("producer_state")),
             stale_markers(batches, run.markers), empty_transactions(batches, run.markers)]
    if TABLE in run.internal:
        # the producers with batches in this run: only their transactions can be observed
        mine = batches.where("producer_id >= 0 AND is_transactional")
        txns = current_transactions(run.internal[TABLE]).join(
            mine.select("producer_id").distinct(), "producer_id", "left_semi").cache()
        parts.append(fenced_writes(txns, batches))
        ranges: dict = {}
        for b in mine.select("topic", "partition", "base_offset", "last_offset").collect():
            ranges.setdefault((b.topic, b.partition), []).append((b.base_offset, b.last_offset))
        max_ms = run.policy.check(None, LONG_TRANSACTION).get("max_ms", DEFAULT_MAX_MS)
        rows = [r.asDict(recursive=True) for r in txns.collect()]
        found = transaction_observations(rows, ranges, max_ms)
        if found:
            parts.append(observation_frame(spark, found))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


__all__ = ["DEFAULT_MAX_MS", "DOUBLE_CONSUMPTION", "DUPLICATE_SEQUENCE", "EMPTY_TRANSACTION",
           "LONG_TRANSACTION", "OUTPUT_WITHOUT_OFFSET_COMMIT", "SEQUENCE_GAP", "TABLE",
           "ZOMBIE_WRITE", "current_transactions", "duplicate_sequences", "empty_transactions",
           "fenced_writes", "load", "observe", "sequence_gaps", "stale_markers",
           "transaction_observations"]
