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
FAST_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: the pipeline's default ``KAFKALOG_SPARK_CONF`` (kafkalog_pipeline.settings) plus the above,
#: and no web UI (nobody looks at it; the in-process session has none either)
SUBMIT_CONF = json.dumps({"spark.sql.shuffle.partitions": "8", "spark.default.parallelism": "4",
                          "spark.driver.extraJavaOptions": FAST_START_JVM,
                          "spark.ui.enabled": "false"})
