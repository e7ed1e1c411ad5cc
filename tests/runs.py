"""The one way a test runs the decode job in its own process: ``spark_jobs.decode.main`` with
the session-scoped ``spark`` fixture's session (no second JVM), as Airflow's decode task
and ``spark-submit`` run it (``--input --output --run-id``, ``--night`` when given, then the
job's other flags); and the rows an audit wrote (``dq_rows``)."""

from __future__ import annotations

from spark_jobs import decode as job
from spark_jobs import schemas, tables


def decode(spark, src, out, run_id: str, *extra: str, night: str | None = None) -> dict:
    """Decode snapshot (or manifest) ``src`` into warehouse ``out`` as run ``run_id``;
    the job's summary."""
    argv = ["--input", str(src), "--output", str(out), "--run-id", run_id]
    if night is not None:
        argv += ["--night", night]
    return job.main([*argv, *extra], spark=spark)


def dq_rows(root, run_id):
    """Run ``run_id``'s rows of the dq_results table (``root``: a path or an Warehouse)."""
    from pyiceberg.expressions import EqualTo

    table = tables.read_arrow(root, "dq_results", row_filter=EqualTo("run_id", run_id))
    assert table.schema.equals(schemas.DQ_RESULTS, check_metadata=False)
    return table.to_pylist()
