"""The decode job: Kafka segment snapshots into the warehouse's Iceberg tables
(docs/tables.md), one module per stage (plan, replicas, task, write, results, dedupe, job, main).

- plan, :mod:`~spark_jobs.decode.planning` — the driver lists the segments (reads are pinned to
  what the listing saw), reads the ledger as ``main`` held it when the run began and,
  for big segments, the ``.index`` files, and plans tasks;
- replicas, :mod:`~spark_jobs.decode.replicas` — a partition several brokers' folders
  hold is framed on the executors and reconciled batch by batch: each batch is
  decoded once, from one copy (docs/replicas.md);
- task, :mod:`~spark_jobs.decode.executor` — executors fetch segment bytes themselves (local
  files, or boto3 ranged GETs), decode them with ``kafkalog`` into Arrow and ...
- write, :mod:`~spark_jobs.decode.writing` — ... write Parquet data files into the tables' data
  folders, partition columns inside (with :mod:`spark_jobs.parquet`'s writer),
  and hand back a :class:`~spark_jobs.decode.results.TaskResult` each (ledger row, files);
- dedupe, :mod:`~spark_jobs.decode.deduplication` — partitions whose offsets may
  already be published (or appear twice in this run) go to the run's scratch first and are deduplicated in
  Spark against only the files whose statistics can overlap them; two copies of one
  offset with different content give a ``divergence`` finding;
- job, :mod:`~spark_jobs.decode.job` — the job as a page of named steps (list, plan, frame
  replicas, run the tasks, dedupe, derive: :mod:`spark_jobs.derive`, commit): the driver
  commits every file to the run's branch (:mod:`spark_jobs.warehouse`) and publishes it
  unless ``--no-publish`` (the DAG audits the branch first);
- main, :mod:`~spark_jobs.decode.cli` — the command line, parsed for :func:`job.run
  <spark_jobs.decode.job.run>`.

``spark-submit spark_jobs/decode_segments.py ...`` runs :func:`main`. The names below
are the package's public API.
"""

import importlib

#: the package's public names, each in the module of its stage: imported when first asked
#: for (PEP 562), so that a caller of one stage (the DAG's plan reads ``planning``) does not
#: import every stage, the executors', Spark's and the derived tables' modules with them
_HOMES = {
    "deduplication": ("dedupe", "divergence_findings", "overlap_filter", "resolve_pending"),
    "cli": ("main", "parse_args"),
    "job": ("unparsable_findings",),
    "planning": ("DEFAULT_SPLIT_BYTES", "Coverage", "Segment", "Task", "coverage_from_ledger",
                 "discover", "first_ingested", "index_positions", "ingested", "ledger_ranges",
                 "overlap_days", "plan", "read_index_positions", "resume_from", "split_points",
                 "trusted_runs"),
    "executor": ("RAW_KINDS", "run_task", "run_tasks"),
    "results": ("TaskResult", "ledger_table", "task_files"),
    "writing": ("DEFAULT_MAX_RAW", "DEFAULT_SLACK", "Context", "day_partitions",
                "make_context", "write_frame"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str):
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOME_OF))


__all__ = [
    "DEFAULT_MAX_RAW", "DEFAULT_SLACK", "DEFAULT_SPLIT_BYTES", "RAW_KINDS", "Context",
    "Coverage", "Segment", "Task", "coverage_from_ledger", "day_partitions",
    "dedupe", "discover", "divergence_findings", "first_ingested", "index_positions",
    "ingested", "ledger_ranges", "ledger_table", "main", "make_context", "overlap_filter",
    "overlap_days", "parse_args", "plan", "read_index_positions",
    "resolve_pending", "resume_from", "run_task", "run_tasks", "split_points", "task_files",
    "TaskResult",
    "trusted_runs", "unparsable_findings", "write_frame",
]
