"""The data-quality audit of a decode run: checks, severity policy, dq_results, Data Docs.

* ``job`` — the audit of one run as named steps (``spark_jobs/check_quality.py`` runs it);
* ``registry`` — every check in one table (name, unit, classes, the function observing it);
  ``units`` the units a result's ``observed`` counts;
* the checks by family, pure ``DataFrame -> DataFrame`` transforms (per-partition window SQL):
  ``crc``, ``offsets``, ``records``, ``timestamps``, ``findings_checks``, ``absence``,
  ``schema_decode``, ``internal_checks``; ``checks`` runs them all and grades them
  (``policy``: the severity policy of ``expectations/policy.yaml``);
* what the checks share: ``observations`` (their one schema), ``inputs`` (the run's tables as
  audited), ``context`` (where the run stands among the nights), ``as_of`` (rows later nights
  published first);
* ``rows`` — observations to dq_results rows; ``results`` — the typed dq_results row
  (``DqResult``, ``Details``), reading and writing the table.

The great-expectations suites are in ``expectations/suites.py``.
"""
