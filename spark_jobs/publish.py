"""Publish a run's audited commits (the last step of write -> audit -> publish).

    python -m spark_jobs.publish --warehouse W --run-id ID [--catalog NAME]

Each table's ``main`` moves to the run's branch (``run_<run token>``), table by
table, ledger last (later runs trust it to skip bytes); then the branches are
dropped. Publishing again after a crash at any point completes what is left;
a run whose offsets another run published meanwhile is refused (exit 1, naming
that run). See :meth:`spark_jobs.warehouse.Warehouse.publish` and docs/tables.md.
No Spark needed: it only moves references in the catalog.
"""

from __future__ import annotations

import argparse
import json
import sys

from spark_jobs import storage
from spark_jobs.warehouse import (DEFAULT_CATALOG, DEFAULT_NAMESPACE, CatalogError, ConflictError,
                                  NotAudited, NothingStaged, Warehouse, add_catalog_args)


def publish_run(wh: Warehouse, run_id: str, *, audited: bool = False) -> dict:
    """Publish run ``run_id`` in ``wh``; returns ``{"run_id", "tables": {table: action}}``.
    ``audited``: only what the run's newest audit read (else :class:`NotAudited`)."""
    return {"run_id": run_id, "tables": wh.publish(run_id, audited=audited)}


def publish(warehouse: str, run_id: str, config: storage.S3Config | None = None, *,
            catalog: str = DEFAULT_CATALOG,
            namespace: str = DEFAULT_NAMESPACE, audited: bool = False) -> dict:
    """:func:`publish_run` on the warehouse at root ``warehouse``."""
    return publish_run(Warehouse(warehouse, catalog, namespace, config), run_id,
                       audited=audited)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m spark_jobs.publish", description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, help="the warehouse root (local path or s3://)")
    p.add_argument("--run-id", required=True)
    add_catalog_args(p)
    p.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL)")
    p.add_argument("--require-audit", action="store_true",
                   help="publish only the branch heads the run's newest audit read (its "
                        "dq_results snapshot); refuse (exit 1) if the run was written again since")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    config = storage.S3Config.from_env(args.s3_endpoint) if storage.is_s3(args.warehouse) \
        or args.s3_endpoint else None
    try:
        result = publish(args.warehouse, args.run_id, config, catalog=args.catalog,
                         namespace=args.namespace, audited=args.require_audit)
    except (ConflictError, NothingStaged, CatalogError, NotAudited) as err:
        print(f"publish: {err}", file=sys.stderr)
        raise SystemExit(1) from err
    print(json.dumps(result, sort_keys=True))
    return result


if __name__ == "__main__":
    main()
