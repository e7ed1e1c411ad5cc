"""Reconciling Kafka->lake sinks against the log they came from (issue 44, docs/sinks.md):
``config`` (the sinks file and the profiles, pure), ``sink_read`` (a sink's table through
pyiceberg planning into Spark), ``compare`` (append sinks), ``upsert`` (upsert sinks),
``classes`` (the check's and classes' names), ``job`` (the command: ``python -m
spark_jobs.reconcile``)."""
