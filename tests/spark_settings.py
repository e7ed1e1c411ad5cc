"""Spark settings the tests share: the in-process SparkSession (conftest's ``spark``)
and every spark-submit of the DAG tests (``KAFKALOG_SPARK_CONF``, see airflow_env).

The tests' jobs run for seconds on kilobytes, so the JVM's start-up is most of their
cost: C1 only (no C2 compiles of code that runs a handful of times) and the serial
collector (no parallel GC threads to start on a 2-core machine) take a third off the
CPU time of a spark-submit. A test setting, not a production one.
"""

from __future__ import annotations

import json

#: JVM options of every test driver (``spark.driver.extraJavaOptions``)
#: and room for the compiled code: with C1 alone every warm method stays compiled, and the
#: audit's generated code filled the default code cache ("Out of space in CodeCache for
#: adapters" in check_quality of test_dags_e2e's night 1, once in two runs)
FAST_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=512m"

#: the pipeline's default ``KAFKALOG_SPARK_CONF`` (kafkalog_pipeline.settings) plus the above,
#: and no web UI (nobody looks at it; the in-process session has none either)
SUBMIT_CONF = json.dumps({"spark.sql.shuffle.partitions": "8", "spark.default.parallelism": "4",
                          "spark.driver.extraJavaOptions": FAST_START_JVM,
                          "spark.ui.enabled": "false"})
