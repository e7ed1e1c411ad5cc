"""docker/: the deployment, checked statically (no Docker engine runs here).

What can be checked without an engine is checked against the real thing: the compose file is
loaded with PyYAML and its wiring followed (images, environment, depends_on, ports, variables);
the Dockerfile is parsed and every COPY source looked up in the repository and against
.dockerignore; every Airflow command line is parsed by this Airflow's own CLI parser and every
AIRFLOW__* variable looked up in its configuration reference; the Spark classes are looked up
in pyspark's jars; and airflow-init.sh runs for real against a SQLite metadata database, after
which the provider's SparkSubmitHook resolves the connection it created.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.pipeline

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
ENV_EXAMPLE = DOCKER / ".env.example"
VENV_BIN = Path(sys.executable).parent

AIRFLOW_SERVICES = {"airflow-init", "airflow-apiserver", "airflow-scheduler",
                    "airflow-dag-processor", "airflow-triggerer"}
SPARK_SERVICES = {"spark-master", "spark-worker"}
REQUIRED_SERVICES = AIRFLOW_SERVICES | SPARK_SERVICES | {"postgres", "minio", "minio-init"}
#: the Airflow 3 components and the subcommand each must run
COMPONENTS = {"airflow-apiserver": "api-server", "airflow-scheduler": "scheduler",
              "airflow-dag-processor": "dag-processor", "airflow-triggerer": "triggerer"}
DEPENDS_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


# ---- helpers ---------------------------------------------------------------------------------

def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict:
    return load_compose()["services"]


def env_of(service: dict) -> dict:
    env = service.get("environment") or {}
    if isinstance(env, list):  # KEY=VALUE form
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def argv(command) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


_VAR = re.compile(r"\$(\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\})")


def interpolate(value: str, env: dict) -> str:
    """Compose's interpolation: ${X}, ${X:-default}, ${X-default}, ${X:?error}, $$."""
    def sub(m):
        if m.group(1) == "$":
            return "$"
        name, op, arg = m.group(2), m.group(3), m.group(4)
        val = env.get(name)
        if op in (":-", ":?"):
            missing = not val
        else:
            missing = val is None
        if missing and op in (":-", "-"):
            return arg
        if missing and op in (":?", "?"):
            raise KeyError(f"{name}: {arg}")
        return val or ""
    return _VAR.sub(sub, value)


def compose_variables(text: str) -> dict[str, str | None]:
    """Every ${NAME...} the compose file reads from its environment -> its operator."""
    return {m.group(2): m.group(3) for m in _VAR.finditer(text) if m.group(1) != "$"}


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f"{path.name}: not NAME=VALUE: {line!r}"
            out[name.strip()] = value.strip()
    return out


def generated_env(tmp_path: Path) -> dict[str, str]:
    out = tmp_path / "generated.env"
    proc = subprocess.run([sys.executable, str(DOCKER / "gen-env.py"), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return read_env_file(out)


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comment lines dropped."""
    instructions, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return instructions


def stages(instructions) -> list[dict]:
    """The Dockerfile's stages: base, name and their instructions."""
    out = []
    for keyword, rest in instructions:
        if keyword == "FROM":
            words = rest.split()
            words = [w for w in words if not w.startswith("--")]
            out.append({"base": words[0],
                        "name": words[2] if len(words) > 2 and words[1].upper() == "AS" else None,
                        "body": []})
        else:
            assert out, f"{keyword} before the first FROM"
            out[-1]["body"].append((keyword, rest))
    return out


def copy_args(rest: str) -> tuple[dict, list[str], str]:
    """Options, sources and destination of a COPY."""
    words = shlex.split(rest)
    options = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        options[key] = value
    if words and words[0].startswith("["):
        words = json.loads(" ".join(words))
    return options, words[:-1], words[-1]


def stage_env(stage: dict) -> dict[str, str]:
    env = {}
    for keyword, rest in stage["body"]:
        if keyword == "ENV":
            for word in shlex.split(rest):
                name, _, value = word.partition("=")
                env[name] = value
    return env


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def _pattern_regex(pattern: str) -> re.Pattern:
    pattern = pattern.strip("/")
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: a pattern excludes a path it matches, or a path under a directory it
    matches; patterns apply in order and a later ``!pattern`` brings a path back."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _pattern_regex(pattern[1:] if negate else pattern)
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negate
    return excluded


def clean_airflow_env(tmp_path: Path, extra: dict | None = None) -> dict:
    """An environment for the venv's airflow with a throwaway AIRFLOW_HOME and nothing of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    home = tmp_path / "airflow-home"
    home.mkdir(exist_ok=True)
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}")
    env.update(extra or {})
    return env


def run_python(code: str, env: dict, timeout: int = 180) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=env["AIRFLOW_HOME"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def init_script_airflow_commands() -> list[list[str]]:
    out = []
    for line in (DOCKER / "airflow-init.sh").read_text().splitlines():
        words = shlex.split(line, comments=True) if line.strip() else []
        if words and words[0] == "airflow":
            # the command ends where the shell's redirections and operators begin
            end = next((i for i, w in enumerate(words) if re.match(r"\d?>|\|\||&&|\||;", w)),
                       len(words))
            out.append(words[1:end])
    return out


# ---- compose: structure ----------------------------------------------------------------------

def test_compose_has_every_service_and_declares_its_volumes():
    data = load_compose()
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    svc = data["services"]
    assert REQUIRED_SERVICES <= set(svc), REQUIRED_SERVICES - set(svc)
    declared = set(data.get("volumes") or {})
    for name, s in svc.items():
        for volume in s.get("volumes") or []:
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source")
            if not source.startswith((".", "/", "~")):
                assert source in declared, f"{name} mounts undeclared volume {source}"
    # the data that must survive a restart is on named volumes
    assert any(v.endswith(":/var/lib/postgresql/data") for v in svc["postgres"]["volumes"])
    assert any(v.endswith(":/data") for v in svc["minio"]["volumes"])
    assert "/data" in argv(svc["minio"]["command"])


def test_every_build_uses_the_dockerfile_with_the_repository_as_context():
    svc = services()
    built = {name: s for name, s in svc.items() if "build" in s}
    assert AIRFLOW_SERVICES | SPARK_SERVICES <= set(built)
    for name, s in built.items():
        build = s["build"]
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == ROOT, f"{name}: build context {context} is not the repository root"
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.resolve() == DOCKERFILE.resolve() and DOCKERFILE.is_file(), name
    # one image for Airflow and Spark alike
    images = {s["image"] for s in built.values()}
    assert len(images) == 1, images


def test_airflow_services_share_the_image_and_the_common_environment():
    svc = services()
    envs = {name: env_of(svc[name]) for name in AIRFLOW_SERVICES}
    first = envs["airflow-scheduler"]
    for name, env in envs.items():
        assert svc[name]["image"] == svc["airflow-scheduler"]["image"], name
        assert env == first, f"{name} differs from the scheduler's environment"
    env = first
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert 1 <= int(env["AIRFLOW__CORE__PARALLELISM"]) <= 8
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
    assert re.fullmatch(r"postgresql\+psycopg2://airflow:\$\{POSTGRES_PASSWORD:\?[^}]*\}@postgres:5432/airflow",
                        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    for secret in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY",
                   "AIRFLOW__CORE__FERNET_KEY"):
        assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", env[secret]), f"{secret} must come from .env"
    assert env["KAFKALOG_WAREHOUSE"] == "s3://warehouse/kafka"
    assert env["KAFKALOG_SNAPSHOT_BUCKET"] == "kafka-snapshots"
    assert env["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert env["AWS_ACCESS_KEY_ID"].startswith("${") and env["AWS_SECRET_ACCESS_KEY"].startswith("${")


def test_spark_services_get_the_s3_and_python_settings_of_the_airflow_side():
    svc = services()
    airflow_env = env_of(svc["airflow-scheduler"])
    shared = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
              "AWS_DEFAULT_REGION", "PYSPARK_PYTHON", "KAFKALOG_WAREHOUSE")
    for name in SPARK_SERVICES:
        env = env_of(svc[name])
        for key in shared:
            assert env.get(key) == airflow_env[key], f"{name}: {key}"


def test_buckets_the_pipeline_reads_are_created_by_minio_init():
    svc = services()
    env = env_of(svc["airflow-scheduler"])
    script = "\n".join(argv(svc["minio-init"]["entrypoint"]) + argv(svc["minio-init"]["command"]))
    made = set(re.findall(r"mc mb (?:--ignore-existing )?local/([a-z0-9.-]+)", script))
    warehouse_bucket = env["KAFKALOG_WAREHOUSE"].removeprefix("s3://").split("/")[0]
    assert {warehouse_bucket, env["KAFKALOG_SNAPSHOT_BUCKET"]} <= made
    # the pipeline's key is the one minio-init creates
    init_env = env_of(svc["minio-init"])
    assert env["AWS_ACCESS_KEY_ID"] == init_env["KAFKALOG_S3_ACCESS_KEY"]
    assert env["AWS_SECRET_ACCESS_KEY"] == init_env["KAFKALOG_S3_SECRET_KEY"]
    assert 'mc admin user add local "$$KAFKALOG_S3_ACCESS_KEY"' in COMPOSE.read_text()


#: services whose processes run the jobs or open the catalog: Airflow tasks (plan, the Spark
#: drivers, publish), the UI plugin, airflow-init, and the Spark workers (executors)
JOB_SERVICES = AIRFLOW_SERVICES | SPARK_SERVICES


def catalog_env(env: dict) -> dict[str, str]:
    """The PYICEBERG_CATALOG__<name>__* variables of the catalog KAFKALOG_CATALOG names."""
    prefix = f"PYICEBERG_CATALOG__{env['KAFKALOG_CATALOG'].upper()}__"
    return {k: v for k, v in env.items() if k.startswith(prefix)}


def test_iceberg_catalog_env_is_set_on_every_service_that_runs_jobs(tmp_path):
    svc = services()
    first = env_of(svc["airflow-scheduler"])
    assert first["KAFKALOG_CATALOG"] == "kafkalog" and first["KAFKALOG_NAMESPACE"] == "kafka"
    wanted = catalog_env(first)
    assert wanted, "no PYICEBERG_CATALOG__KAFKALOG__* variable"
    for name in JOB_SERVICES:
        env = env_of(svc[name])
        for key in ("KAFKALOG_CATALOG", "KAFKALOG_NAMESPACE", *wanted):
            assert env.get(key) == first[key], f"{name}: {key}"
    # pyiceberg itself turns the (interpolated) variables into the catalog's properties
    values = generated_env(tmp_path)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG")}
    run_env.update({k: interpolate(v, values) for k, v in first.items()})
    run_env["PYICEBERG_HOME"] = str(tmp_path)  # no .pyiceberg.yaml there
    code = """
import json
from pyiceberg.utils.config import Config
print("RESULT " + json.dumps(Config().get_catalog_config("kafkalog")))
"""
    proc = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    props = json.loads(proc.stdout.split("RESULT ", 1)[1])
    import pyiceberg.io as pio

    assert set(props) == {"type", "uri", "warehouse", pio.S3_ENDPOINT, pio.S3_REGION,
                          pio.S3_ACCESS_KEY_ID, pio.S3_SECRET_ACCESS_KEY}, props
    assert props["type"] == "sql"
    # the tables' files are on MinIO with the pipeline's key, in a bucket minio-init makes
    env = {k: interpolate(v, values) for k, v in first.items()}
    assert props[pio.S3_ENDPOINT] == env["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert props[pio.S3_REGION] == env["AWS_DEFAULT_REGION"]  # set: no region lookup on AWS
    assert props[pio.S3_ACCESS_KEY_ID] == env["AWS_ACCESS_KEY_ID"] == values["KAFKALOG_S3_ACCESS_KEY"]
    assert props[pio.S3_SECRET_ACCESS_KEY] == env["AWS_SECRET_ACCESS_KEY"] == values["KAFKALOG_S3_SECRET_KEY"]
    assert props["warehouse"].startswith("s3://")
    bucket = props["warehouse"].removeprefix("s3://").split("/")[0]
    script = "\n".join(argv(svc["minio-init"]["command"]))
    assert bucket in set(re.findall(r"mc mb (?:--ignore-existing )?local/([a-z0-9.-]+)", script))
    # apart from the scratch, Data Docs and manifests under the warehouse root W
    assert props["warehouse"].rstrip("/") != env["KAFKALOG_WAREHOUSE"].rstrip("/")


def test_table_assets_are_named_by_the_tables_s3_locations(tmp_path, monkeypatch):
    """The DAG file parsed with the stack's environment (docker/README.md): each table's asset
    URI is where the SQL catalog makes the table, under its warehouse on MinIO
    (``s3://warehouse/iceberg/kafka/<table>``), not under the root W; read without the
    catalog's database (postgres is not there at parse time, nor here)."""
    from kafkalog_pipeline.assets import DERIVED_ASSETS, table_asset

    values = generated_env(tmp_path)
    env = {k: interpolate(v, values) for k, v in env_of(services()["airflow-scheduler"]).items()}
    for key in [k for k in os.environ if k.startswith(("PYICEBERG", "KAFKALOG_"))]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith(("PYICEBERG_CATALOG__", "KAFKALOG_")):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))  # no .pyiceberg.yaml there
    warehouse = env["PYICEBERG_CATALOG__KAFKALOG__WAREHOUSE"]
    assert warehouse == "s3://warehouse/iceberg"
    for name in ("records", "ledger", *list(DERIVED_ASSETS)[:2]):
        asset = table_asset(name)
        assert (asset.name, asset.uri) == (f"kafkalog.{name}", f"{warehouse}/kafka/{name}")
    assert not list(tmp_path.glob(".pyiceberg.yaml"))


def test_iceberg_catalog_uri_names_the_postgres_service_and_secrets_from_env(tmp_path):
    from sqlalchemy.engine import make_url

    svc = services()
    raw = catalog_env(env_of(svc["airflow-scheduler"]))
    uri_key = next(k for k in raw if k.endswith("__URI"))
    # user and password are .env variables (required), never literals in compose.yaml
    m = re.fullmatch(r"postgresql\+psycopg2://(\$\{[A-Z_]+:\?[^}]*\}):(\$\{[A-Z_]+:\?[^}]*\})@"
                     r"([a-z0-9-]+):(\d+)/([a-z_][a-z0-9_]*)", raw[uri_key])
    assert m, raw[uri_key]
    user_var, password_var = (compose_variables(m.group(i)) for i in (1, 2))
    assert set(password_var) == {"ICEBERG_DB_PASSWORD"} and set(user_var) == {"ICEBERG_DB_USER"}
    assert read_env_file(ENV_EXAMPLE)["ICEBERG_DB_PASSWORD"] == ""  # gen-env.py fills it
    host, port, database = m.group(3), int(m.group(4)), m.group(5)
    assert host == "postgres" and host in svc and port == 5432
    assert "image" in svc[host] and svc[host]["image"].startswith("postgres:")
    # the catalog's own role and database: not Airflow's
    assert database != svc["postgres"]["environment"]["POSTGRES_DB"]
    values = generated_env(tmp_path)
    url = make_url(interpolate(raw[uri_key], values))
    assert url.username == values["ICEBERG_DB_USER"] != "airflow"
    assert url.password == values["ICEBERG_DB_PASSWORD"] and len(url.password) >= 16
    # airflow-init, which creates that database, starts after postgres is healthy
    assert svc["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        assert svc[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_no_literal_password_or_secret_in_compose():
    """Every password, secret and URL credential in compose.yaml is a ${VARIABLE} from .env."""
    reference = re.compile(r"\$\{[A-Z_][A-Z0-9_]*(?::?[-?][^}]*)?\}")
    for name, s in services().items():
        for key, value in env_of(s).items():
            if re.search(r"PASSWORD|SECRET|FERNET", key):
                assert reference.fullmatch(value), f"{name}: {key} is not from docker/.env"
            for userinfo in re.findall(r"://([^/@\s]+)@", value):
                user, _, password = userinfo.partition(":")
                assert reference.fullmatch(password), f"{name}: {key} has a literal password"


def _init_python(function: str) -> str:
    """The Python that function ``function`` of airflow-init.sh runs (its heredoc)."""
    text = (DOCKER / "airflow-init.sh").read_text()
    m = re.search(rf"^{function}\(\) \{{\n\s*python - <<'PY'\n(.*?)\nPY\n\}}", text, re.S | re.M)
    assert m, f"airflow-init.sh has no function {function} running python"
    return m.group(1)


def _init_env(tmp_path: Path) -> tuple[dict, dict]:
    """airflow-init's environment as compose gives it (values from a fresh gen-env.py), and the
    generated values; without PYICEBERG_*/AIRFLOW* of ours and with no .pyiceberg.yaml around."""
    values = generated_env(tmp_path)
    env = {k: interpolate(v, values) for k, v in env_of(services()["airflow-init"]).items()}
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYICEBERG", "AIRFLOW"))}
    run_env.update(env, PYICEBERG_HOME=str(tmp_path))
    return run_env, values


def _uri_key(env: dict) -> str:
    return next(k for k in catalog_env(env) if k.endswith("__URI"))


def _run_init_step(function: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _init_python(function)], env=env,
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_airflow_init_catalog_step_refuses_what_it_must_not_touch(tmp_path):
    """Refusals that need no server (each exits before connecting): another server than the
    metadata database's, names that would need quoting or are PostgreSQL's own, the admin's
    own account or database; a catalog that is not PostgreSQL has nothing to create."""
    run_env, _ = _init_env(tmp_path)
    key = _uri_key(run_env)
    pg = "postgresql+psycopg2://{}:pw@{}:5432/{}"
    for uri_value, expect, status in (
            (f"sqlite:///{tmp_path}/c.db", "no database to create", 0),
            (pg.format("iceberg", "elsewhere", "iceberg"), "yourself", 1),
            (pg.format("Bad-User", "postgres", "iceberg"), "use lower-case", 1),
            (pg.format("ice\"berg", "postgres", "iceberg"), "use lower-case", 1),
            (pg.format("pg_monitor", "postgres", "iceberg"), "use lower-case", 1),
            (pg.format("iceberg", "postgres", "ice;berg"), "use lower-case", 1),
            (pg.format("airflow", "postgres", "iceberg"), "metadata database's own account", 1),
            (pg.format("iceberg", "postgres", "airflow"), "is not its own", 1),
            (pg.format("iceberg", "postgres", "postgres"), "is not its own", 1),
            ("postgresql+psycopg2://iceberg@postgres:5432/iceberg", "no password", 1)):
        proc = _run_init_step("catalog_database", {**run_env, key: uri_value}, tmp_path)
        assert proc.returncode == status and expect in proc.stdout + proc.stderr, \
            (uri_value, proc.stdout, proc.stderr[-2000:])


# ---- airflow-init's catalog step against a real PostgreSQL server ------------------------------

from tests.postgres import postgres_server  # noqa: E402,F401 - the fixture (tests/postgres.py)


def test_airflow_init_creates_the_catalog_role_and_database_on_a_real_postgres(
        postgres_server, tmp_path):
    """airflow-init's catalog steps (its own Python, compose's environment with the host and
    port of a real server instead of ``postgres:5432``) against PostgreSQL: the role and the
    database are made once, the role's password follows docker/.env on every start, a password
    full of quotes and URL characters works and never reaches the server as text, the SQL
    catalog opens on it and pyiceberg commits through it; and nothing that belongs to someone
    else is taken over."""
    import psycopg2
    from sqlalchemy.engine import make_url

    pg = postgres_server
    run_env, values = _init_env(tmp_path)
    key = _uri_key(run_env)
    compose_admin = make_url(run_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    compose_uri = make_url(run_env[key])
    assert (compose_admin.host, compose_uri.host) == ("postgres", "postgres")
    where = dict(host=pg["host"], port=pg["port"])
    run_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = compose_admin.set(
        password=pg["password"], **where).render_as_string(hide_password=False)
    warehouse = tmp_path / "iceberg"
    catalog = f"PYICEBERG_CATALOG__{run_env['KAFKALOG_CATALOG'].upper()}__"
    run_env[catalog + "WAREHOUSE"] = warehouse.as_uri()  # files local: this checks the catalog
    run_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    role, database = compose_uri.username, compose_uri.database
    hostile = "it's \"a\" @%/:?#; DROP ROLE airflow; -- " + secrets.token_hex(4)

    def with_password(password: str) -> dict:
        uri = compose_uri.set(password=password, **where).render_as_string(hide_password=False)
        return {**run_env, key: uri}

    def step(function: str, env: dict) -> str:
        proc = _run_init_step(function, env, tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        return proc.stdout

    def query(sql: str, params=(), dbname: str = "airflow", fetch: bool = True):
        conn = psycopg2.connect(dbname=dbname, user="airflow", password=pg["password"], **where)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall() if fetch else None
        finally:
            conn.close()

    def can_log_in(password: str) -> bool:
        try:
            psycopg2.connect(dbname=database, user=role, password=password, connect_timeout=5,
                             **where).close()
            return True
        except psycopg2.OperationalError:
            return False

    # the compose password (gen-env.py's), then a new one: the role follows docker/.env
    assert "database iceberg created" in step("catalog_database", with_password(values["ICEBERG_DB_PASSWORD"]))
    assert can_log_in(values["ICEBERG_DB_PASSWORD"])
    env = with_password(hostile)
    assert "kept, password set again" in step("catalog_database", env)
    assert "already there" in step("catalog_database", env)
    assert can_log_in(hostile) and not can_log_in(values["ICEBERG_DB_PASSWORD"])
    assert query("SELECT rolsuper, rolcreatedb, rolcreaterole, rolcanlogin FROM pg_roles "
                 "WHERE rolname = %s", (role,)) == [(False, False, False, True)]
    assert query("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s",
                 (database,)) == [(role,)]
    assert query("SELECT count(*) FROM pg_roles WHERE rolname = 'airflow'") == [(1,)]
    # the server saw the SCRAM verifier only, never the password
    server_log = pg["log"].read_text()
    assert "ALTER ROLE" in server_log and "SCRAM-SHA-256$" in server_log
    assert values["ICEBERG_DB_PASSWORD"] not in server_log and "DROP ROLE" not in server_log

    # the catalog opens as the role (its own tables in its database), the namespace is made
    out = step("open_catalog", env)
    assert f"opened, namespace {run_env['KAFKALOG_NAMESPACE']}" in out and "SqlCatalog" in out
    tables = {r[0] for r in query("SELECT tablename FROM pg_tables WHERE tableowner = %s",
                                  (role,), dbname=database)}
    assert {"iceberg_tables", "iceberg_namespace_properties"} <= tables
    # and the pipeline commits through it: a table made, a run's rows replaced, read back
    code = """
import datetime as dt, json, os, sys
import pyarrow as pa
from spark_jobs import schemas, tables
from spark_jobs.warehouse import Warehouse
wh = Warehouse(sys.argv[1], os.environ["KAFKALOG_CATALOG"], os.environ["KAFKALOG_NAMESPACE"])
row = dict(run_id="r1", check="c", topic="t", partition=0, status="pass", severity="error",
           observed=1, failed=0, details="{}", checked_at=dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc))
for attempt in (1, 2):
    wh.replace_run_rows("dq_results", "r1", pa.Table.from_pylist([row], schemas.DQ_RESULTS))
print("RESULT " + json.dumps({"rows": tables.read_arrow(wh, "dq_results").num_rows,
                              "catalog": type(wh.catalog).__name__}))
"""
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "W")], env=env,
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result == {"rows": 1, "catalog": "SqlCatalog"}
    assert query("SELECT table_namespace, table_name FROM iceberg_tables", dbname=database) \
        == [(run_env["KAFKALOG_NAMESPACE"], "dq_results")]
    assert (warehouse / run_env["KAFKALOG_NAMESPACE"] / "dq_results" / "metadata").is_dir()

    # never taken over: a superuser role, or a database that belongs to another role
    query("CREATE ROLE other_admin SUPERUSER LOGIN", fetch=False)
    query("CREATE DATABASE theirs", fetch=False)
    for uri, expect in ((compose_uri.set(username="other_admin"), "is a superuser"),
                        (compose_uri.set(database="theirs"), "belongs to airflow")):
        proc = _run_init_step("catalog_database", {**run_env, key: uri.set(password="pw", **where)
                                                   .render_as_string(hide_password=False)}, tmp_path)
        assert proc.returncode == 1 and expect in proc.stderr, proc.stdout + proc.stderr[-2000:]
    assert can_log_in(hostile)


def test_depends_on_is_wired_and_acyclic():
    svc = services()
    graph = {}
    for name, s in svc.items():
        deps = s.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        graph[name] = set(deps)
        for dep, spec in deps.items():
            assert dep in svc, f"{name} depends on unknown service {dep}"
            condition = spec.get("condition", "service_started")
            assert condition in DEPENDS_CONDITIONS, (name, dep, condition)
            if condition == "service_healthy":
                assert "healthcheck" in svc[dep], f"{name} waits for {dep} to be healthy; it has no healthcheck"
            if condition == "service_completed_successfully":
                assert str(svc[dep].get("restart", "no")) == "no", f"{dep} is one-shot: restart must be no"
    # the order that matters
    assert svc["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in COMPONENTS:
        assert svc[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert svc["minio-init"]["depends_on"]["minio"]["condition"] == "service_healthy"
    assert "spark-master" in svc["spark-worker"]["depends_on"]
    # no cycle: peel off services whose dependencies are all started
    remaining = dict(graph)
    while remaining:
        ready = [n for n, deps in remaining.items() if not deps & set(remaining)]
        assert ready, f"depends_on cycle among {sorted(remaining)}"
        for n in ready:
            del remaining[n]


def test_long_running_services_have_healthchecks_on_their_own_ports():
    svc = services()
    for name in ("postgres", "minio", "airflow-apiserver", "airflow-scheduler",
                 "airflow-dag-processor", "airflow-triggerer", "spark-master", "spark-worker"):
        test = svc[name].get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), name
    api = argv(svc["airflow-apiserver"]["command"])
    api_port = api[api.index("--port") + 1]
    assert f"http://localhost:{api_port}/api/v2/monitor/health" in " ".join(svc["airflow-apiserver"]["healthcheck"]["test"])
    master = argv(svc["spark-master"]["command"])
    ui_port = master[master.index("--webui-port") + 1]
    assert f"http://localhost:{ui_port}/" in " ".join(svc["spark-master"]["healthcheck"]["test"])
    # the scheduler's health server is on (its healthcheck asks it)
    assert env_of(svc["airflow-scheduler"])["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "True"
    assert "localhost:8974/health" in " ".join(svc["airflow-scheduler"]["healthcheck"]["test"])


def _published(service: dict) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            out[int(port["target"])] = int(port["published"])
        else:
            parts = str(port).split("/")[0].split(":")
            out[int(parts[-1])] = int(parts[-2])
    return out


def test_ui_and_endpoint_ports_are_published_without_clashes():
    svc = services()
    api = argv(svc["airflow-apiserver"]["command"])
    assert int(api[api.index("--port") + 1]) in _published(svc["airflow-apiserver"])
    master = argv(svc["spark-master"]["command"])
    assert int(master[master.index("--port") + 1]) in _published(svc["spark-master"])
    assert int(master[master.index("--webui-port") + 1]) in _published(svc["spark-master"])
    assert 9000 in _published(svc["minio"])
    host_ports = [hp for s in svc.values() for hp in _published(s).values()]
    assert len(host_ports) == len(set(host_ports)), f"a host port is published twice: {host_ports}"
    # workers publish nothing, so --scale spark-worker=N cannot clash
    assert not _published(svc["spark-worker"])


def test_every_compose_variable_is_in_the_env_example_and_gen_env_fills_the_required(tmp_path):
    text = COMPOSE.read_text()
    variables = compose_variables(text)
    example = read_env_file(ENV_EXAMPLE)
    assert set(variables) <= set(example), set(variables) - set(example)
    # the example holds placeholders only: no secret value is committed
    for name, value in example.items():
        if re.search(r"PASSWORD|SECRET|FERNET", name):
            assert value == "", f"{name} has a value in .env.example"
    env = generated_env(tmp_path)
    assert set(env) == set(example)
    required = [n for n, op in variables.items() if op == ":?"]
    assert required
    for name in required:
        assert env[name], f"{name} is required by compose.yaml and still empty"
        assert re.fullmatch(r"[A-Za-z0-9_=-]+", env[name]), f"{name} needs quoting somewhere"
    from cryptography.fernet import Fernet
    Fernet(env["AIRFLOW_FERNET_KEY"].encode())  # raises on a malformed key
    assert len(env["MINIO_ROOT_PASSWORD"]) >= 8 and len(env["KAFKALOG_S3_SECRET_KEY"]) >= 8
    # the whole file interpolates with them, and fails without them
    interpolate(text, env)
    with pytest.raises(KeyError, match="POSTGRES_PASSWORD"):
        interpolate(text, {**env, "POSTGRES_PASSWORD": ""})
    # never overwrites an existing file (Postgres and MinIO already hold those secrets)
    out = tmp_path / "generated.env"
    before = out.read_text()
    proc = subprocess.run([sys.executable, str(DOCKER / "gen-env.py"), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and out.read_text() == before


# ---- Dockerfile ------------------------------------------------------------------------------

def test_dockerfile_stages_base_image_and_copy_sources():
    parsed = stages(parse_dockerfile(DOCKERFILE.read_text()))
    names = set()
    for stage in parsed:
        assert stage["base"] in names or stage["base"] == "python:3.11-slim-bookworm", stage["base"]
        for keyword, rest in stage["body"]:
            if keyword in ("COPY", "ADD"):
                assert keyword == "COPY", "ADD fetches and unpacks: use COPY"
                options, sources, _ = copy_args(rest)
                if "from" in options:
                    assert options["from"] in names, f"COPY --from={options['from']}: no such stage"
                    continue
                assert sources
                for source in sources:
                    assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
        if stage["name"]:
            names.add(stage["name"])
    assert parsed[-1]["base"] == "python:3.11-slim-bookworm"


def _runs(stage) -> str:
    return "\n".join(rest for keyword, rest in stage["body"] if keyword == "RUN")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock() -> dict[str, str]:
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    return dict(ln.split("==", 1) for ln in lines if "==" in ln and not ln.startswith("#"))


def test_dockerfile_installs_from_the_lock_then_the_package_with_every_module():
    parsed = stages(parse_dockerfile(DOCKERFILE.read_text()))
    build = next(s for s in parsed if re.search(r"pip install[^\n]*--no-deps \.", _runs(s)))
    copied, order = set(), []
    for keyword, rest in build["body"]:
        if keyword == "COPY":
            _, sources, _ = copy_args(rest)
            copied |= {s.rstrip("/") for s in sources}
        if keyword == "RUN" and "pip install" in rest:
            order.append((rest, set(copied)))
    deps_run, deps_copied = next((r, c) for r, c in order if "-r requirements.txt" in r)
    assert re.search(r"pip install (.* )?-c requirements\.lock (.* )?-r requirements\.txt", deps_run)
    assert {"requirements.txt", "requirements.lock"} <= deps_copied
    locked = {_norm(name) for name in _lock()}
    for extra in re.findall(r"-r (\S+)", deps_run):
        assert (ROOT / extra).is_file(), extra
        for line in (ROOT / extra).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                name = _norm(re.match(r"[A-Za-z0-9._-]+", line).group())
                assert name in locked or "==" in line, f"{extra}: {line} is neither locked nor pinned"
    pkg_run, pkg_copied = next((r, c) for r, c in order if "--no-deps ." in r)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # a package's folder (a subpackage travels with its parent's folder): the patterns
    # setuptools finds the packages by
    packages = {p.split(".")[0] for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages == {"kafkalog", "spark_jobs", "kafkalog_pipeline", "expectations"}
    needed = packages | {"pyproject.toml", "setup.py", project["project"]["readme"]}
    assert needed <= pkg_copied, f"not copied before pip install .: {needed - pkg_copied}"
    # the compiled path must really be there (setup.py would silently fall back)
    assert "import kafkalog._speedups" in pkg_run
    assert re.search(r"apt-get install[^\n]* gcc", _runs(build))


def test_dockerfile_keeps_the_pyspark_client_guard_and_the_lock_pins_both_alike():
    text = DOCKERFILE.read_text()
    makefile = (ROOT / "Makefile").read_text()
    guard = "pyspark.__version__ == m.version('pyspark') == m.version('pyspark-client')"
    assert guard in makefile.replace("\\\n\t\t", "")
    final = stages(parse_dockerfile(text))[-1]
    assert guard in _runs(final), "the final image must check pyspark against pyspark-client"
    lock = _lock()
    assert lock["pyspark"] == lock["pyspark-client"]


def test_dockerfile_runtime_has_java_17_pyspark_python_and_airflow_layout():
    parsed = stages(parse_dockerfile(DOCKERFILE.read_text()))
    final = parsed[-1]
    runs = _runs(final)
    assert re.search(r"apt-get install[^\n]*\bopenjdk-17-jre-headless\b", runs)
    env = stage_env(final)
    # PYSPARK_PYTHON is the python of the venv the build stage made and the final stage copied
    venvs = set(re.findall(r"python -m venv (\S+)", "\n".join(_runs(s) for s in parsed)))
    copied_venvs = {dest.rstrip("/") for k, r in final["body"] if k == "COPY"
                    for opts, srcs, dest in [copy_args(r)] if "from" in opts}
    venv = (venvs & copied_venvs).pop()
    assert env["PYSPARK_PYTHON"] == f"{venv}/bin/python"
    assert env["PATH"].startswith(f"{venv}/bin:")
    for name in SPARK_SERVICES | AIRFLOW_SERVICES:
        assert env_of(services()[name])["PYSPARK_PYTHON"] == env["PYSPARK_PYTHON"], name
    # dags and plugins where Airflow looks by default; the jobs beside them
    home = env["AIRFLOW_HOME"]
    dests = {}
    for keyword, rest in final["body"]:
        if keyword == "COPY":
            opts, sources, dest = copy_args(rest)
            for source in sources:
                dests[source.rstrip("/")] = dest.rstrip("/")
    assert dests["dags"] == f"{home}/dags"
    assert dests["plugins"] == f"{home}/plugins"
    assert dests["spark_jobs"] == f"{home}/spark_jobs"
    assert dests["expectations"] == f"{home}/expectations"
    # the DAGs find the job scripts through KAFKALOG_SPARK_JOBS_DIR
    assert env_of(services()["airflow-scheduler"])["KAFKALOG_SPARK_JOBS_DIR"] == dests["spark_jobs"]
    # airflow-init (the compose command) is the script, on PATH
    assert dests["docker/airflow-init.sh"] == "/usr/local/bin/airflow-init"
    assert argv(services()["airflow-init"]["command"]) == ["airflow-init"]
    # every container starts through the entrypoint script
    entrypoint = [json.loads(r) for k, r in final["body"] if k == "ENTRYPOINT"][-1]
    assert entrypoint == [dests["docker/entrypoint.sh"]]
    assert any(k == "USER" and r not in ("root", "0") for k, r in final["body"]), "runs as root"


def test_dockerignore_keeps_local_artifacts_out_and_every_copied_file_in():
    patterns = dockerignore_patterns()
    for path in (".venv/bin/python", "demo-output/orders-0/00000000000000000000.log",
                 "build/lib.linux-x86_64-cpython-311/kafkalog/x.py", "bench/out/run.json",
                 "kafkalog/_speedups.cpython-311-x86_64-linux-gnu.so", "kafkalog/_speedups.c",
                 ".git/HEAD", "docker/.env", "kafkalog/__pycache__/reader.cpython-311.pyc",
                 "kafkalog.egg-info/PKG-INFO"):
        assert ignored(path, patterns), f"{path} would be sent to the build"
    sources = []
    for stage in stages(parse_dockerfile(DOCKERFILE.read_text())):
        for keyword, rest in stage["body"]:
            if keyword == "COPY":
                opts, srcs, _ = copy_args(rest)
                if "from" not in opts:
                    sources += [s.rstrip("/") for s in srcs]
    files = subprocess.run(["git", "ls-files", "--", *sources], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    assert {"setup.py", "kafkalog/_speedups.pyx", "requirements.lock"} <= set(files)
    kept_out = [f for f in files if ignored(f, patterns)]
    assert not kept_out, f"COPY'd but excluded by .dockerignore: {kept_out[:10]}"


def test_dockerignore_matcher_follows_dockers_rules():
    # the checks above are only as good as this matcher
    assert ignored("a.so", ["*.so"]) and not ignored("kafkalog/a.so", ["*.so"])
    assert ignored("kafkalog/a.so", ["**/*.so"]) and ignored("a.so", ["**/*.so"])
    assert ignored("build/x/y.py", ["build"]) and not ignored("kafkalog/build.py", ["build"])
    assert not ignored("docs/keep.md", ["docs", "!docs/keep.md"])


# ---- the commands are real -------------------------------------------------------------------

def test_airflow_commands_parse_with_this_airflows_cli_and_options_exist(tmp_path):
    svc = services()
    commands = [argv(svc[name]["command"])[1:] for name in COMPONENTS]
    assert [c[0] for c in commands] == list(COMPONENTS.values())
    for s in svc.values():
        test = (s.get("healthcheck") or {}).get("test") or []
        if test[1:2] == ["airflow"]:
            commands.append(test[2:])
    init = init_script_airflow_commands()
    assert ["db", "migrate"] in init
    commands += init
    options = sorted({k for name in AIRFLOW_SERVICES for k in env_of(svc[name])
                      if k.startswith("AIRFLOW__")})
    env = env_of(svc["airflow-scheduler"])
    code = f"""
import importlib, json
from airflow.cli.cli_parser import get_parser
from airflow.configuration import retrieve_configuration_description
from airflow.api_fastapi.core_api.routes.public import public_router
bad = []
for cmd in {commands!r}:
    try:
        get_parser().parse_args(cmd)
    except SystemExit as exc:
        bad.append([cmd, exc.code])
reference = retrieve_configuration_description(include_providers=True)
unknown = []
for name in {options!r}:
    _, section, key = name.split("__", 2)
    if key.lower() not in reference.get(section.lower(), {{}}).get("options", {{}}):
        unknown.append(name)
module, _, cls = {env["AIRFLOW__CORE__AUTH_MANAGER"]!r}.rpartition(".")
getattr(importlib.import_module(module), cls)
routes = [r.path for r in public_router.routes]
print("RESULT " + json.dumps({{"bad": bad, "unknown": unknown, "routes": routes}}))
"""
    result = run_python(code, clean_airflow_env(tmp_path))
    assert result["bad"] == []
    assert result["unknown"] == []
    assert "/api/v2/monitor/health" in result["routes"]


def test_airflow_component_commands_run_with_help(tmp_path):
    env = clean_airflow_env(tmp_path)
    procs = {cmd: subprocess.Popen([str(VENV_BIN / "airflow"), *cmd.split(), "--help"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for cmd in [*COMPONENTS.values(), "db migrate"]}
    for cmd, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out[-2000:]
        assert f"usage: airflow {cmd}" in out.lower(), out[:500]


def test_entrypoint_keeps_an_explicit_spark_local_ip_and_never_picks_loopback():
    import socket

    script = str(DOCKER / "entrypoint.sh")
    show = ["python", "-c", "import os, sys; print(repr(os.environ.get('SPARK_LOCAL_IP')), sys.argv[1:])",
            "a b", "c"]
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    own = socket.gethostbyname(socket.gethostname())
    out = subprocess.run(["bash", script, *show], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    expected = None if own.startswith("127.") else own  # in a container: its network address
    assert out == f"{expected!r} ['a b', 'c']"
    out = subprocess.run(["bash", script, *show], env={**env, "SPARK_LOCAL_IP": "10.1.2.3"},
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert out == "'10.1.2.3' ['a b', 'c']"
    # the command's exit status is the container's
    assert subprocess.run(["bash", script, "sh", "-c", "exit 7"], env=env, timeout=60).returncode == 7


def _pyspark_home() -> Path:
    import importlib.util
    return Path(importlib.util.find_spec("pyspark").origin).parent


def test_spark_commands_name_classes_that_exist_in_pyspark():
    svc = services()
    master, worker = argv(svc["spark-master"]["command"]), argv(svc["spark-worker"]["command"])
    home = _pyspark_home()
    assert master[0] == worker[0] == "spark-class"
    assert (home / "bin" / "spark-class").is_file() and (VENV_BIN / "spark-class").is_file()
    assert master[1] == "org.apache.spark.deploy.master.Master"
    assert worker[1] == "org.apache.spark.deploy.worker.Worker"
    entries = set()
    for jar in (home / "jars").glob("spark-*.jar"):
        with zipfile.ZipFile(jar) as z:
            entries.update(z.namelist())
    for cls in (master[1], worker[1]):
        assert cls.replace(".", "/") + ".class" in entries, cls
    # the worker and Airflow's spark_default both go to the master's advertised address
    host, port = master[master.index("--host") + 1], master[master.index("--port") + 1]
    assert svc["spark-master"].get("hostname", "spark-master") == host and host in svc
    url = f"spark://{host}:{port}"
    assert worker[2] == url
    assert env_of(svc["airflow-init"])["KAFKALOG_SPARK_MASTER"] == url


@pytest.mark.slow
def test_airflow_init_migrates_and_creates_connections_the_provider_resolves(tmp_path):
    """Run docker/airflow-init.sh twice (a restart) with airflow-init's compose environment,
    on SQLite instead of Postgres (no Postgres driver or server here)."""
    svc = services()
    values = generated_env(tmp_path)
    env = {k: interpolate(v, values) for k, v in env_of(svc["airflow-init"]).items()}
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{tmp_path}/airflow.db"
    # the Iceberg catalog on SQLite as well (its PostgreSQL step: test_airflow_init_creates_...)
    catalog = f"PYICEBERG_CATALOG__{env['KAFKALOG_CATALOG'].upper()}__"
    env[catalog + "URI"] = f"sqlite:///{tmp_path}/catalog.db"
    env[catalog + "WAREHOUSE"] = f"file://{tmp_path}/iceberg"
    run_env = clean_airflow_env(tmp_path, env)
    for attempt in (1, 2):
        proc = subprocess.run(["bash", str(DOCKER / "airflow-init.sh")], env=run_env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"run {attempt}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        assert "no database to create" in proc.stdout and "opened, namespace kafka" in proc.stdout
    code = """
import json, os
from sqlalchemy import select
from airflow.models.connection import Connection
from airflow.utils.session import create_session
conns = {}
with create_session() as session:
    for c in session.scalars(select(Connection)):
        conns[c.conn_id] = {"conn_type": c.conn_type, "host": c.host, "port": c.port,
                            "login": c.login, "password": c.password, "extra": c.extra_dejson}
spark = conns["spark_default"]
os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({k: spark[k] for k in ("conn_type", "host", "port", "extra")})
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
resolved = SparkSubmitHook(conn_id="spark_default")._connection
from pyiceberg.catalog import load_catalog
catalog = load_catalog(os.environ["KAFKALOG_CATALOG"])
print("RESULT " + json.dumps({"conns": conns, "spark": resolved,
                              "catalog": [type(catalog).__name__, catalog.list_namespaces()]}))
"""
    result = run_python(code, run_env)
    # the catalog airflow-init opened has its tables and the pipeline's namespace
    assert result["catalog"] == ["SqlCatalog", [[env["KAFKALOG_NAMESPACE"]]]]
    worker = argv(svc["spark-worker"]["command"])
    assert result["spark"]["master"] == worker[2]
    assert result["spark"]["deploy_mode"] == "client"
    aws = result["conns"]["aws_default"]
    assert aws["conn_type"] == "aws"
    assert aws["extra"]["endpoint_url"] == env["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert aws["login"] == values["KAFKALOG_S3_ACCESS_KEY"]
    assert aws["password"] == values["KAFKALOG_S3_SECRET_KEY"]
