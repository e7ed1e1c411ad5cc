"""The ``missing_partition`` check: what earlier nights held and this snapshot lacks.

A topic-partition that the published ledger shows in the last ``lookback`` snapshot nights
before the run's (other runs' rows) and that the run's ledger lacks — not listed at all: a
listed segment, even one skipped as unchanged, is a present partition — is ``missing``,
unless the snapshot says its topic was deleted. Only evidence counts (:func:`deletions`):

* a ``-delete`` folder: Kafka renames a deleted partition's folder
  ``<topic>-<partition>.<id>-delete`` before removing it (``LocalLog.logDeleteDirName``),
  listed tonight or where the partition was last seen;
* a ``RemoveTopicRecord`` in ``__cluster_metadata`` (the ``cluster_metadata`` table, of the
  nights up to the run's) removing the id of the topic's latest ``TopicRecord``;
* the topic gone from the night's metadata: the night's newest KRaft snapshot
  (``kraft_snapshots``) lists topics and not this one, and no ``TopicRecord`` of it follows.

A topic with evidence is one ``topic_deleted`` observation (partition null) naming it; a topic
without, even one none of whose partitions is here, gives a ``missing`` observation per
partition — a broker's failed copy looks like a deleted topic, and only the metadata tells
them apart. Where the ``missing`` partitions are more than ``max_share`` of the partitions the
earlier nights held (the policy's ``missing_partition.max_share``, 0.5 by default), each of
them is ``beyond_max_share`` instead: a night that lost most of its partitions at once. Each
observation names where and when the partition was last seen and the last offset ingested.
Nothing where the run names no night (its nights are what "before" means).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafkalog.folders import DELETE, parse_partition_folder

from .context import RUN_TIMES
from .inputs import RunFrames
from .observations import observation_frame

#: the check's name (a place the snapshot lacks gets this check's result only)
MISSING_PARTITION = "missing_partition"
#: its classes
MISSING, TOPIC_DELETED, BEYOND_MAX_SHARE = "missing", "topic_deleted", "beyond_max_share"
#: the metadata records that name and remove topics (kafkalog.internal's type names)
TOPIC_RECORD, REMOVE_TOPIC_RECORD = "TOPIC_RECORD", "REMOVE_TOPIC_RECORD"
#: the derived tables the evidence is read from (spark_jobs.layout.DERIVED_TABLES)
METADATA_TABLES = ("cluster_metadata", "kraft_snapshots")


@dataclass(frozen=True)
class Metadata:
    """The cluster metadata the audit reads of a run (:func:`load_metadata`): the
    ``cluster_metadata`` and ``kraft_snapshots`` frames as audited, None where the warehouse
    has no such table."""

    log: Any = None
    snapshots: Any = None


def load_metadata(spark, wh, snapshots: dict) -> Metadata:
    """The :data:`METADATA_TABLES` as of ``snapshots`` (:func:`.inputs.audited_snapshots`:
    the run's branch, every run's rows)."""
    from spark_jobs.tables import read_table

    frames = {name: read_table(spark, wh, name, snapshot=snapshots[name][1])
              for name in METADATA_TABLES if name in snapshots}
    return Metadata(frames.get("cluster_metadata"), frames.get("kraft_snapshots"))


def missing_partitions(run_ledger, published_ledger, run_id: str, lookback: int = 1,
                       keep=None, *, max_share: float | None = 0.5,
                       metadata_of=None):
    """``missing_partition`` observations of run ``run_id`` (see the module docstring).
    ``keep``: a predicate over topics (the run's topic filter; default all); ``max_share``:
    the share of the expected partitions beyond which the missing ones are
    ``beyond_max_share`` (None: never); ``metadata_of``: loads the cluster metadata as audited
    (:func:`load_metadata`; called only where a partition is gone: the evidence is read
    then alone)."""
    spark = run_ledger.sparkSession
    before = ledger_before(run_ledger, published_ledger, run_id)
    nights = sorted((r.night for r in before.select("night").distinct().collect()), reverse=True)
    if not nights:
        return observation_frame(spark)
    since = nights[:lookback][-1]
    wanted = (lambda topic: True) if keep is None else keep
    gone = [r for r in partitions_gone(run_ledger, before, since) if wanted(r.topic)]
    if not gone:
        return observation_frame(spark)
    expected = sum(r.n for r in expected_counts(before, since) if wanted(r.topic))
    evidence = deletions(run_ledger, published_ledger, run_id, {r.topic for r in gone},
                         metadata_of() if metadata_of else Metadata(), last_segments={r.last_segment for r in gone})
    return observation_frame(spark, gone_observations(gone, evidence, expected, max_share))


def ledger_before(run_ledger, published_ledger, run_id: str):
    """Other runs' published ledger rows of a topic-partition and a night before the run's
    first night."""
    return run_ledger.sparkSession.sql("""
        WITH mine AS (""" + RUN_TIMES + """)
        SELECT l.* FROM {l} l CROSS JOIN mine
        WHERE l.run_id <> :run AND l.topic IS NOT NULL AND l.partition IS NOT NULL
          AND l.night IS NOT NULL AND l.night < mine.first_night""",
                                       r=run_ledger, l=published_ledger, args={"run": run_id})


def expected_counts(before, since: str) -> list:
    """``(topic, n)``: how many partitions of each topic :func:`ledger_before`'s nights from
    ``since`` on held (what the run should hold)."""
    return before.sparkSession.sql("""
        SELECT topic, COUNT(DISTINCT partition) AS n FROM {b} WHERE night >= :since
        GROUP BY topic""", b=before, args={"since": since}).collect()


def partitions_gone(run_ledger, before, since: str) -> list:
    """The topic-partitions of ``before`` (:func:`ledger_before`) of the nights from ``since``
    on that the run's ledger lacks, collected in (topic, partition) order: where they were
    last seen (``last_night``, ``last_offset``, ``last_segment``) and whether the run has
    any partition of their topic (``topic_here``)."""
    return run_ledger.sparkSession.sql("""
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
                                       args={"since": since}).collect()


# ------------------------------------------------------------------ evidence of a deletion
def deleted_folder(segment: str | None) -> str | None:
    """The folder of ``segment`` (a URI) where Kafka renamed it ``-delete``, else None."""
    if not segment or "/" not in segment:
        return None
    folder = segment.rsplit("/", 2)[-2]
    parsed = parse_partition_folder(folder)
    return segment.rsplit("/", 1)[0] + "/" if parsed is not None and parsed.state == DELETE \
        else None


def deletions(run_ledger, published_ledger, run_id: str, topics: set[str], metadata: Metadata,
              *, last_segments=()) -> dict[str, str]:
    """topic -> what in the snapshot says it was deleted (one phrase), for the ``topics``
    that have such evidence (the module docstring); ``last_segments``: the segments where
    the gone partitions were last seen."""
    out: dict[str, str] = {}
    spark = run_ledger.sparkSession
    renamed = spark.sql("SELECT DISTINCT topic, segment FROM {r} WHERE segment LIKE '%-delete/%'",
                        r=run_ledger).collect()
    for topic, segment in [(r.topic, r.segment) for r in renamed] + [
            (None, s) for s in sorted(s for s in last_segments if s)]:
        folder = deleted_folder(segment)
        parsed = parse_partition_folder(folder.rstrip("/")) if folder else None
        name = topic or (parsed.topic if parsed else None)
        if folder and name in topics and name not in out:
            out[name] = f"its partition folder was renamed for deletion ({folder})"
    records = metadata_records(run_ledger, published_ledger, run_id, metadata)
    for name, why in metadata_deletions(records, topics).items():
        out.setdefault(name, why)
    return out


def metadata_records(run_ledger, published_ledger, run_id: str, metadata: Metadata) -> list:
    """The ``TopicRecord`` and ``RemoveTopicRecord`` rows known as of the run's night, as
    ``(source, type, topic_id, topic_name, at, where)``: ``source`` ``log`` (of
    ``__cluster_metadata``, ``at`` its offset: the run's own and those of the segments of
    nights up to the run's) or ``snapshot`` (of a KRaft snapshot of those nights, ``at`` its
    end offset, ``where`` the file; a night's snapshots are marked ``tonight``)."""
    spark = run_ledger.sparkSession
    out = []
    if metadata.log is not None:
        out += spark.sql("""
            WITH mine AS (""" + RUN_TIMES + """),
            nights AS (
              SELECT run_id, segment, MIN(night) AS night FROM (
                SELECT run_id, segment, night FROM {r}
                UNION ALL SELECT run_id, segment, night FROM {l}) GROUP BY run_id, segment)
            SELECT 'log' AS source, m.type, m.topic_id, m.topic_name, m.source_offset AS at,
                   m.segment AS `where`
            FROM {m} m CROSS JOIN mine
            LEFT JOIN nights n ON n.run_id = m.run_id AND n.segment = m.segment
            WHERE m.type IN (:topic, :remove)
              AND (m.run_id = :run OR n.night <= mine.last_night)""",
                         r=run_ledger, l=published_ledger, m=metadata.log,
                         args={"run": run_id, "topic": TOPIC_RECORD,
                               "remove": REMOVE_TOPIC_RECORD}).collect()
    if metadata.snapshots is not None:
        out += spark.sql("""
            WITH mine AS (""" + RUN_TIMES + """)
            SELECT CASE WHEN s.night = mine.last_night THEN 'tonight' ELSE 'snapshot' END
                     AS source, s.type, s.topic_id, s.topic_name, s.snapshot_offset AS at,
                   s.file AS `where`
            FROM {s} s CROSS JOIN mine
            WHERE NOT s.bootstrap AND NOT s.deleted AND s.snapshot_offset IS NOT NULL
              AND s.type = :topic AND s.night <= mine.last_night""",
                         r=run_ledger, s=metadata.snapshots,
                         args={"topic": TOPIC_RECORD}).collect()
    return [tuple(r) for r in out]


def metadata_deletions(records, topics: set[str]) -> dict[str, str]:
    """topic -> why the metadata says it is deleted, of ``topics`` (pure: ``records`` as
    :func:`metadata_records` gives them). A topic is deleted where the id of its latest
    ``TopicRecord`` (of the log, or of a KRaft snapshot: as of the snapshot's end offset) is
    removed by a later ``RemoveTopicRecord``, or where the night's newest KRaft snapshot lists
    topics and not it and no ``TopicRecord`` of it is at or after that snapshot's offset."""
    latest: dict[str, tuple[int, str]] = {}  # name -> (at, topic id) of its latest TopicRecord
    removed: dict[str, tuple[int, str]] = {}  # topic id -> (at, where) of its first removal
    tonight: dict[str, set[str]] = {}  # the night's KRaft snapshot file -> its topics
    offsets: dict[str, int] = {}
    for source, kind, topic_id, name, at, where in records:
        if kind == TOPIC_RECORD and name is not None:
            at = at if source == "log" else at - 1  # a snapshot holds what was before its offset
            if name not in latest or at >= latest[name][0]:
                latest[name] = (at, topic_id)
            if source == "tonight":
                tonight.setdefault(where, set()).add(name)
                offsets[where] = at + 1
        elif kind == REMOVE_TOPIC_RECORD and topic_id is not None:
            if topic_id not in removed or at < removed[topic_id][0]:
                removed[topic_id] = (at, where)
    newest = max(tonight, key=lambda f: (offsets[f], f)) if tonight else None
    out = {}
    for name in sorted(topics):
        at, topic_id = latest.get(name, (None, None))
        removal = removed.get(topic_id) if topic_id is not None else None
        if removal is not None and removal[0] > at:
            out[name] = (f"a RemoveTopicRecord of its id {topic_id} is in __cluster_metadata "
                         f"(offset {removal[0]} of {_where(removal[1])})")
        elif newest is not None and name not in tonight[newest] and (
                at is None or at < offsets[newest]):
            out[name] = (f"the night's KRaft snapshot {newest} lists {len(tonight[newest])} "
                         "topics and not this one")
    return out


# ------------------------------------------------------------------ the observations
def gone_observations(gone, evidence: dict[str, str] | None = None, expected: int | None = None,
                      max_share: float | None = None) -> list[tuple]:
    """The observations of :func:`partitions_gone`' rows: one ``topic_deleted`` per topic
    with ``evidence`` (topic -> why: :func:`deletions`), one ``missing`` per other partition,
    each ``beyond_max_share`` where they are more than ``max_share`` of the ``expected``
    partitions."""
    evidence = evidence or {}
    out, deleted, missing = [], {}, []
    for r in gone:
        if r.topic in evidence:
            deleted.setdefault(r.topic, []).append(r)
        else:
            missing.append(r)
    share = len(missing) / expected if expected else None
    beyond = max_share is not None and share is not None and share > max_share
    for r in missing:
        said = (f"{r.topic}-{r.partition} is not in this snapshot: last seen on "
                f"{r.last_night} ({_where(r.last_segment)}), ingested up to offset "
                f"{_offset(r.last_offset)}")
        if not r.topic_here:
            said += (f"; no partition of {r.topic} is here and nothing in the snapshot says it "
                     "was deleted (no -delete folder, RemoveTopicRecord or KRaft snapshot "
                     "without it)")
        if beyond:
            said += (f"; one of {len(missing)} of the {expected} partitions of the nights "
                     f"before ({share:.0%}, beyond max_share {max_share:.0%}): most of the "
                     "copy is gone")
        out.append((MISSING_PARTITION, r.topic, r.partition,
                    BEYOND_MAX_SHARE if beyond else MISSING, r.last_offset, r.last_offset,
                    None, None, r.last_segment, None, said))
    for topic, parts in sorted(deleted.items()):
        last = max(parts, key=lambda r: (r.last_night, r.partition))
        out.append((MISSING_PARTITION, topic, None, TOPIC_DELETED, None, None, None,
                    len(parts), last.last_segment, None,
                    f"topic {topic}: its partitions "
                    f"({', '.join(str(r.partition) for r in parts)}), last seen on "
                    f"{last.last_night}, are not in this snapshot: deleted, as "
                    f"{evidence[topic]}"))
    out.sort(key=lambda o: (o[1], -1 if o[2] is None else o[2]))
    return out


def _where(uri: str | None) -> str:
    """The folder a partition was seen in: its segment's URI without the file name."""
    return uri.rsplit("/", 1)[0] + "/" if uri and "/" in uri else (uri or "?")


def _offset(value) -> str:
    return "?" if value is None else str(value)


def observe(run: RunFrames):
    """The ``missing_partition`` observations of ``run`` (computed before the checks run: the
    job counts the places they add; None where the run names no night)."""
    return run.absent
