"""great-expectations in its own process (expectations/gx_process.py), as a spark-submitted
audit runs it: the same summary and Data Docs as in process, and failures said, not lost.

The verdict rows are of the audit's own columns (``spark_jobs.audit.rows.VERDICT_COLUMNS``);
no Spark: the verdicts are rows on the driver.
"""

from __future__ import annotations

import os
import shutil

import pytest

from expectations import suites
from expectations.gx_process import GxError, GxProcess
from spark_jobs.audit.rows import VERDICT_COLUMNS

RUN = "scheduled__2026-12-01T03:00:00+00:00"
CHECKS = ["crc", "offset_gaps", "duplicate_offsets"]
#: check, topic, partition, class, status, severity, items, offsets, max_value, example
VERDICTS = [
    ("crc", "orders", 0, "mismatch", "fail", "fail", 1, 1, None, "batch at 40: stored != computed"),
    ("offset_gaps", "orders", 0, "unexplained", "warn", "warn", 2, 5, 3, "gap 10..12"),
    ("offset_gaps", "orders", 1, "compacted", "pass", "pass", 1, 2, 2, "compacted 3..4"),
]


def docs_files(folder: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, fs in os.walk(folder) for f in fs)


def test_the_child_validates_as_the_process_itself_does(tmp_path):
    with GxProcess() as gx:
        got, got_dir = gx.validate(VERDICTS, VERDICT_COLUMNS, RUN, CHECKS, str(tmp_path / "child"))
    want, want_dir = suites.validate(VERDICTS, VERDICT_COLUMNS, RUN, CHECKS, str(tmp_path / "here"))
    assert got == want == {"crc": {"fail": 1, "warn": 0}, "offset_gaps": {"fail": 0, "warn": 1},
                           "duplicate_offsets": {"fail": 0, "warn": 0}}
    assert docs_files(got_dir) == docs_files(want_dir)
    assert "index.html" in docs_files(got_dir)
    assert len(docs_files(got_dir)) == len(CHECKS) + 1


def test_a_failure_in_the_child_is_raised_with_its_cause_and_the_child_answers_again():
    with GxProcess() as gx:
        with pytest.raises(GxError, match="KeyError.*'float'"):
            gx.validate(VERDICTS, "check string, topic float", RUN, CHECKS)
        summary, docs = gx.validate(VERDICTS, VERDICT_COLUMNS, RUN, ["crc"])
        assert summary == {"crc": {"fail": 1, "warn": 0}}
        assert os.path.exists(os.path.join(docs, "index.html"))
        shutil.rmtree(docs)


def test_a_child_that_died_is_said_to_have_ended():
    gx = GxProcess()
    try:
        gx._process.kill()  # noqa: SLF001 - the test kills the child it started
        gx._process.join()  # noqa: SLF001
        with pytest.raises(GxError, match="ended \\(exit status -9\\) before it answered"):
            gx.validate(VERDICTS, VERDICT_COLUMNS, RUN, CHECKS)
    finally:
        gx.close()
