"""The "Data quality" view of kafkalog's warehouse in the Airflow 3 UI.

- :mod:`.repository`: reads the runs' results from the Iceberg table ``dq_results`` of the
  warehouse's catalog (pyiceberg and pyarrow through :mod:`spark_jobs.warehouse`, no Spark;
  catalog and namespace from the ``kafkalog_catalog`` / ``kafkalog_namespace`` settings), their
  ledger rows and their Data Docs from ``W/data_docs/<token>/`` (local or S3), with its cache;
- :mod:`.model`: what the report shows, as types (``Result``, ``Run``, ``Coverage``);
  :mod:`.words`: outcomes, counts and problems in plain words; :mod:`.series`: the charts' figures;
- :mod:`.calendar`: snapshot nights (of a segment, due by the nightly schedule, as text);
  :mod:`.nights`: the nights-at-a-glance grid; :mod:`.remedies`: a failed run's "not
  published" section and its ways forward;
- :mod:`.svg`: server-side SVG charts; :mod:`.pages`: the HTML;
- :mod:`.app`: the FastAPI app Airflow mounts (``fastapi_apps``), authenticated by Airflow's
  auth manager; :mod:`.links`: the "Data quality report" operator extra link.

The plugin class itself is in ``plugins/kafkalog_quality_plugin.py``; this package is kept out of
Airflow's plugin scan by ``plugins/.airflowignore`` and imported as a normal package (Airflow
puts the plugins folder on ``sys.path``).
"""
