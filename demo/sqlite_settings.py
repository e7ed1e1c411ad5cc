"""Connect arguments of the demo's SQLite Airflow metadata database.

Every Airflow process of the demo and the pipeline tests (scheduler, dag-processor,
API server, task runners, the ``airflow`` CLI) writes to one SQLite file. pysqlite
gives up on a locked database after 5 s: wait up to a minute instead.
``demo.servers.airflow_env`` points ``[database] sql_alchemy_connect_args`` here.

No timeout helps where a transaction that has read wants to write after another
process wrote (Airflow runs SQLite in WAL mode): SQLite answers ``database is
locked`` at once, since the reader's snapshot is stale. ``airflow backfill create``
meets that when the scheduler writes between its SAVEPOINT's read and its insert;
Airflow then removes the half-made backfill and the command can simply be run
again (dags/README.md, tests/pipeline/test_backfill.py).
"""

CONNECT_ARGS = {"timeout": 60}
