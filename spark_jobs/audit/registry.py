"""Every check of the audit, in one table: its name, unit, classes and the function that
observes it.

* **unit** (:mod:`.units`): what its ``observed`` count is made of;
* **classes**: the classes its observations may have, each graded by the policy (None:
  ``decoder_findings``, whose classes are the finding kinds);
* **observe**: ``RunFrames -> DataFrame | None``, its observations of one run (None: none
  apply, e.g. no internal-topic tables); one function may observe several checks
  (:func:`.findings_checks.observe_findings`); None for ``snapshot_missing``, which the
  DAG's plan writes (:func:`.results.write_missing_nights`);
* **on_driver**: its observations are made on the driver from a few collected rows (the tier
  audit's, ``missing_partition``'s), and its ``observe`` returns them as a list (tuples in
  :data:`.observations.OBSERVATION_NAMES`' order, or Rows): graded and summarized there,
  never a Spark job (:func:`.checks.run_observations`);
* **optional**: a place gets a result of it only where it applies (the internal topics' and
  state files' checks where the partition has a committed offset, a .snapshot, a
  checkpoint; the log directory's where it has a high watermark, an open transaction, a
  ``meta.properties``; the tier audit's where the partition is tiered; ``missing_partition`` where the run read a named night; ``snapshot_missing``,
  the plan's, never a partition's); every other check gives every place a result.

The order is the order of a run's dq_results rows and of its Data Docs suites.

The families of checks that read more than the run's own tables (:data:`FAMILIES`) also
name what they load and the places they add (:mod:`.families`); the audit
(:mod:`.job`) runs them in this table's order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import (absence, crc, eos, families, findings_checks, internal_checks, log_dir_checks,
               offsets, records, schema_decode, tier, timestamps)
from .absence import MISSING_PARTITION
from .log_dir_checks import (BEYOND_HIGH_WATERMARK, CHECKPOINT_AHEAD, CLOSED, HANGING,
                             HANGING_TRANSACTION, LOG_START_MOVED, MIXED_CLUSTER, OPEN)
from .policy import ACTIVE_SEGMENT, UNCLEAN_SHUTDOWN
from ..reconcile import classes as sink_classes
from .units import (BATCHES, CHECKPOINTED_BATCHES, COMMITTED_OFFSETS, HIGH_WATERMARKS, LOG_DIRS,
                    NIGHTS, OPEN_TRANSACTIONS, PARTITIONS, PRODUCERS, RECORDS, REMOTE_SEGMENTS,
                    SEGMENTS, SINK_RECORDS, TIER_SEGMENTS, TIERED_PARTITIONS)

#: a night the run was to read whose snapshot prefix holds no segment: the DAG's plan writes
#: this result (one row per such night, topic and partition null) and decodes nothing
SNAPSHOT_MISSING = "snapshot_missing"
SNAPSHOT_MISSING_CLASS = "no_snapshot"
#: the check whose classes are the finding kinds
DECODER_FINDINGS = "decoder_findings"


@dataclass(frozen=True, slots=True)
class Check:
    """One check: see the module docstring."""

    name: str
    unit: str
    classes: tuple[str, ...] | None
    observe: Callable | None
    optional: bool = False
    on_driver: bool = False


#: the checks of the run's records, batches, markers and findings: a result for every place
DATA_CHECKS = (
    Check("crc", BATCHES, ("crc_mismatch",), crc.observe),
    Check("offset_gaps", BATCHES, ("unreadable_bytes", LOG_START_MOVED, "retention",
                                   "missing_segment", "aborted_txn", "compaction", "unexplained"),
          offsets.observe),
    Check("record_gaps", RECORDS, ("control_marker", "compaction", "excluded_batch", "batch_gap",
                                   "unexplained"), records.observe_record_gaps),
    Check("record_count", BATCHES, ("count_exceeds_span", "records_missing", "records_extra",
                                    "offset_outside_batch"), records.observe_record_counts),
    Check("duplicate_offsets", RECORDS, ("duplicate",), records.observe_duplicates),
    Check("log_append_time", BATCHES, ("regression",), timestamps.observe_log_append_time),
    Check("create_time", RECORDS, ("regression", "beyond_tolerance"),
          timestamps.observe_create_time),
    Check("max_timestamp", BATCHES, ("mismatch",), timestamps.observe_max_timestamp),
    Check("divergence", SEGMENTS, ("divergence",), findings_checks.observe_findings),
    Check("replica_divergence", SEGMENTS, ("divergence",),
          findings_checks.observe_replica_divergences),
    Check("truncated_tail", SEGMENTS, ("truncated_tail", ACTIVE_SEGMENT, UNCLEAN_SHUTDOWN),
          findings_checks.observe_findings),
    Check(DECODER_FINDINGS, SEGMENTS, None, findings_checks.observe_findings),
    Check(schema_decode.CHECK, RECORDS, ("unknown_schema_id", "malformed", "beyond_max_share"),
          schema_decode.observe),
)
#: what earlier nights held and this snapshot lacks
MISSING_PARTITION_CHECK = Check(MISSING_PARTITION, PARTITIONS,
                                (absence.MISSING, absence.BEYOND_MAX_SHARE, absence.TOPIC_DELETED),
                                absence.observe, optional=True, on_driver=True)
#: the checks of Kafka's internal topics and state files (:mod:`.internal_checks`)
INTERNAL_TOPIC_CHECKS = (
    Check("committed_offset_beyond_log_end", COMMITTED_OFFSETS, ("beyond_log_end",),
          internal_checks.observe_committed_offsets, optional=True),
    Check("committed_offset_before_log_start", COMMITTED_OFFSETS, ("before_log_start",),
          internal_checks.observe_committed_offsets, optional=True),
    Check("producer_snapshot", PRODUCERS, ("agrees", "disagrees", "not_in_run"),
          internal_checks.observe_producer_snapshots, optional=True),
    Check("leader_epoch_checkpoint", CHECKPOINTED_BATCHES,
          ("agrees", "disagrees", "before_first_entry"), internal_checks.observe_leader_epochs,
          optional=True),
)
#: exactly once, checked from the log (:mod:`.eos`, issue 45): every place gets a result;
#: a family (:data:`FAMILIES`): it reads every night's ``producer_transactions``
EOS_CHECKS = (
    Check(eos.DUPLICATE_SEQUENCE, BATCHES, ("duplicate",), eos.observe),
    Check(eos.SEQUENCE_GAP, BATCHES, ("offset_hole", "snapshot_agrees", "unexplained"),
          eos.observe),
    Check(eos.ZOMBIE_WRITE, BATCHES, ("fenced_write", "stale_marker"), eos.observe),
    Check(eos.DOUBLE_CONSUMPTION, BATCHES, ("double_consumption",), eos.observe),
    Check(eos.OUTPUT_WITHOUT_OFFSET_COMMIT, BATCHES, ("no_offset_commit",), eos.observe),
    Check(eos.LONG_TRANSACTION, BATCHES, ("long", "within"), eos.observe),
    Check(eos.EMPTY_TRANSACTION, BATCHES, ("empty",), eos.observe),
)
#: the checks of a broker log directory's own files (:mod:`.log_dir_checks`, issue 36);
#: ``mixed_cluster``'s place is about no partition: (None, None)
LOG_DIR_CHECKS = (
    Check(BEYOND_HIGH_WATERMARK, HIGH_WATERMARKS, (BEYOND_HIGH_WATERMARK, CHECKPOINT_AHEAD),
          log_dir_checks.observe_beyond_high_watermark, optional=True),
    Check(HANGING_TRANSACTION, OPEN_TRANSACTIONS, (HANGING, OPEN, CLOSED),
          log_dir_checks.observe_hanging_transactions, optional=True),
    Check(MIXED_CLUSTER, LOG_DIRS, (MIXED_CLUSTER,), log_dir_checks.observe_mixed_cluster,
          optional=True),
)
#: the tier audit (:mod:`.tier`): where a partition has remote segments, a listed tier, a
#: tier_divergence finding
TIER_CHECKS = (
    Check(tier.ORPHANS, REMOTE_SEGMENTS, ("orphan", "in_flight"), tier.observe_orphans,
          optional=True, on_driver=True),
    Check(tier.MISSING, TIER_SEGMENTS, ("missing_object",), tier.observe_missing, optional=True,
          on_driver=True),
    Check(tier.UNREFERENCED, TIER_SEGMENTS, ("unreferenced", "deleted_segment"),
          tier.observe_unreferenced, optional=True, on_driver=True),
    Check(tier.REUPLOADS, REMOTE_SEGMENTS, ("reupload",), tier.observe_reuploads, optional=True,
          on_driver=True),
    Check(tier.EPOCHS, REMOTE_SEGMENTS, ("offset_gap", "offset_overlap", "epoch_regression"),
          tier.observe_epochs, optional=True, on_driver=True),
    Check(tier.DIVERGENCE, TIERED_PARTITIONS, ("divergence",), tier.observe_divergence,
          optional=True, on_driver=True),
)
#: the plan's result of a night without a snapshot
SNAPSHOT_MISSING_CHECK = Check(SNAPSHOT_MISSING, NIGHTS, (SNAPSHOT_MISSING_CLASS,), None,
                               optional=True)

#: a Kafka->lake sink against the log (issue 44, docs/sinks.md): one result per sink x
#: topic-partition, made by the sinks family (:data:`FAMILIES`) in the nightly audit and by
#: ``python -m spark_jobs.reconcile`` under a run id of its own (observe None: its results
#: are graded already, :func:`spark_jobs.reconcile.job.reconcile_sinks`)
SINK_RECONCILE_CHECK = Check(sink_classes.CHECK, SINK_RECORDS, sink_classes.CLASSES, None,
                             optional=True)

#: check name -> :class:`Check`, every check in dq_results' order
CHECKS = {c.name: c for c in (*DATA_CHECKS, MISSING_PARTITION_CHECK, *INTERNAL_TOPIC_CHECKS,
                              *EOS_CHECKS, *LOG_DIR_CHECKS, *TIER_CHECKS,
                              SNAPSHOT_MISSING_CHECK, SINK_RECONCILE_CHECK)}
#: check name -> the unit its ``observed`` count is made of (:data:`CHECKS`' units)
UNITS = {name: c.unit for name, c in CHECKS.items()}
#: the checks a place gets a result of only where they apply
OPTIONAL_CHECKS = frozenset(name for name, c in CHECKS.items() if c.optional)
#: the checks of Kafka's internal topics and state files
INTERNAL_CHECKS = frozenset(c.name for c in INTERNAL_TOPIC_CHECKS)
#: the tier audit's checks
TIER_CHECK_NAMES = frozenset(c.name for c in TIER_CHECKS)


@dataclass(frozen=True, slots=True)
class Family:
    """A family of checks that reads more than the run's own tables: its ``checks``, what it
    loads (``load``: ``(run, loaded) -> dict``) and the places it counts and adds
    (``places``: ``(run, loaded, units, checks) -> None``), and the results it makes whole
    where its places are not (topic, partition) (``results``: ``(run, loaded) ->
    [DqResult]``; the sinks', one per sink x topic-partition): :mod:`.families`."""

    name: str
    checks: tuple[Check, ...]
    load: Callable
    places: Callable
    results: Callable | None = None


#: the families, in the order the audit loads them and counts their places
FAMILIES = (
    Family("internal_topics", INTERNAL_TOPIC_CHECKS, families.load_internal,
           families.places_internal),
    Family("exactly_once", EOS_CHECKS, families.load_eos, families.places_eos),
    Family("log_dirs", LOG_DIR_CHECKS, families.load_log_dirs, families.places_log_dirs),
    Family("missing_partition", (MISSING_PARTITION_CHECK,), families.load_absent,
           families.places_absent),
    Family("tier", TIER_CHECKS, families.load_tier, families.places_tier),
    Family("sinks", (SINK_RECONCILE_CHECK,), families.load_sinks, families.places_sinks,
           families.results_sinks),
)


def observers(on_driver: bool | None = None) -> list[Callable]:
    """Each check's ``observe`` function once, in :data:`CHECKS`' order (``on_driver``: only
    those whose checks are / are not made on the driver; None: all)."""
    return list(dict.fromkeys(c.observe for c in CHECKS.values() if c.observe is not None
                              and (on_driver is None or c.on_driver == on_driver)))
