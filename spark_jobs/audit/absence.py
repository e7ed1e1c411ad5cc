"""The ``missing_partition`` check: what earlier nights held and this snapshot lacks.

A topic-partition that the published ledger shows in the last ``lookback`` snapshot nights
before the run's (other runs' rows) and that the run's ledger lacks — not listed at all: a
listed segment, even one skipped as unchanged, is a present partition — is ``missing``
where its topic is still here; a topic none of whose partitions is here is one
``topic_deleted`` observation (partition null). Each names where and when the partition was
last seen and the last offset ingested. Nothing where the run names no night (its nights are
what "before" means).
"""

from __future__ import annotations

from .context import RUN_TIMES
from .inputs import RunFrames
from .observations import observation_frame

#: the check's name (a place the snapshot lacks gets this check's result only)
MISSING_PARTITION = "missing_partition"
#: its classes
MISSING, TOPIC_DELETED = "missing", "topic_deleted"


def missing_partitions(run_ledger, published_ledger, run_id: str, lookback: int = 1,
                       keep=None):
    """``missing_partition`` observations of run ``run_id`` (see the module docstring).
    ``keep``: a predicate over topics (the run's topic filter; default all)."""
    spark = run_ledger.sparkSession
    before = ledger_before(run_ledger, published_ledger, run_id)
    nights = sorted((r.night for r in before.select("night").distinct().collect()), reverse=True)
    if not nights:
        return observation_frame(spark)
    gone = [r for r in partitions_gone(run_ledger, before, nights[:lookback][-1])
            if keep is None or keep(r.topic)]
    return observation_frame(spark, gone_observations(gone))


def ledger_before(run_ledger, published_ledger, run_id: str):
    """Other runs' published ledger rows of a topic-partition and a night before the run's
    first night."""
    return run_ledger.sparkSession.sql("""
        WITH mine AS (""" + RUN_TIMES + """)
        SELECT l.* FROM {l} l CROSS JOIN mine
        WHERE l.run_id <> :run AND l.topic IS NOT NULL AND l.partition IS NOT NULL
          AND l.night IS NOT NULL AND l.night < mine.first_night""",
                                       r=run_ledger, l=published_ledger, args={"run": run_id})


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


def gone_observations(gone) -> list[tuple]:
    """The observations of :func:`partitions_gone`' rows: one ``missing`` per partition of a
    topic still here, one ``topic_deleted`` per topic none of whose partitions is."""
    out, deleted = [], {}
    for r in gone:
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
