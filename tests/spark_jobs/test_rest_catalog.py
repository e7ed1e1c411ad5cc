"""The pipeline through an Iceberg REST catalog (issue 46): a real HTTP server on 127.0.0.1.

The server is tests/rest_catalog.py (the REST spec's endpoints over pyiceberg's SQL catalog,
in a subprocess stopped by its pid); the pipeline reaches it as any deployment would, through
pyiceberg's ``RestCatalog`` (``type: rest`` in the warehouse's ``.pyiceberg.yaml``). Two
nights (decode, audit, publish with the audit required, as the DAG runs them), a rerun of
night 2, a publish whose commit the server refuses with ``409 CommitFailedException`` (another
run moved ``main`` between its read and its commit) and which ``warehouse.commits`` plans
again, then maintenance (compaction, expiry, orphans). After each step the records table is
counted against the truth, the segments decoded by ``kafkalog.decode`` on their own: lost 0,
duplicated 0. Every exchange the server logged is then checked against the Iceberg REST
OpenAPI document (tests/data/iceberg_rest/, vendored from apache/iceberg): each route and
method is one of the spec's operations, each status one it documents, each request and
response body valid against the spec's schema for it.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import pytest
from tests.rest_catalog import PREFIX, ROUTES, RestCatalogServer
from tests.runs import decode
from tests.snapshots import numbered
from tests.spark_jobs.faults import around_commits, lost_and_duplicated, published, staged_run, truth

from spark_jobs import check_quality, publish
from spark_jobs.warehouse import Warehouse
from spark_jobs.warehouse.catalog import write_config

pytestmark = pytest.mark.pipeline

OPENAPI = Path(__file__).resolve().parents[1] / "data" / "iceberg_rest" / \
    "rest-catalog-open-api.yaml"


@pytest.fixture(scope="module")
def rest_catalog(tmp_path_factory):
    with RestCatalogServer(tmp_path_factory.mktemp("rest")) as server:
        yield server


def rest_warehouse(server: RestCatalogServer, root: Path) -> str:
    """A warehouse root whose catalog ``kafkalog`` is the REST server."""
    write_config(str(root), "kafkalog", {"type": "rest", "uri": server.uri})
    return str(root)


def night(spark, src, wh: str, run_id: str) -> None:
    """A night as the DAG runs it: decode to the run's branch, audit it, publish what the
    audit read."""
    decode(spark, src, wh, run_id, "--no-publish")
    assert check_quality.main(["--warehouse", wh, "--run-id", run_id, "--no-docs"],
                              spark=spark) == 0
    publish.publish(wh, run_id, audited=True)


@contextlib.contextmanager
def another_publish_before_the_first_commit_to_main(wh: str, other_run: str):
    """The next commit that moves ``records``' main first lets run ``other_run`` publish
    (through the server, for real): the commit then carries a stale requirement."""
    from pyiceberg.table import update

    fired = []

    def hook(commit, table, updates, requirements):
        moves_main = any(isinstance(u, update.SetSnapshotRefUpdate) and u.ref_name == "main"
                         for u in updates)
        if moves_main and table.name()[-1] == "records" and not fired:
            fired.append(other_run)
            publish.publish(wh, other_run)
        return commit(table, updates, requirements)

    with around_commits(hook):
        yield fired


def test_two_nights_a_rerun_a_refused_commit_and_maintenance_through_a_rest_catalog(
        spark, rest_catalog, tmp_path):
    from spark_jobs.maintenance.job import maintain

    wh = rest_warehouse(rest_catalog, tmp_path / "wh")
    n1 = numbered(tmp_path / "n1", batches=3)
    n2 = numbered(tmp_path / "n2", batches=5)  # night 1's batches and two more
    want1, want2 = truth(n1), truth(n2)
    assert want1 < want2
    night(spark, n1, wh, "night-1")
    assert lost_and_duplicated(want1, published(wh)) == (0, 0)
    decode(spark, n2, wh, "night-2")  # decode and publish (the audit's commits: night 1's)
    assert lost_and_duplicated(want2, published(wh)) == (0, 0)
    decode(spark, n2, wh, "night-2")  # the rerun, under the same run id
    assert lost_and_duplicated(want2, published(wh)) == (0, 0)

    # two runs of other partitions staged; run a's publish meets run b's, published first
    rows = {"a": {5: range(0, 10)}, "b": {6: range(0, 7)}}
    warehouse = Warehouse(wh)
    for run_id, parts in rows.items():
        staged_run(warehouse, run_id, parts)
    want = want2 | {("orders", p, o) for parts in rows.values() for p, r in parts.items()
                    for o in r}
    before = len(rest_catalog.exchanges())
    with another_publish_before_the_first_commit_to_main(wh, "b") as fired:
        publish.publish(wh, "a")
    assert fired == ["b"]
    # refused: a's commits to a main b moved (records, then each table a loaded before b's
    # publish), each then planned again at the new head
    refused = [e for e in rest_catalog.exchanges()[before:] if e["status"] == 409]
    assert {(e["method"], e["route"], e["response"]["error"]["type"]) for e in refused} == {
        ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}", "CommitFailedException")}
    assert "records" in {e["request"]["identifier"]["name"] for e in refused}
    assert lost_and_duplicated(want, published(wh)) == (0, 0)

    # maintenance: an orphan (a crashed writer's file, past the grace period), manifests
    # merged, snapshots expired, each a commit through the server
    import os
    import time

    maintained = Warehouse(wh)
    orphan = Path(maintained.data_root("records")[len("file://"):]) / "topic=orders" / \
        "crashed~x~0.parquet"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"x")
    os.utime(orphan, (time.time() - 7200, time.time() - 7200))
    before = len(rest_catalog.exchanges())
    summary = maintain(maintained, older_than_days=0, retain_last=1, orphan_grace_hours=1,
                       min_files=2, min_manifests=2)
    assert summary["expired_snapshots"] > 0 and summary["orphans_deleted"] == 1, summary
    assert summary["manifests_after"] < summary["manifests_before"], summary
    assert not orphan.exists()
    assert any(e["method"] == "POST" and e["status"] == 200 and e["route"].endswith("{table}")
               for e in rest_catalog.exchanges()[before:])
    assert lost_and_duplicated(want, published(wh)) == (0, 0)

    exchanges = rest_catalog.exchanges()
    served = {(e["method"], e["route"]) for e in exchanges}
    assert {("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"),
            ("GET", "/v1/{prefix}/namespaces/{namespace}/tables/{table}")} <= served
    assert not [e for e in exchanges if e["route"].startswith("UNSERVED")], exchanges
    assert served <= set(ROUTES)
    assert_follows_the_spec(exchanges)


# ------------------------------------------------------------------ the OpenAPI document
@functools.lru_cache(maxsize=1)
def spec() -> dict:
    import yaml

    return yaml.load(OPENAPI.read_text(), Loader=yaml.CSafeLoader)


def nullable(node):
    """An OpenAPI 3.0 schema as JSON Schema: ``nullable: true`` becomes the null type."""
    if isinstance(node, dict):
        out = {k: nullable(v) for k, v in node.items() if k != "nullable"}
        if node.get("nullable") and "type" in out:
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(node, list):
        return [nullable(v) for v in node]
    return node


@functools.lru_cache(maxsize=1)
def components() -> dict:
    return nullable(spec()["components"])


def schema_validator(schema: dict):
    """A JSON Schema validator for an OpenAPI 3.0 schema of the spec (its ``$ref``s,
    ``#/components/...``, resolved in the document)."""
    import jsonschema

    return jsonschema.Draft7Validator({**nullable(schema), "components": components()})


def response_schema(doc: dict, operation: dict, status: int) -> dict | None:
    """The JSON schema the spec gives ``operation``'s response ``status`` (None: no body);
    KeyError where the spec documents no such status."""
    responses = operation["responses"]
    found = responses.get(status) or responses.get(str(status)) or \
        responses.get(f"{str(status)[0]}XX")
    if found is None:
        raise KeyError(f"status {status} is not documented")
    while "$ref" in found:
        found = doc["components"]["responses"][found["$ref"].rsplit("/", 1)[1]]
    content = found.get("content") or {}
    return content.get("application/json", {}).get("schema")


def assert_follows_the_spec(exchanges: list[dict]) -> None:
    doc = spec()
    problems = []
    for e in exchanges:
        operation = doc["paths"].get(e["route"], {}).get(e["method"].lower())
        if operation is None:
            problems.append(f"{e['method']} {e['route']}: not an operation of the spec")
            continue
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if e["request"] is not None and body is not None:
            problems += [f"{e['method']} {e['route']} request: {err.message}"
                         for err in schema_validator(body["schema"]).iter_errors(
                             e["request"])][:3]
        try:
            schema = response_schema(doc, operation, e["status"])
        except KeyError as err:
            problems.append(f"{e['method']} {e['route']}: {err}")
            continue
        if e["method"] == "HEAD" or schema is None:
            continue
        problems += [f"{e['method']} {e['route']} {e['status']}: {err.message}"
                     for err in schema_validator(schema).iter_errors(e["response"])][:3]
    assert problems == [], sorted(set(problems))[:20]


def test_the_spec_check_catches_what_it_is_for():
    """A route the spec lacks, an undocumented status and a body off its schema are caught."""
    good = {"method": "GET", "route": "/v1/config", "status": 200, "request": None,
            "response": {"defaults": {}, "overrides": {"prefix": PREFIX}}}
    assert_follows_the_spec([good])
    for bad, said in (({**good, "route": "/v1/nowhere"}, "not an operation"),
                      ({**good, "status": 302}, "not documented"),
                      ({**good, "response": {"defaults": []}}, "is not of type 'object'")):
        with pytest.raises(AssertionError, match=said):
            assert_follows_the_spec([bad])
