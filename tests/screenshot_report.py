"""Screenshots of the Data quality report of a warehouse: the overview and a run page.

    .venv/bin/python tests/screenshot_report.py WAREHOUSE [--out /tmp/shots] [--run TOKEN]
        [--prefix NAME-] [--full-page]

``make screenshots`` runs it on the demo's warehouse (``make demo``) and writes the README's
two images, ``docs/img/report-overview.png`` and ``docs/img/report-run.png``.

Serves the plugin's FastAPI app (:mod:`kafkalog_quality.app`, authentication off, so no Airflow
is started) on 127.0.0.1 for ``WAREHOUSE`` (its catalog found as the plugin finds it: pyiceberg's
configuration, else ``WAREHOUSE/.pyiceberg.yaml``), opens both pages in Debian's headless
Chromium (``make browser``) over the DevTools pipe of ``tests/plugin/browser.py`` and writes
``overview.png`` and ``run.png`` (``--prefix`` before each name; the first screen, 1440x900,
or the whole page with ``--full-page``) to ``--out``. The run page is ``--run`` (a run token), else the worst run:
failed before warned before passed, newest first. Prints the two paths and the pages' URLs.
``tests/plugin/test_plugin_ui.py`` takes the same two screenshots with :func:`shoot` from the test data.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "plugins"):  # run as a script: the checkout, and the plugin as Airflow has it
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from tests.plugin.browser import WINDOW  # noqa: E402

#: where the screenshots go unless told
SHOTS = Path("/tmp/shots")


def worst_run(runs) -> str | None:
    """The token of the run to show: failed before warned before passed, newest first."""
    rank = {"fail": 0, "warn": 1, "error": 2, "pass": 3}
    if not runs:
        return None
    return min(enumerate(runs), key=lambda ir: (rank.get(ir[1].verdict, 4), ir[0]))[1].token


def _full_height(devtools) -> int:
    return int(devtools.js("Math.ceil(document.documentElement.scrollHeight)"))


def shoot(devtools, base_url: str, token: str, out: Path, *, full_page: bool = False,
          prefix: str = "") -> dict:
    """Open the overview and run ``token``'s page under ``base_url`` (the app's mount point,
    ending in ``/``) and write ``out/<prefix>overview.png`` and ``out/<prefix>run.png``;
    their paths."""
    out.mkdir(parents=True, exist_ok=True)
    shots = {}
    for name, url in (("overview", base_url), ("run", f"{base_url}runs/{token}")):
        devtools.open(url, *WINDOW)
        if full_page:
            devtools.open(url, WINDOW[0], max(WINDOW[1], _full_height(devtools)))
        path = out / f"{prefix}{name}.png"
        devtools.screenshot(path)
        shots[name] = path
    return shots


def serve(root: str):
    """The plugin's app for ``root`` on 127.0.0.1 (a free port), in a thread; (server, url)."""
    import socket

    import uvicorn
    from fastapi import FastAPI

    from kafkalog_quality.app import URL_PREFIX, create_app

    outer = FastAPI()
    outer.mount(URL_PREFIX, create_app(authenticate=False, root=root))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(outer, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the report's server did not start in 30 s")
        time.sleep(0.1)
    return server, f"http://127.0.0.1:{port}{URL_PREFIX}/"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("warehouse", help="the warehouse root W (local directory or s3://...)")
    p.add_argument("--out", type=Path, default=SHOTS, help=f"output directory (default {SHOTS})")
    p.add_argument("--run", help="the run page to shoot (a run token; default: the worst run)")
    p.add_argument("--full-page", action="store_true", help="whole pages, not the first screen")
    p.add_argument("--prefix", default="", help="before each file's name (make screenshots: report-)")
    args = p.parse_args(argv)

    from kafkalog_quality import repository
    from tests.plugin.browser import DevTools

    chromium = shutil.which("chromium")
    if chromium is None:
        print("screenshot_report: Debian's `chromium` is not installed (make browser)", file=sys.stderr)
        return 2
    token = args.run or worst_run(repository.Warehouse(args.warehouse).runs())
    if token is None:
        print(f"screenshot_report: no data-quality results in {args.warehouse}", file=sys.stderr)
        return 1
    server, url = serve(args.warehouse)
    profile = tempfile.mkdtemp(prefix="kafkalog-shots-")
    devtools = DevTools(chromium, Path(profile))
    try:
        shots = shoot(devtools, url, token, args.out, full_page=args.full_page, prefix=args.prefix)
    finally:
        devtools.close()
        server.should_exit = True
        shutil.rmtree(profile, ignore_errors=True)
    print(f"{shots['overview']}  ({url})")
    print(f"{shots['run']}  ({url}runs/{token})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
