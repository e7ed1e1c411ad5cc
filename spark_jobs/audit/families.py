"""How each family of checks beyond the run's own tables joins the audit: what it loads and
the places it adds (:data:`.registry.FAMILIES` names them, in order).

A family's ``load(run, loaded)`` returns the inputs it adds (merged into ``loaded``, which
holds those of the families before it; ``run``: :class:`.inputs.AuditedRun`); its
``places(run, loaded, units, checks)`` counts what its checks' ``observed`` counts at each
place of ``units`` ((topic, partition) -> ``{unit: n}``, :func:`.rows.partition_units`),
adding the places only it knows of (``checks``: the family's own, :class:`.registry.Check`).

* the internal topics' and state files' checks (:mod:`.internal_checks`): counts at the run's
  partitions only;
* the exactly-once checks (:mod:`.eos`): every night's ``producer_transactions`` as of the
  run; no place of their own (their unit is the run's batches, counted at every place);
* the log directories' checks (:mod:`.log_dir_checks`): counts at the run's partitions, and
  the night's log directories as the place (None, None) of ``mixed_cluster``;
* ``missing_partition`` (:mod:`.absence`): where the run names a night, every partition counts
  as one ``partitions``, and each partition it lacks is a place of ``missing_partition`` only;
* the tier audit (:mod:`.tier`): a tiered partition without a local tail is a place of the
  tier checks only;
* the configured sinks (``sink_reconcile``, :mod:`spark_jobs.reconcile`, docs/sinks.md): each
  sink x topic-partition is a result of its own (``details.sink``), made by the reconcile
  command's own code (:func:`spark_jobs.reconcile.job.reconcile_sinks`, handed in as
  ``run.sinks``: :class:`spark_jobs.reconcile.job.Sinks`) against the log as
  of the run's night, read at the run's audited snapshots; they add no place (a family's
  ``results``: :func:`results_sinks`). No sink configured: nothing loaded, no Spark work.
"""

from __future__ import annotations

from spark_jobs import layout

from . import absence, eos, internal_checks, log_dir_checks, tier
from .observations import dedup_batches
from .units import ONLY, PARTITIONS

#: where the ``missing_partition`` family keeps its observations in ``loaded``
ABSENT = absence.MISSING_PARTITION
#: where the sinks family keeps its results in ``loaded``
SINKS = "sink_reconcile"
#: the keys of ``loaded`` that are no internal topic's frames (:mod:`.internal_checks`)
NOT_INTERNAL = (ABSENT, SINKS)


def load_internal(run, loaded: dict) -> dict:
    return internal_checks.load(run.spark, run.wh, run.run_id, run.snapshots, run.ledger,
                                run.listed, run.published_ledger)


def places_internal(run, loaded: dict, units: dict, checks) -> None:
    for tp, counts in internal_checks.units(loaded, dedup_batches(run.tables["batches"])).items():
        if tp in units:
            units[tp].update(counts)


def load_eos(run, loaded: dict) -> dict:
    return eos.load(run.spark, run.wh, run.snapshots)


def places_eos(run, loaded: dict, units: dict, checks) -> None:
    """None of their own: the exactly-once checks count the run's batches, as every place
    already does (:func:`.rows.run_summary`)."""


def load_log_dirs(run, loaded: dict) -> dict:
    return log_dir_checks.load(run.spark, run.wh, run.run_id, run.snapshots, loaded)


def places_log_dirs(run, loaded: dict, units: dict, checks) -> None:
    for tp, counts in log_dir_checks.units(loaded).items():
        if tp == (None, None):  # the log directories: a place about no partition
            place = units.setdefault(tp, {ONLY: set()})
            place[ONLY] = set(place.get(ONLY) or ()) | {log_dir_checks.MIXED_CLUSTER}
            place.update(counts)
        elif tp in units:
            units[tp].update(counts)


def load_absent(run, loaded: dict) -> dict:
    """``{ABSENT: observations}`` (:func:`.absence.missing_partitions`, collected: a few rows
    made on the driver); nothing where the run names no night."""
    if run.night is None:
        return {}
    frame = absence.missing_partitions(run.ledger, run.published_ledger, run.run_id,
                                       run.policy.lookback_nights(),
                                       layout.topic_matcher(run.topic_filter),
                                       max_share=run.policy.missing_share(),
                                       metadata_of=lambda: absence.load_metadata(
                                           run.spark, run.wh, run.snapshots))
    return {ABSENT: frame.collect()}


def places_absent(run, loaded: dict, units: dict, checks) -> None:
    absent = loaded.get(ABSENT)
    if absent is None:
        return
    for tp in units:
        if tp[0] is not None:
            units[tp][PARTITIONS] = 1
    for r in absent:
        units[(r.topic, r.partition)] = {PARTITIONS: 1, ONLY: {absence.MISSING_PARTITION}}


def tiered_topics(internal: dict) -> set:
    """The topics of the tier audit's places (a tiered topic may have no local tail)."""
    return {t for t, _ in tier.units(internal)}


def audited_topics(run, loaded: dict) -> tuple[str, ...]:
    """Every topic of the run (:func:`.rows.run_summary`), of the partitions it lacks and of
    the tier audit's places, sorted: the topics the policy grades."""
    return tuple(sorted((set(run.summary.topics) | {r.topic for r in loaded.get(ABSENT) or ()}
                         | tiered_topics(loaded)) - {None}))


def load_tier(run, loaded: dict) -> dict:
    return tier.load(run.spark, run.wh, run.run_id, run.snapshots, run.tables["findings"],
                     run.tiered_storage)


def places_tier(run, loaded: dict, units: dict, checks) -> None:
    for tp, counts in tier.units(loaded).items():  # a tiered partition without a local tail:
        units.setdefault(tp, {ONLY: set()}).update(counts)  # the tier checks only
        if ONLY in units[tp]:
            units[tp][ONLY] |= {c.name for c in checks if counts.get(c.unit)}


def load_sinks(run, loaded: dict) -> dict:
    """``{SINKS: results}`` of the run's configured sinks (``run.sinks``: the sinks file's,
    :class:`spark_jobs.reconcile.job.Sinks`), against the log as of the run's night at the
    run's audited snapshots; nothing (and no Spark job) where no sink is configured."""
    if not run.sinks:
        return {}
    return {SINKS: run.sinks.reconcile(run.spark, run.wh, policy=run.policy,
                                       run_id=run.run_id, night=run.night,
                                       snapshots={n: s for n, (_, s) in run.snapshots.items()},
                                       out=run.out, prefix="check_quality: ")}


def places_sinks(run, loaded: dict, units: dict, checks) -> None:
    """The sinks add no place: each result is a sink x topic-partition of its own."""


def results_sinks(run, loaded: dict) -> list:
    """The sinks' results (:class:`.results.DqResult`), graded already."""
    return list(loaded.get(SINKS) or ())
