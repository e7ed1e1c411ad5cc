"""The SparkSession every job builds: the same settings in tests, the demo and production."""

from __future__ import annotations

import os
import sys

#: settings every session gets (a caller's ``conf`` overrides them)
DEFAULTS = {
    # partition columns stay strings: dt=2026-11-20 is not a date, topic=007 is not an int
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    # one pool of Python workers for RDD tasks (the decode job's) and SQL's Arrow UDFs:
    # with simplified tracebacks SQL's workers get an environment of their own, hence
    # workers of their own, which import everything again (a UDF's error shows its
    # whole traceback instead)
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
    # the driver logs at WARN from the SparkContext's start: at INFO some 40 lines of Spark's
    # start-up came before a job's own lines (the jobs print those: they stay). Spark applies
    # it as it starts the context, after its first three lines (version, OS, Java)
    "spark.log.level": "WARN",
}


#: Spark's interpreted SQL evaluation: no whole-stage code generation and no generated code for
#: expressions, projections and orderings either. ``factoryMode`` is a setting Spark keeps for
#: its own test suites (which run every expression through the interpreted path as well), not a
#: documented one: set for queries over a few hundred rows (the tests' sessions,
#: ``tests/spark_settings.py``; a small run's audit, ``spark_jobs.audit.inputs.sized_settings``),
#: where Janino compiling the code of each new plan costs more than the rows do
INTERPRETED_SQL = {"spark.sql.codegen.wholeStage": "false",
                   "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def build_session(app_name: str, master: str | None = None, conf: dict | None = None):
    """A SparkSession; ``master`` None leaves it to spark-submit (or ``local[*]``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        # embedded Spark stays on loopback; on a cluster the driver must be reachable
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:
        # not under spark-submit (which sets the master): the embedded default
        builder = builder.master(master := "local[*]")
    settings = dict(DEFAULTS)
    if master is not None and master.startswith("local"):
        settings["spark.ui.enabled"] = "false"
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    from spark_jobs import lineage

    lineage.started(spark)  # the Spark run's OpenLineage START, where spark-submit asked for it
    return spark

