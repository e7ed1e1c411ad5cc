"""The FastAPI app of the Data quality view, mounted by Airflow's api-server under ``URL_PREFIX``.

Routes (relative to the prefix):

=====================================  ============================================================
``GET /``                              nights at a glance (topic-partition x snapshot night), each
                                       unhealthy night's problems, the runs, the charts
``GET /runs/{token}``                  failed then warned checks, one line each; passes collapsed
``GET /runs/{token}/docs/{path}``      that run's Data Docs, read from the warehouse (local or S3)
``GET /api/runs``                      the runs list as JSON
``GET /api/runs/{token}``              one run as JSON (summary, checks, every result row)
``GET /api/nights``                    the nights-at-a-glance grid as JSON (cells, runs' nights)
``GET /api/series``                    the charts' figures as JSON
=====================================  ============================================================

Where Airflow has a newer attempt of a run than its results (a re-audit running, or one that
failed without writing results), the pages and the JSON show that attempt's state as the run's
verdict, the results below it as an earlier attempt's (:func:`.dag_runs.attempts`).

Authentication: Airflow does not authenticate plugin apps (a mounted app inherits none of
the core API's dependencies), so every route here asks Airflow's configured auth manager
itself. The caller is the user of the ``Authorization: Bearer <JWT>`` header (from
``POST /auth/token``) or of the UI's session cookie; an HTML request without one is
redirected to the auth manager's login page (and back), an API request gets 401. The user
must be allowed to see the website and to read the DAG runs of one of ``DAG_IDS``; else 403.
"""

from __future__ import annotations

import mimetypes

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from . import nights, pages, repository
from .dag_runs import DAG_IDS, attempts, skip_reason
from .model import Run, shown_verdict
from .series import series

URL_PREFIX = "/kafkalog-quality"


class LoginRequired(Exception):
    def __init__(self, login_url: str):
        self.login_url = login_url


async def airflow_user(request: Request):
    """The caller as Airflow's auth manager sees them, authorized to read the pipeline's runs."""
    from fastapi.security import HTTPAuthorizationCredentials

    from kafkalog_pipeline._airflow import login_url, may_read_runs, request_user

    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    bearer = (HTTPAuthorizationCredentials(scheme=scheme, credentials=credentials.strip())
              if scheme.lower() == "bearer" and credentials.strip() else None)
    try:
        user = await request_user(request, bearer)
    except HTTPException as err:
        if err.status_code in (401, 403) and bearer is None and _wants_html(request):
            raise LoginRequired(login_url(str(request.url)))
        raise
    allowed = may_read_runs(user, DAG_IDS)
    if not allowed:
        raise HTTPException(status_code=403, detail="not allowed to read the pipeline's DAG runs")
    return user


def _wants_html(request: Request) -> bool:
    """Pages get a login redirect, the JSON API a status code."""
    path, root = request.scope.get("path", ""), request.scope.get("root_path", "")
    local = path[len(root):] if root and path.startswith(root) else path
    return not (local == "/api" or local.startswith("/api/"))


def create_app(*, authenticate: bool = True, root: str | None = None) -> FastAPI:
    """The app. ``root`` fixes the warehouse (else it is resolved per request,
    see repository.warehouse_root).

    ``authenticate=False`` serves without asking Airflow (only for use outside an api-server,
    e.g. embedding the views elsewhere behind another gate); the plugin always authenticates.
    """
    deps = [Depends(airflow_user)] if authenticate else []
    app = FastAPI(title="kafkalog data quality", dependencies=deps, docs_url=None,
                  redoc_url=None, openapi_url=None)

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, exc: LoginRequired):
        return RedirectResponse(exc.login_url, status_code=307)

    @app.exception_handler(repository.WarehouseNotConfigured)
    async def _unconfigured(request: Request, exc: repository.WarehouseNotConfigured):
        if _wants_html(request):
            return HTMLResponse(pages.message_page("Data quality", str(exc), _base(request)),
                                status_code=503)
        return JSONResponse({"detail": str(exc)}, status_code=503)

    def warehouse() -> repository.Warehouse:
        return repository.Warehouse(root or repository.warehouse_root())

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request):
        wh = warehouse()
        runs = wh.runs()
        return HTMLResponse(pages.index_page(runs, _base(request), wh.root, _overview(wh, runs),
                                             attempts=attempts(runs)))

    @app.get("/runs/{token}", response_class=HTMLResponse)
    def run_view(request: Request, token: str):
        wh = warehouse()
        run = wh.run(token)
        if run is None:
            return HTMLResponse(pages.message_page(
                "No such run", f"no data-quality results for run {token!r} in this warehouse",
                _base(request)), status_code=404)
        skipped = None
        if run.missing_nights:  # Airflow skipped the rest of such a run: say why, beside it
            skipped = skip_reason(run.run_id)
        return HTMLResponse(pages.run_page(
            run, _base(request), wh.coverage([run]).get(run.token), root=wh.root,
            catalog=wh.catalog_name, namespace=wh.namespace, skip_reason=skipped,
            attempt=attempts([run]).get(run.token)))

    @app.get("/runs/{token}/docs")
    def docs_root(token: str):
        return RedirectResponse("docs/index.html", status_code=307)

    @app.get("/runs/{token}/docs/{path:path}")
    def docs(token: str, path: str):
        try:
            body = warehouse().read_doc(token, path or "index.html")
        except FileNotFoundError:
            raise HTTPException(status_code=404, detail=f"no Data Docs file {path!r} for {token!r}")
        media = mimetypes.guess_type(path)[0] or "application/octet-stream"
        # Data Docs are someone's HTML and scripts: run them in an opaque origin, so they
        # cannot call Airflow's API with the viewer's session.
        return Response(body, media_type=media, headers={
            "Content-Security-Policy": "sandbox allow-scripts allow-popups allow-forms",
            "X-Content-Type-Options": "nosniff"})

    @app.get("/api/runs")
    def api_runs():
        wh = warehouse()
        runs = wh.runs()
        latest = attempts(runs)
        return {"warehouse": wh.root, "runs": [_with_attempt(r, latest) for r in runs]}

    @app.get("/api/runs/{token}")
    def api_run(token: str):
        run = warehouse().run(token)
        if run is None:
            raise HTTPException(status_code=404, detail=f"no data-quality results for {token!r}")
        return {**run.as_json(), **_with_attempt(run, attempts([run]))}

    @app.get("/api/nights")
    def api_nights():
        wh = warehouse()
        return {"warehouse": wh.root, **_overview(wh, wh.runs()).as_json()}

    @app.get("/api/series")
    def api_series():
        return series(warehouse().runs())

    return app


def _with_attempt(run: Run, latest: dict) -> dict:
    """A run's summary with ``shown_verdict`` and its latest ``attempt`` where that is newer
    than its results (running, failed; else null)."""
    attempt = latest.get(run.token)
    return {**run.summary_json(), "shown_verdict": shown_verdict(run, attempt),
            "attempt": attempt.as_json() if attempt else None}


def _overview(wh: repository.Warehouse, runs: list[Run]) -> nights.Overview:
    return nights.overview(runs, wh.coverage(runs), wh.night_pattern())


def _base(request: Request) -> str:
    """The app's mount point as the browser sees it (``root_path`` is set by the mount)."""
    return request.scope.get("root_path", "") or "/"
