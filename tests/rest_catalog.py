"""A small Apache Iceberg REST catalog server for the tests, over pyiceberg's SQL catalog.

No installable Python REST catalog server fits the venv (``lakana-server`` 0.20.0 needs
``fastapi>=0.141``; the lock pins 0.136.3), so this one implements the endpoints of the REST
spec (``tests/data/iceberg_rest/rest-catalog-open-api.yaml``, vendored from apache/iceberg)
that pyiceberg's ``RestCatalog`` calls for the pipeline: the configuration, namespaces
(list, create, load, exists), tables (list, create, load, exists, commit, drop) and rename.
Each handler is the spec's operation on a ``SqlCatalog`` (SQLite, a file of its own): a
commit is ``SqlCatalog.commit_table`` with the request's own requirements and updates, which
checks the requirements against the current metadata and swaps the metadata location; a
requirement that no longer holds (or a snapshot beaten to its sequence number by a
concurrent commit) is the spec's ``409 CommitFailedException``, "a conflict with another
commit ... can be retried". Errors are the spec's ``IcebergErrorResponse``.

Every exchange is appended to a JSON-lines log (method, route template, status, request and
response bodies), which ``tests/spark_jobs/test_rest_catalog.py`` validates against the
OpenAPI document. Run as ``python rest_catalog.py --port P --root DIR``; the tests start it
with :class:`RestCatalogServer` (a subprocess on 127.0.0.1, stopped by its pid).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from fastapi import Request  # at module level: FastAPI resolves the handlers' annotations here

#: the path prefix the server hands clients in its configuration (the spec's ``{prefix}``)
PREFIX = "kafkalog"
#: the spec's operations served here: (method, route under /v1)
ROUTES = (
    ("GET", "/v1/config"),
    ("GET", "/v1/{prefix}/namespaces"),
    ("POST", "/v1/{prefix}/namespaces"),
    ("GET", "/v1/{prefix}/namespaces/{namespace}"),
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}"),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/tables"),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/tables"),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"),
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"),
    ("DELETE", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"),
    ("POST", "/v1/{prefix}/tables/rename"),
)
UNIT_SEPARATOR = "\x1f"  # a multipart namespace in a path (the spec's `namespace` parameter)


def create_app(root: Path, log_path: Path):
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import (CommitFailedException, NamespaceAlreadyExistsError,
                                      NoSuchNamespaceError, NoSuchTableError,
                                      TableAlreadyExistsError)
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import CommitTableRequest
    from pyiceberg.table.sorting import SortOrder

    root.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("rest_backend", uri=f"sqlite:///{root}/rest_catalog.db",
                         warehouse=f"file://{root}/tables")
    app = FastAPI(title="kafkalog test REST catalog", docs_url=None, redoc_url=None,
                  openapi_url=None)
    log_lock = threading.Lock()
    #: one commit at a time: SQLite's own locking would turn a race into "database is locked"
    commit_lock = threading.Lock()

    def record(method, route, status, request_body, response_body):
        with log_lock, open(log_path, "a") as out:
            out.write(json.dumps({"method": method, "route": route, "status": status,
                                  "request": request_body, "response": response_body}) + "\n")

    def error(status: int, kind: str, message: str):
        return status, {"error": {"message": message, "type": kind, "code": status}}

    def namespace_of(text: str) -> tuple[str, ...]:
        return tuple(text.split(UNIT_SEPARATOR))

    def table_result(table) -> dict:
        return {"metadata-location": table.metadata_location,
                "metadata": json.loads(table.metadata.model_dump_json()), "config": {}}

    async def handle(request: Request, route: str, fn):
        raw = await request.body()
        body = json.loads(raw) if raw else None
        try:
            status, out = fn(body, request)
        except NoSuchNamespaceError as err:
            status, out = error(404, "NoSuchNamespaceException", str(err))
        except NoSuchTableError as err:
            status, out = error(404, "NoSuchTableException", str(err))
        except (NamespaceAlreadyExistsError, TableAlreadyExistsError) as err:
            status, out = error(409, "AlreadyExistsException", str(err))
        except CommitFailedException as err:
            status, out = error(409, "CommitFailedException", str(err))
        except ValueError as err:  # a malformed request, or a stale sequence number (below)
            if "sequence number" in str(err):
                status, out = error(409, "CommitFailedException", str(err))
            else:
                status, out = error(400, "BadRequestException", str(err))
        record(request.method, route, status, body, out)
        if out is None:
            return Response(status_code=status)
        if request.method == "HEAD":
            return Response(status_code=status)
        return JSONResponse(out, status_code=status)

    def config(body, request):
        endpoints = [f"{m} {r}" for m, r in ROUTES if r != "/v1/config"]
        return 200, {"defaults": {}, "overrides": {"prefix": PREFIX}, "endpoints": endpoints}

    def list_namespaces(body, request):
        parent = request.query_params.get("parent")
        found = catalog.list_namespaces(namespace_of(parent) if parent else ())
        return 200, {"namespaces": [list(n) for n in found]}

    def create_namespace(body, request):
        ns = tuple(body["namespace"])
        props = body.get("properties") or {}
        catalog.create_namespace(ns, props)
        return 200, {"namespace": list(ns), "properties": props}

    def load_namespace(ns):
        def fn(body, request):
            props = catalog.load_namespace_properties(namespace_of(ns))
            return 200, {"namespace": list(namespace_of(ns)), "properties": dict(props)}
        return fn

    def namespace_exists(ns):
        def fn(body, request):
            catalog.load_namespace_properties(namespace_of(ns))
            return 204, None
        return fn

    def list_tables(ns):
        def fn(body, request):
            catalog.load_namespace_properties(namespace_of(ns))  # 404 for a missing namespace
            return 200, {"identifiers": [{"namespace": list(t[:-1]), "name": t[-1]}
                                         for t in catalog.list_tables(namespace_of(ns))]}
        return fn

    def create_table(ns):
        def fn(body, request):
            if body.get("stage-create"):
                return error(406, "UnsupportedOperationException",
                             "staged creation is not served by the test catalog")
            kwargs = {}
            if body.get("partition-spec") is not None:
                kwargs["partition_spec"] = PartitionSpec.model_validate(body["partition-spec"])
            if body.get("write-order") is not None:
                kwargs["sort_order"] = SortOrder.model_validate(body["write-order"])
            table = catalog.create_table((*namespace_of(ns), body["name"]),
                                         Schema.model_validate(body["schema"]),
                                         location=body.get("location"),
                                         properties=body.get("properties") or {}, **kwargs)
            return 200, table_result(table)
        return fn

    def load_table(ns, name):
        def fn(body, request):
            return 200, table_result(catalog.load_table((*namespace_of(ns), name)))
        return fn

    def table_exists(ns, name):
        def fn(body, request):
            catalog.load_table((*namespace_of(ns), name))
            return 204, None
        return fn

    def commit(ns, name):
        def fn(body, request):
            req = CommitTableRequest.model_validate(body)
            with commit_lock:
                table = catalog.load_table((*namespace_of(ns), name))
                done = catalog.commit_table(table, req.requirements, req.updates)
            return 200, {"metadata-location": done.metadata_location,
                         "metadata": json.loads(done.metadata.model_dump_json())}
        return fn

    def drop_table(ns, name):
        def fn(body, request):
            ident = (*namespace_of(ns), name)
            if request.query_params.get("purgeRequested") == "true":
                catalog.purge_table(ident)
            else:
                catalog.drop_table(ident)
            return 204, None
        return fn

    def rename(body, request):
        src, dst = body["source"], body["destination"]
        catalog.rename_table((*src["namespace"], src["name"]), (*dst["namespace"], dst["name"]))
        return 204, None

    base = f"/v1/{PREFIX}"

    @app.get("/v1/config")
    async def _config(request: Request):
        return await handle(request, "/v1/config", config)

    @app.get(f"{base}/namespaces")
    async def _list_namespaces(request: Request):
        return await handle(request, "/v1/{prefix}/namespaces", list_namespaces)

    @app.post(f"{base}/namespaces")
    async def _create_namespace(request: Request):
        return await handle(request, "/v1/{prefix}/namespaces", create_namespace)

    @app.get(base + "/namespaces/{ns}")
    async def _load_namespace(request: Request, ns: str):
        return await handle(request, "/v1/{prefix}/namespaces/{namespace}", load_namespace(ns))

    @app.head(base + "/namespaces/{ns}")
    async def _namespace_exists(request: Request, ns: str):
        return await handle(request, "/v1/{prefix}/namespaces/{namespace}", namespace_exists(ns))

    @app.get(base + "/namespaces/{ns}/tables")
    async def _list_tables(request: Request, ns: str):
        return await handle(request, "/v1/{prefix}/namespaces/{namespace}/tables", list_tables(ns))

    @app.post(base + "/namespaces/{ns}/tables")
    async def _create_table(request: Request, ns: str):
        return await handle(request, "/v1/{prefix}/namespaces/{namespace}/tables",
                            create_table(ns))

    table_route = "/v1/{prefix}/namespaces/{namespace}/tables/{table}"

    @app.get(base + "/namespaces/{ns}/tables/{name}")
    async def _load_table(request: Request, ns: str, name: str):
        return await handle(request, table_route, load_table(ns, name))

    @app.head(base + "/namespaces/{ns}/tables/{name}")
    async def _table_exists(request: Request, ns: str, name: str):
        return await handle(request, table_route, table_exists(ns, name))

    @app.post(base + "/namespaces/{ns}/tables/{name}")
    async def _commit(request: Request, ns: str, name: str):
        return await handle(request, table_route, commit(ns, name))

    @app.delete(base + "/namespaces/{ns}/tables/{name}")
    async def _drop(request: Request, ns: str, name: str):
        return await handle(request, table_route, drop_table(ns, name))

    @app.post(f"{base}/tables/rename")
    async def _rename(request: Request):
        return await handle(request, "/v1/{prefix}/tables/rename", rename)

    @app.api_route("/{path:path}", methods=["GET", "POST", "DELETE", "HEAD", "PUT"])
    async def _unknown(request: Request, path: str):  # said, and logged for the test to see
        return await handle(request, f"UNSERVED /{path}", lambda body, request: error(
            404, "NotFoundException", f"not served by the test catalog: {request.method} /{path}"))

    return app


class RestCatalogServer:
    """The server in a subprocess on 127.0.0.1 (``with RestCatalogServer(root) as server``):
    ``server.uri`` for pyiceberg's ``uri``, ``server.exchanges()`` the log so far."""

    def __init__(self, root: Path):
        import socket

        self.root = Path(root)
        self.log = self.root / "exchanges.jsonl"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process = None

    def __enter__(self):
        import urllib.request

        self.root.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--port", str(self.port), "--root", str(self.root)],
            stdout=open(self.root / "server.out", "wb"), stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2).read()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the REST catalog did not start: "
                                       + (self.root / "server.out").read_text()[-2000:])
                time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def exchanges(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


def main(argv=None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    app = create_app(args.root, args.root / "exchanges.jsonl")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
