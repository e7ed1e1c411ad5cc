"""OpenLineage for the nightly DAG (docs/lineage.md): the datasets a task reads and writes,
named by OpenLineage's dataset naming, the audit's results as data-quality facets, and
what spark-submit is handed so that the Spark run's events name the Airflow task's run as
their parent.

The Airflow side is apache-airflow-providers-openlineage: its listener emits each task's
START / COMPLETE / FAIL; our operators (:mod:`kafkalog_pipeline.operators`) give it their
inputs and outputs through ``get_openlineage_facets_on_start/complete/failure``, built here.

**Names** (OpenLineage's naming spec, spec/Naming.md; an Iceberg table as OpenLineage's Spark
integration names one, ``IcebergHandler``): a location is namespace ``s3://{bucket}`` and
name ``{key}``, or namespace ``file`` and name ``{absolute path}``. A night's snapshot is its
prefix (``s3://bucket/nightly/2026-11-21``), a tier its ``s3://bucket/prefix``. An Iceberg
table is its table location (``file`` + ``/W/kafka/records``; the table's asset has that
dataset's URI, ``file:///W/kafka/records``: :func:`dataset_uri`), with a ``symlinks`` facet
of type ``TABLE`` naming it in its catalog (``kafka.records`` in the catalog's URI) and a
``catalog`` facet (framework ``iceberg``, the catalog's type, name, URI and warehouse).

Nothing here runs at DAG parse time: OpenLineage's client and pyiceberg are imported inside
the functions.
"""

from __future__ import annotations

import logging
from urllib.parse import urlparse

log = logging.getLogger(__name__)

#: the Spark properties OpenLineage's Spark integration reads (and our jobs too:
#: spark_jobs/lineage.py): ``parentRunId``, ``parentJobName``, ... and ``transport.*``
SPARK_PREFIX = "spark.openlineage."
#: what an audit check's unit says about the table its results are about (the others: records)
UNIT_TABLES = {"batches": "batches", "records": "records", "segments": "ledger"}
DEFAULT_DQ_TABLE = "records"


def enabled() -> bool:
    """Whether the OpenLineage provider is installed and configured (a transport set)."""
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:
        return False
    return not is_disabled()


# ---------------------------------------------------------------- names
def location_name(uri: str) -> tuple[str, str]:
    """``(namespace, name)`` of a storage location: ``s3://b/k/`` -> ``("s3://b", "k")``;
    ``/p`` or ``file:///p`` -> ``("file", "/p")`` (a trailing ``/`` dropped)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        import os

        return "file", os.path.abspath(parsed.path if parsed.scheme else uri).rstrip("/") or "/"
    return f"{parsed.scheme}://{parsed.netloc}", parsed.path.strip("/")


def dataset_uri(uri: str) -> str:
    """The URI of location ``uri``'s dataset: its namespace and name joined as the naming spec
    joins them (``s3://b`` + ``k`` -> ``s3://b/k``; ``file`` + ``/p`` -> ``file:///p``), which
    Airflow's asset converters turn back into the same pair (the common-io provider's for
    ``file``, the Amazon provider's for ``s3``): a table asset's URI
    (:mod:`kafkalog_pipeline.assets`)."""
    namespace, name = location_name(uri)
    return f"file://{name}" if namespace == "file" else f"{namespace}/{name}"


def location_dataset(uri: str, kind: str = "input", facets=None, io_facets=None):
    """An OpenLineage input (or output) dataset of a location."""
    from openlineage.client.event_v2 import InputDataset, OutputDataset

    namespace, name = location_name(uri)
    if kind == "input":
        return InputDataset(namespace=namespace, name=name, facets=facets or {},
                            inputFacets=io_facets or {})
    return OutputDataset(namespace=namespace, name=name, facets=facets or {},
                         outputFacets=io_facets or {})


def source_datasets(plan: dict | None, tier: str | None) -> list:
    """The run's inputs: each night's snapshot prefix (the plan's XCom), and the tier."""
    uris = list((plan or {}).get("prefixes") or [])
    if tier:
        uris.append(tier)
    return [location_dataset(u) for u in uris]


def run_warehouse(ti, access=None):
    """The warehouse run ``ti.run_id`` writes, from its plan's XComs (None before the plan)."""
    from .tasks import CATALOG_KEY, NAMESPACE_KEY, PLAN_TASK, WAREHOUSE_KEY, open_warehouse

    root = ti.xcom_pull(task_ids=PLAN_TASK, key=WAREHOUSE_KEY)
    if not root:
        return None
    return open_warehouse(root, access,
                          catalog=ti.xcom_pull(task_ids=PLAN_TASK, key=CATALOG_KEY),
                          namespace=ti.xcom_pull(task_ids=PLAN_TASK, key=NAMESPACE_KEY))


def run_tables(wh, run_id: str) -> list[str]:
    """The tables run ``run_id`` has a branch of (what it wrote and has not published)."""
    return [n for n in wh.run_tables() if wh.staged_snapshot(n, run_id) is not None]


def catalog_identity(wh) -> tuple[str, dict]:
    """``(namespace of the symlink, catalog facet kwargs)`` of warehouse ``wh``'s catalog: the
    catalog's URI (password masked) where it has one, else its warehouse location."""
    from spark_jobs.warehouse.catalog import catalog_properties, mask_password

    props = catalog_properties(wh.root, wh.catalog_name, wh.s3)
    uri = mask_password(str(props.get("uri") or ""))
    warehouse = str(props.get("warehouse") or wh.root)
    facet = {"framework": "iceberg", "type": str(props.get("type") or "sql"),
             "name": wh.catalog_name, "metadataUri": uri or None, "warehouseUri": warehouse,
             "source": "pyiceberg"}
    return uri or warehouse, facet


def table_datasets(wh, names, kind: str = "output", *, ref: str | None = None,
                   io_facets: dict | None = None) -> list:
    """The Iceberg tables ``names`` of warehouse ``wh`` (a ``spark_jobs.warehouse.Warehouse``)
    as OpenLineage datasets; a table that does not exist is left out. ``ref``: the branch or
    snapshot the dataset's version facet names (default: main's head). ``io_facets``: table
    name -> its input (or output) facets."""
    from openlineage.client.generated.catalog_dataset import CatalogDatasetFacet
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
    from openlineage.client.generated.storage_dataset import StorageDatasetFacet
    from openlineage.client.generated.symlinks_dataset import Identifier, SymlinksDatasetFacet

    symlink_ns, catalog = catalog_identity(wh)
    out = []
    for name in names:
        table = wh.load(name)
        if table is None:
            continue
        facets = {
            "symlinks": SymlinksDatasetFacet(identifiers=[
                Identifier(namespace=symlink_ns, name=f"{wh.namespace}.{name}", type="TABLE")]),
            "catalog": CatalogDatasetFacet(**catalog),
            "storage": StorageDatasetFacet(storageLayer="iceberg", fileFormat="parquet"),
        }
        snapshot = _snapshot(table, ref)
        if snapshot is not None:
            facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(snapshot.snapshot_id))
        out.append(location_dataset(table.location(), kind, facets,
                                    (io_facets or {}).get(name)))
    return out


def _snapshot(table, ref: str | None):
    if ref is not None:
        found = table.refs().get(ref)
        if found is not None:
            return table.snapshot_by_id(found.snapshot_id)
    return table.current_snapshot()


def row_count(table, ref: str | None = None) -> int | None:
    """The rows of ``table`` at ``ref`` (else main), from its snapshot summary."""
    snapshot = _snapshot(table, ref)
    if snapshot is None or snapshot.summary is None:
        return None
    value = snapshot.summary.get("total-records")
    return None if value is None else int(value)


# ---------------------------------------------------------------- the audit's results
def quality_facets(wh, rows, run_id: str) -> dict[str, dict]:
    """Table name -> its ``dataQualityAssertions`` and ``dataQualityMetrics`` input facets, from
    the run's dq_results rows (``spark_jobs.audit.results.DqResult``): one assertion per check
    and place (``success`` = not failed; ``severity`` = the graded status; the place as
    ``column`` only where it is none: a topic-partition is no column), on the table of the
    check's unit (:data:`UNIT_TABLES`), and each table's row count at the run's branch head."""
    from openlineage.client.generated.data_quality_assertions_dataset import (
        Assertion, DataQualityAssertionsDatasetFacet)
    from openlineage.client.generated.data_quality_metrics_input_dataset import (
        DataQualityMetricsInputDatasetFacet)

    from spark_jobs.audit.registry import UNITS
    from spark_jobs.audit.results import place
    from spark_jobs.warehouse import branch_name

    assertions: dict[str, list] = {}
    for r in rows:
        table = UNIT_TABLES.get(UNITS.get(r.check, ""), DEFAULT_DQ_TABLE)
        assertions.setdefault(table, []).append(Assertion(
            assertion=r.check, success=r.status != "fail", severity=r.status,
            name=f"{r.check} {place(r._asdict())}", actual=str(r.failed),
            params={"place": place(r._asdict()), "observed": r.observed, "failed": r.failed}))
    out = {}
    for name, items in assertions.items():
        table = wh.load(name)
        count = row_count(table, branch_name(run_id)) if table is not None else None
        out[name] = {"dataQualityAssertions": DataQualityAssertionsDatasetFacet(assertions=items),
                     "dataQualityMetrics": DataQualityMetricsInputDatasetFacet(
                         columnMetrics={}, rowCount=count)}
    return out


# ---------------------------------------------------------------- spark-submit
def spark_properties(conf: dict | None, context) -> dict:
    """``conf`` with the OpenLineage properties of this task try: the parent run (the
    provider's ``inject_parent_job_information_into_spark_properties``: this task's run id,
    job name and namespace, and the DAG run's as the root) and the transport (the provider's
    for an ``http`` transport; a ``file`` transport as ``transport.type=file`` and
    ``transport.location``, the keys OpenLineage's Spark integration reads; ``console`` as
    is). Any OpenLineage properties of an earlier try are replaced (the run id is per try).
    Unchanged where OpenLineage is not enabled."""
    base = {k: v for k, v in (conf or {}).items() if not str(k).startswith(SPARK_PREFIX)}
    if not enabled():
        return dict(conf or {})
    from airflow.providers.openlineage import conf as ol_conf
    from airflow.providers.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
        inject_transport_information_into_spark_properties)

    out = inject_parent_job_information_into_spark_properties(base, context)
    transport = ol_conf.transport()
    kind = transport.get("type")
    if kind == "file" and transport.get("log_file_path"):
        out[f"{SPARK_PREFIX}transport.type"] = "file"
        out[f"{SPARK_PREFIX}transport.location"] = str(transport["log_file_path"])
    elif kind == "console":
        out[f"{SPARK_PREFIX}transport.type"] = "console"
    else:
        out = inject_transport_information_into_spark_properties(out, context)
    return out


def task_lineage(inputs=(), outputs=(), run_facets=None):
    """The provider's ``OperatorLineage`` of a task."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=list(inputs), outputs=list(outputs),
                           run_facets=run_facets or {})
