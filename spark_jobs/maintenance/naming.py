"""The names maintenance reads and leaves in the warehouse: a submission's file-name prefix
(what a rerun removes, read back from a data file's name), the tag of a compacted file, the
``kafkalog.*`` summary keys of the snapshots maintenance commits, and the folders it looks
in (a table's ``data/`` and ``metadata/``, the scratch folder under the warehouse root).

The names a run leaves are :mod:`spark_jobs.warehouse.naming`'s; the ones here are how
maintenance reads them back and what it adds (docs/tables.md, "Files" and "Snapshot summaries").
"""

from __future__ import annotations

import posixpath

from spark_jobs import layout
from spark_jobs.warehouse import ROWS, STAGE, airflow_summary, branch_name

#: the prefix part of a compacted file's name, after the submission prefix
COMPACTED_TAG = "m-"
MAINTENANCE = "kafkalog.maintenance"  # snapshot summary: which step made the snapshot
COMPACTED_FILES = "kafkalog.compacted-files"


def data_folder(table) -> str:
    """Where a (pyiceberg) table's data files are: ``<location>/data``."""
    return layout.table_folder(table.location())


def metadata_folder(table) -> str:
    """Where a table's manifests, manifest lists and metadata files are."""
    return layout.table_folder(table.location(), layout.METADATA_FOLDER)


def submission_prefix(path: str) -> str | None:
    """The file-name prefix that a rerun of the submission which wrote ``path`` removes:
    ``<token>~c<chunk>~`` for a chunk's file, ``<token>~`` otherwise; None for a file
    not named by a run (e.g. pyiceberg's own ``00000-0-<uuid>.parquet``).

    A run without chunks whose attempt id begins with ``c`` reads as a chunk here:
    harmless, since a rerun of the whole run removes every ``<token>~`` file, and a
    file named ``<prefix>m-...`` matches exactly the removal prefixes its sources match.
    """
    parts = posixpath.basename(path).split("~")
    if len(parts) < 2 or not parts[0]:
        return None
    if len(parts) >= 3 and parts[1].startswith("c") and len(parts[1]) > 1:
        return f"{parts[0]}~{parts[1]}~"
    return f"{parts[0]}~"


def submission_branch(prefix: str) -> str:
    """The run branch of the run whose files have the submission prefix ``prefix``
    (:func:`submission_prefix`): ``run_<run token>`` (a run token is its own token)."""
    return branch_name(prefix.split("~", 1)[0])


def snapshot_summary(step: str, rows: int, **more: str) -> dict[str, str]:
    """The summary of a snapshot maintenance commits to ``main``: ``kafkalog.stage`` is
    ``maintenance``, :data:`MAINTENANCE` names the ``step``, ``kafkalog.rows`` the rows it
    rewrote; then ``more`` keys and the Airflow DAG run it runs for, if any."""
    return {STAGE: "maintenance", MAINTENANCE: step, ROWS: str(rows), **more, **airflow_summary()}
