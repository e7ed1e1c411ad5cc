"""Nightly: the Kafka log segment snapshot in S3 -> audited Apache Iceberg tables.

**What a run does**

- `plan` lists the night's snapshot (`s3://{bucket}/{template}`, template default
  `{prefix}/{snapshot_date}/`), groups its segments into chunks balanced by the bytes to
  decode (a topic-partition stays in one chunk), writes one manifest per chunk and makes the
  run's Iceberg branch `run_<run token>` of each table from `main`.
- `decode_chunk` (one mapped task per chunk, spark-submit on `spark_default`) decodes a chunk
  into the run's branch.
- `check_quality` audits exactly that branch; its verdict is the task's return value and the
  run's note (`DQ: passed`, `DQ: 6 warned: ...`, `DQ: failed: ... — not published`).
- `publish_gate` lets the night through, or, for a night the audit warned and a policy
  `publish_warned: approve` (expectations/policy.yaml), waits in Required actions until a
  person approves (publish runs) or rejects it (not published, said in the run's note);
  `publish_warned: never` fails it.
- `publish` makes the branch `main`, only if the audit passed (and the gate let it), and
  emits the table Assets: one event per night the run published, `partition_key` = the
  night (YYYY-MM-DD), for DAGs scheduled with `PartitionedAssetTimetable`
  (dags/kafka_night_summary.py).
- `rerun_on_conflict` runs only if `publish` did not succeed: when publish was refused because
  another run published the same offsets first, it triggers a rerun of the same nights on a
  fresh branch (`rerun__<run id>`, once: a rerun is not rerun again; with a policy
  `publish_conflict: approve`, once a person approved it in Required actions). It is a
  teardown, so the run's state stays publish's: a run not published ends failed.

**A night without a snapshot** (nothing under its prefix): `plan` records it
(`snapshot_missing` in dq_results, warn by the policy) and fails, without retries; the run is
failed and its note says `DQ: no snapshot for <night> — …`. When the copy arrives, clear the
run (or backfill the nights with `--reprocess-behavior failed`): its plan reads the night then.

**Which night a run reads**

- Without params, one night: the UTC date of the run's logical date (its data interval
  start; the run of 2026-11-21 03:00 reads `.../2026-11-21/`). That holds for scheduled runs,
  for each run of a backfill (the Backfill dialog's date range picks the runs' logical dates,
  one run per night of the schedule) and for a triggered run with a logical date.
- `date_from`/`date_to` (inclusive) replace it with their range for this one run (one run
  over all those nights); leave them empty in a backfill, or every run of it reads the same
  range. The trigger form and the Backfill dialog keep them in a collapsed section of their
  own, so that the dialog's date range is the one in sight.

**Other params**

- `topics`: comma-separated patterns (fnmatch) of the topics to read.
- `reprocess`: decode segments again even when the ledger shows them ingested.
- `schema_registry_conn_id`: decode values with a live Schema Registry instead of the
  snapshot's own `_schemas` topic (docs/schemas.md).
- `tiered_storage`: `s3://bucket/prefix` of a tiered-storage tier (Aiven's plugin) to read
  beside the snapshot: its live remote segments, as the snapshot's `__remote_log_metadata`
  names them, reconciled with the local tail; the key ring from the `kafkalog_tier_keys`
  setting (docs/tiered.md). The run is then one chunk. Its default is the setting
  `KAFKALOG_TIERED_STORAGE` (read when the DAG is parsed; empty: no tier).
- `latest_topics`: a regular expression (whole topic name) of topics that get a
  `latest__<topic>` table, the latest committed record per key as of each night (compacted
  topics get one anyway; docs/tables.md "Latest per key").
- `cdc_topics`: the same for Debezium topics' `cdc__<topic>` tables, the source table as of
  each night (topics whose values are Debezium envelopes get one anyway; docs/debezium.md).
- `sinks`: a sinks file (docs/sinks.md) the audit reconciles against the log as of the
  night: `sink_reconcile` results, one per sink × topic-partition, in the run's verdict and
  its "Sinks" section of the report. Its default is the setting `KAFKALOG_SINKS` (read when
  the DAG is parsed; empty: `expectations/sinks.yaml`, which configures none: no work).
- `rerun_of`: leave empty; the DAG sets it on the rerun it triggers.

**Never twice**

- Records are deduplicated against the warehouse, and runs take it in turn (`plan` waits while
  another run is between plan and publish, backfill runs included): reruns and backfills never
  duplicate them.
- Backfill from the CLI: `airflow backfill create --dag-id kafka_segments_nightly --from-date
  2026-11-01 --to-date 2026-11-07T23:59:59` (the bounds are logical dates, a night's is 03:00,
  so a bare `--to-date 2026-11-07` leaves that night out).

**Who is told**: a failed or a warned night goes to the notifier (the SMTP provider's by
default, any Airflow notifier class by the setting `kafkalog_notifier`) with its verdict line
and report link; a night not published `KAFKALOG_PUBLISH_DEADLINE_HOURS` (6) after its
logical date fires the DAG's Deadline Alert.

**More** (dags/README.md): settings (Variables / environment), connections, failures and
retries, and what to do after a failed audit (the run's rows wait on its branch).
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import Param, TriggerRule, chain, dag, task

from kafkalog_pipeline import alerts, schema_registry, settings, tasks
from kafkalog_pipeline.assets import DERIVED_ALIAS, TABLE_ASSETS, derived_asset
from kafkalog_pipeline.gate import PublishGateOperator
from kafkalog_pipeline.operators import KafkalogSparkSubmitOperator, RerunOnConflictOperator

#: the trigger form's section of the range params, collapsed: a run reads its logical date's
#: night unless they are set, and a backfill (whose dialog has a date range of its own) never
#: sets them
RANGE_SECTION = "A range of nights instead of the logical date's (not for a backfill)"

DAGRUN_TIMEOUT = dt.timedelta(hours=12)
RETRY_DELAY = dt.timedelta(seconds=int(settings.parse_time_setting("retry_delay_seconds")))

default_args = {
    "owner": "data-platform",
    "retries": int(settings.parse_time_setting("retries")),
    "retry_delay": RETRY_DELAY,
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(minutes=30),
    "execution_timeout": dt.timedelta(hours=4),
}


@dag(
    dag_id=settings.NIGHTLY_DAG_ID,
    description="Decode the nightly Kafka segment snapshot, audit it, publish it",
    schedule=settings.parse_time_setting("schedule"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,  # backfill runs are not counted: plan's warehouse wait covers them
    dagrun_timeout=DAGRUN_TIMEOUT,
    default_args=default_args,
    # who is told (kafkalog_pipeline.alerts): a failed or warned night, a night not published
    # KAFKALOG_PUBLISH_DEADLINE_HOURS (6) after its logical date
    on_failure_callback=alerts.NightNotifier(failed=True),
    on_success_callback=alerts.NightNotifier(failed=False),
    deadline=alerts.publish_deadline(),
    tags=["kafkalog", "kafka", "spark", "data-quality"],
    doc_md=__doc__,
    params={
        "date_from": Param(None, type=["null", "string"], format="date", section=RANGE_SECTION,
                           title="First snapshot night (instead of the logical date's)",
                           description="Empty (the default): the run reads one night, the UTC date "
                                       "of its logical date; each run of a backfill reads its own "
                                       "night. Set: this run reads the nights date_from..date_to "
                                       "instead (leave empty in a backfill, or every run of it "
                                       "reads this same range)."),
        "date_to": Param(None, type=["null", "string"], format="date", section=RANGE_SECTION,
                         title="Last snapshot night (inclusive)",
                         description="The range's last night, inclusive. Empty: date_from "
                                     "alone (date_to alone: that one night)."),
        "topics": Param("*", type="string", title="Topics",
                        description="Comma-separated patterns (fnmatch), * for all"),
        "reprocess": Param(False, type="boolean", title="Reprocess",
                           description="Decode segments again even if already ingested "
                                       "(rows already in the warehouse are still not duplicated)"),
        schema_registry.PARAM: Param(
            None, type=["null", "string"], title="Schema Registry connection",
            description="Empty (the default): values in Schema Registry's wire format decode "
                        "with the snapshot's own _schemas topic. Set: with the live registry "
                        "of this Airflow connection (host = URL, login/password = basic "
                        "auth). See docs/schemas.md."),
        settings.TIER_PARAM: Param(
            settings.parse_time_setting("tiered_storage") or None, type=["null", "string"],
            title="Tiered storage",
            description="Empty: no tier (the default unless the setting KAFKALOG_TIERED_STORAGE "
                        "gives one, as the demo's does). Set (s3://bucket/prefix, the plugin's "
                        "key.prefix verbatim): also decode that tier's live remote segments "
                        "as the snapshot's __remote_log_metadata names them, reconciled with "
                        "the local tail; encrypted segments need the key ring (setting "
                        "kafkalog_tier_keys: a folder of PEM files). See docs/tiered.md."),
        settings.LATEST_PARAM: Param(
            None, type=["null", "string"], title="Latest-per-key topics",
            description="Empty (the default): compacted topics only. Set: a regular "
                        "expression (whole topic name); those topics also get "
                        "latest__<topic>, the latest committed record per key as of each "
                        "night, tagged night-YYYY-MM-DD. See docs/tables.md."),
        settings.CDC_PARAM: Param(
            None, type=["null", "string"], title="Debezium topics",
            description="Empty (the default): topics whose values are Debezium envelopes. "
                        "Set: a regular expression (whole topic name); those topics also get "
                        "cdc__<topic>, the source table per key as of each night. See "
                        "docs/debezium.md."),
        settings.SINKS_PARAM: Param(
            settings.parse_time_setting("sinks") or None, type=["null", "string"],
            title="Sinks to reconcile",
            description="Empty: expectations/sinks.yaml (the default unless the setting "
                        "KAFKALOG_SINKS names another file, as the demo's does), which "
                        "configures none. Set: a sinks file on the Spark hosts; the audit "
                        "reconciles each Kafka->lake sink it names against the log as of the "
                        "night (check sink_reconcile). See docs/sinks.md."),
        tasks.RERUN_OF: Param(
            None, type=["null", "string"], title="Rerun of (set by the DAG)",
            description="Leave empty. The DAG sets it on the run it triggers when a run's "
                        "publish was refused because another run published the same offsets "
                        "first: the id of that run. A run with it set is not rerun again."),
    },
)
def kafka_segments_nightly():
    # one plan at a time across all runs (backfill runs included): a plan first waits
    # while another run holds the warehouse (kafkalog_pipeline.tasks.wait_for_warehouse)
    @task(task_id=tasks.PLAN_TASK, retries=3, max_active_tis_per_dag=1)
    def plan(**context) -> list[list[str]]:
        return tasks.plan_task(context)

    decode_args = plan()

    decode = KafkalogSparkSubmitOperator.partial(
        task_id=tasks.DECODE_TASK,
        application=settings.spark_entry(),  # runs spark_jobs.decode_segments (first arg)
        name="kafkalog-decode",
        retries=3,
        map_index_template=tasks.DECODE_MAP_INDEX_TEMPLATE,  # "chunk K"
    ).expand(application_args=decode_args)

    check_quality = KafkalogSparkSubmitOperator(
        task_id=tasks.QUALITY_TASK,  # the UI plugin links this task id to the run's report
        application=settings.spark_entry(),
        name="kafkalog-check-quality",
        application_args=tasks.quality_args(),
        # a failed check fails the task at once (AirflowFailException, no retry: the verdict
        # cannot change); one retry covers a crash (a Spark hiccup). Returns the verdict.
        retries=1,
    )

    @task(task_id=tasks.PUBLISH_TASK, outlets=[*TABLE_ASSETS.values(), DERIVED_ALIAS], retries=3)
    def publish(**context) -> dict:
        return tasks.publish_from_context(context, TABLE_ASSETS.values(),
                                          (DERIVED_ALIAS, derived_asset))

    # A teardown: Airflow leaves teardowns out of a run's state (DagRun._tis_for_dagrun_state),
    # so publish stays the leaf that decides it and a run not published still ends failed.
    # It runs only when publish failed or could not run (one_failed: a failed audit makes
    # publish upstream_failed), and triggers a rerun only after a conflict.
    rerun = RerunOnConflictOperator(task_id=tasks.RERUN_TASK,
                                    trigger_dag_id=settings.NIGHTLY_DAG_ID).as_teardown()
    rerun.trigger_rule = TriggerRule.ONE_FAILED

    # The human gate (expectations/policy.yaml publish_warned): a passed night, or a warned
    # one under `auto`, goes straight on; under `approve` a warned night waits in Required
    # actions (approve: publish runs; reject: publish is skipped, main unchanged); `never`
    # fails it. The answer is awaited as long as the run may last (an unanswered gate fails).
    gate = PublishGateOperator(task_id=tasks.GATE_TASK, response_timeout=DAGRUN_TIMEOUT)

    chain(decode, check_quality, gate, publish(), rerun)


kafka_segments_nightly()
