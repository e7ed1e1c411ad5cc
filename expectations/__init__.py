"""great-expectations suites of the audit, as code (see README.md in this folder)."""
