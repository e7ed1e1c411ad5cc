"""Airflow plugin: each nightly run's note says the audit's verdict (kafkalog_pipeline.notes)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from kafkalog_pipeline import notes


class KafkalogNotesPlugin(AirflowPlugin):
    name = "kafkalog_notes"
    # called where a run's state changes: the scheduler, the api-server (a person marks a
    # run), the process of dag.test() (make demo)
    listeners = [notes]
