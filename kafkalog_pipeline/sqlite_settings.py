"""Connect arguments of the demo's SQLite Airflow metadata database.

Every Airflow process of the demo and the pipeline tests (scheduler, dag-processor,
API server, task runners, the ``airflow`` CLI) writes to one SQLite file. pysqlite
gives up on a locked database after 5 s, and on a busy 2-core machine an
``airflow backfill create`` met that (``sqlite3.OperationalError: database is
locked``) while the scheduler was writing: wait up to a minute instead.
``demo.airflow_env`` points ``[database] sql_alchemy_connect_args`` here.
"""

CONNECT_ARGS = {"timeout": 60}
