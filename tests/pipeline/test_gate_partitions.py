"""The human gate before publish and the night-partitioned assets (issue 46), with the real
scheduler, no mocks.

Airflow runs as in ``test_backfill`` (``scheduler.running_airflow``: ``dag-processor``,
``api-server`` on 127.0.0.1, ``scheduler``, LocalExecutor, SQLite, local Spark) over the
smallest nights the helpers build (``scheduler.write_conflict_nights``: the topic ``rerun``, 25
records; night n1 holds ``rerun-0`` and ``rerun-1``, night n2 lacks ``rerun-1``, so its audit
warns of ``missing_partition rerun-1``), with a policy ``publish_warned: approve``
(``KAFKALOG_POLICY``):

1. n1 runs and publishes; the ``kafka.records`` asset's event carries ``partition_key`` n1.
2. n2 warns: its ``publish_gate`` waits in Airflow's Required actions (``awaiting_input``, the
   3.3 form of a deferred HITL task) with the verdict and the run's link; ``main`` holds no
   n2 row. Rejected through the REST API: publish is skipped, ``main`` still holds no n2 row,
   no asset event, and the run's note says who rejected it.
3. n2's gate cleared (a person changed their mind): it asks again, once; approved, n2 is
   published; its events carry n2.
4. The example DAG ``kafka_night_summary`` (``PartitionedAssetTimetable`` on the ledger's
   asset) ran once per announced night, with that night's partition key, and read that
   night's ledger rows.

That a rerun of a night announces that night only is ``test_backfill``'s (its backfill's
rerun of the last night), at no DAG run more.

The answers wait until the scheduler has taken the exit of the worker that parked the gate
(``scheduler.executor_events``), as a person's answer, seconds later, does: Airflow 3.3.2's
scheduler, handed that exit after it queued the resumed gate under the same try (an answer
within two or three seconds of the question), takes the resumed gate for one killed
externally and retries it, and the retry asks again with the answer reset
(apache/airflow#67287, whose fix, #68741, guards the queued state besides the scheduled one;
3.3.2 guards the scheduled only). Each answer is given once and must be taken: the gate
asks no more after it (its try number stays). Unguarded, this test met it twice after the clear (its answers 1.7 s and 2.5 s after the
question, the scheduler's "state mismatch" about a second later each time, the second answer
by a helper that answered whatever question it found): the gate asked in four tries, the last
never answered.

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
                                      executor_events, partition_events, run_notes,
                                      running_airflow, task_states, write_conflict_nights)
from tests.pipeline.demo_nights import warehouse_rows  # noqa: E402

from kafkalog_pipeline.settings import NIGHTLY_DAG_ID as DAG_ID  # noqa: E402
from kafkalog_pipeline.tasks import GATE_TASK  # noqa: E402

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

N1, N2 = CONFLICT_NIGHTS
SUMMARY_DAG = "kafka_night_summary"
RUNS = f"/api/v2/dags/{DAG_ID}/dagRuns"


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    out = tmp_path_factory.mktemp("gate")
    write_conflict_nights(out / "snapshots")
    policy = (Path(__file__).resolve().parents[2] / "expectations" / "policy.yaml").read_text()
    assert "\npublish_warned: auto\n" in policy
    # not out/policy.yaml: servers.airflow_env writes the demo's policy there
    (out / "approve-policy.yaml").write_text(policy.replace("\npublish_warned: auto\n",
                                                            "\npublish_warned: approve\n"))
    with running_airflow(out, {
        "KAFKALOG_POLICY": str(out / "approve-policy.yaml"),
        "KAFKALOG_MAX_CHUNKS": "1",
        "KAFKALOG_NIGHTLY_SCHEDULE": "0 3 29 2 *",  # no scheduled run of the nightly DAG
    }, dag_ids=(DAG_ID, SUMMARY_DAG)) as af:
        af.cli("dags", "unpause", DAG_ID)
        af.cli("dags", "unpause", SUMMARY_DAG)
        yield af


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
        time.sleep(1)


def run_state(af: Airflow, run_id: str, dag_id: str = DAG_ID) -> str | None:
    rows = af.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, run_id)
    return rows[0][0] if rows else None


def gate_try(af: Airflow, run_id: str) -> int:
    (try_number,) = af.query("SELECT try_number FROM task_instance WHERE dag_id = ? AND "
                             "run_id = ? AND task_id = ?", DAG_ID, run_id, GATE_TASK)[0]
    return try_number


def gate_or_end(af: Airflow, run_id: str) -> str:
    """Wait until the run's gate waits for an answer, or the run has ended: which."""
    def ready():
        if task_states(af, run_id).get(GATE_TASK) == "awaiting_input":
            return "awaiting_input"
        return run_state(af, run_id) if run_state(af, run_id) in FINAL else None
    return wait_until(af, f"run {run_id} waits or ends", ready)


def end(af: Airflow, run_id: str, asked: int) -> str:
    """The end state of run ``run_id``, whose gate was answered in its try ``asked``: an
    answer taken, it is not asked again (no later try), which fails at once."""
    def ready():
        assert gate_try(af, run_id) == asked, f"the gate asked again: {task_states(af, run_id)}"
        return run_state(af, run_id) if run_state(af, run_id) in FINAL else None
    return wait_until(af, f"run {run_id} ends", ready)


def answer(af: Airflow, run_id: str, option: str) -> None:
    """Answer the waiting gate of run ``run_id`` through the REST API, once the scheduler has
    taken the exit of the worker that parked it (see the module's text); the answer must be
    the one recorded."""
    parked = gate_try(af, run_id)
    wait_until(af, f"the scheduler takes the exit of {run_id}'s parked gate",
               lambda: executor_events(af, run_id, GATE_TASK, parked) >= 1, timeout=120)
    assert task_states(af, run_id)[GATE_TASK] == "awaiting_input"
    path = f"{RUNS}/{quote(run_id, safe='')}/taskInstances/{GATE_TASK}/-1/hitlDetails"
    got = af.api("PATCH", path, {"chosen_options": [option], "params_input": {}})
    assert (got["chosen_options"], got["responded_by"]["name"]) == ([option], "admin"), got


def ledger_nights(af: Airflow) -> set[str]:
    return {r["night"] for r in warehouse_rows(af.warehouse, "ledger", ["night", "topic"])}


def summary_runs(af: Airflow) -> list[tuple[str, str, str]]:
    return af.query("SELECT run_id, partition_key, state FROM dag_run WHERE dag_id = ? "
                    "ORDER BY id", SUMMARY_DAG)


# ------------------------------------------------------------------ the test
@pytest.mark.timeout(2 * RUN_TIMEOUT)
def test_a_warned_night_waits_for_a_person_and_events_are_per_night(gated):
    af = gated
    try:
        # 1. n1: published (its audit passes: the gate lets it through without asking)
        run_1 = trigger(af, {}, N1)
        assert gate_or_end(af, run_1) == "success", task_states(af, run_1)
        assert task_states(af, run_1)[GATE_TASK] == "success"
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
        assert end(af, run_2, asked=1) == "success"
        states = task_states(af, run_2)
        assert (states["publish_gate"], states["publish"]) == ("success", "skipped"), states
        assert ledger_nights(af) == {N1}
        assert [k for r, k in partition_events(af)] == [N1]
        note = run_notes(af, [run_2])[run_2]
        assert "missing_partition rerun-1" in note and (
            "Not published: rejected by admin in Required actions (publish_warned: approve); "
            "main unchanged") in note, note

        # 3. the gate cleared (a person changed their mind): it asks again, once (its next
        #    try); approved, n2 is published and its events carry n2
        af.api("POST", f"/api/v2/dags/{DAG_ID}/clearTaskInstances", {
            "dag_run_id": run_2, "task_ids": [GATE_TASK], "include_downstream": True,
            "only_failed": False, "dry_run": False})
        run_3 = run_2
        assert gate_or_end(af, run_3) == "awaiting_input", task_states(af, run_3)
        assert gate_try(af, run_3) == 2
        answer(af, run_3, "Approve")
        assert end(af, run_3, asked=2) == "success"  # the approval taken: not asked again
        assert task_states(af, run_3)["publish"] == "success"
        assert ledger_nights(af) == {N1, N2}
        note = run_notes(af, [run_3])[run_3]
        assert "Approved by admin in Required actions" in note and "rejected" not in note, note
        for table in ("kafkalog.records", "kafkalog.ledger", "kafkalog.dq_results"):
            assert [k for r, k in partition_events(af, table)] == [N1, N2], table
        assert {r: k for r, k in partition_events(af)} == {run_1: N1, run_3: N2}

        # 4. the example downstream DAG: once per night, that night's rows
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
    except BaseException:
        af.dump_logs()
        raise
