"""A derive step's view of the run's branch while another chunk of the run makes a table.

Seen under the real scheduler (``test_backfill``'s first night, two decode chunks side by
side): chunk 1 made ``consumer_offsets`` (its first rows, a fresh warehouse) and had not yet
joined the run's branch on it (``Warehouse.begin_table``, at its commit) when chunk 0's
``producer_txns`` step read the table on the branch: ``LookupError: table consumer_offsets
has no branch or tag 'run_…'``, and chunk 0's try failed (its retry passed). A table made
after a submission began holds none of the run's rows until its maker commits: it reads empty,
as it did a moment before it was made (``Submission.read_branch``). A table the submission
began on must have the branch. No Spark: the embedded catalog in ``tmp_path``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs import schemas
from spark_jobs.derive.step import Submission
from spark_jobs.warehouse import Warehouse

RUN = "manual__2026-12-01T03:00:00+00:00"


def submission(wh: Warehouse, bases: dict) -> Submission:
    return Submission(spark=None, ctx=None, wh=wh, run_id=RUN, night=None, records=[],
                      bases=bases)


def test_a_table_another_chunk_is_making_reads_empty_until_it_joins_the_branch(tmp_path):
    wh = Warehouse(str(tmp_path / "warehouse"))
    bases = wh.begin_run(RUN, reset=True, names=("batches",))  # this chunk's begin
    sub = submission(wh, bases)
    absent = sub.read_branch("consumer_offsets")  # no such table: empty, as before
    assert absent.num_rows == 0 and absent.schema == schemas.TABLES["consumer_offsets"]

    wh.table("consumer_offsets")  # the other chunk makes it (its first rows), no branch yet
    got = sub.read_branch("consumer_offsets")
    assert got.num_rows == 0 and got.schema == schemas.TABLES["consumer_offsets"]
    cols = sub.read_branch("consumer_offsets", columns=("group", "topic"))
    assert cols.num_rows == 0 and cols.schema.names == ["group", "topic"]

    wh.begin_table("consumer_offsets", RUN)  # the other chunk joins the branch at its commit
    assert sub.read_branch("consumer_offsets").num_rows == 0
    assert isinstance(sub.read_branch("batches"), pa.Table)


def test_a_table_the_submission_began_on_must_have_the_run_branch(tmp_path):
    wh = Warehouse(str(tmp_path / "warehouse"))
    wh.table("consumer_offsets")  # exists, and this submission says it began on it
    sub = submission(wh, {"consumer_offsets": wh.table("consumer_offsets")
                          .current_snapshot().snapshot_id})
    with pytest.raises(LookupError, match="has no branch or tag"):
        sub.read_branch("consumer_offsets")
