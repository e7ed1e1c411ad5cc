"""Breaking the write -> audit -> publish path on purpose, and counting what it costs.

Each test injects a fault (a process that dies at a commit point of a run or of its
publish, a reader during publish, two runs at once outside Airflow, a rerun,
unparsable names) and counts the (topic, partition, offset) keys lost and
duplicated in the published ``records`` table against the snapshot's truth,
decoded from the segment files on their own with ``kafkalog.decode``.

A crash is the catalog commit that never happens: ``pyiceberg``'s
``Table._do_commit`` (every catalog write goes through it) raises at the n-th
call, as a process killed there would leave things; what ran before it stays
(tests/spark_jobs/faults.py, shared with the other fault tests). The snapshots are
tests/snapshots.py's numbered ones.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException

from spark_jobs import publish, schemas, tables
from spark_jobs.warehouse import ConflictError, NotAudited, Warehouse, branch_name, run_files_prefix
from spark_jobs.warehouse._pyiceberg import STALE_SEQUENCE
from spark_jobs.warehouse.history import live_files, main_history
from spark_jobs.warehouse.naming import PUBLISHING
from spark_jobs.warehouse.snapshots import adding_snapshot

from tests.runs import decode
from tests.snapshots import numbered
from tests.spark_jobs.faults import Crash, crash_at_commit, lost_and_duplicated, published, staged_run, truth

pytestmark = pytest.mark.pipeline


def commits_of(fn) -> int:
    """How many catalog commits ``fn()`` makes."""
    with crash_at_commit(None) as count:
        fn()
    return count[0]


# ------------------------------------------------------------ a run dies at a commit point
def test_a_decode_killed_at_any_commit_point_then_rerun_loses_and_duplicates_nothing(spark, tmp_path):
    src = numbered(tmp_path / "snap")
    want = truth(src)
    n = commits_of(lambda: decode(spark, src, tmp_path / "probe", "night-1", "--no-publish"))
    assert n >= 2 * len(schemas.DECODE_TABLES)  # a branch and a commit per table at least
    for k in range(n):
        wh = tmp_path / f"wh-{k}"
        with pytest.raises(Crash), crash_at_commit(k):
            decode(spark, src, wh, "night-1", "--no-publish")
        assert published(wh) == Counter(), k  # nothing reaches main before publish
        decode(spark, src, wh, "night-1", "--no-publish")  # the task's retry
        publish.publish(str(wh), "night-1")
        assert lost_and_duplicated(want, published(wh)) == (0, 0), k
        assert set(published(wh)) == want


def test_a_publish_killed_at_any_commit_point_then_retried_converges(tmp_path):
    rows = {0: range(0, 10), 1: range(0, 7)}
    want = {("orders", p, o) for p, r in rows.items() for o in r}
    probe = Warehouse(str(tmp_path / "probe"))
    staged_run(probe, "r", rows)
    n = commits_of(lambda: probe.publish("r"))
    # one commit per table, its branch dropped (where the run wrote: records, ledger, with
    # main fast-forwarded to its head; the first also sets the marker), the marker gone
    assert n == len(schemas.DECODE_TABLES) + 1
    for k in range(n):
        wh = Warehouse(str(tmp_path / f"wh-{k}"))
        staged_run(wh, "r", rows)
        with pytest.raises(Crash), crash_at_commit(k):
            wh.publish("r")
        got = published(wh.root)
        assert got in (Counter(), Counter(want)), k  # a table shows all of the run or none
        wh.publish("r")  # Airflow's retry of the publish task
        assert lost_and_duplicated(want, published(wh.root)) == (0, 0), k
        assert set(published(wh.root)) == want
        for name in schemas.DECODE_TABLES:
            t = wh.table(name)
            assert list(t.refs()) == ["main"], (k, name)  # no branch left behind
            assert not [p for p in t.properties if p.startswith(PUBLISHING)]


def test_publish_with_the_audit_required_takes_only_what_the_audit_read(tmp_path):
    """The DAG publishes with the audit required: a run written again after its audit
    (a rerun of the decode task, a manual spark-submit with the same run id) is refused
    until it is audited again, also where a publish crashed part-way in between."""
    from spark_jobs.audit.inputs import audited_snapshots
    from spark_jobs.audit import results

    def audit(wh, run_id):
        results.write(wh, run_id, [], audited={n: s for n, (_, s) in
                                               audited_snapshots(wh, run_id).items()})

    wh = Warehouse(str(tmp_path / "wh"))
    staged_run(wh, "r", {0: range(0, 10)})
    with pytest.raises(NotAudited, match="no audit"):
        wh.publish("r", audited=True)
    audit(wh, "r")
    staged_run(wh, "r", {0: range(0, 12)})  # written again after the audit
    with pytest.raises(NotAudited, match="written again after its audit"):
        publish.publish(str(wh.root), "r", audited=True)
    with pytest.raises(SystemExit):  # the command line says so and exits 1
        publish.main(["--warehouse", str(wh.root), "--run-id", "r", "--require-audit"])
    assert published(wh.root) == Counter()
    audit(wh, "r")
    # commit 0 puts records on main, commit 4 the ledger: a crash at 2 leaves it behind
    with pytest.raises(Crash), crash_at_commit(2):
        wh.publish("r", audited=True)
    wh.publish("r", audited=True)  # the retry: the ledger's branch is still the audited one
    assert set(published(wh.root)) == {("orders", 0, o) for o in range(12)}


def test_a_publish_killed_part_way_is_completed_by_the_next_night(spark, tmp_path):
    """The publish dies after ``records`` reached main and before the ledger did, and
    nobody retries it: the next night, over an overlapping snapshot, completes it first
    instead of decoding the same segments again (it would duplicate them)."""
    night1 = numbered(tmp_path / "n1", batches=3)
    night2 = numbered(tmp_path / "n2", batches=5)  # the same segments, grown
    wh = tmp_path / "wh"
    decode(spark, night1, wh, "night-1", "--no-publish")
    records_done = 1  # the publish marker and records' fast-forward: the first commit
    with pytest.raises(Crash), crash_at_commit(records_done):
        publish.publish(str(wh), "night-1")
    assert set(published(wh)) == truth(night1)  # records are there, the ledger is not
    assert tables.read_arrow(str(wh), "ledger").num_rows == 0
    s = decode(spark, night2, wh, "night-2")
    assert s["actions"] == {"resumed": 2}  # night 1's ledger was published first
    assert lost_and_duplicated(truth(night2), published(wh)) == (0, 0)


# ------------------------------------------------------------ readers during publish
def test_a_reader_during_publish_sees_none_or_all_of_the_run(tmp_path):
    wh = Warehouse(str(tmp_path / "wh"))
    staged_run(wh, "night-1", {0: range(0, 50)})
    wh.publish("night-1")
    staged_run(wh, "night-2", {0: range(50, 80), 1: range(0, 40)})
    seen, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            seen.append((tables.read_arrow(wh.root, "records", columns=("offset",)).num_rows,
                         tables.read_arrow(wh.root, "ledger", columns=("run_id",)).num_rows))

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        with crash_at_commit(None, delay=0.15):  # a slow catalog: publish takes ~2 s
            wh.publish("night-2")
    finally:
        stop.set()
        reader.join()
    poll_once = [(tables.read_arrow(wh.root, "records", columns=("offset",)).num_rows, None)]
    assert poll_once[0][0] == 120
    assert len(seen) > 3
    assert {r for r, _ in seen} <= {50, 120}  # never part of night 2's records
    assert {ledger for _, ledger in seen} <= {1, 3}  # nor part of its ledger


# ------------------------------------------------------------ two runs at once
def test_a_snapshot_beaten_to_its_sequence_number_is_a_lost_race_and_tried_again(
        tmp_path, monkeypatch):
    """Two runs commit to their own branches of one table at once. pyiceberg checks only
    the branch's head when it adds a snapshot, so where the other run's snapshot took the
    table's next sequence number in between, the catalog refuses with a ValueError. That
    is a lost race like any other: tried again on a fresh load, not a crashed run."""
    wh = Warehouse(str(tmp_path / "wh"))
    staged_run(wh, "a", {0: range(0, 5)})
    stale = wh.table("records")  # run a loads the table...
    staged_run(wh, "b", {1: range(0, 5)})  # ...run b's snapshot takes the next number
    branch = branch_name("a")
    mine = live_files(stale, stale.refs()[branch].snapshot_id)
    assert mine

    def delete_mine(table):
        with table.transaction() as tx:
            with tx.update_snapshot(branch=branch).overwrite() as ow:
                for f in mine:
                    ow.delete_data_file(f)

    with pytest.raises(ValueError, match=STALE_SEQUENCE):  # pyiceberg's own word
        delete_mine(stale)
    with pytest.raises(CommitFailedException), adding_snapshot():
        delete_mine(stale)
    loads, table = [], Warehouse.table
    monkeypatch.setattr(Warehouse, "table", lambda self, name: stale if name == "records"
                        and not loads and not loads.append(name) else table(self, name))
    wh.commit_files("records", "a", [])  # the first try on the stale table, then again
    assert loads == ["records"]
    fresh = wh.table("records")
    assert live_files(fresh, fresh.refs()[branch].snapshot_id) == []
    assert len(live_files(fresh, fresh.refs()[branch_name("b")].snapshot_id)) == 1


def test_two_runs_planned_together_publish_once_and_the_second_is_refused(spark, tmp_path):
    """A scheduled run and a manual spark-submit over the same snapshot, both decoded
    before either published (nothing outside the warehouse keeps them apart)."""
    src = numbered(tmp_path / "snap")
    want = truth(src)
    wh = tmp_path / "wh"
    decode(spark, src, wh, "scheduled", "--no-publish")
    decode(spark, src, wh, "manual", "--no-publish")
    publish.publish(str(wh), "scheduled")
    with pytest.raises(ConflictError, match="scheduled") as refused:
        publish.publish(str(wh), "manual")
    # what the DAG says of it (kafkalog_pipeline.tasks.conflict_line) without parsing the message
    assert (refused.value.table, refused.value.runs) == ("records", ("scheduled",))
    assert refused.value.files >= 1
    assert lost_and_duplicated(want, published(wh)) == (0, 0)
    # run again, the refused run deduplicates against the new main: nothing to add
    s = decode(spark, src, wh, "manual")
    assert s["published"]
    assert lost_and_duplicated(want, published(wh)) == (0, 0)
    with pytest.raises(SystemExit):  # the command line says so and exits 1
        publish.main(["--warehouse", str(wh), "--run-id", "nobody"])


def test_two_runs_at_the_same_time_never_duplicate(spark, tmp_path):
    src = numbered(tmp_path / "snap", partitions=(0, 1, 2))
    want = truth(src)
    wh = tmp_path / "wh"
    decode(spark, src, tmp_path / "warm", "warm")  # Spark warmed up, in another warehouse
    outcomes = {}

    def run(run_id):
        try:
            outcomes[run_id] = decode(spark, src, wh, run_id)["published"]
        except ConflictError as err:
            outcomes[run_id] = err
        except Exception as err:  # noqa: BLE001 - any other error is a failure, said below
            outcomes[run_id] = f"crashed: {type(err).__name__}: {err}"

    # a fresh catalog: both also race to create the namespace and the tables
    threads = [threading.Thread(target=run, args=(r,)) for r in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert lost_and_duplicated(want, published(wh)) == (0, 0), outcomes
    assert not [e for e in outcomes.values() if isinstance(e, str)], outcomes
    refused = [e for e in outcomes.values() if isinstance(e, ConflictError)]
    assert len(refused) <= 1 and sum(v is True for v in outcomes.values()) >= 1, outcomes


# ------------------------------------------------------------ reruns and names
def test_a_rerun_replaces_exactly_that_runs_rows(spark, tmp_path):
    night1 = numbered(tmp_path / "n1", partitions=(0,))
    night2 = numbered(tmp_path / "n2", partitions=(0, 1))
    wh = tmp_path / "wh"
    decode(spark, night1, wh, "night-1")
    decode(spark, night2, wh, "night-2")
    before = tables.read_arrow(str(wh), "records").sort_by([("partition", "ascending"),
                                                             ("offset", "ascending")])
    for run_id, src in (("night-1", night1), ("night-2", night2), ("night-1", night1)):
        decode(spark, src, wh, run_id)
        assert lost_and_duplicated(truth(night2), published(wh)) == (0, 0), run_id
    after = tables.read_arrow(str(wh), "records").sort_by([("partition", "ascending"),
                                                            ("offset", "ascending")])
    assert after.drop_columns(["segment"]).equals(before.drop_columns(["segment"]))
    history = main_history(Warehouse(str(wh)).table("records"))
    assert [h["run_id"] for h in history if h["run_id"]][-1] == "night-1"


def test_unparsable_log_names_are_findings_and_the_log_names_them(spark, tmp_path, capsys):
    src = numbered(tmp_path / "snap", partitions=(0,))
    good = next(src.rglob("*.log"))
    (src / "orders-0" / "garbage.log").write_bytes(good.read_bytes())
    (src / "no_partition_dir").mkdir()
    (src / "no_partition_dir" / f"{0:020d}.log").write_bytes(good.read_bytes())
    wh = tmp_path / "wh"
    s = decode(spark, src, wh, "r")
    assert s["unparsable"] == 2
    err = capsys.readouterr().err
    assert "garbage.log is not <topic>-<partition>" in err and "no_partition_dir" in err
    found = [f for f in tables.read_arrow(str(wh), "findings").to_pylist()
             if f["kind"] == "unparsable_name"]
    assert sorted(f["segment"].rsplit("/", 2)[-2] for f in found) == ["no_partition_dir", "orders-0"]
    by_dir = {f["segment"].rsplit("/", 2)[-2]: f for f in found}
    assert (by_dir["orders-0"]["topic"], by_dir["orders-0"]["partition"]) == ("orders", 0)
    assert by_dir["no_partition_dir"]["topic"] is None
    assert lost_and_duplicated(truth(src / "orders-0"), published(wh))[1] == 0
