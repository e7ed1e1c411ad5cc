"""Every check over one run's tables, graded by the policy.

:func:`run_checks` gives each registered check (:data:`.registry.CHECKS`) the run's frames
(:class:`.inputs.RunFrames`) and unions their observations (:mod:`.observations`);
:func:`apply_policy` turns each observation's ``class`` into a ``severity`` and ``status``
(per check, class and topic: :class:`.policy.Policy`).

Everything that runs in offset order is a window per Kafka partition,
``... OVER (PARTITION BY topic, partition ORDER BY offset)``, never one window over the
whole table. Inputs are the tables of docs/tables.md as read by
``spark_jobs.tables.read_table`` (records, batches, markers, findings, ledger). The gap
classification rules are documented in expectations/README.md.
"""

from __future__ import annotations

from .context import listed_segments
from .families import tiered_topics
from .inputs import RunFrames
from .observations import OBSERVATION_NAMES, observation_frame, union_all
from .policy import Policy
from .records import batch_kinds
from .registry import CHECKS, DECODER_FINDINGS, observers


def run_checks(tables: dict, policy: Policy, run_id: str, prior=None, listed=None,
               internal=None, absent=None):
    """All checks over one run's tables (``records``, ``batches``, ``markers``,
    ``findings``, ``ledger``): (observations with severity and status, the run's topics).
    ``prior``: :func:`.context.prior_ends`; ``listed``: :func:`.context.listed_segments`
    (by default from the run's ledger alone: what skipped segments hold is then not
    known); ``internal``: the frames of :mod:`.internal_checks` (``consumer_lag``,
    ``producer_state``, ``leader_epochs``) where the run has them; ``absent``:
    :func:`.absence.missing_partitions`."""
    tiered = tiered_topics(internal or {})  # tiered topics without a local tail
    run = RunFrames(tables=tables, policy=policy, run_id=run_id,
                    topics=tuple(sorted(set(run_topics(tables, absent)) | tiered - {None})),
                    prior=prior, internal=internal or {},
                    absent=absent, kinds=batch_kinds(tables["batches"]).cache(),
                    listed=listed_segments(tables["ledger"], run_id=run_id) if listed is None
                    else listed)
    parts = [observation_frame(run.spark, frame) if isinstance(frame, list) else frame
             for observe in observers() if (frame := observe(run)) is not None]
    out = union_all(run.spark, parts)
    finding_kinds = [row[0] for row in run.findings.select("kind").distinct().collect()]
    return apply_policy(out, policy, run.topics, finding_kinds), run.topics


def run_observations(tables: dict, policy: Policy, run_id: str, *, topics, finding_kinds,
                     prior, listed, internal: dict, absent: list | None):
    """The audit's observations of one run in two parts: ``(spark, driver)``, the checks
    that read the run's tables in one Spark frame (graded: :func:`apply_policy`) and those
    made on the driver (:attr:`.registry.Check.on_driver`: the tier audit's,
    ``missing_partition``'s) as graded Rows, never a Spark job. ``topics``: the topics graded
    (:func:`.families.audited_topics`); ``finding_kinds``: the run's
    (:func:`.rows.run_summary`); ``absent``: the ``missing_partition`` observations,
    collected (None: the run names no night)."""
    run = RunFrames(tables=tables, policy=policy, run_id=run_id, topics=topics, prior=prior,
                    internal=internal, absent=absent, kinds=batch_kinds(tables["batches"]).cache(),
                    listed=listed)
    grades = policy_rows(policy, topics, finding_kinds)
    parts = [frame for observe in observers(on_driver=False) if (frame := observe(run)) is not None]
    spark = apply_policy(union_all(run.spark, parts), policy, topics, finding_kinds, rows=grades)
    found = [observe(run) for observe in observers(on_driver=True)]
    return spark, graded_rows([o for f in found if f is not None for o in driver_rows(f)],
                              grades)


def driver_rows(found) -> list:
    """Observations made on the driver as Rows of :data:`.observations.OBSERVATION_NAMES`:
    ``found`` is a list of such Rows or of tuples in that order (the tier audit's), or a
    frame (collected)."""
    from pyspark.sql import Row

    if not isinstance(found, list):
        return found.collect()
    return [o if isinstance(o, Row) else Row(**dict(zip(OBSERVATION_NAMES, o))) for o in found]


def graded_rows(observations, grades) -> list:
    """:func:`apply_policy` of observations made on the driver (Rows), by the policy's
    ``grades`` (:func:`policy_rows`): Rows with ``severity`` and ``status`` added."""
    from pyspark.sql import Row

    table = {(t, check, cls): sev for t, check, cls, sev in grades}
    out = []
    for o in observations:
        severity = table.get((o["topic"], o["check"], o["class"]), "fail")
        out.append(Row(**o.asDict(), severity=severity, status=severity))
    return out


def run_topics(tables: dict, absent=None) -> tuple[str, ...]:
    """Every topic the run's tables have rows of, and those of the partitions it lacks
    (``absent``: their topics may have nothing else), sorted."""
    b, r, f, l = (tables[n] for n in ("batches", "records", "findings", "ledger"))
    topics = {row[0] for row in b.select("topic").union(r.select("topic"))
              .union(f.select("topic")).union(l.select("topic")).distinct().collect()
              if row[0] is not None}
    if absent is not None:
        topics |= {row[0] for row in absent.select("topic").distinct().collect()}
    return tuple(sorted(topics))


def apply_policy(observations, policy: Policy, topics, finding_kinds=(), rows=None):
    """``observations`` with ``severity`` and ``status`` from ``policy``
    (per check, class and topic; ``rows``: its :func:`policy_rows`, where known)."""
    spark = observations.sparkSession
    rows = policy_rows(policy, topics, finding_kinds) if rows is None else rows
    table = spark.createDataFrame(rows,
                                  "topic string, check string, class string, severity string")
    return spark.sql("""
        SELECT o.*, COALESCE(p.severity, 'fail') AS severity, COALESCE(p.severity, 'fail') AS status
        FROM {o} o LEFT JOIN {p} p ON p.topic <=> o.topic AND p.check = o.check AND p.class = o.class
        """, o=observations, p=table)


def policy_rows(policy: Policy, topics, finding_kinds=()) -> list[tuple]:
    """``(topic, check, class, severity)`` of every check and class (:data:`.registry.CHECKS`)
    for each of ``topics`` and for None (results about no topic: an object outside any
    partition); ``decoder_findings``' classes are the finding kinds the policy names and
    those the run has (``finding_kinds``)."""
    kinds = set(finding_kinds)
    for t in [*topics, None]:
        kinds |= set((policy.check(t, DECODER_FINDINGS).get("kinds") or {}))
    finding_classes = tuple(sorted(kinds - {"other"}))
    return [(t, name, cls, policy.severity(t, name, cls))
            for t in [*topics, None]
            for name, check in CHECKS.items()
            for cls in (finding_classes if check.classes is None else check.classes)]
