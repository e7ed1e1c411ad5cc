"""Tables derived from the decode job's output, written in the same run (docs/tables.md).

- :mod:`~spark_jobs.derive.internal` — Kafka's internal topics (consumer offsets, group
  metadata, transactions, cluster metadata, share group state) and the partitions' state
  files (producer state, leader epochs);
- :mod:`~spark_jobs.derive.log_dirs` — a broker log directory's own files (broker state,
  offset checkpoints, KRaft snapshots, quorum state);
- :mod:`~spark_jobs.derive.remote` — ``remote_segments``: ``__remote_log_metadata`` replayed as
  of the run (tiered storage);
- :mod:`~spark_jobs.derive.typed` — a typed table per topic whose values carry an Avro,
  JSON Schema or Protobuf schema, with its pure half :mod:`~spark_jobs.derive.value_types`
  (registry schemas as Arrow types);
- :mod:`~spark_jobs.derive.files` — the executor step both share;
- :mod:`~spark_jobs.derive.step` — :class:`~spark_jobs.derive.step.Submission`, what every
  step reads of one submission;
- :mod:`~spark_jobs.derive.debezium` — Debezium change events as changes of their source
  table (pure: the ``cdc__`` tables' writer, still to come, applies them; docs/debezium.md).

The decode job (:mod:`spark_jobs.decode`) calls each module's ``derive(Submission)`` after the
dedupe; each returns ``({table: [data files]}, {table: rows})``.
"""
