"""The Data quality plugin without a server: loading dq_results, charts, pages, the extra link.

Every expectation is computed from the rows the test writes (``scenario``, in
tests/plugin/report_data.py), never typed in. The rows are committed to the warehouse's
Iceberg table ``dq_results`` as the audit commits them
(``spark_jobs.warehouse.Warehouse.replace_run_rows``); Data Docs are files under the root.
The pages are served by the plugin's own FastAPI app through Starlette's test client, with
authentication off (the api-server test, test_plugin_ui.py, covers Airflow's auth manager).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

# Airflow reads AIRFLOW_HOME at import: never let a test touch ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="kafkalog-plugin-airflow-"))

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs import schemas, storage
from spark_jobs.audit.results import Details, Item, parse_details
from spark_jobs.warehouse import AUDITED, DEFAULT_CATALOG, Warehouse, branch_name
from spark_jobs.warehouse.catalog import EMBEDDED_DB

from tests.plugin.report_data import (  # noqa: E402 (it puts the plugins folder on the path)
    CAUSES, CHECKS, PARTITIONS, PLUGINS, RANK, REPO, SNAPSHOTS, UNITS, docs_css, docs_html,
    Dom, expected_cells, expected_counts, expected_series, expected_verdict, iceberg_warehouse,
    item, night_columns, no_snapshot_row, passing_run, row, scenario, segment_name, short,
    write_ledger, write_run, write_warehouse)

from kafkalog_quality import (calendar, model, nights, pages, repository, series, svg,  # noqa: E402
                              words)

from kafkalog_quality.app import URL_PREFIX, create_app  # noqa: E402

pytestmark = pytest.mark.pipeline


# ---- writing a warehouse ------------------------------------------------------------------


def data_file_of(root: str, run_id: str, catalog: str = DEFAULT_CATALOG) -> str:
    """The local path of the data file holding run ``run_id``'s rows on main."""
    table = iceberg_warehouse(root, catalog).load("dq_results")
    [path] = [t.file.file_path for t in table.scan().plan_files()
              if pq.read_table(t.file.file_path[len("file://"):]).column("run_id").to_pylist()
              == [run_id] * t.file.record_count]
    return path[len("file://"):]


# ---- reading HTML back ---------------------------------------------------------------------


# ---- fixtures ------------------------------------------------------------------------------


#: the tests' "now": the scenario's last night, after the schedule's 03:00 (the grid's columns
#: run to the last night the nightly DAG was due to read)
NOW = dt.datetime(2026, 11, 20, 12, tzinfo=dt.timezone.utc)


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """The clock of the night calendar, fixed at ``NOW``; the default schedule."""
    monkeypatch.setattr(calendar, "utcnow", lambda: NOW)
    monkeypatch.delenv("KAFKALOG_NIGHTLY_SCHEDULE", raising=False)
    return NOW


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    """scenario()'s runs in a warehouse, written once for the tests that only read it
    (a dozen Iceberg commits); a test that changes its warehouse takes ``own_warehouse``."""
    root = str(tmp_path_factory.mktemp("shared") / "warehouse")
    return root, write_warehouse(root)


@pytest.fixture
def own_warehouse(tmp_path):
    """scenario()'s runs in a warehouse of this test's own, free to change."""
    root = str(tmp_path / "warehouse")
    return root, write_warehouse(root)


def make_client(root: str):
    from fastapi.testclient import TestClient

    return TestClient(create_app(authenticate=False, root=root), root_path=URL_PREFIX)


@pytest.fixture
def client(warehouse):
    return make_client(warehouse[0])


@pytest.fixture
def own_client(own_warehouse):
    return make_client(own_warehouse[0])


# ---- data ----------------------------------------------------------------------------------


def test_runs_newest_first_with_counts_and_verdicts(warehouse):
    root, runs = warehouse
    loaded = repository.Warehouse(root).runs()
    newest_first = sorted(runs, key=lambda r: r["checked_at"], reverse=True)
    assert [r.token for r in loaded] == [r["token"] for r in newest_first]
    for got, want in zip(loaded, newest_first):
        assert got.run_id == want["run_id"]
        assert got.checked_at == want["checked_at"]
        assert got.counts == expected_counts(want)
        assert got.verdict == expected_verdict(want)
        assert got.has_docs
        assert len(got.results) == len(want["rows"])
    assert {r.verdict for r in loaded} == {"pass", "fail", "warn"}  # the scenario covers all three


def test_one_run_keeps_every_row_and_parses_details(warehouse):
    root, runs = warehouse
    want = runs[1]
    run = repository.Warehouse(root).run(want["token"])
    got = sorted((r.check, r.topic, r.partition, r.status, r.failed, r.observed,
                  json.dumps(json.loads(r.raw_details))) for r in run.results)
    assert all(r.details == parse_details(r.raw_details) is not None for r in run.results)
    assert got == sorted((r["check"], r["topic"], r["partition"], r["status"], r["failed"],
                          r["observed"], json.dumps(json.loads(r["details"]))) for r in want["rows"])
    checks = {c["check"]: c for c in run.checks()}
    assert set(checks) == set(CHECKS)
    for name, check in checks.items():
        rows = [r for r in want["rows"] if r["check"] == name]
        assert check["failed"] == sum(r["failed"] for r in rows)
        assert check["counts"] == dict(Counter(r["status"] for r in rows))
        assert [(r.topic, r.partition) for r in check["rows"]] == sorted(PARTITIONS)


def test_unknown_or_unsafe_tokens_are_not_runs(warehouse):
    root, _ = warehouse
    wh = repository.Warehouse(root)
    assert wh.run("no-such-run") is None
    for token in ["..", ".", "a/b", "../warehouse", ""]:
        assert wh.run(token) is None


def test_series_are_the_sums_of_the_rows(warehouse):
    root, runs = warehouse
    s = series.series(repository.Warehouse(root).runs())
    want = expected_series(runs)
    assert [r["run_id"] for r in s["runs"]] == [r["run_id"] for r in sorted(runs, key=lambda r: r["checked_at"])]
    assert s["crc_failures"] == want["crc"]
    assert s["timestamp_regressions"] == want["ts"]
    assert s["gaps_by_cause"] == want["gaps"]
    assert sum(want["crc"]) > 0 and all(map(sum, want["ts"].values())) and want["gaps"]  # not empty


def test_gap_causes_from_classes_else_by_cause_else_failed():
    def row(details, failed=4):
        return model.Result("r", "offset_gaps", "t", 0, "warn", "warning", 10, failed,
                            parse_details(details), None)

    classes = {"compaction": {"status": "pass", "items": 5, "offsets": 9},
               "missing_segment": {"status": "warn", "items": 2, "offsets": 3},
               "retention": {"status": "pass", "items": 0, "offsets": 0}}
    assert series.gap_causes(row({"classes": classes})) == {"compaction": 5, "missing_segment": 2}
    assert series.gap_causes(row({"by_cause": {"a": "2", "b": None}})) == {"a": 2}
    assert series.gap_causes(row({"other": 1})) == {series.UNSPECIFIED_CAUSE: 4}
    assert series.gap_causes(row("not json", failed=0)) == {}
    ts = model.Result("r", "create_time", "t", 0, "warn", "warning", 10, 0,
                      parse_details({"regressions": 6}), None)
    assert series.timestamp_regressions(ts) == 6
    assert series.timestamp_regressions(dataclasses.replace(ts, details=None, failed=3)) == 3
    assert [series.check_kind(n) for n in ["crc", "offset_gaps", "record_gaps", "create_time",
                                         "log_append_time", "max_timestamp", "record_count"]] == \
        ["crc", "gaps", None, "timestamps", "timestamps", None, None]


def test_unreadable_data_file_is_an_error_run_not_a_broken_page(own_warehouse, own_client):
    """A data file of dq_results that cannot be read: the run that committed it is an error
    run, the other runs are read as usual."""
    root, runs = own_warehouse
    broken = {"run_id": "broken", "rows": [dict(r, run_id="broken") for r in scenario()[0]["rows"]]}
    write_run(root, broken, docs=False)
    Path(data_file_of(root, "broken")).write_bytes(b"not parquet at all")
    loaded = {r.token: r for r in repository.Warehouse(root).runs()}
    assert loaded["broken"].verdict == "error" and loaded["broken"].error
    assert len(loaded) == len(runs) + 1
    assert {t: r.verdict for t, r in loaded.items() if t != "broken"} == \
        {r["token"]: expected_verdict(r) for r in runs}
    page = own_client.get("/")
    assert page.status_code == 200
    assert Dom(page.text).one("tr", data_token="broken").attrs["data-verdict"] == "error"


def test_unreadable_catalog_is_an_error_page_not_a_crash(own_warehouse, own_client, monkeypatch):
    """A catalog the settings name but nothing defines, then a broken catalog database: the
    pages and the API say so (503), the Data Docs are still served."""
    root, runs = own_warehouse
    token = runs[0]["token"]
    monkeypatch.delenv("AIRFLOW_VAR_KAFKALOG_CATALOG", raising=False)
    monkeypatch.setenv("KAFKALOG_CATALOG", "nosuch")
    for path in ("/", f"/runs/{token}"):
        page = own_client.get(path)
        assert page.status_code == 503 and "'nosuch'" in Dom(page.text).one(id="message").text
    assert own_client.get("/api/runs").status_code == 503
    assert "nosuch" in own_client.get("/api/series").json()["detail"]
    monkeypatch.delenv("KAFKALOG_CATALOG")
    assert own_client.get("/").status_code == 200
    # the embedded catalog's SQLite file, overwritten in place
    with open(Path(root, EMBEDDED_DB), "r+b") as f:
        f.write(b"not a database" * 512)
    for path in ("/", f"/runs/{token}"):
        page = own_client.get(path)
        assert page.status_code == 503
        message = Dom(page.text).one(id="message").text
        assert "dq_results" in message and "'kafkalog'" in message
    assert own_client.get("/api/runs").status_code == 503
    assert own_client.get(f"/runs/{token}/docs/index.html").text == docs_html(runs[0]["run_id"])


def test_new_snapshot_is_read_again(own_warehouse):
    root, runs = own_warehouse
    wh = repository.Warehouse(root)
    before = wh.run(runs[0]["token"])
    changed = dict(runs[0], rows=[dict(r, status="fail", failed=1) for r in runs[0]["rows"]])
    write_run(root, changed, docs=False)
    after = wh.run(runs[0]["token"])
    assert before.verdict == expected_verdict(runs[0]) != "fail"
    assert after.counts["fail"] == len(changed["rows"])


def test_a_view_costs_one_catalog_lookup_until_a_new_snapshot(own_warehouse, monkeypatch):
    root, runs = own_warehouse
    lookups, reads = Counter(), Counter()
    load, scan = Warehouse.load, repository.scan

    def counted_load(self, name):
        lookups[name] += 1
        return load(self, name)

    def counted_scan(table, *args, **kwargs):
        reads[table.name()[-1]] += 1
        return scan(table, *args, **kwargs)

    monkeypatch.setattr(Warehouse, "load", counted_load)
    monkeypatch.setattr(repository, "scan", counted_scan)
    assert len(repository.Warehouse(root).runs()) == len(runs)
    assert reads == {"dq_results": 1}
    for view in (lambda wh: wh.runs(), lambda wh: wh.run(runs[1]["token"])):
        lookups.clear()
        reads.clear()
        assert view(repository.Warehouse(root))  # a new Warehouse per request, as the app makes
        assert lookups == {"dq_results": 1} and not reads
    # the overview's nights: main's ledger read once, then one lookup per view
    wh = repository.Warehouse(root)
    assert {c.nights[0] for c in wh.coverage(wh.runs()).values()} == {r["nights"][0] for r in runs}
    assert reads["ledger"] == 1
    lookups.clear()
    reads.clear()
    wh = repository.Warehouse(root)
    assert len(wh.coverage(wh.runs())) == len(runs)
    assert lookups == {"dq_results": 1, "ledger": 1} and not reads
    write_run(root, dict(runs[0], rows=runs[0]["rows"][:3]), docs=False)
    reads.clear()
    assert len(repository.Warehouse(root).run(runs[0]["token"]).results) == 3
    assert reads == {"dq_results": 1}


def test_catalog_and_namespace_come_from_the_settings(tmp_path, monkeypatch):
    root = str(tmp_path / "wh")
    run = scenario()[0]
    write_run(root, run, namespace="quality")
    for name in ("CATALOG", "NAMESPACE"):
        monkeypatch.delenv(f"KAFKALOG_{name}", raising=False)
        monkeypatch.delenv(f"AIRFLOW_VAR_KAFKALOG_{name}", raising=False)
    wh = repository.Warehouse(root)
    assert (wh.catalog_name, wh.namespace) == ("kafkalog", "kafka") and wh.runs() == []
    monkeypatch.setenv("KAFKALOG_NAMESPACE", "quality")
    assert [r.run_id for r in repository.Warehouse(root).runs()] == [run["run_id"]]
    # the Airflow Variable wins over the environment variable
    monkeypatch.setenv("KAFKALOG_NAMESPACE", "kafka")
    monkeypatch.setenv("AIRFLOW_VAR_KAFKALOG_NAMESPACE", "quality")
    assert [r.run_id for r in repository.Warehouse(root).runs()] == [run["run_id"]]
    assert repository.Warehouse(root, namespace="kafka").runs() == []


# ---- charts --------------------------------------------------------------------------------

SVG_NS = "{http://www.w3.org/2000/svg}"


def test_bar_chart_is_svg_whose_bars_carry_the_values():
    rng = random.Random(3)
    labels = [f"run {i}" for i in range(7)]
    series = {"a": [rng.randrange(0, 40) for _ in labels], "b": [rng.randrange(0, 40) for _ in labels]}
    series["a"][2] = series["b"][2] = 0  # an empty bar
    root = ET.fromstring(svg.bar_chart("c1", "T <&>", labels, series))
    assert root.tag == SVG_NS + "svg" and root.get("id") == "c1"
    assert int(root.get("data-total")) == sum(map(sum, series.values()))
    bars = root.findall(SVG_NS + "g[@class='bar']")
    assert len(bars) == len(labels)
    unit = None
    for i, bar in enumerate(bars):
        rects = bar.findall(SVG_NS + "rect")
        assert {r.get("data-series"): int(r.get("data-value")) for r in rects} == \
            {k: v[i] for k, v in series.items() if v[i]}
        assert int(bar.get("data-total")) == series["a"][i] + series["b"][i]
        for r in rects:  # heights are proportional to the values
            per = float(r.get("height")) / int(r.get("data-value"))
            unit = unit or per
            assert per == pytest.approx(unit, rel=0.02)
    assert not bars[2].findall(SVG_NS + "rect")
    assert {g.get("data-series") for g in root.findall(SVG_NS + "g[@class='legend-item']")} == {"a", "b"}
    assert root.find(SVG_NS + "title").text == "T <&>"


def test_bar_chart_axis_covers_the_tallest_bar():
    for top in [0, 1, 3, 4, 5, 9, 17, 99, 101, 12345]:
        chart = ET.fromstring(svg.bar_chart("c", "t", ["x"], {"s": [top]}))
        ticks = [int(t.text) for t in chart.findall(SVG_NS + "text") if t.get("text-anchor") == "end"
                 and t.text.isdigit()]
        assert max(ticks) >= top and min(ticks) == 0
        assert len(ticks) <= 6
    empty = svg.bar_chart("e", "t", [], {})
    assert "no runs yet" in empty
    with pytest.raises(ValueError):
        svg.bar_chart("x", "t", ["a", "b"], {"s": [1]})


# ---- pages ---------------------------------------------------------------------------------


def test_index_page_lists_runs_with_charts_and_links(warehouse, client):
    root, runs = warehouse
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    dom = Dom(page.text)
    assert dom.one("base").attrs["href"] == URL_PREFIX + "/"
    rows = dom.find("tr", cls="run")
    newest_first = sorted(runs, key=lambda r: r["checked_at"], reverse=True)
    assert [r.attrs["data-run-id"] for r in rows] == [r["run_id"] for r in newest_first]
    for row, run in zip(rows, newest_first):
        assert row.attrs["data-verdict"] == expected_verdict(run)
        assert f"row-{expected_verdict(run)}" in row.classes
    for status in ("pass", "warn", "fail"):
        cells = [int(c.text) for c in dom.find("td", cls=f"count-{status}")]
        assert cells == [expected_counts(r)[status] for r in newest_first]
    assert [a.attrs["href"] for a in dom.find("a", cls="run-link")] == \
        [f"runs/{r['token']}" for r in newest_first]
    assert [a.attrs["href"] for a in dom.find("a", cls="docs-link")] == \
        [f"runs/{r['token']}/docs/index.html" for r in newest_first]
    want = expected_series(runs)
    assert int(dom.one("svg", id="chart-crc").attrs["data-total"]) == sum(want["crc"])
    assert int(dom.one("svg", id="chart-timestamps").attrs["data-total"]) == sum(map(sum, want["ts"].values()))
    assert int(dom.one("svg", id="chart-gaps").attrs["data-total"]) == sum(map(sum, want["gaps"].values()))
    assert {g.attrs["data-series"] for g in dom.find("g", cls="legend-item")} >= set(want["gaps"])
    assert "<script" not in page.text and "http://" not in page.text.replace("http://www.w3.org", "")


# ---- nights at a glance ---------------------------------------------------------------------


def test_nights_at_a_glance_are_keyed_by_snapshot_night(warehouse, client):
    """The overview's grid: a column per night the runs read (from their ledger rows, not when
    they were checked), a cell per topic-partition and night coloured by its worst check,
    linking to the run page at that check's row; the range run covers both its nights."""
    root, runs = warehouse
    want = expected_cells(runs)
    api = client.get("/api/nights").json()
    assert api["nights"] == sorted({n for run in runs for n in run["nights"]})
    assert {(f"{c['topic']}-{c['partition']}", c["night"]): (c["outcome"], c["token"], c["anchor"])
            for c in api["cells"]} == want
    assert {r["run_id"]: r["nights"] for r in api["runs"]} == {r["run_id"]: r["nights"] for r in runs}
    assert {o for o, _, _ in want.values()} >= {"fail", "warn", "accepted"}  # the scenario has each
    dom = Dom(client.get("/").text)
    grid = dom.one("svg", id="night-grid")
    cells = {(c.attrs["data-tp"], c.attrs["data-night"]): c for c in dom.find("rect", cls="cell")
             if "data-tp" in c.attrs}
    assert set(cells) == set(want)
    links = [a.attrs["href"] for a in dom.find("a") if a.attrs.get("href", "").startswith("runs/")]
    pages = {}
    for key, (outcome, token, anchor) in want.items():
        rect = cells[key]
        assert rect.attrs["data-outcome"] == outcome and rect.attrs["data-token"] == token
        assert rect.attrs["fill"] == svg.OUTCOME_FILLS[outcome]  # accepted: neutral, never red
        href = f"runs/{token}" + (f"#{anchor}" if anchor else "")
        assert href in links
        if anchor:  # the run page has that row, with that check and topic-partition
            page = pages.setdefault(token, Dom(client.get(f"/runs/{token}").text))
            row = page.one("tr", id=anchor)
            assert (row.attrs["data-check"], f"{row.attrs['data-topic']}-{row.attrs['data-partition']}") \
                == (anchor.split("-", 2)[1], key[0])
    assert int(grid.attrs["data-columns"]) == len(api["nights"])
    # the headline names the unhealthy nights, newest first; each has its problem lines
    bad = sorted({n for (_, n), (o, _, _) in want.items() if o in ("fail", "warn")}, reverse=True)
    assert [d.attrs["data-night"] for d in dom.find("div", cls="night")] == bad
    for div in dom.find("div", cls="night"):
        for (tp, night), (outcome, _, anchor) in want.items():
            if night == div.attrs["data-night"] and outcome in ("fail", "warn"):
                assert f"{tp}: " in div.text and anchor.split("-", 2)[1] in div.text
    headline = dom.one("p", id="headline").text
    assert headline.startswith("Unhealthy nights: ") and all(n in headline for n in bad)
    # the runs table says which nights each run read
    nights = {r.attrs["data-run-id"]: r for r in dom.find("tr", cls="run")}
    for run in runs:
        assert calendar.nights_text(run["nights"]) in nights[run["run_id"]].text
    assert "2026-11-19..2026-11-20" in nights[runs[2]["run_id"]].text
    assert not dom.find(id="unplaced")


def test_accepted_gap_causes_are_drawn_neutral(warehouse, client):
    root, runs = warehouse
    s = client.get("/api/series").json()
    assert s["gap_cause_status"] == {c: st for c, st in {**CAUSES, "retention": "pass"}.items()
                                     if c in s["gaps_by_cause"]}
    assert s["gap_cause_status"]["retention"] == "pass"
    colors = pages.cause_colors(s["gap_cause_status"])
    alarm = {svg.OUTCOME_FILLS["fail"], "#a40e26", "#e5534b"}
    for cause, status in s["gap_cause_status"].items():
        assert (colors[cause] in alarm) == (status == "fail")
    dom = Dom(client.get("/").text)
    drawn = {r.attrs["data-series"]: r.attrs["fill"] for r in dom.find("rect")
             if r.attrs.get("data-series") in s["gap_cause_status"]}
    assert drawn and all(drawn[c] == colors[c] for c in drawn)


def test_night_of_a_segment_follows_the_snapshot_template():
    uri = "s3://b/{}/orders-3/00000000000000000042.log"
    cases = {
        "{prefix}/{snapshot_date}/": "snapshots/2026-11-19",
        "{prefix}/year={yyyy}/month={mm}/day={dd}/": "snapshots/year=2026/month=11/day=19",
        "nightly/{compact_date}/{prefix}": "nightly/20261119/snapshots",
    }
    for template, directory in cases.items():
        pattern = calendar.night_pattern(template)
        assert calendar.night_of(uri.format(directory), pattern) == "2026-11-19", template
        assert calendar.night_of(uri.format("2026-11-19").replace("orders-3/", ""), pattern) is None
    default = calendar.night_pattern("{prefix}/{snapshot_date}/")
    assert calendar.night_of("s3://b/2026-11-19/orders-3/00000000000000000042.log", default) == "2026-11-19"
    assert calendar.night_of(uri.format("snapshots/2026-13-40"), default) is None  # no such day
    assert calendar.night_of(uri.format("snapshots/latest"), default) is None
    with pytest.raises(ValueError):
        calendar.night_pattern("{prefix}/static/")  # a template must use the date


def _result(run_id, check, status, items, more=0, tp=("orders", 0)):
    return model.Result(run_id, check, tp[0], tp[1], status, status, 10, len(items),
                       parse_details({"unit": "batches", "classes": {}, "items": items,
                                      "more_items": more}),
                       dt.datetime(2026, 11, 21, tzinfo=dt.timezone.utc))


def test_a_range_runs_items_are_placed_on_their_nights():
    """A run that read two nights: a problem item whose segment lies in one night marks that
    night only; where an item is not stored (more_items) the row's outcome holds on both. A
    row of the snapshot itself (no topic) is the grid's "snapshot" row, on every night read."""
    pattern = calendar.night_pattern("{prefix}/{snapshot_date}/")
    seg = "s3://b/snapshots/{}/orders-0/00000000000000000000.log"
    item = {"class": "crc_mismatch", "status": "fail", "first_offset": 5, "last_offset": 9,
            "segment": seg.format("2026-11-19"), "position": 120, "message": "stored crc ..."}
    cov = model.Coverage.of([("orders", 0, seg.format(n), None) for n in ("2026-11-19", "2026-11-20")],
                           pattern, "{prefix}/{snapshot_date}/")
    assert cov.partitions == {("orders", 0): ("2026-11-19", "2026-11-20")}
    for more, want in ((0, {"2026-11-19": "fail", "2026-11-20": "pass"}),
                       (3, {"2026-11-19": "fail", "2026-11-20": "fail"})):
        run = model.Run("t", "range", None, [_result("range", "crc", "fail", [item], more),
                                            _result("range", "record_count", "pass", []),
                                            _result("range", "run_level", "warn", [], tp=(None, None))])
        ov = nights.overview([run], {"t": cov}, pattern)
        assert set(ov.cells) == {(t, p, n) for t, p in (("orders", 0), (None, None)) for n in cov.nights}
        assert ov.partitions == [(None, None), ("orders", 0)]  # the snapshot's row first
        assert {n: ov.cells[("orders", 0, n)].outcome for n in ov.nights} == want
        assert {ov.cells[(None, None, n)].outcome for n in ov.nights} == {"warn"}
        assert ov.cells[("orders", 0, "2026-11-19")].anchor == "r-crc-orders-0"
        assert ov.cells[(None, None, "2026-11-19")].anchor == "r-run_level-snapshot"
    # paths the template does not match: no night, and the reason says so
    odd = model.Coverage.of([("orders", 0, "s3://b/elsewhere/orders-0/00000000000000000000.log", None)],
                           pattern, "{prefix}/{snapshot_date}/")
    assert not odd.nights and "{prefix}/{snapshot_date}/" in odd.reason
    # the ledger's night, where it has one, over the URI's
    told = model.Coverage.of([("orders", 0, seg.format("2026-11-19"), "2026-11-21")], pattern, "t")
    assert told.partitions == {("orders", 0): ("2026-11-21",)}


def test_an_unpublished_run_is_placed_by_the_ledger_its_audit_read(tmp_path):
    """A run whose audit failed is not on main's ledger: its nights come from the ledger
    snapshot named in its dq_results commit (kafkalog.audited); without one it is listed
    under the grid with the reason."""
    from pyiceberg.expressions import EqualTo

    root = str(tmp_path / "warehouse")
    published, failed, unknown = scenario()
    sid = write_ledger(root, [failed])
    iceberg_warehouse(root).table("ledger").delete(EqualTo("run_id", failed["run_id"]))
    write_ledger(root, [published])
    # the unknown run's rows name no night either (as an audit before the column wrote them)
    unknown["rows"] = [{**r, repository.NIGHT: None} for r in unknown["rows"]]
    for run, audited in ((published, None), (failed, {"ledger": sid}), (unknown, None)):
        iceberg_warehouse(root).replace_run_rows(
            "dq_results", run["run_id"], pa.Table.from_pylist(run["rows"], schema=schemas.DQ_RESULTS),
            {AUDITED: json.dumps(audited)} if audited else None)
    wh = repository.Warehouse(root)
    runs = wh.runs()
    cov = {r.run_id: c for r in runs for t, c in wh.coverage(runs).items() if t == r.token}
    assert cov[published["run_id"]].nights == published["nights"]
    assert cov[failed["run_id"]].nights == failed["nights"]
    assert not cov[unknown["run_id"]].nights and "audit" in cov[unknown["run_id"]].reason
    dom = Dom(make_client(root).get("/").text)
    assert unknown["run_id"] in dom.one("p", id="unplaced").text
    assert {c.attrs["data-night"] for c in dom.find("rect", cls="cell") if "data-tp" in c.attrs} \
        == set(published["nights"] + failed["nights"])


def run_page_rows(dom: Dom):
    """The run page's result rows in page order, with the disclosure (if any) each sits in."""
    return dom.find("tr", cls="result")


def test_run_page_lists_problems_first_then_collapsed_passes(warehouse, client):
    root, runs = warehouse
    for run in runs:
        page = client.get(f"/runs/{run['token']}")
        assert page.status_code == 200
        dom = Dom(page.text)
        assert dom.one(id="run-id").text == run["run_id"]
        assert dom.one(id="verdict").text == expected_verdict(run)
        want = expected_counts(run)
        # one count vocabulary: results (a check on a topic-partition) fail, warn or pass
        nouns = {"fail": ("failure", "failures"), "warn": ("warning", "warnings"),
                 "pass": ("pass", "passes")}
        assert dom.one(id="counts").text == " · ".join(
            f"{want[s]} {nouns[s][want[s] != 1]}" for s in nouns if want[s]) + \
            ", counted per check × topic-partition"
        # the Data Docs' unit: one suite per check, its status the check's worst
        worst: dict = {}
        for r in run["rows"]:
            worst[r["check"]] = min(worst.get(r["check"], "pass"), r["status"], key=RANK.get)
        suites = Counter(worst.values())
        assert dom.one(id="suites").text == f"(they count {len(worst)} suites, one per check: " + \
            " · ".join(f"{suites[s]} {w}" for s, w in (("fail", "failed"), ("warn", "warned"),
                                                        ("pass", "passed")) if suites[s]) + ")"
        rows = run_page_rows(dom)
        assert Counter((r.attrs["data-check"], r.attrs["data-topic"], r.attrs["data-partition"],
                        r.attrs["data-status"]) for r in rows) == \
            Counter((r["check"], r["topic"], str(r["partition"]), r["status"]) for r in run["rows"])
        statuses = [r.attrs["data-status"] for r in rows]
        assert statuses == sorted(statuses, key=["fail", "warn", "pass"].index)  # problems first
        # passes are inside one collapsed <details>, problems are not
        passes = dom.find("details", id="passes")
        if want["pass"]:
            assert len(passes) == 1 and "open" not in passes[0].attrs
            pass_rows = [r for r in rows if r.attrs["data-status"] == "pass"]
            section_of = {s.attrs["data-status"]: s for s in dom.find(cls="outcome")}
            assert set(section_of) == {s for s in ("fail", "warn", "pass") if want[s]}
            for r in pass_rows:  # each pass row's check name is in the passes' text
                assert r.attrs["data-check"] in passes[0].text
            # what a passing check accepted is said (e.g. gaps explained by compaction)
            for want_row in run["rows"]:
                if want_row["status"] != "pass":
                    continue
                accepted = {c: v["items"] for c, v in json.loads(want_row["details"])["classes"].items()
                            if v["status"] == "pass" and v["items"]}
                [cell] = [r for r in pass_rows if (r.attrs["data-check"], r.attrs["data-topic"],
                          r.attrs["data-partition"]) == (want_row["check"], want_row["topic"],
                                                         str(want_row["partition"]))]
                for c, n in accepted.items():
                    assert f"{c}: {n} item" in cell.text
        for status, title in (("fail", "Failed"), ("warn", "Warned")):
            sections = dom.find("section", id=f"outcome-{status}")
            assert len(sections) == (1 if want[status] else 0)
            if want[status]:
                assert sections[0].text.startswith(f"{title}: {want[status]} (counted per check "
                                                   "× topic-partition)")
        # never a severity column: the configured severity is a label of passing rows only
        assert "Severity" not in [th.text for th in dom.find("th")]
        assert all(c.text in words.SEVERITY_LABELS.values() for c in dom.find("td", cls="if-found"))
        assert len(dom.find("td", cls="if-found")) == want["pass"]


#: a segment URI of scenario()'s messages
SEGMENT_URI = re.compile(r"s3://[^\s()]+?\.log")


def test_run_page_says_each_problem_in_one_plain_line(warehouse, client):
    """One line per problem: topic-partition, offsets, the segment by its partition folder and
    file name (the whole URI on hover), byte position; the rest behind disclosures."""
    root, runs = warehouse
    run = runs[1]  # fails (CRC, broker timestamps) and warns (a missing segment)
    html = client.get(f"/runs/{run['token']}").text
    dom = Dom(html)
    problems = [r for r in run["rows"] if r["status"] != "pass"]
    lines = [el.text for el in dom.find("div", cls="problem-line")]
    assert len(lines) == len(problems) > 0
    by_key = {(r["check"], r["topic"], r["partition"]): r for r in problems}
    rows = [r for r in dom.find("tr", cls="result") if r.attrs["data-status"] != "pass"]
    hover = {el.attrs["title"]: el.text for el in dom.find("span", cls="uri")}
    for row, line in zip(rows, lines):
        want = by_key[(row.attrs["data-check"], row.attrs["data-topic"], int(row.attrs["data-partition"]))]
        first = json.loads(want["details"])["items"][0]
        full = f"{row.attrs['data-topic']}-{row.attrs['data-partition']}: " + words.describe_item(Item.from_dict(first))
        assert first["segment"].startswith("s3://") and first["segment"] in full
        assert line == SEGMENT_URI.sub(lambda m: short(m.group(0)), full)
        assert f"{first['first_offset']}..{first['last_offset']}" in line or \
            f"offset {first['first_offset']}" in line
        assert first["segment"] not in line and short(first["segment"]) in line
        assert hover[first["segment"]] == short(first["segment"])  # the whole URI on hover
        assert short(first["segment"]).endswith(f"/{want['topic']}-{want['partition']}/"
                                                + first["segment"].rsplit("/", 1)[1])
        assert line in row.text and f"{want['failed']} item" in row.text
        assert f"{want['observed']:,} {UNITS[want['check']]} checked" in row.text
    # raw JSON only inside the "raw details" disclosures, one per row
    raws = dom.find("details", cls="raw")
    assert len(raws) == len(run["rows"])
    text_outside = "".join(el.text for el in dom.find("div", cls="problem-line"))
    assert '{"' not in text_outside
    for r in run["rows"]:
        assert any(json.dumps(json.loads(r["details"]), indent=2, sort_keys=True) in d.text for d in raws)


def test_item_lines_name_the_partition_offsets_segment_and_bytes():
    seg = "00000000000000000025.log"
    crc = {"class": "crc_mismatch", "status": "fail", "first_offset": 10, "last_offset": 14,
           "segment": seg, "position": 4096,
           "message": f"batch at position 4096 of {seg} (offsets 10..14): stored crc 0x00000001, "
                      "computed 0x00000002"}
    # the audit's message already names all of it: nothing is added
    assert words.item_line("payments", 1, Item.from_dict(crc)) == f"payments-1: {crc['message']}"
    gap = {"class": "missing_segment", "status": "warn", "first_offset": 15, "last_offset": 24,
           "segment": seg, "position": 0,
           "message": f"offsets 15..24: 00000000000000000000.log ends at 14 but the next segment "
                      f"file {seg} starts at 25: a segment based at 15 is missing from the snapshot"}
    assert words.item_line("payments", 1, Item.from_dict(gap)) == f"payments-1: {gap['message']} (segment {seg} at byte 0)"
    count = {"class": "records_missing", "status": "fail", "first_offset": 40, "last_offset": 44,
             "segment": seg, "position": 812, "message": "batch 40..44 declares 5 records; the records table holds 3"}
    assert words.describe_item(Item.from_dict(count)) == f"{count['message']} (segment {seg} at byte 812)"
    one = {"class": "regression", "first_offset": 7, "last_offset": 7, "segment": seg, "position": 9,
           "message": "CreateTime went back 5 ms at offset 7 (…)"}
    assert words.describe_item(Item.from_dict(one)) == f"{one['message']} (segment {seg} at byte 9)"
    bare = {"class": "unexplained", "first_offset": 3, "last_offset": 5}
    assert words.describe_item(Item.from_dict(bare)) == "unexplained at offsets 3..5"
    assert words.describe_item(Item.from_dict({"class": "duplicate", "first_offset": 8,
                                               "last_offset": 8, "message": ""})) == "duplicate at offset 8"
    finding = {"class": "corrupt_batch", "first_offset": None, "last_offset": None, "segment": seg,
               "position": 100, "message": f"corrupt_batch in {seg} at 100..160: impossible magic 7"}
    assert words.describe_item(Item.from_dict(finding)) == finding["message"]


def test_problem_line_is_the_audits_log_line_in_the_reports_words():
    details = {"unit": "batches", "classes": {
        "missing_segment": {"status": "warn", "items": 1, "offsets": 10},
        "compaction": {"status": "pass", "items": 2, "offsets": 4}},
        "items": [{"class": "missing_segment", "status": "warn", "first_offset": 15, "last_offset": 24,
                   "segment": "b.log", "position": 0, "message": "offsets 15..24: a.log ends at 14 "
                   "but the next segment file b.log starts at 25: a segment based at 15 is missing"},
                  {"class": "compaction", "status": "pass", "first_offset": 30, "last_offset": 31,
                   "segment": "b.log", "position": 640, "message": "offsets 30..31: removed by log compaction"}],
        "more_items": 0}
    line = words.problem_line("offset_gaps", "payments", 1, "warn", parse_details(json.dumps(details)),
                              failed=1, observed=1204)
    assert line == ("WARN offset_gaps payments-1: 1 item, 1,204 batches checked; first: "
                    + words.describe_item(Item.from_dict(details["items"][0])))
    # the audit's own log line (check_quality.report) counts in the same words
    from spark_jobs import check_quality

    out = io.StringIO()
    check_quality.report([{"check": "offset_gaps", "topic": "payments", "partition": 1,
                           "status": "warn", "failed": 1, "observed": 1204,
                           "details": json.dumps(details)}], out)
    assert out.getvalue().splitlines()[0] == ("WARN offset_gaps payments-1: 1 item, 1,204 batches "
                                              "checked; first: " + details["items"][0]["message"])
    assert words.first_problem("payments", 1, parse_details(details)) == "payments-1: " + words.describe_item(Item.from_dict(details["items"][0]))
    assert words.problem_items(parse_details(details)) == [Item.from_dict(i) for i in details["items"][:1]]
    assert words.accepted_items(parse_details(details)) == [Item.from_dict(i) for i in details["items"][1:]]
    assert words.accepted_classes(parse_details(details)) == {"compaction": {"items": 2, "offsets": 4}}
    # no stored items: the classes' counts; no details at all: the row's count
    no_items = dict(details, items=[])
    assert words.first_problem("payments", 1, parse_details(no_items)) == \
        "payments-1: missing_segment: 1 item (10 offsets) (no item details recorded)"
    assert words.first_problem("orders", 0, None, failed=3) == "orders-0: 3 items found (no details recorded)"
    assert words.first_problem("orders", 0, parse_details("not json\nsecond line"),
                               raw="not json\nsecond line") == "orders-0: not json"
    assert words.problem_line("crc", "orders", 0, "fail", None) == \
        "FAIL crc orders-0: 0 items found (no details recorded)"
    assert words.checked_text(5, Details("segments")) == "5 segments checked"
    assert words.checked_text(1, Details("segments")) == "1 segment checked"
    assert words.checked_text(1, Details("batches")) == "1 batch checked"
    assert words.checked_text(None, parse_details(details)) is None
    assert [words.severity_label(s) for s in ("fail", "warn", "pass", None, "odd")] == \
        ["would fail", "warn-only", "report-only", None, "severity odd"]
    assert words.topic_partition("orders", None) == "orders-?"


def test_unknown_run_is_404_page(client):
    page = client.get("/runs/nope")
    assert page.status_code == 404 and "nope" in Dom(page.text).one(id="message").text


def test_data_docs_are_served_from_the_warehouse(warehouse, client, tmp_path):
    root, runs = warehouse
    (tmp_path / "secret.txt").write_text("outside the warehouse")
    for run in runs:
        page = client.get(f"/runs/{run['token']}/docs/index.html")
        assert page.status_code == 200 and page.text == docs_html(run["run_id"])
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["content-security-policy"].startswith("sandbox")
        css = client.get(f"/runs/{run['token']}/docs/static/styles.css")
        assert css.status_code == 200 and css.text == docs_css(run["run_id"])
        assert css.headers["content-type"].startswith("text/css")
    token = runs[0]["token"]
    assert client.get(f"/runs/{token}/docs", follow_redirects=False).headers["location"] == "docs/index.html"
    for bad in ["../../../secret.txt", "%2e%2e/%2e%2e/%2e%2e/secret.txt", "static/../../x", "missing.html"]:
        resp = client.get(f"/runs/{token}/docs/{bad}")
        assert resp.status_code == 404 and "outside the warehouse" not in resp.text


def test_json_api_matches_the_pages(warehouse, client):
    root, runs = warehouse
    body = client.get("/api/runs").json()
    assert body["warehouse"] == root
    newest_first = sorted(runs, key=lambda r: r["checked_at"], reverse=True)
    assert [(r["run_id"], r["verdict"], r["counts"]) for r in body["runs"]] == \
        [(r["run_id"], expected_verdict(r), expected_counts(r)) for r in newest_first]
    one = client.get(f"/api/runs/{runs[1]['token']}").json()
    assert len(one["results"]) == len(runs[1]["rows"])
    assert {c["check"]: c["failed"] for c in one["checks"]} == \
        {c: sum(r["failed"] for r in runs[1]["rows"] if r["check"] == c) for c in CHECKS}
    assert client.get("/api/runs/nope").status_code == 404
    s = client.get("/api/series").json()
    want = expected_series(runs)
    assert (s["crc_failures"], s["timestamp_regressions"], s["gaps_by_cause"]) == (want["crc"], want["ts"], want["gaps"])


def test_empty_and_unconfigured_warehouse(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    empty = TestClient(create_app(authenticate=False, root=str(tmp_path / "empty")))
    dom = Dom(empty.get("/").text)
    assert dom.one(id="no-runs") and not dom.find("tr", cls="run")
    assert not (tmp_path / "empty").exists()  # viewing makes no catalog
    monkeypatch.delenv(repository.ENV, raising=False)
    monkeypatch.delenv("AIRFLOW_VAR_KAFKALOG_WAREHOUSE", raising=False)
    unset = TestClient(create_app(authenticate=False))
    assert unset.get("/").status_code == 503 and repository.ENV in unset.get("/").text
    assert unset.get("/api/runs").status_code == 503
    monkeypatch.setenv(repository.ENV, str(tmp_path / "from-env"))
    write_run(str(tmp_path / "from-env"), scenario()[0])
    assert [r["run_id"] for r in unset.get("/api/runs").json()["runs"]] == [scenario()[0]["run_id"]]
    # the Airflow Variable wins over the environment variable
    monkeypatch.setenv("AIRFLOW_VAR_KAFKALOG_WAREHOUSE", str(tmp_path / "from-variable"))
    assert repository.warehouse_root() == str(tmp_path / "from-variable")
    assert unset.get("/api/runs").json()["runs"] == []


def test_s3_warehouse(s3_bucket, s3_catalog, monkeypatch):
    """dq_results in a catalog whose tables live on S3 (named by $KAFKALOG_CATALOG), Data Docs
    under an s3:// root; S3 access from the environment."""
    from fastapi.testclient import TestClient

    root = f"s3://{s3_bucket}/wh"
    runs = write_warehouse(root, catalog=s3_catalog)
    monkeypatch.delenv("AIRFLOW_VAR_KAFKALOG_CATALOG", raising=False)
    monkeypatch.setenv("KAFKALOG_CATALOG", s3_catalog)
    app = TestClient(create_app(authenticate=False, root=root))
    body = app.get("/api/runs").json()
    newest_first = sorted(runs, key=lambda r: r["checked_at"], reverse=True)
    assert [(r["token"], r["verdict"], r["has_docs"]) for r in body["runs"]] == \
        [(r["token"], expected_verdict(r), True) for r in newest_first]
    for run in runs:
        assert app.get(f"/runs/{run['token']}/docs/index.html").text == docs_html(run["run_id"])
        assert app.get(f"/runs/{run['token']}/docs/static/styles.css").text == docs_css(run["run_id"])
    assert app.get(f"/runs/{runs[0]['token']}/docs/nothing.html").status_code == 404
    dom = Dom(app.get("/").text)
    assert [r.attrs["data-token"] for r in dom.find("tr", cls="run")] == [r["token"] for r in newest_first]


# ---- what the audit sees absent (issue 32) ---------------------------------------------------
#
# Rows as the audit writes them under issue 32's contract: ``night`` on every row (the run's
# latest night; for ``snapshot_missing`` the night without a snapshot), ``snapshot_missing``
# rows of no topic, ``missing_partition`` rows of a topic-partition absent tonight (or of a
# whole topic, gone), findings of no topic-partition on the snapshot itself.


def at_night(night: str, hours: int = 4) -> dt.datetime:
    return dt.datetime.fromisoformat(night).replace(tzinfo=dt.timezone.utc) + dt.timedelta(hours=hours)


@pytest.mark.parametrize("status", ["warn", "fail"])
def test_a_night_without_a_snapshot_is_on_the_page(tmp_path, monkeypatch, status):
    """A night the nightly DAG was due to read and found no snapshot of (a snapshot_missing row,
    no ledger rows) is a column of "no snapshot" cells in its status' colour, an unhealthy
    night with its line, a run with that verdict in the runs table, on its page and behind its
    Airflow tab; due nights nothing ran for are "no run" columns."""
    root = str(tmp_path / "warehouse")
    first, skipped = "2026-11-17", "2026-11-19"  # NOW is 2026-11-20 12:00: due 17..20
    read = passing_run("scheduled__2026-11-17T03:00:00+00:00", first, at_night(first))
    gone = {"run_id": "scheduled__2026-11-19T03:00:00+00:00", "checked_at": at_night(skipped),
            "rows": [no_snapshot_row("scheduled__2026-11-19T03:00:00+00:00", skipped,
                                     at_night(skipped), status)]}
    for run in (read, gone):
        run["token"] = write_run(root, run)
    write_ledger(root, [read])
    client = make_client(root)
    api = client.get("/api/nights").json()
    assert api["nights"] == ["2026-11-17", "2026-11-18", "2026-11-19", "2026-11-20"]
    assert api["no_run"] == ["2026-11-18", "2026-11-20"]
    assert list(api["no_snapshot"]) == [skipped]
    assert (api["no_snapshot"][skipped]["status"], api["no_snapshot"][skipped]["token"]) == \
        (status, gone["token"])
    assert api["night_outcomes"][skipped] == status
    dom = Dom(client.get("/").text)
    column = [c for c in dom.find("rect", cls="cell") if c.attrs.get("data-night") == skipped]
    rows = int(dom.one("svg", id="night-grid").attrs["data-rows"])
    assert len(column) == rows == 1 + len(PARTITIONS)  # the night's own row and every partition's
    assert {(c.attrs["data-kind"], c.attrs["data-outcome"], c.attrs["fill"]) for c in column} == \
        {("no_snapshot", status, svg.OUTCOME_FILLS[status])}
    no_run = [c for c in dom.find("rect", cls="cell") if c.attrs.get("data-night") in api["no_run"]
              and c.attrs["data-row"] == "whole night"]
    assert {c.attrs["data-outcome"] for c in no_run} == {"no_run"} and len(no_run) == 2
    assert dom.one("p", id="headline").text == f"Unhealthy nights: {skipped} ({status}, no snapshot)"
    night = dom.one("div", id=f"night-{skipped}")
    [line] = night.text.split(" snapshot_missing ")[1:]
    assert line == f"snapshot {skipped}: no snapshot for {skipped}: nothing under …/snapshots/{skipped}/"
    # its line and every cell of its column link to its row on the run's page
    links = {a.attrs["href"] for a in dom.find("a") if a.attrs.get("href", "").startswith(
        f"runs/{gone['token']}#")}
    assert links == {f"runs/{gone['token']}#r-snapshot_missing-snapshot-{skipped}"}
    runs = {r.attrs["data-run-id"]: r for r in dom.find("tr", cls="run")}
    assert runs[gone["run_id"]].attrs["data-verdict"] == status
    assert f"no snapshot: {skipped}" in runs[gone["run_id"]].text
    # its page: the verdict, the night without a snapshot, the row labelled as the snapshot;
    # the reason Airflow skipped the rest of the run beside it
    from kafkalog_quality import app

    monkeypatch.setattr(app, "skip_reason", lambda run_id: f"nothing to decode for {skipped}"
                        if run_id == gone["run_id"] else None)
    page = Dom(client.get(f"/runs/{gone['token']}").text)
    assert page.one(id="verdict").text == status
    assert page.one(id="nights").text == f"No snapshot: {skipped}"
    assert page.one(id="skip-reason").text.endswith(f"nothing to decode for {skipped}")
    result = page.one("tr", id=f"r-snapshot_missing-snapshot-{skipped}")
    assert page.one("tr", id=f"r-snapshot_missing-snapshot-{skipped}").attrs["data-status"] == status
    assert f"snapshot {skipped}" in result.text
    assert page.one(id="counts").text == \
        f"1 {'warning' if status == 'warn' else 'failure'}, counted per check × topic-partition"
    # the run's "Data quality" tab in Airflow opens that page, instead of "no report: skipped"
    from kafkalog_quality.links import create_view_app
    from fastapi.testclient import TestClient

    monkeypatch.setenv(repository.ENV, root)
    monkeypatch.delenv("AIRFLOW_VAR_KAFKALOG_WAREHOUSE", raising=False)
    tab = TestClient(create_view_app(authenticate=False)).get(
        f"/kafka_segments_nightly/{gone['run_id']}", follow_redirects=False)
    assert tab.status_code == 307 and tab.headers["location"].endswith(f"/runs/{gone['token']}")
    # a later run that reads the night after all: its cells replace "no snapshot"
    late = passing_run("manual__2026-11-20T09:00:00+00:00", skipped, at_night("2026-11-20", 9))
    late["token"] = write_run(root, late)
    write_ledger(root, [late])
    api = client.get("/api/nights").json()
    assert not api["no_snapshot"] and api["night_outcomes"][skipped] == "pass"
    assert {c["token"] for c in api["cells"] if c["night"] == skipped} == {late["token"]}


def test_absent_partitions_topics_and_files_of_no_partition_are_graded(tmp_path):
    """A topic-partition earlier nights held and tonight lacks is drawn in its own cell with
    the missing_partition warning (not as "not read"); a deleted topic is a row of the topic,
    accepted; a finding of no topic-partition is the snapshot's row. The run page labels each."""
    root = str(tmp_path / "warehouse")
    before, night = "2026-11-19", "2026-11-20"
    earlier = passing_run("scheduled__2026-11-19T03:00:00+00:00", before, at_night(before))
    run_id, at = "scheduled__2026-11-20T03:00:00+00:00", at_night(night)
    tonight = passing_run(run_id, night, at, partitions=[("orders", 0)])
    gone = (f"orders-1 is not in the snapshot of {night}: last ingested offset 41, last seen on "
            f"{before}")
    stray = f"{SNAPSHOTS}/{night}/stray.log"
    tonight["rows"] += [
        row(run_id, "missing_partition", "orders", 0, night, at, observed=1, unit="partitions"),
        row(run_id, "missing_partition", "orders", 1, night, at, status="warn", observed=1,
            unit="partitions", items=[item("missing", "warn", gone)]),
        row(run_id, "missing_partition", "payments", None, night, at, observed=1, unit="partitions",
            items=[item("topic_deleted", "pass", f"topic payments: every partition gone since {before}")]),
        row(run_id, "decoder_findings", None, None, night, at, status="warn", observed=1,
            unit="segments", items=[item("unparsable_name", "warn",
                                         f"{stray}: not <topic>-<partition>/<base>.log", stray)]),
    ]
    for run in (earlier, tonight):
        write_run(root, run)
    write_ledger(root, [earlier, tonight])
    client = make_client(root)
    cells = {(c["topic"], c["partition"], c["night"]): c for c in client.get("/api/nights").json()["cells"]}
    assert {k: (c["outcome"], c["label"], c["anchor"]) for k, c in cells.items() if k[2] == night} == {
        (None, None, night): ("warn", "snapshot", "r-decoder_findings-snapshot-" + night),
        ("orders", 0, night): ("pass", "orders-0", None),
        ("orders", 1, night): ("warn", "orders-1", "r-missing_partition-orders-1"),
        ("payments", None, night): ("accepted", "payments (topic)", "r-missing_partition-payments-all"),
    }
    assert cells[("payments", 0, before)]["outcome"] == "pass"  # read the night before
    dom = Dom(client.get("/").text)
    labels = [t.text for t in dom.find("text", cls="row-label")]
    assert labels == ["whole night", "snapshot", "orders-0", "orders-1", "payments (topic)", "payments-0"]
    [absent] = [c for c in dom.find("rect", cls="cell")
                if (c.attrs.get("data-tp"), c.attrs.get("data-night")) == ("orders-1", night)]
    assert (absent.attrs["data-outcome"], absent.attrs["fill"]) == ("warn", svg.OUTCOME_FILLS["warn"])
    page = Dom(client.get(f"/runs/{tonight['token']}").text)
    where = {r.attrs["id"]: r for r in page.find("tr", cls="result")}
    assert len(where) == len(tonight["rows"])  # every row its own anchor
    assert where["r-missing_partition-orders-1"].text.count(f"orders-1: {gone}") == 1
    assert f"snapshot {night}: …/{night}/stray.log: not" in where[f"r-decoder_findings-snapshot-{night}"].text
    assert "payments (topic)" in where["r-missing_partition-payments-all"].text
    assert "topic_deleted: 1 item" in where["r-missing_partition-payments-all"].text  # accepted


def test_a_check_that_had_nothing_to_check_reads_nothing_new(tmp_path):
    """A result that passed having checked nothing (observed 0, e.g. crc over unchanged
    segments) is "nothing new" in grey: counted apart, listed apart, a partition whose every
    check had nothing new is a grey cell, never a green pass."""
    root = str(tmp_path / "warehouse")
    night = "2026-11-20"
    run = passing_run("scheduled__2026-11-20T03:00:00+00:00", night, at_night(night))
    idle = [r for r in run["rows"] if (r["topic"], r["partition"]) == ("orders", 0)
            or (r["check"], r["topic"], r["partition"]) == ("crc", "orders", 1)]
    for r in idle:
        r["observed"] = 0
    write_run(root, run)
    write_ledger(root, [run])
    client = make_client(root)
    dom = Dom(client.get("/").text)
    cells = {c.attrs["data-tp"]: c for c in dom.find("rect", cls="cell") if "data-tp" in c.attrs}
    assert (cells["orders-0"].attrs["data-outcome"], cells["orders-0"].attrs["fill"]) == \
        ("nothing_new", svg.OUTCOME_FILLS["nothing_new"])
    assert cells["orders-1"].attrs["data-outcome"] == "pass"  # one check had something to check
    [tr] = dom.find("tr", cls="run")
    n, rest = len(idle), len(run["rows"]) - len(idle)
    assert (int(dom.one("td", cls="count-nothing_new").text), int(dom.one("td", cls="count-pass").text)) \
        == (n, rest)
    page = Dom(client.get(f"/runs/{run['token']}").text)
    assert page.one(id="counts").text == f"{rest} passes · {n} nothing new, counted per check × topic-partition"
    idle_rows = page.one("details", id="nothing-new")
    listed = [r for r in page.find("tr", cls="row-nothing-new")]
    assert sorted((r.attrs["data-check"], r.attrs["data-topic"], r.attrs["data-partition"]) for r in listed) \
        == sorted((r["check"], r["topic"], str(r["partition"])) for r in idle)
    assert all(r.attrs["data-check"] in idle_rows.text for r in listed)
    assert [c.text for c in page.find("span", cls="nothing-new")] == ["nothing new"] * n
    assert " 0 batches checked" not in page.one("details", id="passes").text


def test_a_failed_run_says_it_was_not_published_and_the_ways_forward(tmp_path):
    """A run whose audit failed opens with "Not published: main unchanged", where its rows are
    (its branch, how to read it) and the ways forward: clear it, run again without the failing
    topic (the DAG's topics param), or a policy override for that topic."""
    from pyiceberg.expressions import EqualTo

    root = str(tmp_path / "warehouse")
    night = "2026-11-20"
    run_id, at = "scheduled__2026-11-20T03:00:00+00:00", at_night(night)
    failed = passing_run(run_id, night, at)
    crc = item("crc_mismatch", "fail", "stored crc 0x1, computed 0x2", f"{SNAPSHOTS}/{night}/payments-0/"
               + segment_name(0), 5, 9)
    hole = item("unexplained", "fail", "offsets 3..4 inside a segment that shows no compaction",
                f"{SNAPSHOTS}/{night}/payments-0/" + segment_name(0), 3, 4)
    failed["rows"] = [r for r in failed["rows"] if not (r["topic"] == "payments" and r["check"]
                                                        in ("crc", "offset_gaps"))]
    failed["rows"] += [row(run_id, "crc", "payments", 0, night, at, status="fail", items=[crc]),
                       row(run_id, "offset_gaps", "payments", 0, night, at, status="fail", items=[hole])]
    sid = write_ledger(root, [failed])  # its ledger rows, as its audit read them on its branch
    ledger = iceberg_warehouse(root).table("ledger")
    branch = branch_name(run_id)
    ledger.manage_snapshots().create_branch(sid, branch).commit()
    ledger.delete(EqualTo("run_id", run_id))  # never published: not on main
    write_run(root, failed, summary={AUDITED: json.dumps({"ledger": sid})})
    client = make_client(root)
    dom = Dom(client.get(f"/runs/{failed['token']}").text)
    section = dom.one("section", id="not-published")
    html = client.get(f"/runs/{failed['token']}").text
    assert html.index('id="verdict"') < html.index('id="not-published"') < html.index('id="counts"')
    text = " ".join(section.text.split())
    assert text.startswith("Not published: main unchanged")
    assert f"Iceberg branch {branch} " in text and f'ref="{branch}"' in text
    assert f"kafkalog.kafka.records.branch_{branch}" in text
    assert dom.one("code", id="guide").text == "dags/README.md#after-a-failed-audit"
    conf = json.dumps({"date_from": night, "topics": "orders"})
    assert f"airflow dags trigger kafka_segments_nightly --conf '{conf}'" in text
    assert "every topic it read but payments" in text
    assert dom.one("pre", cls="policy").text == (
        "topics:\n  payments:\n    checks:\n      crc: {severity: warn}\n"
        "      offset_gaps: {classes: {unexplained: warn}}")
    # its branch dropped (the run planned again): said so
    ledger.manage_snapshots().remove_branch(branch).commit()
    text = " ".join(Dom(client.get(f"/runs/{failed['token']}").text).one(id="not-published").text.split())
    assert f"branch {branch}, which the ledger no longer has" in text
    # a published run, and a run that only warned: no such section
    write_ledger(root, [failed])
    assert not Dom(client.get(f"/runs/{failed['token']}").text).find(id="not-published")


def test_problem_lines_show_uris_by_partition_folder_and_file():
    """Every URI or absolute path in a line: its last two parts, the whole on hover;
    punctuation after it and text that is no URI are left alone; everything escaped."""
    seg = "s3://kafka-snapshots/snapshots/2026-11-21/orders-0/00000000000000000034"
    text = (f"index_mismatch in {seg}.log at 1000..1000: {seg}.index: entry 2 <b>; local "
            "/tmp/demo/snapshots/2026-11-21/payments-1/00000000000000000025.log, night "
            "s3://kafka-snapshots/snapshots/2026-11-27/ and 3/4 or a/b")
    dom = Dom(f"<p>{pages.line_html(text)}</p>")
    spans = [(s.attrs["title"], s.text) for s in dom.find("span", cls="uri")]
    assert spans == [
        (f"{seg}.log", "…/orders-0/00000000000000000034.log"),
        (f"{seg}.index", "…/orders-0/00000000000000000034.index"),
        ("/tmp/demo/snapshots/2026-11-21/payments-1/00000000000000000025.log",
         "…/payments-1/00000000000000000025.log"),
        ("s3://kafka-snapshots/snapshots/2026-11-27/", "…/snapshots/2026-11-27/")]
    assert dom.one("p").text == (
        "index_mismatch in …/orders-0/00000000000000000034.log at 1000..1000: "
        "…/orders-0/00000000000000000034.index: entry 2 <b>; local "
        "…/payments-1/00000000000000000025.log, night …/snapshots/2026-11-27/ and 3/4 or a/b")
    assert pages.short_uri("s3://b/x.log") == "s3://b/x.log"  # nothing to gain


def test_due_nights_follow_the_nightly_schedule():
    """The nights the DAG was due to read: the UTC date of each cron fire time up to now (a
    night's run fires at 03:00 by default), one a day however often it fires; a schedule that
    cannot be read: every day between the nights in the data, said so."""
    at = dt.datetime(2026, 11, 24, 12, tzinfo=dt.timezone.utc)  # a Tuesday
    days = ["2026-11-19", "2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23", "2026-11-24"]
    assert calendar.scheduled_nights("0 3 * * *", "2026-11-19", at) == days
    assert calendar.scheduled_nights("0 3 * * *", "2026-11-19", at.replace(hour=2)) == days[:-1]
    assert calendar.scheduled_nights("*/30 * * * *", "2026-11-19", at) == days
    assert calendar.scheduled_nights("0 3 * * 1-5", "2026-11-19", at) == \
        ["2026-11-19", "2026-11-20", "2026-11-23", "2026-11-24"]  # no weekend
    columns, due, note = calendar.night_columns(["2026-11-19", "2026-11-22"], "0 3 * * 1-5", at)
    assert columns == ["2026-11-19", "2026-11-20", "2026-11-22", "2026-11-23", "2026-11-24"]
    assert due == {"2026-11-19", "2026-11-20", "2026-11-23", "2026-11-24"} and note is None
    columns, due, note = calendar.night_columns(["2026-11-19", "2026-11-21"], "not a cron", at)
    assert columns == days[:3] and not due and "'not a cron'" in note
    old = (at - dt.timedelta(days=calendar.MAX_CALENDAR_DAYS + 1)).date().isoformat()
    assert calendar.night_columns([old, "2026-11-20"], "0 3 * * *", at) == ([old, "2026-11-20"], set(), None)


def test_tables_without_the_night_column_are_read(tmp_path):
    """dq_results and ledger as older audits wrote them (no ``night``): read as null, the
    nights taken from the segment URIs; once the tables have the column, the ledger's night
    wins over the URI's, and a ledger snapshot from before it still reads."""
    from pyiceberg.expressions import EqualTo

    root = str(tmp_path / "warehouse")
    old, new = scenario()[0], scenario()[1]
    for r in old["rows"]:
        del r["night"]
    old_sid = write_ledger(root, [old], night=False)
    write_run(root, old, night=False)
    wh = repository.Warehouse(root)
    [run] = wh.runs()
    assert {r.night for r in run.results} == {None}
    assert wh.coverage([run])[run.token].nights == old["nights"]
    # the audit of issue 32 evolves both tables; an older run's rows stay, null
    new["ledger_night"] = "2026-11-21"  # the listing's night, whatever the URI says
    write_ledger(root, [new])
    write_run(root, new, summary={AUDITED: json.dumps({"ledger": old_sid})})
    iceberg_warehouse(root).table("ledger").delete(EqualTo("run_id", old["run_id"]))
    write_run(root, old, night=False, summary={AUDITED: json.dumps({"ledger": old_sid})})
    wh = repository.Warehouse(root)
    runs = {r.run_id: r for r in wh.runs()}
    cov = wh.coverage(list(runs.values()))
    assert {r.night for r in runs[new["run_id"]].results} == set(new["nights"])
    assert cov[runs[new["run_id"]].token].nights == ["2026-11-21"]
    assert cov[runs[old["run_id"]].token].nights == old["nights"]  # its audit's ledger snapshot
    assert cov[runs[old["run_id"]].token].published is False


# ---- the extra link and the plugin as Airflow loads it ------------------------------------


def test_report_link_points_to_the_runs_page(warehouse, client):
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from kafkalog_quality.links import QUALITY_TASK_ID, DataQualityReportLink

    root, runs = warehouse
    link = DataQualityReportLink()
    assert link.name == "Data quality report"
    with DAG("kafka_segments_nightly", schedule=None) as nightly:
        check = EmptyOperator(task_id=QUALITY_TASK_ID)
        other = EmptyOperator(task_id="decode")
    with DAG("some_other_dag", schedule=None):
        foreign = EmptyOperator(task_id=QUALITY_TASK_ID)
    for run in runs:
        key = TaskInstanceKey(nightly.dag_id, check.task_id, run["run_id"], 1, -1)
        url = link.get_link(check, ti_key=key)
        assert url == f"{URL_PREFIX}/runs/{storage.run_token(run['run_id'])}"
        page = client.get(url[len(URL_PREFIX):])
        assert page.status_code == 200 and Dom(page.text).one(id="run-id").text == run["run_id"]
        assert link.get_link(other, ti_key=key._replace(task_id="decode")) == ""
        assert link.get_link(foreign, ti_key=key._replace(dag_id="some_other_dag")) == ""


def test_airflow_lists_the_plugin(tmp_path):
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path / "airflow"),
               AIRFLOW__CORE__PLUGINS_FOLDER=str(PLUGINS), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__DAGS_FOLDER=str(tmp_path / "dags"))
    out = subprocess.run([str(Path(sys.executable).parent / "airflow"), "plugins", "--output", "json"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout[out.stdout.index("["):])}
    plugin = plugins["kafkalog_quality"]
    assert plugin["source"].endswith("kafkalog_quality_plugin.py")
    from kafkalog_quality.links import VIEW_HREF, VIEW_PREFIX

    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == [URL_PREFIX, VIEW_PREFIX]
    # the nav entry, and a "Data quality" tab on every DAG run and task instance
    assert [(v["name"], v["destination"], v["url_route"], v["href"])
            for v in plugin["external_views"]] == [
        ("Data quality", "nav", "data-quality", URL_PREFIX.lstrip("/") + "/"),
        ("Data quality", "dag_run", "data-quality-run", VIEW_HREF),
        ("Data quality", "task_instance", "data-quality-task", VIEW_HREF)]
    assert any("DataQualityReportLink" in link for link in plugin["global_operator_extra_links"])
    # the package's modules are not scanned as plugins of their own (plugins/.airflowignore);
    # the other plugin of this repository is the nightly runs' notes (kafkalog_pipeline.notes,
    # dags/README.md); the rest are installed providers' (OpenLineage's listener, docs/lineage.md)
    ours = {name for name, p in plugins.items() if p["source"].startswith("$PLUGINS_FOLDER")
            or str(PLUGINS) in p["source"] or "kafkalog" in name}
    assert ours == {"kafkalog_quality", "kafkalog_notes"}, plugins
    assert set(plugins) - ours <= {"OpenLineageProviderPlugin"}, plugins
    assert plugins["kafkalog_notes"]["listeners"] == ["kafkalog_pipeline.notes"]
    assert "Failed to import" not in out.stderr


def test_a_newer_attempt_than_the_results_is_what_the_pages_show(tmp_path, monkeypatch):
    """Results an earlier attempt wrote are not the verdict of a run whose latest attempt in
    Airflow runs or failed before writing any: the run page, the runs table and the JSON show
    that attempt (its cause, where it crashed), the results as the earlier attempt's."""
    night = "2026-11-20"
    at = at_night(night)
    later = at + dt.timedelta(hours=2)
    # the rule: queued/running/failed, begun after the results, its audit not succeeded
    assert model.superseded(at, later, "failed", "failed")
    assert model.superseded(at, later, "running", None)
    assert model.superseded(at, later, "queued", None)
    assert model.superseded(None, later, "running", "running")
    assert not model.superseded(later, at, "failed", "failed")  # its audit wrote these rows
    assert not model.superseded(at, later, "success", "success")
    assert not model.superseded(at, later, "failed", "success")  # cleared from publish on
    assert not model.superseded(at, None, "queued", None)

    root = str(tmp_path / "warehouse")
    run_id = "scheduled__2026-11-20T03:00:00+00:00"
    warned = passing_run(run_id, night, at)
    warned["rows"].append(row(run_id, "offset_gaps", "gap", 0, night, at, status="warn",
                              items=[item("unexplained", "warn", "offsets 3..4 missing")]))
    write_ledger(root, [warned])
    write_run(root, warned)
    client = make_client(root)
    assert Dom(client.get(f"/runs/{warned['token']}").text).one(id="verdict").text == "warn"
    assert not Dom(client.get(f"/runs/{warned['token']}").text).find(id="attempt")

    cause = "check_quality crashed: StorageError: s3://w/: could not connect to the endpoint"
    from kafkalog_quality import app as app_module

    latest = {warned["token"]: model.Attempt(model.FAILED, later, "check_quality", cause)}
    monkeypatch.setattr(app_module, "attempts", lambda runs: {
        r.token: latest[r.token] for r in runs if r.token in latest})
    dom = Dom(client.get(f"/runs/{warned['token']}").text)
    assert dom.one(id="verdict").attrs["class"].split() == ["verdict", "verdict-failed"]
    assert dom.one(id="verdict").text == "failed" and dom.one(id="earlier-verdict").text == "warn"
    text = " ".join(dom.one("section", id="attempt").text.split())
    assert text.startswith("Latest attempt failed since 2026-11-20 06:00 UTC: check_quality "
                           f"failed: {cause}.")
    assert "results of an earlier attempt" in text
    index = Dom(client.get("/").text)
    [tr] = index.find("tr", cls="run")
    assert (tr.attrs["data-verdict"], tr.attrs["data-results-verdict"]) == ("failed", "warn")
    assert cause in index.one(id="attempts").text
    api = client.get(f"/api/runs/{warned['token']}").json()
    assert (api["verdict"], api["shown_verdict"], api["attempt"]["cause"]) == ("warn", "failed", cause)
    # a re-audit that runs: "running", no verdict yet
    latest[warned["token"]] = model.Attempt(model.RUNNING, later, "check_quality")
    dom = Dom(client.get(f"/runs/{warned['token']}").text)
    assert dom.one(id="verdict").text == "running"
    assert "running since 2026-11-20 06:00 UTC (check_quality): no verdict yet" in \
        dom.one("section", id="attempt").text
    assert client.get("/api/runs").json()["runs"][0]["shown_verdict"] == "running"


# ---- sinks (issue 44) ----------------------------------------------------------------------


def sink_rows(run_id: str, checked_at, night: str) -> list[dict]:
    """sink_reconcile rows as the audit's sinks family writes them: the results built with the
    audit's own graded_result and the extras reconcile.job adds (sink, position, delivered):
    sink orders-lake fails on orders-0 (offset 17 held twice, 14..15 missing, 26..29 past its
    position) and passes on orders-1; sink dr-copy passes on orders-0."""
    from spark_jobs.audit.policy import Policy
    from spark_jobs.audit.results import graded_result

    policy = Policy.load()

    def result(sink, partition, observed, delivered, found):
        cls = [{"check": "sink_reconcile", "class": c, "status": s, "severity": s,
                "items": 1, "offsets": n, "max_value": None} for c, s, n, _, _ in found]
        items = [{"class": c, "status": s, "first_offset": lo, "last_offset": hi, "offsets": n,
                  "value": None, "segment": None, "position": None,
                  "message": f"offsets {lo}..{hi} of orders-{partition}: {c} in sink {sink}"}
                 for c, s, n, lo, hi in found]
        r = graded_result(run_id, "sink_reconcile", "orders", partition, observed, cls, items,
                          policy, checked_at, night)
        extras = {"sink": sink, "mode": "append", "delivered": delivered,
                  "position": "committed offsets of consumer group connect-orders-lake"}
        return r._replace(details=dataclasses.replace(r.details, extras=extras)).to_row()

    return [result("orders-lake", 0, 20, 18, [("duplicate", "fail", 1, 17, 17),
                                             ("missing", "fail", 2, 14, 15),
                                             ("not_yet_delivered", "pass", 4, 26, 29)]),
            result("orders-lake", 1, 5, 5, []),
            result("dr-copy", 0, 20, 20, [])]


def test_the_run_page_has_a_sinks_section(own_warehouse, own_client):
    """A run that reconciled sinks: its page's "Sinks" section has one row per sink (outcome,
    delivered, missing, duplicates, leaks, lag summed over its partitions), and each sink
    result's row says which sink it is about; a run without sinks has no such section."""
    root, runs = own_warehouse
    run = runs[-1]
    run = {**run, "rows": run["rows"] + sink_rows(run["run_id"], run["checked_at"], run["nights"][-1])}
    token = write_run(root, run)
    page = Dom(own_client.get(f"/runs/{token}").text)
    page.one("section", id="sinks")
    sinks = page.find("tr", cls="sink")
    assert [(tr.attrs["data-sink"], tr.attrs["data-status"]) for tr in sinks] == [
        ("dr-copy", "pass"), ("orders-lake", "fail")]
    cells = {c: [td.text for td in page.find("td", cls=c)] for c in
             ("delivered", "missing", "duplicates", "leaks", "lag")}
    assert cells == {"delivered": ["20", "23"], "missing": ["0", "2"], "duplicates": ["0", "1"],
                     "leaks": ["0", "0"], "lag": ["0", "4"]}
    assert "connect-orders-lake" in page.find("td", cls="position")[1].text
    # the sink's results among the run's: labelled with the sink, each its own row
    labels = [td.text for td in page.find("td", cls="tp") if "(sink " in td.text]
    assert sorted(labels) == ["orders-0 (sink dr-copy)", "orders-0 (sink orders-lake)",
                              "orders-1 (sink orders-lake)"]
    ids = [tr.attrs["id"] for tr in page.find("tr", cls="result")]
    assert len(ids) == len(set(ids))
    other = Dom(own_client.get(f"/runs/{runs[0]['token']}").text)
    assert other.find("section", id="sinks") == []
