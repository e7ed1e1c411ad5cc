"""PySpark jobs: decode segment snapshots into warehouse tables, check them, publish them.

See docs/tables.md for the tables and the contracts between the jobs.
"""
