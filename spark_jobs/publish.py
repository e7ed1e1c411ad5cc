"""Publish a run's staged tables into the warehouse (the last step of write → audit → publish).

    python -m spark_jobs.publish --warehouse W --run-id ID

Everything the run published before is deleted first, so a rerun replaces
exactly that run's output; the ledger goes last (later runs trust it to skip
bytes), then the commit marker ``_runs/<run_token>.json``, then the staging
folder is removed. No Spark needed: it only copies files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from spark_jobs import schemas, storage, tables


def publish(warehouse: str, run_id: str, config: storage.S3Config | None = None) -> dict:
    token = storage.run_token(run_id)
    wh = storage.open_store(warehouse, config)
    staging_key = f"_staging/{token}"
    staged = [o.key for o in wh.list(staging_key + "/")
              if o.key.endswith(".parquet") and "/_pending/" not in o.key
              and "/_manifests/" not in o.key]
    if not staged and not wh.exists(staging_key):
        raise SystemExit(f"publish: nothing staged for run {run_id!r} under "
                         f"{wh.uri(staging_key)}")
    counts = {}
    for name in schemas.DECODE_TABLES:
        old = tables.table_files(wh, name, token)
        wh.delete(old)
        mine = [k for k in staged if k[len(staging_key) + 1:].split("/", 1)[0] == name]
        for key in mine:
            wh.move(key, key[len(staging_key) + 1:])
        counts[name] = len(mine)
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    marker_key = f"_runs/{token}.json"
    first = json.loads(wh.read(marker_key)).get("first_published_at") \
        if wh.exists(marker_key) else None
    marker = {
        "run_id": run_id, "run_token": token, "files": counts,
        "published_at": now,
        # reruns keep it: later runs' ledgers may rely on what this run ingested first
        "first_published_at": first or now,
    }
    wh.write(marker_key, json.dumps(marker, sort_keys=True).encode())
    wh.delete_prefix(staging_key + "/")
    return marker


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m spark_jobs.publish", description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, help="the warehouse root (local path or s3://)")
    p.add_argument("--run-id", required=True)
    p.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    config = storage.S3Config.from_env(args.s3_endpoint) if storage.is_s3(args.warehouse) else None
    marker = publish(args.warehouse, args.run_id, config)
    print(json.dumps(marker, sort_keys=True))
    return marker


if __name__ == "__main__":
    main()
