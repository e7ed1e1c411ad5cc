"""The logic behind the Airflow DAGs: list snapshots, plan chunks, run, audit, publish.

DAG files in dags/ only wire these functions together (see STYLE.md).
"""
