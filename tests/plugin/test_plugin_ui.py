"""The Data quality plugin in a real Airflow api-server, driven by Debian's headless Chromium.

One api-server (temporary AIRFLOW_HOME, SQLite, all users admins) serves a warehouse written
by the test (rows committed to its Iceberg table dq_results, in the embedded SQLite catalog
under the warehouse; Data Docs files): three runs from report_data.scenario() plus one,
committed while the server runs, for a real DAG run of a small
``kafka_segments_nightly`` DAG (run with ``airflow dags test``), whose ``check_quality`` task
carries the "Data quality report" link. A second api-server with a password user checks that
the plugin's routes ask Airflow's auth manager. Chromium is started per page
(``--dump-dom`` / ``--screenshot``); the DOM it prints is what the page rendered; what is on
screen, and where a click goes, is asked of one Chromium over its DevTools pipe, which also
writes the report's screenshots (``/tmp/shots/overview.png``, ``run.png``: the same code as
``tests/screenshot_report.py``, which takes them of any warehouse).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, urljoin

import httpx
import pytest

from kafkalog_pipeline.settings import NIGHTLY_DAG_ID
from kafkalog_pipeline.tasks import CAUSE_KEY, SKIP_REASON_KEY
from spark_jobs import storage

from tests.plugin.browser import WINDOW, Chromium, DevTools, wait_or_kill
from tests.plugin.report_data import (PLUGINS, REPO, Dom, docs_html, expected_cells,
                                      expected_counts, expected_series, expected_verdict, item,
                                      no_snapshot_row, passing_run, row, scenario, short,
                                      write_run, write_warehouse)
from tests.screenshot_report import SHOTS, shoot

pytestmark = pytest.mark.pipeline

AIRFLOW = str(Path(sys.executable).parent / "airflow")
PREFIX = "/kafkalog-quality"
DAG_ID = NIGHTLY_DAG_ID
#: the night the test DAG's plan finds no snapshot of (none of scenario()'s runs read it)
SKIPPED = "2026-11-22"
#: the night whose re-audit crashes (its results are an earlier attempt's, a warning)
CRASHED = "2026-11-23"
#: the one line its audit task pushes, as KafkalogSparkSubmitOperator does of a crash
CRASH_CAUSE = "check_quality crashed: StorageError: s3://warehouse/: could not connect to the endpoint"
DAG_FILE = f'''
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowSkipException


def plan(ti, logical_date, **_):
    night = logical_date.date().isoformat()
    if night == "{SKIPPED}":  # as kafkalog_pipeline.tasks.plan_task skips a night: reason in XCom
        ti.xcom_push(key="{SKIP_REASON_KEY}", value=f"nothing to decode for {{night}}: 0 segments")
        raise AirflowSkipException("nothing to decode")


def check_quality(ti, logical_date, run_id, **_):
    print("--run-id", run_id)
    if logical_date.date().isoformat() == "{CRASHED}":  # as the operator says a crash
        ti.xcom_push(key="{CAUSE_KEY}", value="{CRASH_CAUSE}")
        raise RuntimeError("{CRASH_CAUSE}")


with DAG("{DAG_ID}", schedule=None, tags=["test"]):
    PythonOperator(task_id="plan", python_callable=plan) >> BashOperator(
        task_id="decode", bash_command="true") >> PythonOperator(
        task_id="check_quality", python_callable=check_quality)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def airflow_env(home: Path, warehouse: str, port: int, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API_AUTH__JWT_SECRET": f"test-secret-{port}",
        "KAFKALOG_WAREHOUSE": warehouse,
    })
    env.update(extra)
    return env


def run(args, env, timeout=180) -> subprocess.CompletedProcess:
    out = subprocess.run([AIRFLOW, *args], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"airflow {' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


class ApiServer:
    """``airflow api-server`` on 127.0.0.1 in its own process group (stopped as a group)."""

    def __init__(self, env: dict, port: int, log: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.proc = subprocess.Popen(
            [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env, cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 240
        while True:
            if self.proc.poll() is not None:
                self.stop()
                pytest.fail(f"api-server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/api/v2/monitor/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"api-server not healthy after 240 s:\n{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        wait_or_kill(self.proc)
        try:  # children left behind by the server, if any
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def chromium(tmp_path_factory) -> Chromium:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("Debian's `chromium` is not installed: run `make browser` "
                    "(apt-get update && apt-get install -y chromium)")
    return Chromium(path, tmp_path_factory.mktemp("chromium-profile"))


@pytest.fixture(scope="module")
def devtools(chromium, tmp_path_factory):
    browser = DevTools(chromium.path, tmp_path_factory.mktemp("devtools-profile"))
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("plugin-ui")
    home = base / "airflow"
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "kafka_segments_nightly.py").write_text(DAG_FILE)
    warehouse = str(base / "warehouse")
    runs = write_warehouse(warehouse)
    port = free_port()
    env = airflow_env(home, warehouse, port)
    run(["db", "migrate"], env)
    run(["dags", "test", DAG_ID, "2026-11-21"], env, timeout=300)
    run(["dags", "test", DAG_ID, SKIPPED], env, timeout=300)
    # the re-audit that crashes: `dags test` reports the failed run (its exit status is not ours)
    subprocess.run([AIRFLOW, "dags", "test", DAG_ID, CRASHED], env=env, cwd=REPO,
                   capture_output=True, timeout=300)
    server = ApiServer(env, port, base / "api-server.log")
    try:
        token = httpx.get(server.url + "/auth/token", timeout=10).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        listed = httpx.get(f"{server.url}/api/v2/dags/{DAG_ID}/dagRuns", headers=headers, timeout=10)
        by_night = {r["logical_date"][:10]: r["dag_run_id"] for r in listed.json()["dag_runs"]}
        started = {r["logical_date"][:10]: dt.datetime.fromisoformat(r["start_date"])
                   for r in listed.json()["dag_runs"]}
        states = {r["logical_date"][:10]: r["state"] for r in listed.json()["dag_runs"]}
        assert states[CRASHED] == "failed", states
        # the quality job's results for the first DAG run: rows of a failing run, under its run
        # id, with no ledger rows (nor a night: listed under the grid)
        template = scenario(seed=11)[1]
        later = max(r["checked_at"] for r in runs).replace(year=2027)
        dag_run_results = {
            "run_id": by_night["2026-11-21"], "checked_at": later,
            "rows": [dict(r, run_id=by_night["2026-11-21"], checked_at=later, night=None)
                     for r in template["rows"]]}
        # ... with a long topic name and a long problem line, as a Debezium topic's index has
        # them in the demo (they wrapped to 8 lines in the tab, the Checked column clipped)
        long_topic = "dbserver1.inventory.customers"
        segment = f"s3://kafka-snapshots/snapshots/2026-11-21/{long_topic}-0/00000000000000000000.index"
        dag_run_results["rows"].append(dict(row(
            by_night["2026-11-21"], "decoder_findings", long_topic, 0, None, later, status="warn",
            observed=1234567, unit="segments", items=[item(
                "index_mismatch", "warn", f"{segment}: entry 3 maps offset 57 to position 4096, "
                "but the batch at that position starts at offset 61 (an index written before "
                "the log was truncated, or one that was copied from another replica)",
                segment, 57, 57)]), night=None))
        dag_run_results["token"] = write_run(warehouse, dag_run_results)
        runs.append(dag_run_results)
        # ... and the audit's row for the night the second one found no snapshot of
        skipped_at = later + dt.timedelta(hours=1)
        skipped = {"run_id": by_night[SKIPPED], "checked_at": skipped_at,
                   "rows": [no_snapshot_row(by_night[SKIPPED], SKIPPED, skipped_at)]}
        skipped["token"] = write_run(warehouse, skipped)
        runs.append(skipped)
        # ... and an earlier attempt's results of the night whose latest attempt crashed: a
        # warning, checked before that attempt began (no night: listed under the grid)
        crashed_id, before = by_night[CRASHED], started[CRASHED] - dt.timedelta(hours=1)
        crashed = passing_run(crashed_id, CRASHED, before)
        crashed["rows"].append(row(crashed_id, "offset_gaps", "gap", 0, CRASHED, before,
                                   status="warn", items=[item("unexplained", "warn",
                                                              "offsets 3..4 missing")]))
        crashed["rows"] = [dict(r, night=None) for r in crashed["rows"]]
        del crashed["nights"]
        crashed["shown"] = "failed"  # what the pages show: the latest attempt, not "warn"
        write_run(warehouse, crashed)
        runs.append(crashed)
        yield {"url": server.url, "runs": runs, "dag_run": dag_run_results, "skipped": skipped,
               "crashed": crashed,
               "home": home, "warehouse": warehouse, "headers": headers, "base": base}
    finally:
        server.stop()


def shown_verdict(run: dict) -> str:
    """The verdict the pages show of a run: its latest attempt's state where that is newer
    than its results, else its results' verdict."""
    return run.get("shown") or expected_verdict(run)


def newest_first(runs):
    return sorted(runs, key=lambda r: r["checked_at"], reverse=True)


def assert_png(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_runs_page_in_chromium(site, chromium, tmp_path):
    page_url = site["url"] + PREFIX + "/"
    dom = Dom(chromium.dom(page_url))
    rows = dom.find("tr", cls="run")
    want = newest_first(site["runs"])
    assert [r.attrs["data-run-id"] for r in rows] == [r["run_id"] for r in want]
    verdicts = {r.attrs["data-run-id"]: r.attrs["data-verdict"] for r in rows}
    assert verdicts == {r["run_id"]: shown_verdict(r) for r in want}
    assert "fail" in verdicts.values()
    for status in ("pass", "warn", "fail"):
        assert [int(c.text) for c in dom.find("td", cls=f"count-{status}")] == \
            [expected_counts(r)[status] for r in want]
    series = expected_series(site["runs"])
    crc = dom.one("svg", id="chart-crc")
    assert int(crc.attrs["data-total"]) == sum(series["crc"]) > 0
    assert len([g for g in dom.find("g", cls="bar")]) == 3 * len(want)  # three charts
    assert int(dom.one("svg", id="chart-gaps").attrs["data-total"]) == \
        sum(map(sum, series["gaps"].values()))
    # the Data Docs link of the failing run, resolved as the browser does (<base href>)
    failing = next(r for r in want if expected_verdict(r) == "fail")
    row_index = [r["run_id"] for r in want].index(failing["run_id"])
    href = dom.find("a", cls="docs-link")[row_index].attrs["href"]
    docs_url = urljoin(urljoin(page_url, dom.one("base").attrs["href"]), href)
    assert docs_url == f"{site['url']}{PREFIX}/runs/{failing['token']}/docs/index.html"
    docs = Dom(chromium.dom(docs_url))
    assert docs.one("h1", id="gx-docs").text == f"Data Docs of {failing['run_id']}"
    raw = httpx.get(docs_url, headers=site["headers"], timeout=10)
    assert raw.status_code == 200 and raw.text == docs_html(failing["run_id"])
    shot = chromium.screenshot(page_url, tmp_path / "runs.png")
    assert_png(shot)


#: JSON as the page would show it: an object's opening brace and its first key
JSON_TEXT = re.compile(r'\{\s*"')
#: where each result row is drawn, and whether it is (``checkVisibility``)
ROWS_JS = """[...document.querySelectorAll('tr.result')].map(r => ({
    status: r.dataset.status, check: r.dataset.check, tp: r.dataset.topic + '-' + r.dataset.partition,
    top: r.getBoundingClientRect().top, visible: r.checkVisibility(),
    line: (r.querySelector('.problem-line') || {}).innerText || null,
    uris: [...r.querySelectorAll('.problem-line .uri')].map(u => [u.title, u.innerText])}))"""


def counts_text(counts: dict) -> str:
    """``4 failures · 1 warning · 10 passes``: results as the pages count them."""
    words = {"fail": ("failure", "failures"), "warn": ("warning", "warnings"), "pass": ("pass", "passes")}
    return " · ".join(f"{counts[s]} {words[s][counts[s] != 1]}" for s in words if counts[s])


def test_run_page_in_chromium(site, chromium, devtools, tmp_path):
    """The run page as a reader sees it: fail rows, then warn rows, then the passes collapsed;
    one plain line per problem naming the topic-partition and offsets; raw JSON nowhere in
    the rendered text until a disclosure is opened."""
    failing = next(r for r in newest_first(site["runs"]) if expected_verdict(r) == "fail")
    url = f"{site['url']}{PREFIX}/runs/{quote(failing['token'])}"
    dom = Dom(chromium.dom(url))
    assert dom.one(id="run-id").text == failing["run_id"]
    assert dom.one(id="verdict").attrs["class"].split() == ["verdict", "verdict-fail"]
    results = dom.find("tr", cls="result")
    assert len(results) == len(failing["rows"])
    assert sum(1 for r in results if r.attrs["data-status"] == "fail") == \
        sum(1 for r in failing["rows"] if r["status"] == "fail") > 0
    assert all("row-fail" in r.classes for r in results if r.attrs["data-status"] == "fail")

    devtools.open(url)
    text = devtools.js("document.body.innerText")
    assert not JSON_TEXT.search(text), "raw JSON is visible before any disclosure is opened"
    counts = expected_counts(failing)
    assert f"{counts_text(counts)}, counted per check × topic-partition" in text
    rows = devtools.js(ROWS_JS)
    order = [r["status"] for r in rows]
    assert {"fail", "warn", "pass"} <= set(order)  # the page shows all three
    fails = [r for r in rows if r["status"] == "fail"]
    warns = [r for r in rows if r["status"] == "warn"]
    passes = [r for r in rows if r["status"] == "pass"]
    # problems first, on screen: every fail row above every warn row, the passes collapsed
    assert all(r["visible"] for r in fails + warns) and not any(r["visible"] for r in passes)
    assert max(r["top"] for r in fails) < min(r["top"] for r in warns)
    summary = devtools.js("(() => { const s = document.querySelector('details#passes > summary');"
                          " return {top: s.getBoundingClientRect().top, text: s.innerText}; })()")
    assert summary["top"] > max(r["top"] for r in warns)
    assert summary["text"].startswith(f"Passed: {counts['pass']} (counted per check × topic-partition")
    # one plain line per problem: the topic-partition, the offsets, the segment of its first item
    want = {(r["check"], f"{r['topic']}-{r['partition']}"): json.loads(r["details"])
            for r in failing["rows"] if r["status"] != "pass"}
    for row in fails + warns:
        first = want[(row["check"], row["tp"])]["items"][0]
        assert row["line"].startswith(row["tp"] + ": ")
        assert f"{first['first_offset']}..{first['last_offset']}" in row["line"] or \
            f"offset {first['first_offset']}" in row["line"]
        # the segment by its partition folder and file name, the whole URI on hover
        assert first["segment"].startswith("s3://") and first["segment"] not in row["line"]
        assert short(first["segment"]) in row["line"]
        assert [first["segment"], short(first["segment"])] in row["uris"]
        assert row["line"] in text
    # opened, every disclosure shows what was behind it: the items, the raw JSON, the passes
    devtools.js("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    opened = devtools.js("document.body.innerText")
    assert JSON_TEXT.search(opened) and '"classes":' in opened
    rows = devtools.js(ROWS_JS)
    assert all(r["visible"] for r in rows)
    assert min(r["top"] for r in rows if r["status"] == "pass") > \
        max(r["top"] for r in rows if r["status"] == "warn")
    # the report's two screenshots (issue 17's closing note), as tests/screenshot_report.py takes them
    placed = next(r for r in newest_first(site["runs"]) if expected_verdict(r) == "fail" and r.get("nights"))
    shots = shoot(devtools, f"{site['url']}{PREFIX}/", placed["token"], SHOTS)
    assert_png(shots["overview"].read_bytes())
    assert_png(shots["run"].read_bytes())


#: the overview's grid cells as drawn: what each says and where a click goes
CELLS_JS = """[...document.querySelectorAll('#night-grid rect.cell[data-tp]')].map(r => ({
    tp: r.dataset.tp, night: r.dataset.night, outcome: r.dataset.outcome, fill: r.getAttribute('fill'),
    href: r.closest('a') ? new URL(r.closest('a').getAttribute('href'), document.baseURI).href : null}))"""


def test_overview_in_chromium(site, devtools):
    """The first screen answers which nights are unhealthy, which checks and where: the grid
    has a column per snapshot night in the data and a cell per topic-partition and night; the
    unhealthy nights' problem lines start on that screen; no JSON is visible; one click on a
    failed cell opens its run page at that check's row for that topic-partition."""
    runs = [r for r in site["runs"] if r.get("nights")]
    want = expected_cells(runs)
    url = f"{site['url']}{PREFIX}/"
    devtools.open(url)
    text = devtools.js("document.body.innerText")
    assert not JSON_TEXT.search(text)
    cells = devtools.js(CELLS_JS)
    assert sorted({c["night"] for c in cells}) == sorted({n for r in runs for n in r["nights"]})
    assert {(c["tp"], c["night"]): c["outcome"] for c in cells} == {k: v[0] for k, v in want.items()}
    for c in cells:
        outcome, token, anchor = want[(c["tp"], c["night"])]
        assert c["href"] == f"{url}runs/{token}" + (f"#{anchor}" if anchor else "")
    screen = devtools.js("({h: innerHeight, grid: document.querySelector('#night-grid')"
                         ".getBoundingClientRect().bottom, problems: document.querySelector("
                         "'#night-problems li.night-problem').getBoundingClientRect().top})")
    assert screen["grid"] <= screen["h"] and screen["problems"] < screen["h"]
    unhealthy = sorted({n for (_, n), (o, _, _) in want.items() if o in ("fail", "warn")}, reverse=True)
    worst = {n: "fail" if any(o == "fail" for (_, m), (o, _, _) in want.items() if m == n) else "warn"
             for n in unhealthy}
    assert devtools.js("document.querySelector('#headline').innerText") == \
        f"Unhealthy nights: {SKIPPED} (warn, no snapshot), " + ", ".join(
            f"{n} ({worst[n]})" for n in unhealthy)
    # the night the DAG found no snapshot of: a column of "no snapshot" cells in the finding's
    # colour, on the first screen; every other night the schedule was due to read up to now
    # (03:00 UTC daily) and no run has results for: "no run"
    column = devtools.js(f"""[...document.querySelectorAll('#night-grid rect.cell[data-night="{SKIPPED}"]')]
        .map(r => ({{kind: r.dataset.kind, outcome: r.dataset.outcome, fill: r.getAttribute('fill'),
                    bottom: r.getBoundingClientRect().bottom, right: r.getBoundingClientRect().right}}))""")
    assert len(column) == 1 + len({c["tp"] for c in cells})  # the night's row and each partition's
    assert {(c["kind"], c["outcome"]) for c in column} == {("no_snapshot", "warn")}
    assert all(c["bottom"] <= screen["h"] and c["right"] <= WINDOW[0] for c in column)
    now = dt.datetime.now(dt.timezone.utc)
    last = now.date() - dt.timedelta(days=0 if now.hour >= 3 else 1)
    first = dt.date.fromisoformat(min(c["night"] for c in cells))
    due = [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
    assert devtools.js("[...document.querySelectorAll('#night-grid text.column-label')]"
                       ".map(t => t.dataset.column)") == due
    tops = devtools.js("Object.fromEntries([...document.querySelectorAll('#night-grid rect.cell')]"
                       ".filter(r => r.dataset.row === 'whole night').map(r => [r.dataset.night, "
                       "r.dataset.outcome]))")
    read = {c["night"] for c in cells}
    assert {n for n, o in tops.items() if o == "no_run"} == set(due) - read - {SKIPPED} != set()
    # the DAG run's results have no ledger rows: listed under the grid, not guessed into it
    assert site["dag_run"]["run_id"] in devtools.js("document.querySelector('#unplaced').innerText")
    # one click from a failed cell to its run page, at its check's row
    bad = next(c for c in cells if c["outcome"] == "fail")
    outcome, token, anchor = want[(bad["tp"], bad["night"])]
    devtools.js(f"document.querySelector('#night-grid rect.cell[data-tp=\"{bad['tp']}\"]"
                f"[data-night=\"{bad['night']}\"]').dispatchEvent(new MouseEvent('click', {{bubbles: true}}))")
    deadline = time.monotonic() + 30
    while devtools.js("location.hash") != f"#{anchor}" or devtools.js("document.readyState") != "complete":
        assert time.monotonic() < deadline, "the click did not open the run page"
        time.sleep(0.2)
    target = devtools.js("(() => { const t = document.querySelector(':target'); const b = "
                         "t.getBoundingClientRect(); return {check: t.dataset.check, tp: t.dataset.topic"
                         " + '-' + t.dataset.partition, status: t.dataset.status, top: b.top, "
                         "visible: t.checkVisibility(), h: innerHeight}; })()")
    assert devtools.js("location.pathname") == f"{PREFIX}/runs/{token}"
    assert (target["check"], target["tp"], target["status"]) == (anchor.split("-", 2)[1], bad["tp"], "fail")
    assert target["visible"] and 0 <= target["top"] < target["h"]


#: the rectangles of what must be on screen, in the document's viewport
RECTS_JS = """(() => { const box = e => { const b = e.getBoundingClientRect();
    return {left: b.left, top: b.top, right: b.right, bottom: b.bottom, height: b.height}; };
  return {w: innerWidth, h: innerHeight, scroll: document.documentElement.scrollWidth,
    table: box(document.querySelector('#runs')),
    rows: [...document.querySelectorAll('#runs tr.run')].map(r => ({
      verdict: box(r.querySelector('td.verdict-cell')), run: box(r.querySelector('td.run-cell')),
      docs: box(r.querySelector('td.docs')), text: r.querySelector('td.verdict-cell').innerText})),
    topics: [...document.querySelectorAll('#runs details.topics')].map(d => ({
      open: d.open, summary: d.querySelector('summary').innerText}))}; })()"""


def test_nothing_that_matters_is_off_screen_at_1440x900(site, devtools):
    """At 1440x900 the runs table fits (no page scrolls sideways), each run's verdict is on
    screen beside its run id, its topic-partitions folded behind a count; a failed run's page
    shows its first problem line on the first screen, below the section saying it was not
    published."""
    devtools.open(f"{site['url']}{PREFIX}/", *WINDOW)
    got = devtools.js(RECTS_JS)
    assert (got["w"], got["h"]) == WINDOW
    assert got["scroll"] <= got["w"] and got["table"]["right"] <= got["w"]
    want = newest_first(site["runs"])
    assert [r["text"] for r in got["rows"]] == [shown_verdict(r) for r in want]
    for r in got["rows"]:
        assert 0 <= r["verdict"]["left"] and r["verdict"]["right"] <= got["w"]
        assert r["verdict"]["right"] <= r["run"]["left"] + 1  # the verdict, then the run id
        assert r["docs"]["right"] <= got["w"]
    assert got["topics"] and not any(t["open"] for t in got["topics"])
    assert all(re.fullmatch(r"\d+ topic-partitions?", t["summary"]) for t in got["topics"])
    failing = site["dag_run"]
    devtools.open(f"{site['url']}{PREFIX}/runs/{quote(failing['token'])}", *WINDOW)
    page = devtools.js("""(() => { const b = e => e && e.getBoundingClientRect().toJSON();
        const banner = document.querySelector('#not-published');
        return {w: innerWidth, h: innerHeight, scroll: document.documentElement.scrollWidth,
                banner: b(banner), head: banner && banner.querySelector('h2').innerText,
                line: b(document.querySelector('.problem-line'))}; })()""")
    assert page["head"] == "Not published: main unchanged"
    assert page["banner"]["bottom"] < page["line"]["top"]
    assert 0 <= page["line"]["top"] and page["line"]["bottom"] <= page["h"]
    assert page["line"]["right"] <= page["w"] and page["scroll"] <= page["w"]


def test_the_run_tab_in_airflow(site, devtools):
    """The "Data quality" tab of a DAG run, inside Airflow's shell at 1440x900: the report's
    problem lines name segments by partition folder and file name and do not wrap to more than
    a few lines; the tab of the night without a snapshot shows that run's verdict (warn), with
    the plan task's skip reason beside it (from Airflow's XCom)."""
    failing, skipped = site["dag_run"], site["skipped"]
    tab = f"{site['url']}/dags/{DAG_ID}/runs/{quote(failing['run_id'], safe='')}/plugin/data-quality-run"
    devtools.open(tab, *WINDOW)
    frame_js = """(() => { const f = document.querySelector('iframe[title="Data quality"]');
        const d = f && f.contentDocument; const l = d && d.querySelector('.problem-line');
        if (!l || d.readyState !== 'complete') return null;
        const fb = f.getBoundingClientRect(), lb = l.getBoundingClientRect();
        const lines = [...d.querySelectorAll('tr.result .problem-line')].map(p =>
            p.getBoundingClientRect().height / parseFloat(getComputedStyle(p).lineHeight));
        const checked = [...d.querySelectorAll('tr.result td.checked')].filter(c => c.checkVisibility())
            .map(c => c.getBoundingClientRect().right);
        return {frame: {left: fb.left, width: fb.width, height: fb.height}, lines: lines,
                checked: checked, scroll: d.documentElement.scrollWidth,
                line: {height: lb.height, right: lb.right,
                       lineHeight: parseFloat(getComputedStyle(l).lineHeight)},
                text: l.innerText, inner: d.documentElement.clientWidth,
                verdict: d.querySelector('#verdict').innerText}; })()"""
    deadline, got = time.monotonic() + 60, None
    while got is None:
        assert time.monotonic() < deadline, "the tab did not show the run's report"
        time.sleep(0.5)
        got = devtools.js(frame_js)
    assert got["verdict"] == "fail"
    first = next(json.loads(r["details"])["items"][0] for r in sorted(
        failing["rows"], key=lambda r: (r["check"], r["topic"], r["partition"]))
        if r["status"] == "fail")
    assert short(first["segment"]) in got["text"] and first["segment"] not in got["text"]
    lines = got["line"]["height"] / got["line"]["lineHeight"]
    assert lines <= 4, f"a problem line wraps to {lines:.0f} lines in a {got['frame']['width']} px tab"
    assert got["line"]["right"] <= got["inner"]  # not cut off at the tab's right edge
    # every problem line of the run, not only the first: at most a few lines each; the
    # Checked column in the tab, not clipped behind a scroll bar
    assert max(got["lines"]) <= 4, \
        f"problem lines wrap to {max(got['lines']):.0f} lines in a {got['frame']['width']} px tab"
    assert got["checked"] and max(got["checked"]) <= got["inner"] + 1, got["checked"]
    # the night without a snapshot: its report (a warning), not "no report: night skipped"
    view = f"{site['url']}/kafkalog-quality-view/{DAG_ID}/{quote(skipped['run_id'], safe='')}"
    devtools.open(view, *WINDOW)
    page = devtools.js("""(() => { const text = s => (document.querySelector(s) || {}).innerText;
        return {path: location.pathname, verdict: text('#verdict'), reason: text('#skip-reason'),
                nights: text('#nights')}; })()""")
    assert page["path"] == f"{PREFIX}/runs/{skipped['token']}" and page["verdict"] == "warn"
    assert (page["reason"] or "").endswith(f"nothing to decode for {SKIPPED}: 0 segments"), page
    assert page["nights"] == f"No snapshot: {SKIPPED}"


def test_a_run_whose_re_audit_crashed_shows_the_crash_not_the_earlier_verdict(site, devtools):
    """A run whose latest attempt failed before writing results (its audit crashed) is shown
    as failed, with the crash's cause, in its Data quality tab, on its page and in the runs
    table; its results are said to be an earlier attempt's (their verdict, warn, only
    beside)."""
    crashed = site["crashed"]
    assert expected_verdict(crashed) == "warn"
    view = f"{site['url']}/kafkalog-quality-view/{DAG_ID}/{quote(crashed['run_id'], safe='')}"
    devtools.open(view, *WINDOW)
    page = devtools.js("""(() => { const text = s => (document.querySelector(s) || {}).innerText;
        const a = document.querySelector('#attempt'), v = document.querySelector('#verdict');
        return {path: location.pathname, verdict: text('#verdict'), attempt: text('#attempt'),
                earlier: text('#earlier-verdict'), state: a && a.dataset.state,
                above: a && v && v.getBoundingClientRect().top < a.getBoundingClientRect().top,
                onScreen: a && a.getBoundingClientRect().bottom <= innerHeight}; })()""")
    assert page["path"] == f"{PREFIX}/runs/{crashed['token']}"
    assert (page["verdict"], page["state"], page["earlier"]) == ("failed", "failed", "warn")
    assert "Latest attempt failed" in page["attempt"] and CRASH_CAUSE in page["attempt"]
    assert "check_quality failed" in page["attempt"] and "earlier attempt" in page["attempt"]
    assert page["above"] and page["onScreen"]
    # the runs table: failed, the cause beside the run id
    devtools.open(f"{site['url']}{PREFIX}/", *WINDOW)
    cell = devtools.js(f"""(() => {{ const r = document.querySelector('tr.run[data-token="{crashed['token']}"]');
        return {{verdict: r.querySelector('td.verdict-cell').innerText, results: r.dataset.resultsVerdict,
                 note: r.querySelector('.attempt-note').innerText}}; }})()""")
    assert (cell["verdict"], cell["results"]) == ("failed", "warn")
    assert CRASH_CAUSE in cell["note"]
    assert crashed["run_id"] in devtools.js("document.querySelector('#attempts').innerText")


def test_embedded_in_the_airflow_ui(site, chromium, tmp_path):
    plugins = httpx.get(site["url"] + "/api/v2/plugins", headers=site["headers"], timeout=10).json()
    [ours] = [p for p in plugins["plugins"] if p["name"] == "kafkalog_quality"]
    [view] = [v for v in ours["external_views"] if v["destination"] == "nav"]
    assert (view["name"], view["url_route"], view["destination"]) == ("Data quality", "data-quality", "nav")
    shell_url = f"{site['url']}/plugin/{view['url_route']}"
    assert httpx.get(shell_url, timeout=10).status_code == 200
    dom = Dom(chromium.dom(shell_url))
    frame = dom.one("iframe", title="Data quality")
    assert frame.attrs["src"] == view["href"]
    base = dom.one("base").attrs["href"]
    assert urljoin(urljoin(shell_url, base), frame.attrs["src"]) == f"{site['url']}{PREFIX}/"
    assert any(a.text.strip() == "Data quality" for a in dom.find("a"))  # the nav entry
    assert_png(chromium.screenshot(shell_url, tmp_path / "embedded.png"))


def test_report_link_on_the_quality_task(site, chromium):
    dag_run = site["dag_run"]
    links = {}
    for task_id in ("check_quality", "decode"):
        resp = httpx.get(
            f"{site['url']}/api/v2/dags/{DAG_ID}/dagRuns/{quote(dag_run['run_id'], safe='')}"
            f"/taskInstances/{task_id}/links", headers=site["headers"], timeout=10)
        assert resp.status_code == 200, resp.text
        links[task_id] = resp.json()["extra_links"]
    assert links["check_quality"]["Data quality report"] == f"{PREFIX}/runs/{storage.run_token(dag_run['run_id'])}"
    assert not links["decode"]["Data quality report"]
    dom = Dom(chromium.dom(site["url"] + links["check_quality"]["Data quality report"]))
    assert dom.one(id="run-id").text == dag_run["run_id"]
    assert dom.one(id="verdict").text == expected_verdict(dag_run)


def test_routes_ask_airflows_auth_manager(site):
    """A second api-server with a password user instead of all-admins."""
    port = free_port()
    env = airflow_env(site["home"], site["warehouse"], port,
                      AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
                      AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="viewer:viewer",
                      AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(site["base"] / "passwords.json"))
    server = ApiServer(env, port, site["base"] / "api-server-auth.log")
    try:
        url = server.url + PREFIX
        assert httpx.get(url + "/api/runs", timeout=10).status_code == 401
        page = httpx.get(url + "/", timeout=10)
        assert page.status_code == 307
        assert page.headers["location"].startswith("/auth/login?next=")
        assert httpx.get(f"{url}/runs/{site['runs'][0]['token']}/docs/index.html",
                         timeout=10).status_code == 307
        bad = httpx.get(url + "/api/runs", headers={"Authorization": "Bearer nonsense"}, timeout=10)
        assert bad.status_code in (401, 403)
        password = json.loads((site["base"] / "passwords.json").read_text())["viewer"]
        token = httpx.post(server.url + "/auth/token", json={"username": "viewer", "password": password},
                           timeout=10).json()["access_token"]
        ok = httpx.get(url + "/api/runs", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert ok.status_code == 200
        assert [r["run_id"] for r in ok.json()["runs"]] == [r["run_id"] for r in newest_first(site["runs"])]
        cookie = httpx.get(url + "/", cookies={"_token": token}, timeout=10)
        assert cookie.status_code == 200 and len(Dom(cookie.text).find("tr", cls="run")) == len(site["runs"])
    finally:
        server.stop()
