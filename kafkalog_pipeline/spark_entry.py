"""The application spark-submit runs: ``spark_entry.py MODULE ARGS...`` calls ``MODULE.main(ARGS)``.

Running a job by importing its module (rather than as the ``__main__`` script)
keeps two things right whatever the job file looks like: package-relative
imports work (``from . import storage``), and functions shipped to executors
are pickled by reference to their module instead of by value from ``__main__``.
Only modules under ``spark_jobs.`` are accepted. The exit status is ``main``'s
integer result (0 for anything else), or 1 if it raised: then its cause, one line
(``spark_jobs.crash.CAUSE_PREFIX``), comes first and the traceback after it. A job whose
session emitted an OpenLineage START (``spark_jobs.lineage``) ends it here: COMPLETE for a
zero exit status, FAIL otherwise.
"""

from __future__ import annotations

import importlib
import os
import sys

# run as a script, this file's folder leads sys.path: keep its module names from shadowing others
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def main(argv: list[str]) -> int:
    if not argv or not argv[0].startswith("spark_jobs."):
        print("usage: spark_entry.py spark_jobs.<job> [ARGS...]", file=sys.stderr)
        return 2
    from spark_jobs import crash

    try:
        module = importlib.import_module(argv[0])
    except Exception as err:  # noqa: BLE001 - a job that cannot even import says why first
        print(crash.cause_line(f"{argv[0]}: {crash.cause_of(err)}"), file=sys.stderr, flush=True)
        raise
    sys.argv = [module.__file__, *argv[1:]]
    from spark_jobs import lineage

    status = crash.run(module.main, argv[1:])
    lineage.finished(status == 0, None if status == 0 else f"{argv[0]} exited with status {status}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
