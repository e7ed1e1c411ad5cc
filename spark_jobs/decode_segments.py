"""Decode Kafka segment snapshots into the warehouse's Iceberg tables (docs/tables.md).

    spark-submit spark_jobs/decode_segments.py --input URI --output W --run-id ID \\
        [--no-publish] [--catalog NAME] [--namespace NS] ...

The command line users' scripts and the DAGs call (``spark_entry.py
spark_jobs.decode_segments ...`` too; a crash prints its cause first, one line,
:mod:`spark_jobs.crash`); the job itself is the package
:mod:`spark_jobs.decode`, one module per stage.
"""

# the package's main: functions shipped to executors are pickled by reference to
# spark_jobs.decode.*, not by value from __main__
from spark_jobs.decode import main

if __name__ == "__main__":
    import sys

    from spark_jobs import crash

    sys.exit(crash.run(main))  # a crash says its cause first, then the traceback
