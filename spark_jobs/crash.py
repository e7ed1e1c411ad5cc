"""Why a job stopped, in one line, printed before its traceback.

A job that raises (S3 unreachable, a catalog that refuses a commit, a JVM error) prints a
traceback of tens of lines whose last line is the cause; Airflow logs spark-submit's output
at INFO, so the cause ends up under the traceback. :func:`run` runs a job's ``main`` and,
when it raises, prints the cause first (:data:`CAUSE_PREFIX` + :func:`cause_of`), then the
traceback; a job that stops on a known error without raising prints the same line
(:func:`cause_line`). ``kafkalog_pipeline.operators`` reads that line from spark-submit's
output: logged at ERROR, pushed to XCom (``kafkalog_pipeline.tasks.CAUSE_KEY``) for the
run's note and its Data quality tab, and the task's failure message.
"""

from __future__ import annotations

import sys
import traceback

#: the first words of a job's cause line (spark-submit's output, the task log)
CAUSE_PREFIX = "kafkalog job stopped: "
#: a cause line's longest text (a Java exception's message can be its whole stack)
MAX_CAUSE = 300


def short(text: str) -> str:
    """``text``'s first non-empty line, whitespace collapsed, at most :data:`MAX_CAUSE`."""
    line = next((" ".join(t.split()) for t in str(text).splitlines() if t.strip()), "")
    return line if len(line) <= MAX_CAUSE else line[:MAX_CAUSE - 1] + "…"


def cause_of(err: BaseException) -> str:
    """``StorageError: s3://b/k: could not connect to …``: the exception's type and the
    first line of its message (the type alone where it has none)."""
    text = short(str(err))
    return short(f"{type(err).__name__}: {text}" if text else type(err).__name__)


def cause_line(cause: str) -> str:
    """The line a job prints for why it stopped."""
    return CAUSE_PREFIX + short(cause)


def run(main, argv=None, out=None) -> int:
    """``main(argv)``'s exit status (its int result, else 0); when it raises, its cause line
    (:func:`cause_line`) and then the traceback on ``out`` (stderr), and 1."""
    out = out or sys.stderr
    try:
        result = main(argv)
    except Exception as err:  # noqa: BLE001 - reported, then the job's exit status says it
        print(cause_line(cause_of(err)), file=out, flush=True)
        traceback.print_exc(file=out)
        out.flush()
        return 1
    return result if isinstance(result, int) and not isinstance(result, bool) else 0
