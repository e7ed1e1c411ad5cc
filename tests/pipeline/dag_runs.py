"""Runs of the nightly DAG without running its tasks: a task instance's XComs (``FakeTI``)
and a run whose tasks ended in given states, settled by the scheduler's own code
(``finish_run``). Used by test_dags, test_alerts and test_lineage."""

from __future__ import annotations

import datetime as dt

from tests.airflow_env import DAG_ID

#: an audit that passed, as check_quality returns it
PASSED = {"fail": 0, "warn": 0, "pass": 5, "failed": {}, "warned": {}}
#: the tasks before publish, all done
DONE = {"plan": "success", "decode_chunk": "success", "check_quality": "success"}


class FakeTI:
    """What the rerun's decision reads of a running task instance: XComs."""

    dag_id = DAG_ID

    def __init__(self, xcoms: dict):
        self.xcoms, self.pushed = xcoms, {}

    def xcom_pull(self, task_ids, key="return_value"):
        return self.xcoms.get((task_ids, key))

    def xcom_push(self, key, value):
        self.pushed[key] = value


def finish_run(dag, run_id: str, states: dict, xcoms: dict, *, conf=None, note=None,
               callbacks: list | None = None):
    """A run of the nightly DAG whose tasks ended in ``states`` having pushed ``xcoms``
    (``{(task_id, key): value}``); the scheduler's own ``DagRun.update_state`` decides the
    rest (trigger rules) and the run's state, and calls the listeners as the scheduler
    does. The run's callback request (for the dag-processor, as the scheduler sends it) is
    appended to ``callbacks``. Returns (run state, its note)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    with create_session() as session:
        dr = dag.create_dagrun(run_id=run_id, run_after=dt.datetime.now(dt.timezone.utc),
                               run_type=DagRunType.MANUAL, conf=conf or {}, note=note,
                               triggered_by=DagRunTriggeredByType.TEST,
                               state=DagRunState.RUNNING, session=session)
        session.flush()
        for ti in dr.get_task_instances(session=session):
            ti.state = states.get(ti.task_id, ti.state)
        for (task_id, key), value in xcoms.items():
            XComModel.set(key=key, value=value, dag_id=DAG_ID, task_id=task_id, run_id=run_id,
                          session=session)
        session.flush()
        dr.dag = dag
        for _ in range(8):  # each pass settles one more layer of trigger rules
            _, callback = dr.update_state(session=session, execute_callbacks=False)
            if dr.state != DagRunState.RUNNING:
                if callbacks is not None and callback is not None:
                    callbacks.append(callback)
                break
    with create_session() as session:
        dr = session.query(DagRun).filter_by(dag_id=DAG_ID, run_id=run_id).one()
        return str(dr.state), dr.note
