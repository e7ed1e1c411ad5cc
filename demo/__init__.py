"""``python -m demo run|ui``: the pipeline end to end on one machine (``make demo``, ``make ui``).

Not part of the installed packages: it runs from the repository's root (``make`` does that),
with this checkout's ``dags/`` and ``plugins/``.

``run`` (what ``make demo`` calls, :mod:`demo.cli`):

1. writes sample snapshots for two nights with :mod:`kafkalog.writer`
   (:mod:`demo.data`, :mod:`demo.schemas`) under ``OUT/snapshots``;
2. serves them from a local S3 endpoint (a moto server on 127.0.0.1) in bucket
   ``kafka-snapshots``, prefix ``snapshots`` (:mod:`demo.servers`);
3. runs the nightly DAG for both nights with embedded Airflow (SQLite metadata
   DB in ``OUT/airflow``) and local Spark (``local[2]``), each night as
   ``dag.test()`` in a child process whose output fills
   ``OUT/pipeline-logs/dag-test-DATE.log`` as it runs, while a line per task
   start and end (state, seconds) is printed from the metadata DB (:mod:`demo.nights`);
4. prints where the tables and the data-quality report are, with row counts, each
   night's checks that warned or failed (check, topic-partitions, causes), one
   query to copy, and whether the counts changed since the previous ``make demo``
   (:mod:`demo.report`).

``ui`` (``make ui``) serves the same data: moto again (its state is in memory),
then Airflow's api-server, scheduler, dag-processor and triggerer on 127.0.0.1, each
in its own process group, stopped together on Ctrl-C. Log in as ``admin`` with the
password printed at start (kept in ``OUT/airflow/simple_auth_manager_passwords.json.generated``).
"""
