"""The names a run leaves in the warehouse's tables (docs/tables.md): its branch
``run_<run token>``, its data files' prefix ``<run token>~`` (``<run token>~c<chunk>~``
for a chunk of a DAG run), the ``kafkalog.*`` keys of its snapshots' summaries, and the
table property that marks its publish as under way.
"""

from __future__ import annotations

import os

from spark_jobs import storage

MAIN = "main"

#: snapshot summary keys (docs/tables.md)
RUN_ID = "kafkalog.run-id"
CHUNK_ID = "kafkalog.chunk-id"
DAG_ID = "kafkalog.dag-id"
DAG_RUN_ID = "kafkalog.dag-run-id"
STAGE = "kafkalog.stage"  # staged | published | maintenance
ROWS = "kafkalog.rows"
FILES = "kafkalog.files"
AUDITED = "kafkalog.audited"  # dq_results: {table: snapshot id} the audit of the run read
PUBLISHED_FROM = "kafkalog.published-from"  # a re-applied publish: the branch head it copies
#: a commit's own token, where pyiceberg picks the snapshot id: how a commit whose answer
#: was lost is found again (:func:`spark_jobs.warehouse.commits.token_landed`)
COMMIT_TOKEN = "kafkalog.commit"
#: table property (on the first table published) while a run's publish is under way
PUBLISHING = "kafkalog.publishing."


def branch_name(run_id: str) -> str:
    return "run_" + storage.run_token(run_id)


def publishing_key(run_id: str) -> str:
    return PUBLISHING + storage.run_token(run_id)


def run_files_prefix(run_id: str, chunk_id: str | None = None) -> str:
    """The file-name prefix of a run's (or one chunk's) data files, ``~`` included."""
    token = storage.run_token(run_id)
    return f"{token}~" if chunk_id is None else f"{token}~c{storage.run_token(chunk_id)}~"


def is_run_file(path: str, run_id: str, chunk_id: str | None = None) -> bool:
    return os.path.basename(path).startswith(run_files_prefix(run_id, chunk_id))


def airflow_summary() -> dict[str, str]:
    """The DAG and DAG run a task runs for (Airflow exports them to its subprocesses)."""
    out = {}
    for key, env in ((DAG_ID, "AIRFLOW_CTX_DAG_ID"), (DAG_RUN_ID, "AIRFLOW_CTX_DAG_RUN_ID")):
        if os.environ.get(env):
            out[key] = os.environ[env]
    return out
