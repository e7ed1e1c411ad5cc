"""The human gate before publish and the night-partitioned assets (issue 46), with the real
scheduler, no mocks.

Airflow runs as in ``test_backfill`` (``dag-processor``, ``api-server`` on 127.0.0.1,
``scheduler``, LocalExecutor, SQLite, local Spark) over the smallest nights the helpers build
(``test_backfill.write_conflict_nights``: the topic ``rerun``, 25 records; night n1 holds
``rerun-0`` and ``rerun-1``, night n2 lacks ``rerun-1``, so its audit warns of
``missing_partition rerun-1``), with a policy ``publish_warned: approve``
(``KAFKALOG_POLICY``):

1. n1 runs and publishes; the ``kafka.records`` asset's event carries ``partition_key`` n1.
2. n2 warns: its ``publish_gate`` waits in Airflow's Required actions (``awaiting_input``, the
   3.3 form of a deferred HITL task) with the verdict and the run's link; ``main`` holds no
   n2 row. Rejected through the REST API: publish is skipped, ``main`` still holds no n2 row,
   no asset event, and the run's note says who rejected it.
3. n2's gate cleared (a person changed their mind): it asks again; approved, n2 is
   published; its events carry n2.
4. n1 again (``reprocess``): its events carry n1 only.
5. The example DAG ``kafka_night_summary`` (``PartitionedAssetTimetable`` on the ledger's
   asset) ran once per announced night, with that night's partition key, and read that
   night's ledger rows.

The scheduler makes the asset-triggered runs (``use_job_schedule`` on); the nightly DAG's
cron is Feb 29 (``KAFKALOG_NIGHTLY_SCHEDULE``) so that it schedules no run of its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.pipeline.scheduler import (CONFLICT_NIGHTS, FINAL, RUN_TIMEOUT, Airflow,  # noqa: E402
                                      run_notes, task_states, write_conflict_nights)
from tests.pipeline.demo_nights import warehouse_rows  # noqa: E402

from demo import servers  # noqa: E402
from kafkalog_pipeline.settings import NIGHTLY_DAG_ID as DAG_ID  # noqa: E402
from tests.spark_settings import SUBMIT_CONF  # noqa: E402

pytestmark = [pytest.mark.pipeline, pytest.mark.slow, pytest.mark.skip(
    reason="after the merge with the sinks and exactly-once work, night 2's gate, cleared once "
    "after its rejection, waits in awaiting_input through more tries than the test answers "
    "(4 tries seen, no approval taken in 20 min): under investigation (issue 46); the "
    "gate's decisions are tested in test_gate.py")]

N1, N2 = CONFLICT_NIGHTS
SUMMARY_DAG = "kafka_night_summary"
RUNS = f"/api/v2/dags/{DAG_ID}/dagRuns"


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    out = tmp_path_factory.mktemp("gate")
    logs = out / "pipeline-logs"
    logs.mkdir()
    write_conflict_nights(out / "snapshots")
    policy = (Path(__file__).resolve().parents[2] / "expectations" / "policy.yaml").read_text()
    assert "\npublish_warned: auto\n" in policy
    # not out/policy.yaml: servers.airflow_env writes the demo's policy there
    (out / "approve-policy.yaml").write_text(policy.replace("\npublish_warned: auto\n",
                                                            "\npublish_warned: approve\n"))
    server, endpoint = servers.start_s3(out / "snapshots")
    port = servers.free_port()
    env = servers.airflow_env(out, endpoint, api_port=port)
    env.update({
        "KAFKALOG_POLICY": str(out / "approve-policy.yaml"),
        "KAFKALOG_MAX_CHUNKS": "1",
        "KAFKALOG_NIGHTLY_SCHEDULE": "0 3 29 2 *",  # no scheduled run of the nightly DAG
        "KAFKALOG_WAIT_SECONDS": "5",
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
        "KAFKALOG_SPARK_CONF": SUBMIT_CONF,
    })
    servers.migrate(env, logs)
    procs = []
    af = Airflow(out, env, procs, logs)
    try:
        procs.append(servers.start_component(env, logs, "dag-processor"))
        procs.append(servers.start_component(env, logs, *servers.api_server_args(port)))
        servers.wait_for_dag(env, procs)
        servers.wait_for_dag(env, procs, dag_id=SUMMARY_DAG)
        servers.wait_for_api(port, procs)
        procs.append(servers.start_component(env, logs, "scheduler"))
        af.cli("dags", "unpause", DAG_ID)
        af.cli("dags", "unpause", SUMMARY_DAG)
        yield af
    except BaseException:
        af.dump_logs()
        raise
    finally:
        servers.stop_components(procs)
        server.stop()


# ------------------------------------------------------------------ helpers
def trigger(af: Airflow, conf: dict, night: str | None = None) -> str:
    body = {"logical_date": f"{night}T03:00:00Z" if night else None,
            "conf": {"topics": "rerun", **conf}}
    return af.api("POST", RUNS, body)["dag_run_id"]


def wait_until(af: Airflow, what: str, ready, timeout: float = RUN_TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        got = ready()
        if got:
            return got
        dead = [p.args[1] for p in af.procs if p.poll() is not None]
        assert not dead, f"Airflow {dead} exited while waiting for {what}"
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(3)


def run_state(af: Airflow, run_id: str, dag_id: str = DAG_ID) -> str | None:
    rows = af.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, run_id)
    return rows[0][0] if rows else None


def gate_or_end(af: Airflow, run_id: str) -> str:
    """Wait until the run's gate waits for an answer, or the run has ended: which."""
    def ready():
        if task_states(af, run_id).get("publish_gate") == "awaiting_input":
            return "awaiting_input"
        return run_state(af, run_id) if run_state(af, run_id) in FINAL else None
    return wait_until(af, f"run {run_id} waits or ends", ready)


def answer(af: Airflow, run_id: str, option: str) -> dict:
    path = f"{RUNS}/{quote(run_id, safe='')}/taskInstances/publish_gate/-1/hitlDetails"
    return af.api("PATCH", path, {"chosen_options": [option], "params_input": {}})


def finish(af: Airflow, run_id: str, option: str = "Approve") -> str:
    """The run's end state, answering its gate with ``option`` if it asks."""
    if gate_or_end(af, run_id) == "awaiting_input":
        answer(af, run_id, option)
    return wait_until(af, f"run {run_id} ends",
                      lambda: run_state(af, run_id) if run_state(af, run_id) in FINAL else None)


def partition_events(af: Airflow, asset: str = "kafkalog.records") -> list[tuple[str, str]]:
    """(source run id, partition_key) of the asset's events, in order."""
    return af.query("SELECT e.source_run_id, e.partition_key FROM asset_event e JOIN asset a "
                    "ON a.id = e.asset_id WHERE a.name = ? ORDER BY e.id", asset)


def ledger_nights(af: Airflow) -> set[str]:
    return {r["night"] for r in warehouse_rows(af.warehouse, "ledger", ["night", "topic"])}


def summary_runs(af: Airflow) -> list[tuple[str, str, str]]:
    return af.query("SELECT run_id, partition_key, state FROM dag_run WHERE dag_id = ? "
                    "ORDER BY id", SUMMARY_DAG)


# ------------------------------------------------------------------ the test
@pytest.mark.timeout(4 * RUN_TIMEOUT)
def test_a_warned_night_waits_for_a_person_and_events_are_per_night(gated):
    af = gated
    try:
        # 1. n1: published (its audit passes; were it warned, the gate is approved)
        run_1 = trigger(af, {}, N1)
        assert finish(af, run_1) == "success"
        assert ledger_nights(af) == {N1}
        assert [k for r, k in partition_events(af)] == [N1]

        # 2. n2 warns: the gate waits in Required actions, main untouched
        run_2 = trigger(af, {}, N2)
        assert gate_or_end(af, run_2) == "awaiting_input", task_states(af, run_2)
        assert run_state(af, run_2) == "running"
        detail = af.api("GET", f"{RUNS}/{quote(run_2, safe='')}/taskInstances/publish_gate/-1/"
                               "hitlDetails")
        assert detail["subject"] == f"Publish the warned night {N2}?", detail
        assert "missing_partition (rerun-1)" in detail["body"], detail["body"]
        assert f"/dags/{DAG_ID}/runs/" in detail["body"]  # the run's page: its Data quality tab
        assert detail["options"] == ["Approve", "Reject"]
        assert task_states(af, run_2).get("publish") in (None, "none")
        assert ledger_nights(af) == {N1}
        # rejected: publish skipped, main unchanged, no event, and the note says so
        answer(af, run_2, "Reject")
        assert wait_until(af, "n2 ends", lambda: run_state(af, run_2) in FINAL and
                          run_state(af, run_2)) == "success"
        states = task_states(af, run_2)
        assert (states["publish_gate"], states["publish"]) == ("success", "skipped"), states
        assert ledger_nights(af) == {N1}
        assert [k for r, k in partition_events(af)] == [N1]
        note = run_notes(af, [run_2])[run_2]
        assert "missing_partition rerun-1" in note and (
            "Not published: rejected by admin in Required actions (publish_warned: approve); "
            "main unchanged") in note, note

        # 3. the gate cleared (a person changed their mind): it asks again; approved, n2 is
        #    published and its events carry n2
        af.api("POST", f"/api/v2/dags/{DAG_ID}/clearTaskInstances", {
            "dag_run_id": run_2, "task_ids": ["publish_gate"], "include_downstream": True,
            "only_failed": False, "dry_run": False})
        run_3 = run_2
        assert gate_or_end(af, run_3) == "awaiting_input", task_states(af, run_3)
        answer(af, run_3, "Approve")
        assert finish(af, run_3) == "success"
        assert task_states(af, run_3)["publish"] == "success"
        assert ledger_nights(af) == {N1, N2}
        note = run_notes(af, [run_3])[run_3]
        assert "Approved by admin in Required actions" in note and "rejected" not in note, note
        for table in ("kafkalog.records", "kafkalog.ledger", "kafkalog.dq_results"):
            assert [k for r, k in partition_events(af, table)] == [N1, N2], table
        assert {r: k for r, k in partition_events(af)} == {run_1: N1, run_3: N2}

        # the example downstream DAG: once per night, that night's rows
        wait_until(af, "a summary run per night", lambda: len(
            [s for s in summary_runs(af) if s[2] in FINAL]) >= 2)
        time.sleep(10)  # a stray third run would show by now
        got = summary_runs(af)
        assert sorted((k, s) for _, k, s in got) == [(N1, "success"), (N2, "success")], got
        for run_id, night, _ in got:
            (value,) = af.query("SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND "
                                "key = 'return_value'", SUMMARY_DAG, run_id)[0]
            summary = json.loads(value)
            assert summary["night"] == night and summary["segments"] > 0, summary
            assert set(summary["topics"]) == {"rerun"}, summary

        # 4. n1 again (reprocess): n1 only
        run_4 = trigger(af, {"date_from": N1, "reprocess": True})
        assert finish(af, run_4) == "success"
        assert [k for r, k in partition_events(af) if r == run_4] == [N1]
        wait_until(af, "a second summary run of n1", lambda: len(
            [s for s in summary_runs(af) if s[2] in FINAL]) >= 3)
        assert sorted(k for _, k, _ in summary_runs(af)) == [N1, N1, N2]
    except BaseException:
        af.dump_logs()
        raise
