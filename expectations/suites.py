"""The great-expectations 1.x suites of the audit, and the run's Data Docs.

The checks themselves are per-partition window SQL in
``spark_jobs/audit/checks.py``. Their observations, graded by the policy and
summarized per check × topic-partition × class × status
(``spark_jobs.audit.rows.verdicts``: counts and an example message), are
the batch every suite validates, from a scratch SQLite table (a few rows, already
on the driver: no Spark job per expectation). Each check has one suite with two
``UnexpectedRowsExpectation``\\ s (``expectations.data_docs.PolicyRows``): the
partitions and classes graded ``fail`` (severity critical) and those graded
``warn`` (severity warning). Explained observations (status ``pass``) are listed in
dq_results, never unexpected. The severities carry the policy's grade into the Data
Docs (``expectations/data_docs.py``): a suite whose only unexpected rows are
warn-graded reads "Warning" there, as in dq_results.

great_expectations is imported inside the functions (it takes seconds).
"""

from __future__ import annotations

import os
import tempfile

#: check -> what it asserts (shown in Data Docs)
DESCRIPTIONS = {
    "crc": "Every batch's stored CRC equals the CRC computed over its bytes.",
    "offset_gaps": "Consecutive batches of each partition are contiguous, or the gap is explained "
                   "(compaction, aborted transaction, retention, missing segment).",
    "record_gaps": "Consecutive records of each partition are contiguous, or the missing offsets are "
                   "control markers, compacted away, in excluded batches or in a batch-level gap.",
    "record_count": "Each batch's record_count fits lastOffsetDelta + 1 and equals the records decoded.",
    "duplicate_offsets": "No offset appears twice in a partition's records.",
    "log_append_time": "LogAppendTime never goes back in offset order.",
    "create_time": "CreateTime going back in offset order stays within the configured tolerance.",
    "max_timestamp": "Each batch's max_timestamp is the largest of its records' timestamps.",
    "divergence": "No two copies of one offset differ.",
    "replica_divergence": "Two brokers' copies of a partition hold the same batches at the same offsets.",
    "truncated_tail": "No segment ends in an incomplete entry (the newest segment of a live partition may).",
    "decoder_findings": "The decoder found nothing unreadable (corrupt batches, skipped bytes, codec errors ...).",
    "schema_decode": "Values in Schema Registry's wire format decode with the run's registry "
                     "(unknown schema ids and malformed payloads are counted per partition).",
    "committed_offset_beyond_log_end": "No consumer group's latest committed offset is past the partition's log end.",
    "committed_offset_before_log_start": "No consumer group's latest committed offset is before the partition's "
                                         "log start (data retention removed before the group read it).",
    "producer_snapshot": "Each producer of a .snapshot has the epoch, last sequence and last offset of its "
                         "last batch in the log.",
    "leader_epoch_checkpoint": "Each batch's partition leader epoch is the leader-epoch-checkpoint's epoch "
                               "for its offset.",
    "beyond_high_watermark": "No batch of a partition lies at or past the high watermark its log directory's "
                             "replication-offset-checkpoint names (written, never known replicated).",
    "hanging_transaction": "No transaction of a producer-state .snapshot is open at the snapshot for longer "
                           "than its transaction timeout (it would pin the last stable offset).",
    "duplicate_sequence": "No two batches of one producer id and epoch in a partition hold overlapping "
                          "sequences (a duplicate the broker should have refused).",
    "sequence_gap": "A producer's sequences within an epoch do not skip, or removed batches "
                    "(retention, compaction) or its .snapshot explain the gap.",
    "zombie_write": "No producer writes with an epoch below one it already used, and no COMMIT/ABORT "
                    "marker has an epoch below its producer's data (KIP-1228).",
    "double_consumption": "No input offsets of a transactional group are claimed by two committed "
                          "transactions' offset commits.",
    "output_without_offset_commit": "A read-process-write application's committed output comes with "
                                    "its offset commit.",
    "long_transaction": "No transaction lasts longer than the policy's bound (transaction.max.timeout.ms).",
    "empty_transaction": "Markers that end no data are counted (report only).",
    "mixed_cluster": "The log directories of one snapshot night belong to one cluster.id (meta.properties).",
    "tier_copy_orphans": "Every remote segment copy __remote_log_metadata started has finished, or "
                         "started within the grace period (in flight).",
    "tier_missing_objects": "Every live remote segment's objects (.log, .indexes, .rsm-manifest) are "
                            "in the tier.",
    "tier_unreferenced_objects": "Every segment in the tier is a segment __remote_log_metadata "
                                 "knows and has not deleted.",
    "tier_reuploads": "Each start offset of a tiered partition was copied to the tier once.",
    "tier_leader_epochs": "Consecutive live remote segments continue each other's offsets and "
                          "leader epochs.",
    "tier_divergence": "Remote and local copies of the same offsets hold the same batches.",
    "missing_partition": "Every topic-partition the previous snapshot nights held is in this snapshot "
                         "(a topic the snapshot says was deleted counts once, as deleted).",
    "snapshot_missing": "Every night the run was to read has a snapshot (at least one segment under "
                        "its prefix).",
    "sink_reconcile": "A Kafka-to-lake sink holds every deliverable record of its window exactly "
                      "once (python -m spark_jobs.reconcile; docs/sinks.md).",
}

COLUMNS = "topic, partition, class, items, offsets, max_value, example"


def unexpected_rows_query(check: str, status: str) -> str:
    # `check` is a keyword in SQLite (a CHECK constraint): quoted
    return (f"SELECT {COLUMNS} FROM {{batch}} "
            f"WHERE `check` = '{check}' AND status = '{status}'")


#: the verdicts' column type (``spark_jobs.audit.rows.VERDICT_COLUMNS``) -> SQLite column type
SQLITE_TYPES = {"string": "TEXT", "int": "INTEGER", "bigint": "INTEGER"}


def verdicts_database(verdicts: list[tuple], columns: str, path: str) -> None:
    """Write the verdicts (:func:`spark_jobs.audit.rows.verdicts`: rows of ``columns``, a
    ``name type, ...`` list, one row per check × topic-partition × class × status: small and
    bounded) into the SQLite table ``verdicts`` at ``path``."""
    import sqlite3

    fields = [(name, SQLITE_TYPES[kind]) for name, kind in
              (column.split() for column in columns.split(","))]
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE verdicts ({', '.join(f'`{n}` {t}' for n, t in fields)})")
        db.executemany(f"INSERT INTO verdicts VALUES ({', '.join('?' * len(fields))})", verdicts)
    db.close()


#: the policy grade -> the severity of the expectation whose unexpected rows it grades
SEVERITIES = {"fail": "critical", "warn": "warning"}


def build_suites(gx, checks):
    """One ExpectationSuite per check (not yet added to a context)."""
    from expectations.data_docs import PolicyRows

    suites = []
    for check in checks:
        if check not in DESCRIPTIONS:
            raise KeyError(f"check {check!r} has no description in expectations/suites.py DESCRIPTIONS")
        suite = gx.ExpectationSuite(name=suite_name(check))
        for grade, severity in SEVERITIES.items():
            suite.add_expectation(PolicyRows(
                unexpected_rows_query=unexpected_rows_query(check, grade),
                description=f"{DESCRIPTIONS[check]} Rows: observations the policy grades {grade}.",
                severity=severity))
        suites.append(suite)
    return suites


def suite_name(check: str) -> str:
    return f"kafka_{check}"


def preload() -> None:
    """Import what :func:`validate` uses (great_expectations, the Data Docs' renderers): the
    seconds a cold audit would otherwise pay at its end (:mod:`expectations.gx_process`)."""
    import great_expectations  # noqa: F401
    from great_expectations.data_context.types.base import ProgressBarsConfig  # noqa: F401

    from expectations import data_docs  # noqa: F401


def validate(verdicts: list[tuple], columns: str, run_id: str, checks,
             docs_dir: str | None = None):
    """Validate ``verdicts`` (rows of ``columns``: :func:`verdicts_database`) with every
    check's suite (one checkpoint, one context) and build this run's Data Docs into
    ``docs_dir`` (a new temporary folder if None), once, after all validations
    (``expectations.data_docs.build``). Returns
    ``(summary {check: {"fail": n, "warn": n}}, docs_dir)``: the unexpected rows of each
    check's fail- and warn-graded expectation."""
    import logging

    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    from expectations import data_docs

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    docs_dir = docs_dir or tempfile.mkdtemp(prefix="dq-docs-")
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    with tempfile.TemporaryDirectory(prefix="dq-verdicts-") as scratch:
        database = os.path.join(scratch, "verdicts.sqlite")
        verdicts_database(verdicts, columns, database)
        source = ctx.data_sources.add_sqlite("audit", connection_string=f"sqlite:///{database}")
        whole = source.add_table_asset("verdicts", table_name="verdicts") \
            .add_batch_definition_whole_table("run")
        definitions = []
        for suite in build_suites(gx, checks):
            suite = ctx.suites.add(suite)
            definitions.append(ctx.validation_definitions.add(
                gx.ValidationDefinition(name=suite.name, data=whole, suite=suite)))
        checkpoint = ctx.checkpoints.add(gx.Checkpoint(
            name="kafka_audit", validation_definitions=definitions,
            result_format={"result_format": "SUMMARY"}))
        result = checkpoint.run(run_id=gx.RunIdentifier(run_name=run_id))
    grade_of = {severity: grade for grade, severity in SEVERITIES.items()}
    summary = {}
    for vr in result.run_results.values():
        check = vr.suite_name[len(suite_name("")):]
        counts = summary.setdefault(check, {})
        for r in vr.results:
            info = r.exception_info or {}
            if info.get("raised_exception"):
                raise RuntimeError(f"expectation of {check} raised: {info.get('exception_message')}")
            counts[grade_of[r.expectation_config.severity.value]] = int(r.result.get("observed_value") or 0)
    data_docs.build(list(result.run_results.values()), docs_dir, run_id,
                    descriptions={suite_name(c): DESCRIPTIONS[c] for c in checks})
    return summary, docs_dir
