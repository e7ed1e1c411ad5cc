"""The OpenLineage extractor of the nightly DAG's TaskFlow tasks, ``plan`` and ``publish``
(docs/lineage.md): configured with ``[openlineage] extractors =
kafkalog_pipeline.lineage_tasks.NightlyTaskExtractor``.

TaskFlow tasks are ``_PythonDecoratedOperator`` instances, for which the OpenLineage provider
has no extractor of its own (it then reads only static inlets and outlets). This one gives
``plan`` its inputs (each night's snapshot prefix, the tier) and ``publish`` its outputs (the
tables whose ``main`` it moved, named as :mod:`kafkalog_pipeline.lineage` names them). A
TaskFlow task of another DAG, or another task, gets no datasets from it: the provider then
falls back to the task's inlets and outlets, as without it.

This module imports the provider at import: only the provider's listener imports it. (The
provider's abstract method a custom extractor implements is private: its base class is
``_airflow.openlineage_extractor_base``.)
"""

from __future__ import annotations

from airflow.providers.openlineage.extractors.base import OperatorLineage

from . import lineage, settings
from ._airflow import openlineage_extractor_base
from .tasks import PLAN_KEY, PLAN_TASK, PUBLISH_TASK


class NightlyTaskExtractor(openlineage_extractor_base()):
    """``plan``'s and ``publish``'s datasets (see the module docstring)."""

    @classmethod
    def get_operator_classnames(cls) -> list[str]:
        return ["_PythonDecoratedOperator"]

    def _ours(self) -> bool:
        return (self.operator.dag_id == settings.NIGHTLY_DAG_ID
                and self.operator.task_id in (PLAN_TASK, PUBLISH_TASK))

    def extract_on_start(self) -> OperatorLineage | None:
        if not self._ours():
            return OperatorLineage()
        from airflow.sdk import get_current_context

        return self._lineage(get_current_context()["ti"], done=False)

    def extract_on_complete(self, task_instance) -> OperatorLineage | None:
        return self._lineage(task_instance, done=True) if self._ours() else OperatorLineage()

    def extract_on_failure(self, task_instance) -> OperatorLineage | None:
        return self._lineage(task_instance, done=False) if self._ours() else OperatorLineage()

    def _lineage(self, ti, *, done: bool) -> OperatorLineage:
        if self.operator.task_id == PLAN_TASK:
            tier = (ti.get_template_context().get("params") or {}).get(settings.TIER_PARAM)
            plan = ti.xcom_pull(task_ids=PLAN_TASK, key=PLAN_KEY) if done else None
            return lineage.task_lineage(lineage.source_datasets(plan, tier))
        wh = lineage.run_warehouse(ti, settings.s3_access())
        if wh is None:
            return lineage.task_lineage()
        # before (and after a failed) publish: the tables it is to move; after: all of the
        # run's tables, which are on main now (their branches dropped)
        names = wh.run_tables() if done else lineage.run_tables(wh, ti.run_id)
        return lineage.task_lineage(outputs=lineage.table_datasets(wh, names, "output"))
