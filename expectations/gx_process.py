"""great-expectations in a process of its own, imported while the audit's Spark work runs.

Importing great_expectations costs about 5 s of one core here, most of a cold audit's own
Python time (``bench/bench_audit.py``). An audit that runs as its own process
(``spark_jobs.check_quality`` under spark-submit, as the DAG runs it) starts a
:class:`GxProcess` before its Spark session: the child imports great_expectations and this
package's suites and Data Docs on the machine's other core while the session starts and the
checks run, then waits. At the end the audit hands it the verdict rows; the child runs
:func:`expectations.suites.validate` (the same suites, checkpoint and Data Docs as in
process) and answers with its summary and the folder of the built docs. An audit in a process
that already holds great_expectations (the tests' shared session) validates in process.

The child is started with ``spawn`` (no fork of a process holding a JVM gateway's sockets and
threads) and is a daemon: it ends with the audit, or at :meth:`GxProcess.close`.
"""

from __future__ import annotations

import multiprocessing
import traceback

#: how long :meth:`GxProcess.close` waits for the child to exit before terminating it
CLOSE_SECONDS = 10


class GxError(RuntimeError):
    """great-expectations failed in its process (the child's traceback is the message's tail)."""


class GxProcess:
    """A child process holding great_expectations (see the module's text); a context manager."""

    def __init__(self):
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True,
                                        name="great-expectations")
        self._process.start()
        child.close()

    def validate(self, verdicts: list[tuple], columns: str, run_id: str, checks,
                 docs_dir: str | None = None):
        """:func:`expectations.suites.validate` in the child: ``(summary, docs_dir)``."""
        try:
            self._conn.send((verdicts, columns, run_id, list(checks), docs_dir))
            ok, value = self._conn.recv()
        except (EOFError, OSError) as err:
            self._process.join(1)
            raise GxError(f"great-expectations' process ended (exit status "
                          f"{self._process.exitcode}) before it answered: {err!r}") from err
        if not ok:
            raise GxError(value)
        return value

    def close(self) -> None:
        self._conn.close()  # the child's recv() ends: it exits
        self._process.join(CLOSE_SECONDS)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()

    def __enter__(self) -> GxProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve(conn) -> None:
    """The child: import, then validate each request until the parent closes the pipe. A failed
    import is answered to the first request (so that the audit says why)."""
    failure = None
    try:
        from expectations import suites
        suites.preload()
    except BaseException:  # noqa: BLE001 - answered, not lost
        failure = traceback.format_exc()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if failure is not None:
            conn.send((False, f"great-expectations did not import:\n{failure}"))
            continue
        try:
            conn.send((True, suites.validate(*request)))
        except BaseException as err:  # noqa: BLE001 - answered, not lost
            conn.send((False, f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))
