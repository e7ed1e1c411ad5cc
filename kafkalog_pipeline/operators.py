"""``KafkalogSparkSubmitOperator``: spark-submit with this pipeline's environment.

A :class:`SparkSubmitOperator` (connection ``spark_default``) that, when it
runs, adds to the child's environment what our jobs need: this venv's python
for driver and workers, the venv's ``bin`` on ``PATH`` (``spark-submit``), and
S3 access resolved from the ``aws_default`` connection or the environment.

The credentials are resolved inside the running task, so they never appear in
the DAG file, in XCom or in the rendered template fields.
"""

from __future__ import annotations

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from . import settings


class KafkalogSparkSubmitOperator(SparkSubmitOperator):
    ui_color = "#e8f1fa"

    def __init__(self, *, aws_conn_id: str = settings.AWS_CONN_ID, **kwargs) -> None:
        kwargs.setdefault("conn_id", settings.SPARK_CONN_ID)
        kwargs.setdefault("conf", settings.spark_conf())
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id

    def execute(self, context):
        access = settings.s3_access(self.aws_conn_id)
        self.env_vars = {**settings.spark_env(access), **(self.env_vars or {})}
        self._hook = None  # built from the environment above
        return super().execute(context)
