"""A commit whose answer was lost (issue 47): the catalog took it, and the job never heard.

The catalog's own commit (``SqlCatalog.commit_table``: the database's UPDATE and COMMIT)
runs to the end, and then the job gets the error a dropped connection gives
(``sqlalchemy.exc.OperationalError``, as psycopg2 raises "server closed the connection
unexpectedly"): at each kind of commit a night makes — a staged commit of ``records``,
the ``txn_state`` rewrite, the per-key refresh of a ``latest__`` table, publish's
fast-forward of ``main``. Each time the job (or publish) fails loudly, saying the commit
landed; every file any snapshot of any table references still exists (the bug: the
refresh deleted its new state files as "uncommitted" while the live snapshot named them);
and the retries end in tables equal to independent replays: ``latest__`` as
``test_latest_tables.replay`` of what the test wrote, ``records`` as the keys
``kafkalog.decode`` finds in the segment files on their own — lost 0, duplicated 0.

Once with the embedded SQLite catalog, the fault injected in the process
(:func:`answer_lost`); once against a real PostgreSQL server (tests/postgres.py), the
answer dropped by a TCP proxy in the test (:class:`CommitCutter`), the job meeting
psycopg2's own error.
"""

from __future__ import annotations

import contextlib
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs import layout, schemas
from spark_jobs.warehouse import CommitFailed, Warehouse, branch_name, run_files_prefix
from spark_jobs.warehouse.commits import Rewrite
from spark_jobs.warehouse.history import live_files

from tests.postgres import postgres_server  # noqa: F401 - the fixture (tests/postgres.py)
from tests.spark_jobs.faults import lost_and_duplicated, published, truth
from tests.spark_jobs.keyed_nights import TABLE, decode_night, replay, table_state, write_nights

pytestmark = pytest.mark.pipeline

RUN = "night-2"


# ------------------------------------------------------------ which commit, and the fault
def summary_of(updates) -> dict:
    """The summary of the snapshot a commit adds ({} where it adds none)."""
    from pyiceberg.table.update import AddSnapshotUpdate

    for u in updates:
        if isinstance(u, AddSnapshotUpdate):
            return dict(u.snapshot.summary.additional_properties)
    return {}


def moves_main(updates) -> bool:
    from pyiceberg.table.update import SetSnapshotRefUpdate

    return any(isinstance(u, SetSnapshotRefUpdate) and u.ref_name == "main" for u in updates)


#: each kind of commit a night and its publish make: (which table, is it this commit)
COMMITS = {
    "staged": ("records", lambda u: summary_of(u).get("kafkalog.stage") == "staged"
               and "kafkalog.step" not in summary_of(u)),
    "txn_state": ("records", lambda u: summary_of(u).get("kafkalog.step") == "txn_state"),
    "refresh": (TABLE, lambda u: summary_of(u).get("kafkalog.step") == layout.LATEST),
    "fast-forward": ("records", moves_main),
}


@contextlib.contextmanager
def answer_lost(kind: str):
    """The first catalog commit of ``kind`` (:data:`COMMITS`) from now lands, then its
    answer is lost. Yields the list of commits it cut (one, where it came)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import OperationalError

    name, chosen = COMMITS[kind]
    original, cut = SqlCatalog.commit_table, []

    def commit_table(self, table, requirements, updates):
        response = original(self, table, requirements, updates)
        if not cut and table.name()[-1] == name and chosen(updates):
            cut.append((name, kind))
            raise OperationalError("COMMIT", {}, Exception(
                "server closed the connection unexpectedly"))
        return response

    SqlCatalog.commit_table = commit_table
    try:
        yield cut
    finally:
        SqlCatalog.commit_table = original


# ------------------------------------------------------------ what must hold after each
def missing_files(wh: str) -> list[str]:
    """Every file a snapshot of a table of ``wh`` references (manifest list, manifests,
    live data files) that does not exist."""
    w = Warehouse(wh)
    out = []

    def gone(uri: str) -> bool:
        return not os.path.exists(uri[len("file://"):] if uri.startswith("file://") else uri)

    for name in sorted(w.table_names()):
        t = w.load(name)
        for snap in t.metadata.snapshots:
            if gone(snap.manifest_list):
                out.append(snap.manifest_list)
                continue
            out += [m.manifest_path for m in snap.manifests(t.io) if gone(m.manifest_path)]
            out += [f.file_path for f in live_files(t, snap.snapshot_id) if gone(f.file_path)]
    return sorted(set(out))


def fails_loudly_and_keeps_every_file(wh: str, kind: str, step, fault) -> None:
    with fault(kind) as cut, pytest.raises(CommitFailed) as failed:
        step()
    assert cut, f"no {kind} commit came"
    assert failed.value.outcome == "committed", kind  # read back: it landed
    assert "OperationalError" in str(failed.value), kind
    assert missing_files(wh) == [], kind


def night_with_every_commit_answer_lost(spark, tmp_path, wh: str, fault=answer_lost) -> None:
    """Night 1 published; night 2 fails at its staged commit, at its txn_state rewrite and
    at its refresh (each retried, as Airflow retries the task), then decodes; its publish
    fails at the fast-forward and is retried; ``fault(kind)``: how an answer is lost. The
    module's text says what must hold."""
    n1, n2, e1, e2 = write_nights(tmp_path)
    decode_night(spark, n1, wh, "night-1", "2025-11-21")
    for kind in ("staged", "txn_state", "refresh"):
        fails_loudly_and_keeps_every_file(
            wh, kind, lambda: decode_night(spark, n2, wh, RUN, "2025-11-22", "--no-publish"), fault)
        assert table_state(wh) == replay(e1), kind  # main: night 1's state, whole
    decode_night(spark, n2, wh, RUN, "2025-11-22", "--no-publish")
    fails_loudly_and_keeps_every_file(wh, "fast-forward", lambda: Warehouse(wh).publish(RUN),
                                      fault)
    Warehouse(wh).publish(RUN)  # the publish task's retry
    assert missing_files(wh) == []
    assert table_state(wh) == replay(e2)
    t = Warehouse(wh).load(TABLE)
    assert t.snapshot_by_name(layout.night_tag("2025-11-22")).snapshot_id == \
        t.current_snapshot().snapshot_id
    assert lost_and_duplicated(truth(n2), published(wh)) == (0, 0)
    assert set(published(wh)) == truth(n2)


def test_a_night_whose_commit_answers_are_lost_keeps_its_files_and_converges(spark, tmp_path):
    night_with_every_commit_answer_lost(spark, tmp_path, str(tmp_path / "wh"))


# ------------------------------------------------------------ the rewrite's own files
def staged_records(wh: Warehouse, run_id: str) -> str:
    """A run's branch of ``records`` holding one file of 3 rows; returns its URI."""
    wh.begin_run(run_id, reset=True, names=("records",))
    return write_records(wh, run_id, "p0.parquet", [0, 1, 2], commit=True)


def write_records(wh: Warehouse, run_id: str, name: str, offsets, *, commit=False) -> str:
    n = len(offsets)
    cols = {f.name: pa.nulls(n, f.type) for f in schemas.TABLES["records"]}
    cols.update(topic=pa.array(["orders"] * n), partition=pa.array([0] * n, pa.int32()),
                offset=pa.array(offsets, pa.int64()), run_id=pa.array([run_id] * n),
                dt=pa.array(["none"] * n))
    uri = f"{wh.data_root('records')}/topic=orders/dt=none/{run_files_prefix(run_id)}{name}"
    path = uri[len("file://"):]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(cols, schema=schemas.TABLES["records"]), path)
    if commit:
        wh.commit_files("records", run_id, [uri])
    return uri


@pytest.mark.parametrize("landed", [True, False])
def test_a_rewrite_deletes_its_files_only_where_its_commit_is_known_not_to_have_landed(
        tmp_path, landed):
    """``Warehouse.commit_rewrite`` (the per-key and txn_state rewrites' one mechanism):
    the commit's answer lost after it landed, the new file stays and is live; the
    connection lost before it landed, the table read back shows no such snapshot and the
    new file is deleted. Both fail loudly; a commit refused (the branch moved) is planned
    again at the new head."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import OperationalError

    wh = Warehouse(str(tmp_path / "wh"))
    old = staged_records(wh, "r")
    heads, written = [], []

    def plan(head, attempt):
        heads.append(head)
        written.append(write_records(wh, "r", f"p0~rw{attempt}.parquet", [0, 1, 2, 3]))
        if attempt == 0:  # another writer of the branch came first: refused, planned again
            wh.add_files("records", "r", [write_records(wh, "r", "p1.parquet", [9])])
        return Rewrite([old], [written[-1]], {"kafkalog.step": "test"}, result="done")

    original = SqlCatalog.commit_table

    def commit_table(self, table, requirements, updates):
        if not summary_of(updates).get("kafkalog.step") == "test":
            return original(self, table, requirements, updates)
        if landed:
            original(self, table, requirements, updates)
        raise OperationalError("COMMIT", {}, Exception("server closed the connection"))

    SqlCatalog.commit_table = commit_table
    try:
        with pytest.raises(CommitFailed) as failed:
            wh.commit_rewrite("records", "r", plan)
    finally:
        SqlCatalog.commit_table = original
    assert failed.value.outcome == ("committed" if landed else "not committed")
    assert len(heads) == 2 and heads[0] != heads[1]  # planned again at the new head
    assert not os.path.exists(written[0][len("file://"):])  # the refused try's file went
    t = wh.table("records")
    live = {f.file_path for f in live_files(t, t.refs()[branch_name("r")].snapshot_id)}
    assert (written[1] in live) is landed
    assert os.path.exists(written[1][len("file://"):]) is landed
    assert (old in live) is not landed
    assert missing_files(wh.root) == []


# ------------------------------------------------------------ the same on PostgreSQL
class CommitCutter:
    """A TCP proxy in front of a PostgreSQL server on 127.0.0.1 that, once armed with a
    table's name, lets the next transaction that UPDATEs that table's row of pyiceberg's
    ``iceberg_tables`` run, forwards its COMMIT, reads the server's answer (the commit
    landed) and drops it, then closes both sides: the client sees the connection cut.

    It reads the client's side of PostgreSQL's frontend/backend protocol 3.0
    (postgresql.org/docs/current/protocol-message-formats.html): the untyped startup
    message (an SSLRequest 80877103 or GSSENCRequest 80877104 comes before it), then
    messages of a type byte and a big-endian int32 length that counts itself; psycopg2
    sends its statements, parameters interpolated, as simple ``Q`` (Query) messages, its
    ``BEGIN`` and ``COMMIT`` too."""

    REQUESTS = (80877103, 80877104)

    def __init__(self, port: int):
        import socket
        import threading

        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed: str | None = None
        self.cut: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client) -> None:
        import socket
        import threading

        server = socket.create_connection(self.upstream)
        dropping, answered = threading.Event(), threading.Event()

        def answers():
            while True:
                try:
                    data = server.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    break
                if dropping.is_set():
                    answered.set()  # the COMMIT's answer: read, not passed on
                    continue
                try:
                    client.sendall(data)
                except OSError:
                    break
            answered.set()
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=answers, daemon=True).start()
        buf, started, updating = b"", False, None
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    return
                buf += data
                out = b""
                while True:
                    if not started:  # int32 length (itself included), int32 code, ...
                        if len(buf) < 8 or len(buf) < int.from_bytes(buf[:4], "big"):
                            break
                        n = int.from_bytes(buf[:4], "big")
                        started = int.from_bytes(buf[4:8], "big") not in self.REQUESTS
                        out, buf = out + buf[:n], buf[n:]
                        continue
                    if len(buf) < 5 or len(buf) < 1 + int.from_bytes(buf[1:5], "big"):
                        break
                    n = 1 + int.from_bytes(buf[1:5], "big")
                    msg, buf = buf[:n], buf[n:]
                    if msg[:1] == b"Q":
                        text = msg[5:-1].decode("utf-8", "replace")
                        with self.lock:
                            armed = self.armed
                        if armed and text.lstrip().upper().startswith("UPDATE ICEBERG_TABLES") \
                                and f"table_name = '{armed}'" in text:
                            updating = armed
                        elif updating and text.strip().upper() == "COMMIT":
                            dropping.set()
                            server.sendall(out + msg)
                            answered.wait(30)
                            with self.lock:
                                self.cut.append(updating)
                                self.armed = None
                            return
                    out += msg
                if out:
                    server.sendall(out)
        except OSError:
            return
        finally:
            for s in (client, server):
                with contextlib.suppress(OSError):
                    s.close()


@contextlib.contextmanager
def answer_dropped(cutter: CommitCutter, kind: str):
    """Arm ``cutter`` as the first catalog commit of ``kind`` (:data:`COMMITS`) from now
    begins: its transaction runs for real through the proxy, which cuts it after the
    COMMIT. Yields the tables cut."""
    from pyiceberg.catalog.sql import SqlCatalog

    name, chosen = COMMITS[kind]
    original, begun = SqlCatalog.commit_table, []

    def commit_table(self, table, requirements, updates):
        if not begun and table.name()[-1] == name and chosen(updates):
            begun.append(kind)
            with cutter.lock:
                cutter.armed = name
        return original(self, table, requirements, updates)

    SqlCatalog.commit_table = commit_table
    try:
        yield cutter.cut
    finally:
        SqlCatalog.commit_table = original
        with cutter.lock:
            cutter.armed = None


def test_the_same_night_on_postgresql_with_a_proxy_that_drops_each_commits_answer(
        spark, tmp_path, postgres_server):
    """The night of :func:`night_with_every_commit_answer_lost` with the catalog on a real
    PostgreSQL server reached through :class:`CommitCutter`: the job meets psycopg2's own
    "server closed the connection unexpectedly" after each chosen COMMIT landed."""
    import psycopg2

    from spark_jobs.warehouse.catalog import embedded_config, write_config

    pg = postgres_server
    admin = {k: pg[k] for k in ("host", "port", "user", "password")}
    conn = psycopg2.connect(dbname="postgres", **admin)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE lost_commits")
    conn.close()
    cutter = CommitCutter(pg["port"])
    wh = str(tmp_path / "wh")
    uri = (f"postgresql+psycopg2://{pg['user']}:{pg['password']}@127.0.0.1:{cutter.port}/"
           "lost_commits?sslmode=disable&gssencmode=disable")
    write_config(wh, "kafkalog", {**embedded_config(wh), "uri": uri})

    try:
        night_with_every_commit_answer_lost(spark, tmp_path, wh,
                                            lambda kind: answer_dropped(cutter, kind))
    finally:
        cutter.close()
    assert cutter.cut == ["records", "records", TABLE, "records"]
