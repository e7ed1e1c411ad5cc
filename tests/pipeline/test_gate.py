"""The publish gate's policy and decisions, the conflict's approval, and the per-night
partition keys of the table assets' events (issue 46), without a scheduler: Airflow's own
operator and outlet-event classes, our policy loader. The scheduler's side (a warned night
waiting in Required actions, approved and rejected; the events' keys in the metadata DB; the
example partitioned DAG's runs) is tests/pipeline/test_gate_partitions.py."""

from __future__ import annotations

import re

import pytest

# Airflow reads its configuration at import: airflow_env sets it first.
from tests.airflow_env import DAG_ID, REPO  # noqa: E402

from spark_jobs.audit.policy import POLICY_ENV, Policy, PolicyError  # noqa: E402

WARNED = {"fail": 0, "warn": 2, "pass": 7, "failed": {},
          "warned": {"missing_partition": ["rerun-1"], "offset_gaps": ["payments-1"]}}
PASSED = {"fail": 0, "warn": 0, "pass": 9, "failed": {}, "warned": {}}


def policy_text(**settings) -> str:
    text = (REPO / "expectations" / "policy.yaml").read_text()
    for key, value in settings.items():
        text, n = re.subn(rf"^{key}: \w+$", f"{key}: {value}", text, flags=re.M)
        assert n == 1, key
    return text


def test_the_policy_says_what_becomes_of_a_warned_night(tmp_path, monkeypatch):
    import yaml

    shipped = Policy.load()
    assert (shipped.publish_warned, shipped.publish_conflict) == ("auto", "rerun")  # as before
    # absent: the defaults
    doc = yaml.safe_load(policy_text())
    del doc["publish_warned"], doc["publish_conflict"]
    assert (Policy(doc).publish_warned, Policy(doc).publish_conflict) == ("auto", "rerun")
    # a bad value: a clear error naming the key and the choices
    with pytest.raises(PolicyError, match=re.escape(
            "publish_warned: 'ask' is not one of auto | approve | never")):
        Policy(yaml.safe_load(policy_text(publish_warned="ask")))
    with pytest.raises(PolicyError, match=re.escape(
            "publish_conflict: 'later' is not one of rerun | approve")):
        Policy(yaml.safe_load(policy_text(publish_conflict="later")))
    # KAFKALOG_POLICY names another file, for the DAG's tasks and the audit they submit
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(publish_warned="approve", publish_conflict="approve"))
    monkeypatch.setenv(POLICY_ENV, str(path))
    got = Policy.load()
    assert (got.publish_warned, got.publish_conflict) == ("approve", "approve")


def test_the_gate_asks_only_of_a_warned_night_under_approve():
    from kafkalog_pipeline.gate import ASK, PUBLISH, REFUSE, decide, question

    for policy in ("auto", "approve", "never"):
        assert decide(policy, PASSED) == PUBLISH
        assert decide(policy, None) == PUBLISH
    assert [decide(p, WARNED) for p in ("auto", "approve", "never")] == [PUBLISH, ASK, REFUSE]
    subject, body = question(run_id="r1", dates=["2026-11-23"], verdict=WARNED,
                             report="http://ui/dags/d/runs/r1")
    assert subject == "Publish the warned night 2026-11-23?"
    assert "- missing_partition (rerun-1)" in body and "- offset_gaps (payments-1)" in body
    assert "http://ui/dags/d/runs/r1" in body and "2 warned, 7 passed" in body


class FakeTI:
    dag_id = DAG_ID

    def __init__(self, xcoms):
        self.xcoms, self.pushed = xcoms, {}

    def xcom_pull(self, task_ids, key="return_value"):
        return self.xcoms.get((task_ids, key))

    def xcom_push(self, key, value):
        self.pushed[key] = value


def test_the_gate_lets_through_or_refuses_without_asking(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from kafkalog_pipeline.gate import PublishGateOperator

    gate = PublishGateOperator(task_id="publish_gate")
    warned = FakeTI({("check_quality", "return_value"): WARNED})
    # auto (the shipped policy): a warned night goes on, nobody is asked
    assert gate.execute({"ti": warned, "run_id": "r1"}) is None
    assert warned.pushed["gate"] == {"decision": "auto", "by": None}
    # never: the gate fails, saying why; publish does not run
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(publish_warned="never"))
    monkeypatch.setenv("KAFKALOG_POLICY", str(path))
    with pytest.raises(AirflowFailException, match=re.escape(
            "not published: the audit warned (missing_partition (rerun-1); offset_gaps "
            "(payments-1)) and the policy publishes no warned night")):
        gate.execute({"ti": warned, "run_id": "r1"})
    assert warned.pushed["gate"] == {"decision": "never", "by": None}
    passed = FakeTI({("check_quality", "return_value"): PASSED})
    assert gate.execute({"ti": passed, "run_id": "r2"}) is None


def test_a_conflicts_rerun_waits_for_an_answer_under_approve():
    """``rerun_on_conflict``, resumed with a person's answer: approved, the rerun is
    triggered as without the gate; rejected, no rerun, said as the skip's reason."""
    from airflow.sdk.exceptions import AirflowSkipException, DagRunTriggerException

    from kafkalog_pipeline.operators import RerunOnConflictOperator

    conflict = {"table": "records", "runs": ["manual__b"], "files": 2}
    run_id = "manual__a"
    context = {"run_id": run_id, "params": {"topics": "rerun"}}
    op = RerunOnConflictOperator(task_id="rerun_on_conflict", trigger_dag_id=DAG_ID)
    user = {"id": "ana", "name": "Ana"}
    ti = FakeTI({("publish", "conflict"): conflict, ("plan", "plan"): {"dates": ["2026-11-22"]}})
    with pytest.raises(AirflowSkipException, match="rerun rejected by Ana"):
        op.execute_answered({**context, "ti": ti}, {"chosen_options": ["Reject"],
                                                   "responded_by_user": user})
    assert ti.pushed["gate"] == {"decision": "rejected", "by": "Ana"}
    # the response timeout passed (the scheduler resumes the task with an error event)
    with pytest.raises(AirflowSkipException, match="rerun not answered in time"):
        op.execute_answered({**context, "ti": ti}, {"error": "timeout", "error_type": "timeout"})
    assert ti.pushed["gate"] == {"decision": "unanswered", "by": None}
    with pytest.raises(DagRunTriggerException) as trigger:
        op.execute_answered({**context, "ti": ti}, {"chosen_options": ["Approve"],
                                                   "responded_by_user": user})
    assert trigger.value.dag_run_id == f"rerun__{run_id}"
    assert trigger.value.conf["date_from"] == "2026-11-22"
    assert ti.pushed["gate"] == {"decision": "approved", "by": "Ana"}


def test_table_events_carry_one_partition_key_per_published_night():
    """Airflow's own outlet-event accessors, as the task runner hands ``publish`` them: one
    partition key per night the run published (a night without a snapshot is not one)."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from kafkalog_pipeline.assets import TABLE_ASSETS
    from kafkalog_pipeline.tasks import announce_tables, published_nights

    plan = {"dates": ["2026-11-20", "2026-11-21", "2026-11-22"],
            "missing_nights": ["2026-11-21"]}
    assert published_nights(plan) == ["2026-11-20", "2026-11-22"]
    assert published_nights({"dates": ["2026-11-20"], "missing_nights": []}) == ["2026-11-20"]
    events = OutletEventAccessors()
    extra = {"run_id": "r", "dates": plan["dates"]}
    announce_tables(events, TABLE_ASSETS.values(), published_nights(plan), extra)
    for asset in TABLE_ASSETS.values():
        assert events[asset].partition_keys == {"2026-11-20", "2026-11-22"}, asset.name
        assert events[asset].extra == extra
