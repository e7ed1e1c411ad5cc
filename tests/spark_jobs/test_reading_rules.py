"""Two rules every reader of the warehouse shares, each one function: a column a file lacks
reads null (spark_jobs.parquet.conform, as Iceberg reads a column added after a file was
written) and the night of a run (spark_jobs.layout.run_night). No Spark."""

from __future__ import annotations

import pyarrow as pa

from spark_jobs import layout, schemas
from spark_jobs.parquet import column_or_null, conform


def test_a_column_a_file_lacks_reads_null_in_the_tables_schema():
    schema = schemas.TABLES["ledger"]
    old = pa.table({"run_id": ["r1", "r2"], "topic": ["orders", "orders"],
                    "not_a_ledger_column": [1, 2]})
    got = conform(old, schema)
    assert got.schema == schema  # every column, in order, cast; the unknown one left out
    assert got.column("run_id").to_pylist() == ["r1", "r2"]
    assert got.column(schemas.NIGHT).to_pylist() == [None, None]
    assert conform(schema.empty_table(), schema).num_rows == 0
    field = schema.field(schemas.NIGHT)
    assert column_or_null(old, field).type == field.type
    assert column_or_null(old, schema.field("topic")).to_pylist() == ["orders", "orders"]


def test_the_night_of_a_run_is_its_latest_else_the_jobs():
    assert layout.run_night(["2024-03-01", None, "2024-03-03", "", "2024-03-02"]) == "2024-03-03"
    assert layout.run_night([None, ""], "2024-01-01") == "2024-01-01"
    assert layout.run_night(iter(()), None) is None
    # a night of its own wins over the job's --night
    assert layout.run_night(["2024-03-01"], "2024-05-05") == "2024-03-01"
