"""Warehouse maintenance: compact small files and manifests, expire old snapshots, delete
orphan files.

    python -m spark_jobs.maintenance --warehouse W [--catalog NAME] [--namespace NS]
        [--older-than-days 7] [--retain-last 10] [--orphan-grace-hours 72]
        [--min-files 4] [--target-file-mb 128] [--groups-per-commit 100]
        [--min-manifests 2] [--table NAME ...] [--clean-metadata] [--dry-run]

:func:`maintain` runs the four steps on every table, in this order (each one's output is
what the next one frees), then cleans the scratch space; :func:`main` is the command line.
It prints the JSON summary :func:`maintain` returns.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

from spark_jobs import layout, schemas, storage
from spark_jobs.maintenance.compaction import DEFAULT_GROUPS_PER_COMMIT, compact_table
from spark_jobs.maintenance.errors import MaintenanceError
from spark_jobs.maintenance.expiry import (DEFAULT_OLDER_THAN_DAYS, DEFAULT_RETAIN_LAST,
                                           expire_table)
from spark_jobs.maintenance.grouping import DEFAULT_MIN_FILES, DEFAULT_TARGET_FILE_MB
from spark_jobs.maintenance.manifests import DEFAULT_MIN_MANIFESTS, merge_manifests
from spark_jobs.maintenance.orphans import (DEFAULT_ORPHAN_GRACE_HOURS, clean_scratch,
                                            remove_orphans)
from spark_jobs.warehouse import CatalogError, Warehouse, add_catalog_args

#: the per-table figures a summary also gives in total
TOTALS = ("expired_snapshots", "orphans_deleted", "orphan_bytes", "groups_compacted",
          "groups_skipped", "files_compacted", "files_before", "files_after",
          "manifests_before", "manifests_after")


def existing_tables(wh: Warehouse, names=None) -> list[str]:
    """The warehouse's tables among ``names`` (default: all, the internal topics' and the
    typed per-topic tables included) that exist (none is created)."""
    if names:
        return [n for n in names if wh.load(n) is not None]
    existing = wh.table_names()
    return ([n for n in schemas.ALL_NAMES if n in existing] + list(wh.typed_tables(existing))
            + list(wh.keyed_tables(existing)))


def maintain(wh: Warehouse, *, names=None,
             older_than_days: float = DEFAULT_OLDER_THAN_DAYS,
             retain_last: int = DEFAULT_RETAIN_LAST,
             orphan_grace_hours: float = DEFAULT_ORPHAN_GRACE_HOURS,
             min_files: int = DEFAULT_MIN_FILES, target_file_mb: int = DEFAULT_TARGET_FILE_MB,
             groups_per_commit: int = DEFAULT_GROUPS_PER_COMMIT,
             min_manifests: int = DEFAULT_MIN_MANIFESTS,
             dry_run: bool = False, clean_metadata: bool = False,
             now: dt.datetime | None = None) -> dict:
    """Compact files and manifests, expire, delete orphans on every table of ``wh`` (or
    ``names``), then the scratch space. Returns the JSON-able summary: totals and per
    table."""
    t0 = time.time()
    now = now or dt.datetime.now(dt.timezone.utc)
    grace = dt.timedelta(hours=orphan_grace_hours)
    out = {"warehouse": wh.root, "catalog": wh.catalog_name, "namespace": wh.namespace,
           "dry_run": dry_run, "tables": {}}
    for name in existing_tables(wh, names):
        t = time.time()
        res = compact_table(wh, name, min_files=min_files, target_bytes=target_file_mb << 20,
                            groups_per_commit=groups_per_commit, dry_run=dry_run)
        res.update(merge_manifests(wh, name, min_manifests=min_manifests, dry_run=dry_run))
        res.update(expire_table(wh, name, older_than=now - dt.timedelta(days=older_than_days),
                                retain_last=retain_last, dry_run=dry_run))
        res.update(remove_orphans(wh, name, grace=grace, now=now, dry_run=dry_run,
                                  clean_metadata=clean_metadata))
        res["seconds"] = round(time.time() - t, 3)
        out["tables"][name] = res
    out.update(clean_scratch(wh, grace=grace, now=now, dry_run=dry_run))
    for key in TOTALS:
        out[key] = sum(t[key] for t in out["tables"].values())
    out["seconds"] = round(time.time() - t0, 3)
    return out


def table_name(name: str) -> str:
    """``--table``'s type: a fixed table's name or a typed table's (layout.typed_table_name)."""
    if name in schemas.ALL_NAMES or layout.typed_topic(name) is not None:
        return name
    raise argparse.ArgumentTypeError(f"no table {name!r}: one of {', '.join(schemas.ALL_NAMES)} "
                                     "or values__<topic>")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m spark_jobs.maintenance",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, help="the warehouse root W (local path or s3://)")
    add_catalog_args(p)
    p.add_argument("--table", action="append", type=table_name, metavar="TABLE",
                   help="only this table: one of %s or a typed table values__<topic> "
                        "(repeatable; default: every table)" % ", ".join(schemas.ALL_NAMES))
    p.add_argument("--older-than-days", type=float, default=DEFAULT_OLDER_THAN_DAYS,
                   help="expire snapshots older than this (default %(default)s)")
    p.add_argument("--retain-last", type=int, default=DEFAULT_RETAIN_LAST,
                   help="always keep this many of main's last snapshots (default %(default)s)")
    p.add_argument("--orphan-grace-hours", type=float, default=DEFAULT_ORPHAN_GRACE_HOURS,
                   help="delete unreferenced files only when older than this (default "
                        "%(default)s): longer than any run takes")
    p.add_argument("--min-files", type=int, default=DEFAULT_MIN_FILES,
                   help="compact a partition value's files of one run when it has at least "
                        "this many small ones (default %(default)s)")
    p.add_argument("--target-file-mb", type=int, default=DEFAULT_TARGET_FILE_MB,
                   help="files from this size on are not small; a rewritten file stays "
                        "under it (default %(default)s)")
    p.add_argument("--groups-per-commit", type=int, default=DEFAULT_GROUPS_PER_COMMIT,
                   help="rewritten groups committed together in one snapshot (default "
                        "%(default)s)")
    p.add_argument("--min-manifests", type=int, default=DEFAULT_MIN_MANIFESTS,
                   help="merge main's manifests when it has at least this many small ones "
                        "(default %(default)s)")
    p.add_argument("--clean-metadata", action="store_true",
                   help="also delete unreferenced manifests, manifest lists and metadata "
                        "files under each table's metadata/ (older than the grace)")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    p.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL)")
    args = p.parse_args(argv)
    if args.retain_last < 1:
        p.error("--retain-last must be at least 1")
    if args.min_files < 2 or args.min_manifests < 2:
        p.error("--min-files and --min-manifests must be at least 2")
    if args.groups_per_commit < 1 or args.target_file_mb < 1:
        p.error("--groups-per-commit and --target-file-mb must be positive")
    return args


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    config = storage.S3Config.from_env(args.s3_endpoint) if storage.is_s3(args.warehouse) \
        or args.s3_endpoint else None
    wh = Warehouse(args.warehouse, args.catalog, args.namespace, config)
    try:
        summary = maintain(wh, names=args.table, older_than_days=args.older_than_days,
                           retain_last=args.retain_last,
                           orphan_grace_hours=args.orphan_grace_hours, min_files=args.min_files,
                           target_file_mb=args.target_file_mb,
                           groups_per_commit=args.groups_per_commit,
                           min_manifests=args.min_manifests, dry_run=args.dry_run,
                           clean_metadata=args.clean_metadata)
    except (MaintenanceError, CatalogError) as err:
        print(f"maintenance: {err}", file=sys.stderr)
        raise SystemExit(1) from err
    print(json.dumps(summary, sort_keys=True))
    return summary
