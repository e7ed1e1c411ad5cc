"""Fixtures of the pipeline tests.

The demo's nights (``demo.data.write_nights``), written once per test process: the DAG
tests and the demo's data tests each take a copy of their own (``demo_nights``), instead of
writing the same nights again for every module. A fresh Airflow metadata DB per module
(``airflow_db``), the demo's snapshots in a fresh bucket with a fresh warehouse
(``pipeline``), the nightly DAG as the dag-processor stores it (``nightly_in_db``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def demo_nights_written(tmp_path_factory) -> Path:
    """One folder of the demo's nights (read only: copy it with ``demo_nights``)."""
    from demo import data as demo_data

    root = tmp_path_factory.mktemp("demo-nights")
    demo_data.write_nights(root)
    return root


@pytest.fixture(scope="session")
def demo_nights(demo_nights_written):
    """``copy(dest)``: the demo's nights under ``dest`` (a new folder), as
    ``demo.data.write_nights(dest)`` writes them; returns each night's folder, in order."""
    from demo import data as demo_data

    def copy(dest: Path) -> list[Path]:
        shutil.copytree(demo_nights_written, dest, dirs_exist_ok=True)
        return [Path(dest) / night for night in demo_data.NIGHTS]

    return copy


@pytest.fixture(scope="module")
def airflow_db():
    from airflow.configuration import conf
    from airflow.utils import db

    from tests.airflow_env import DAGS

    conf.set("core", "dags_folder", str(DAGS))
    db.resetdb()
    yield


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, s3_endpoint, airflow_db, demo_nights):
    """Snapshots in a fresh bucket, a fresh warehouse, settings and connections in the env."""
    import uuid

    import boto3

    from demo import data as demo_data, exactly_once, servers

    root = tmp_path_factory.mktemp("snapshots")
    demo_nights(root)  # demo_data.write_nights's (tests/pipeline/conftest.py)
    bucket = f"snap-{uuid.uuid4().hex[:10]}"
    demo_data.upload(root, bucket, "nightly", boto3.client("s3", endpoint_url=s3_endpoint))
    warehouse = tmp_path_factory.mktemp("warehouse")
    env = {
        "KAFKALOG_WAREHOUSE": str(warehouse),
        "KAFKALOG_SNAPSHOT_BUCKET": bucket,
        "KAFKALOG_SNAPSHOT_PREFIX": "nightly",
        "KAFKALOG_CHUNK_BYTES": "3000",
        "KAFKALOG_MAX_CHUNKS": "2",
        # the demo's policy: its planted exactly-once faults warn (demo.exactly_once)
        "KAFKALOG_POLICY": str(exactly_once.write_policy(warehouse.parent / "policy.yaml")),
        **servers.local_connections(s3_endpoint, "testing"),
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield {"root": root, "bucket": bucket, "warehouse": warehouse, "endpoint": s3_endpoint}
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def nightly_in_db():
    """A fresh metadata DB holding the nightly DAG as the dag-processor writes it."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.dagbag import DBDagBag
    from airflow.utils import db
    from airflow.utils.session import create_session

    db.resetdb()
    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    for bundle in manager.get_all_dag_bundles():
        bundle.initialize()
        sync_bag_to_db(BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path,
                                    bundle_name=bundle.name), bundle.name, bundle.version)
    from tests.airflow_env import DAG_ID

    with create_session() as session:
        return DBDagBag().get_latest_version_of_dag(DAG_ID, session=session)
