"""A pytest plugin that records every audit's dq_results rows, to compare two versions of the
audit on the same tests (``bench/dq_diff.py``, issue 43: the same rows, field by field).

    DQ_CAPTURE=/tmp/rows-a.jsonl PYTHONPATH=<code>:bench .venv/bin/python -m pytest \\
        -p dq_capture tests/spark_jobs/test_quality.py ...

Every call of ``spark_jobs.audit.job.audit`` (directly, or through ``check_quality.main``)
appends one JSON line: the test's node id, the call's number within the test, its run id and
the rows it returned, canonical (:func:`dq_diff.canonical`). The tests run as they are: the
wrapper returns the audit's rows unchanged.
"""

from __future__ import annotations

import functools
import json
import os

import pytest

import dq_diff

_current = {"test": None, "calls": 0}


def pytest_configure(config):
    path = os.environ.get("DQ_CAPTURE")
    if not path:
        return
    from spark_jobs import check_quality
    from spark_jobs.audit import job

    audit = job.audit

    @functools.wraps(audit)
    def recorded(spark, wh, run_id, *args, **kwargs):
        rows = audit(spark, wh, run_id, *args, **kwargs)
        _current["calls"] += 1
        with open(path, "a") as f:
            f.write(json.dumps({"test": _current["test"], "call": _current["calls"],
                                "run_id": run_id,
                                "rows": dq_diff.canonical(rows, [config.rootpath])},
                               sort_keys=True) + "\n")
        return rows

    job.audit = recorded
    check_quality.audit = recorded


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _current["test"], _current["calls"] = item.nodeid, 0
