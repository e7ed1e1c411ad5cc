"""What makes a test a pipeline test, seen while it runs (tests/conftest.py fails a test that
does it without the ``pipeline`` marker): a command it starts (``spark-submit``, Airflow,
Chromium, ``python -m spark_jobs...``/``airflow``), or a JVM child of the test process that was
not there before it (a Spark session's gateway, however it was made). The ``spark`` and
``s3_endpoint`` fixtures mark their users by themselves (conftest's PIPELINE_FIXTURES)."""

from __future__ import annotations

import os
from pathlib import Path

#: programs whose start makes a test a pipeline test
PROGRAMS = frozenset({"spark-submit", "spark-class", "pyspark", "airflow", "chromium",
                      "chromium-browser", "google-chrome"})
#: ``python -m <module>`` entry points that run Spark or Airflow
MODULES = ("spark_jobs", "airflow", "kafkalog_pipeline.spark_entry")


def pipeline_command(args) -> str | None:
    """The program or module ``args`` (a Popen argument) starts if it is one of Spark's,
    Airflow's or a browser's, else None."""
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    argv = [os.fsdecode(a) for a in argv]
    if not argv:
        return None
    words = argv[0].split() if len(argv) == 1 else argv  # a shell string
    name = Path(words[0]).name
    if name in PROGRAMS:
        return name
    for word, module in zip(words, words[1:]):
        if word == "-m" and any(module == m or module.startswith(m + ".") for m in MODULES):
            return f"python -m {module}"
    return None


def jvm_children(pid: int | None = None) -> set[int]:
    """The pids of ``pid``'s (this process's) children that are JVMs (Linux /proc; empty
    elsewhere)."""
    pid = os.getpid() if pid is None else pid
    out = set()
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids = children.read_text().split()
        except OSError:
            continue
        for kid in kids:
            try:
                if Path(f"/proc/{kid}/comm").read_text().strip() == "java":
                    out.add(int(kid))
            except OSError:
                continue
    return out
