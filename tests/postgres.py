"""A throwaway PostgreSQL server for tests (the docker stack's catalog database, and the
Iceberg catalog the fault tests commit through): :func:`postgres_server`, a fixture; a
test module imports it (``from postgres import postgres_server``).

The server's binaries are the machine's (``initdb`` and ``postgres`` on PATH, else
Debian's ``/usr/lib/postgresql/<version>/bin``: ``apt-get install postgresql``); without
them the tests that ask for it are skipped.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def postgres_bindir() -> Path | None:
    """The folder of a PostgreSQL server's initdb and postgres (PATH, else Debian's layout)."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    return next((d for d in candidates if (d / "initdb").exists() and (d / "postgres").exists()),
                None)


@pytest.fixture
def postgres_server():
    """A throwaway PostgreSQL server on 127.0.0.1 (a free port), its data in a temp dir, with the
    postgres image's setup: superuser ``airflow`` with a password (SCRAM over TCP) and database
    ``airflow``. Started as the ``postgres`` user when running as root (the server refuses
    root), stopped by its pid (fast shutdown), its folder removed."""
    import pwd

    psycopg2 = pytest.importorskip("psycopg2", reason="no psycopg2 (requirements.txt has it)")
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server (initdb, postgres) on this machine")
    prefix: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="kafkalog-pg-"))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base)
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        os.chown(base, user.pw_uid, user.pw_gid)
        prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    password = secrets.token_urlsafe(16)
    pwfile = base / "pw"
    pwfile.write_text(password + "\n")
    if prefix:
        os.chown(pwfile, user.pw_uid, user.pw_gid)
    data, log = base / "data", base / "server.log"
    proc = None
    try:
        init = subprocess.run(prefix + [str(bindir / "initdb"), "-D", str(data), "-U", "airflow",
                                        f"--pwfile={pwfile}", "--auth-local=trust",
                                        "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"],
                              capture_output=True, text=True, timeout=120)
        assert init.returncode == 0, init.stdout + init.stderr
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(log, "w") as out:
            # every statement logged: the test reads the log for the catalog's password
            proc = subprocess.Popen(prefix + [str(bindir / "postgres"), "-D", str(data),
                                              "-p", str(port), "-k", str(base),
                                              "-c", "listen_addresses=127.0.0.1",
                                              "-c", "fsync=off", "-c", "log_statement=all"],
                                    stdout=out, stderr=subprocess.STDOUT)
        admin = dict(host="127.0.0.1", port=port, user="airflow", password=password)
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = psycopg2.connect(dbname="postgres", connect_timeout=5, **admin)
                break
            except psycopg2.OperationalError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.3)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE airflow")  # the image's POSTGRES_DB
        conn.close()
        yield {**admin, "log": log}
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(base, ignore_errors=True)
