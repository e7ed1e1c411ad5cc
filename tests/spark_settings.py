"""Spark settings the tests share: the in-process SparkSession (conftest's ``spark``)
and every spark-submit of the DAG tests (``KAFKALOG_SPARK_CONF``, see airflow_env).

The tests' jobs run for seconds on kilobytes, so the JVM's start-up is most of their
cost: C1 only (no C2 compiles of code that runs a handful of times) and the serial
collector (no parallel GC threads to start on a 2-core machine) take a third off the
CPU time of a spark-submit. And each of their queries runs once on a few hundred rows:
Spark's interpreted evaluation (:data:`INTERPRETED_SQL`) costs less than generating and
compiling Java code for it. Test settings, not production ones.
"""

from __future__ import annotations

import json

from spark_jobs import session

#: JVM options of every test driver (``spark.driver.extraJavaOptions``)
#: and room for the compiled code: with C1 alone every warm method stays compiled, and the
#: audit's generated code filled the default code cache ("Out of space in CodeCache for
#: adapters" in check_quality of test_dags_e2e's night 1, once in two runs)
FAST_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=512m"

#: SQL settings of every test session and spark-submit: Spark's interpreted evaluation
#: (spark_jobs.session.INTERPRETED_SQL). Janino compiling the code of each new plan was a third
#: of an audit's CPU time: check_quality on the demo's night 2 (night 1 published; one
#: in-process session, the settings alternated, 3 audits each, load 4-9) took 36.1/43.6/37.3 s
#: CPU (driver, JVM and Python workers) with code generation, 23.3/23.3/24.9 s without it,
#: 31.5/42.5/35.0 s with only the whole-stage generation off; the same dq_results rows every time
INTERPRETED_SQL = session.INTERPRETED_SQL

#: the in-process session's settings (conftest's ``spark``): two cores' worth of partitions
SESSION_CONF = {"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "4",
                "spark.driver.extraJavaOptions": FAST_START_JVM, **INTERPRETED_SQL}

#: the pipeline's default ``KAFKALOG_SPARK_CONF`` (kafkalog_pipeline.settings) plus the above,
#: and no web UI (nobody looks at it; the in-process session has none either)
SUBMIT_CONF = json.dumps({"spark.sql.shuffle.partitions": "8", "spark.default.parallelism": "4",
                          "spark.driver.extraJavaOptions": FAST_START_JVM,
                          "spark.ui.enabled": "false", **INTERPRETED_SQL})
