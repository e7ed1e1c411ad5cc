"""Shared fixtures: one local SparkSession and one moto S3 server per test session.

Both start lazily, only for tests that ask for them. The pipeline tests (Spark,
S3, Airflow, a browser) carry the ``pipeline`` marker; ``make test`` runs them once, on the
compiled pass, since they do not exercise the decoder paths differently. A user of the
``spark`` or ``s3_endpoint`` fixture is marked here; a test without the marker that starts
Spark, Airflow or a browser another way fails and says so (tests/pipeline_guard.py).

``tests`` is a package (each folder has its ``__init__.py``): pytest puts the checkout on
``sys.path`` and test modules import the shared helpers as ``tests.<module>`` (``from
tests.segments import batch_v2``; a folder's own, ``tests.spark_jobs.faults``). Builders that
more than one test module uses live in such helper modules, never in a ``test_*.py`` (no test
module imports another: tests/test_architecture.py).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid

import pytest

from tests.pipeline_guard import jvm_children, pipeline_command

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

#: fake credentials for the moto server (never real ones)
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


#: the test modules that take longest, longest first (seconds of the compiled pass at the last
#: full run, on the loaded 2-core machine), collected first: with ``--dist loadfile
#: --no-loadscope-reorder`` (the Makefile) each worker takes the next module when it is nearly
#: done with its own, so the longest go first (one to each worker: the two Airflow modules,
#: 15-20 min each when the machine is busy) and the short ones fill in after them. The modules
#: not named here follow, those that run Spark, Airflow or a browser (the ``pipeline`` marker)
#: before the rest: the suite ends on quick modules, not on one worker still in a long one while
#: the other has nothing left (xdist's own order, most tests first, left the Airflow modules to
#: the end: the suite ended with one of them running alone for ~20 minutes).
LONGEST_FIRST = (
    "test_backfill.py",  # ~750 s: two tests over one real scheduler, six DAG runs
    "test_dags_e2e.py",  # ~300 s: five dag.test() nights
    "test_gate_partitions.py",
    "test_absent.py",  # ~320 s: a dozen decoded and audited nights
    "test_quality.py",  # ~200 s
    "test_reconcile.py",  # ~120 s
    "test_eos.py",  # ~100 s
    "test_second_engine.py",
    "test_lineage.py",
    "test_tier_audit.py",
    "test_log_dir_checks.py",
    "test_docker.py",
    "test_plugin_ui.py",
)


#: fixtures that start a Spark session or an S3 server: a test using one (directly or through
#: another fixture) is a pipeline test whether or not its module says so, so that it runs once
PIPELINE_FIXTURES = frozenset({"spark", "s3_endpoint"})


@pytest.hookimpl(tryfirst=True)  # before ``-m "not pipeline"`` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if PIPELINE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.pipeline)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    pipeline_modules = {item.path for item in items if item.get_closest_marker("pipeline")}
    # one key per module (a module's tests stay together, in their order): stable, so the
    # modules of each kind stay as collected
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)),
                                 item.path not in pipeline_modules))


@pytest.fixture(autouse=True)
def _pipeline_marker_where_a_test_starts_a_pipeline(request, monkeypatch):
    """A test without the ``pipeline`` marker may start no Spark, Airflow or browser: the
    commands it starts are watched, and a JVM child it leaves fails it (its marker is
    missing: it would run twice, and it needs what the pure pass does not set up)."""
    if request.node.get_closest_marker("pipeline"):
        yield
        return
    started = []

    class Watched(subprocess.Popen):
        def __init__(self, args, *a, **k):
            if (what := pipeline_command(args)) is not None:
                started.append(what)
            super().__init__(args, *a, **k)

    jvms = jvm_children()
    monkeypatch.setattr(subprocess, "Popen", Watched)
    yield
    new_jvms = jvm_children() - jvms
    if started or new_jvms:
        pytest.fail(f"{request.node.nodeid} starts {', '.join(started) or 'a JVM (Spark)'} "
                    "without the pipeline marker: add pytestmark = pytest.mark.pipeline "
                    "(or @pytest.mark.pipeline)", pytrace=False)


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.session import build_session

    from tests.spark_settings import SESSION_CONF

    session = build_session("kafkalog-tests", master="local[2]", conf=SESSION_CONF)
    yield session
    session.stop()
    # py4j says goodbye at INFO from __del__ when the interpreter exits; by then the
    # stream of a console handler set up during the tests (Airflow's) is closed, and
    # logging prints a "--- Logging error ---" traceback after the summary
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def s3_endpoint():
    """URL of a moto S3 server on 127.0.0.1 (environment set for boto3)."""
    from moto.server import ThreadedMotoServer

    old = {k: os.environ.get(k) for k in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENV)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    os.environ["AWS_ENDPOINT_URL"] = url
    yield url
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def s3_bucket(s3_endpoint):
    """A fresh, empty bucket on the moto server; yields its name."""
    import boto3

    name = f"t-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_catalog(tmp_path, s3_bucket, monkeypatch):
    """An Iceberg catalog ``s3test`` for warehouses on the moto server (pyiceberg's
    environment configuration): SQLite in ``tmp_path``, tables under
    ``s3://<bucket>/iceberg``. Returns the catalog name (jobs take ``--catalog``)."""
    monkeypatch.setenv("PYICEBERG_CATALOG__S3TEST__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__S3TEST__URI", f"sqlite:///{tmp_path}/s3test-catalog.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__S3TEST__WAREHOUSE", f"s3://{s3_bucket}/iceberg")
    return "s3test"
