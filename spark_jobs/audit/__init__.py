"""The data-quality audit of a decode run: checks, severity policy, dq_results, Data Docs.

``checks`` holds the pure ``DataFrame -> DataFrame`` transforms (one per check,
per-partition window SQL), ``policy`` the severity policy of
``expectations/policy.yaml``, ``results`` the ``dq_results`` rows; the
great-expectations suites are in ``expectations/suites.py``.
"""
