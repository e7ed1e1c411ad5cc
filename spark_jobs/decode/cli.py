"""The decode job's command line: its arguments, parsed into what :func:`spark_jobs.decode.job.run`
takes.

    spark-submit spark_jobs/decode_segments.py --input URI --output W --run-id ID [--no-publish]

:func:`main` raises; only the command-line entry (``spark_jobs/decode_segments.py``)
turns an error into an exit status.
"""

from __future__ import annotations

import argparse
import sys

from spark_jobs import layout
from spark_jobs.decode import values
from spark_jobs.decode.job import run
from spark_jobs.decode.planning import DEFAULT_SPLIT_BYTES
from spark_jobs.decode.writing import DEFAULT_MAX_RAW, DEFAULT_READ_AHEAD
from spark_jobs.warehouse import add_catalog_args


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="decode_segments.py",
        description="Decode Kafka segment snapshots into Iceberg tables (records, batches, "
                    "markers, findings, ledger); see docs/tables.md.")
    p.add_argument("--input", required=True,
                   help="a local directory or s3://bucket/prefix holding <topic>-<partition>/"
                        "<base offset>.log at any depth (renamed -delete/-future/-stray "
                        "folders read as their topic; the partitions' state files and the log "
                        "directories' own files, meta.properties, offset checkpoints, KRaft "
                        "snapshots, quorum-state, are read too), or a JSON manifest of segment "
                        "URIs")
    p.add_argument("--output", required=True,
                   help="the warehouse root W (local path or s3://): scratch space, and the "
                        "embedded catalog's home where no catalog is configured")
    p.add_argument("--run-id", required=True,
                   help="this run's id; rerunning an id replaces exactly that run's output")
    p.add_argument("--chunk-id", help="this submission is one chunk of the run (see docs/tables.md)")
    p.add_argument("--night", type=layout.night, metavar="YYYY-MM-DD",
                   help="the snapshot night the input holds, recorded in the ledger (a "
                        "manifest entry's own \"night\" wins); the audit reads a run as of "
                        "its night (default: none)")
    p.add_argument("--no-publish", action="store_true",
                   help="stop after committing to the run's branch (the DAG audits, then runs "
                        "spark_jobs.publish)")
    add_catalog_args(p)
    p.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL)")
    p.add_argument("--reprocess", action="store_true",
                   help="decode every segment from byte 0 even where the ledger proves it "
                        "ingested; published offsets are deduplicated, changed ones give "
                        "divergence findings")
    p.add_argument("--split-bytes", type=int, default=DEFAULT_SPLIT_BYTES,
                   help="split segments with an .index into tasks of about this many bytes "
                        "(default %(default)s)")
    p.add_argument("--max-raw-bytes", type=int, default=DEFAULT_MAX_RAW,
                   help="keep at most this many raw bytes per finding (default %(default)s)")
    p.add_argument("--read-ahead", type=int, default=DEFAULT_READ_AHEAD, metavar="N",
                   help="where small segments on S3 share a Spark task, start reading the "
                        "next N tasks' objects while one decodes (default %(default)s; 0: off)")
    p.add_argument("--schema-registry", metavar="URL|DIR",
                   help="decode keys and values in Schema Registry's wire format with this "
                        "registry: a URL (basic auth from the environment, "
                        f"{values.AUTH_ENV[0]} / {values.AUTH_ENV[1]}), a segment manifest "
                        "(.json) or s3:// prefix holding _schemas segments, a local _schemas "
                        "folder or a schema folder (default: the input's own _schemas segments; none: "
                        "the value columns stay null; docs/schemas.md)")
    p.add_argument(layout.TIERED_STORAGE_FLAG, dest="tiered_storage", metavar="s3://BUCKET/PREFIX",
                   help="also decode the live remote segments of this tiered-storage tier "
                        "(Aiven's plugin; PREFIX is its key.prefix, verbatim), as the input's "
                        "__remote_log_metadata segments name them; a remote segment and the "
                        "local tail are reconciled batch by batch. Encrypted segments need the "
                        f"key ring: {layout.TIER_KEYS_ENV}=a folder of PKCS#8 PEM files, key id "
                        "= file name without .pem (docs/tiered.md)")
    p.add_argument(layout.LATEST_TOPICS_FLAG, dest="latest_topics", type=_regex, metavar="REGEX",
                   help="also keep a latest-per-key table (latest__<topic>: the latest "
                        "committed record per partition and key, tombstones deleting) for the "
                        "topics whose whole name matches; compacted topics get one without "
                        "(docs/tables.md \"Latest per key\")")
    p.add_argument(layout.CDC_TOPICS_FLAG, dest="cdc_topics", type=_regex, metavar="REGEX",
                   help="also keep a change-data-capture table (cdc__<topic>: the source "
                        "table's rows per Debezium key) for the topics whose whole name "
                        "matches; topics whose values look like Debezium envelopes get one "
                        "without (docs/debezium.md)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    return p.parse_args(argv)


def _regex(text: str) -> str:
    """A topic regular expression of the command line (checked here: a bad one is a usage
    error, not a failure after the decode)."""
    import re

    try:
        re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"not a regular expression: {err}") from err
    return text


def main(argv=None, spark=None) -> dict:
    """Run the job on ``argv`` (default: the process's arguments); its summary."""
    return run(parse_args(sys.argv[1:] if argv is None else argv), spark)


__all__ = ["main", "parse_args"]
