"""Warehouse maintenance: the four steps that keep the Iceberg tables fast to plan and small
on disk, per table and in this order (each one's output is what the next one frees):

1. compaction, :mod:`~spark_jobs.maintenance.compaction` — ``main``'s small files of one
   partition value and one submission (and, where files are found by offset, one Kafka
   partition: :mod:`~spark_jobs.maintenance.grouping`) rewritten into one file that keeps
   the submission's name prefix, in overwrite snapshots; groups whose offsets could meet
   what an open run branch staged are left alone (:mod:`~spark_jobs.maintenance.branches`);
2. manifests, :mod:`~spark_jobs.maintenance.manifests` — ``main``'s data manifests
   clustered by ingest period, in one snapshot that changes no data file;
3. snapshot expiry, :mod:`~spark_jobs.maintenance.expiry` — old snapshots, except
   ``main``'s last few and what an open run branch still needs;
4. orphan files, :mod:`~spark_jobs.maintenance.orphans` — unreferenced files past a
   grace period, then old scratch folders.

:mod:`~spark_jobs.maintenance.job` runs them all (:func:`maintain`) and is the command line,
``python -m spark_jobs.maintenance`` (:func:`main`); :mod:`~spark_jobs.maintenance.naming`
holds the names maintenance reads and leaves, :mod:`~spark_jobs.maintenance.errors` what
it raises. The weekly DAG ``kafka_warehouse_maintenance`` runs the steps as its tasks
(:mod:`kafkalog_pipeline.maintenance`). Run it while no decode run is between plan and
publish (the DAG waits for the nightly DAG's runs). The names below are the package's
public API.
"""

from spark_jobs.maintenance.compaction import (DEFAULT_GROUPS_PER_COMMIT, SORT_COLUMNS,
                                               compact_table, rewrite)
from spark_jobs.maintenance.errors import MaintenanceError
from spark_jobs.maintenance.expiry import (DEFAULT_OLDER_THAN_DAYS, DEFAULT_RETAIN_LAST,
                                           expirable_snapshots, expire_table,
                                           protected_snapshots)
from spark_jobs.maintenance.grouping import (DEFAULT_MIN_FILES, DEFAULT_TARGET_FILE_MB, Group,
                                             plan_compaction)
from spark_jobs.maintenance.job import TOTALS, existing_tables, main, maintain, parse_args
from spark_jobs.maintenance.manifests import (DEFAULT_MIN_MANIFESTS, ManifestPlan, ingest_period,
                                              merge_manifests, plan_manifests)
from spark_jobs.maintenance.naming import COMPACTED_TAG, submission_prefix
from spark_jobs.maintenance.orphans import (DEFAULT_ORPHAN_GRACE_HOURS, clean_scratch,
                                            normalize, referenced_files, remove_orphans)

__all__ = [
    "COMPACTED_TAG", "DEFAULT_GROUPS_PER_COMMIT", "DEFAULT_MIN_FILES", "DEFAULT_MIN_MANIFESTS",
    "DEFAULT_OLDER_THAN_DAYS", "DEFAULT_ORPHAN_GRACE_HOURS", "DEFAULT_RETAIN_LAST",
    "DEFAULT_TARGET_FILE_MB", "SORT_COLUMNS", "TOTALS", "Group", "MaintenanceError",
    "ManifestPlan", "clean_scratch", "compact_table", "existing_tables", "expirable_snapshots",
    "expire_table", "ingest_period", "main", "maintain", "merge_manifests", "normalize",
    "parse_args", "plan_compaction", "plan_manifests", "protected_snapshots", "referenced_files",
    "remove_orphans", "rewrite", "submission_prefix",
]
