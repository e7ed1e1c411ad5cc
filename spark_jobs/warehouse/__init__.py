"""The warehouse's tables as Apache Iceberg tables in a catalog, and the write -> audit ->
publish protocol of a run (docs/tables.md), one module per idea:

- :mod:`~spark_jobs.warehouse.catalog` — which catalog (pyiceberg's configuration, else an
  embedded SQLite catalog under a local warehouse root), and opening it;
- :mod:`~spark_jobs.warehouse.ddl` — making and evolving the tables: schemas, identity
  partitions, table properties, the empty first snapshot; typed per-topic tables;
- :mod:`~spark_jobs.warehouse.runs` — :class:`Warehouse`: a run's branch, its commits,
  the audited heads, publish (fast-forward or re-applied after the overlap check),
  discard, and the audit's direct writes (``replace_run_rows``);
- :mod:`~spark_jobs.warehouse.commits` — the one commit mechanism: what became of a
  commit (committed, refused, outcome unknown: read back), a refused one planned again at
  the new head (``retry``), the files of one deleted only where known not committed;
- :mod:`~spark_jobs.warehouse.snapshots` — the commits themselves: branch moves
  (``commit_refs``), a snapshot in one pass (``SnapshotWriter``), DataFiles of written
  files, a manifest rewrite;
- :mod:`~spark_jobs.warehouse.history` — read-only: ancestry, fork points, summaries,
  live files and their offset ranges, the publish-time overlap check;
- :mod:`~spark_jobs.warehouse.naming` — a run's branch and file names, the snapshot
  summary keys; :mod:`~spark_jobs.warehouse.errors` — what the warehouse raises;
- ``_pyiceberg`` — every pyiceberg private the package needs, for one pinned pyiceberg.

The names below are what the rest of the project uses; the modules above are public too
(``from spark_jobs.warehouse import history``). Importing the package imports no pyiceberg:
each function imports it when it needs it; nor pyarrow: :class:`Warehouse` (``runs``) is
imported when first named, so that the DAG file's parse, which reads only ``catalog``
(``kafkalog_pipeline.assets``), does not pay for it.
"""

from spark_jobs.warehouse.catalog import DEFAULT_CATALOG, DEFAULT_NAMESPACE, add_catalog_args
from spark_jobs.warehouse.errors import (CatalogError, CommitError, CommitFailed, CommitRefused,
                                         ConflictError, NotAudited, NothingStaged)
from spark_jobs.warehouse.naming import (AUDITED, FILES, MAIN, ROWS, RUN_ID, STAGE,
                                         airflow_summary, branch_name, is_run_file,
                                         run_files_prefix)


def __getattr__(name: str):
    if name == "Warehouse":  # PEP 562: imported when first named (see above)
        from spark_jobs.warehouse.runs import Warehouse

        return Warehouse
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AUDITED", "DEFAULT_CATALOG", "DEFAULT_NAMESPACE", "FILES", "MAIN", "ROWS", "RUN_ID", "STAGE",
    "CatalogError", "CommitError", "CommitFailed", "CommitRefused", "ConflictError", "NotAudited",
    "NothingStaged", "Warehouse",
    "add_catalog_args", "airflow_summary", "branch_name", "is_run_file", "run_files_prefix",
]
