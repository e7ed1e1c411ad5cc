"""The units a result's ``observed`` count is made of (a dq_results row's ``details.unit``).

The audit counts them per place — a (topic, partition), either of which may be None — as
``{unit: n}`` (:func:`.rows.partition_units`, :func:`.internal_checks.units`), and each check
names its unit (:data:`.registry.CHECKS`): a check's ``observed`` is its place's count of it.
"""

from __future__ import annotations

BATCHES, RECORDS, SEGMENTS = "batches", "records", "segments"
#: ``missing_partition``: a place is one partition
PARTITIONS = "partitions"
#: ``snapshot_missing``: the nights the plan found no snapshot of
NIGHTS = "nights"
#: the checks of Kafka's internal topics and state files (:mod:`.internal_checks`)
COMMITTED_OFFSETS, PRODUCERS, CHECKPOINTED_BATCHES = (
    "committed offsets", "producers", "checkpointed batches")
#: the checks of a log directory's own files (:mod:`.log_dir_checks`): a partition's high
#: watermarks (one per log directory holding it), its open transactions, a night's log
#: directories
HIGH_WATERMARKS, OPEN_TRANSACTIONS, LOG_DIRS = "high watermarks", "open transactions", "log directories"

#: the tier audit (:mod:`.tier`): the remote segments ``remote_segments`` has of a partition,
#: the segments of its metadata and of the tier's listing together, and 1 for a tiered one
REMOTE_SEGMENTS, TIER_SEGMENTS, TIERED_PARTITIONS = (
    "remote segments", "tier segments", "tiered partitions")

#: ``sink_reconcile`` (:mod:`spark_jobs.reconcile`): the deliverable records of a sink's window
#: in a partition, counted by the reconcile command only (the nightly audit never counts it, so
#: the optional check gets no result there)
SINK_RECORDS = "sink records"

#: a place's key naming the only checks it gets results of (a partition this snapshot lacks:
#: ``missing_partition``; findings outside any partition: ``decoder_findings``)
ONLY = "only"
