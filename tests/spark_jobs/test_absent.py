"""The audit sees what is absent and says the same thing every time (issue 32).

Nights are decoded with the decode job (``--night``), audited with check_quality and
published, as the nightly DAG does; every expectation is computed from the segments the
test writes. A night's verdict is a function of that night: audited again, rerun after
later nights, or backfilled after them, it gives the same dq_results rows; a partition
earlier nights held and tonight lacks is a ``missing_partition`` warning; a ``.log`` outside
any partition folder is graded; a night without a snapshot is a ``snapshot_missing`` result.
"""

from __future__ import annotations

import json

import pytest

from kafkalog.writer import SegmentWriter, internal_record
from spark_jobs import tables
from spark_jobs.warehouse import Warehouse
from spark_jobs.audit import results

from tests.runs import decode, dq_rows
from tests.snapshots import T0, recs, write_segments

pytestmark = pytest.mark.pipeline

HOUR = 3_600_000
NIGHTS = ("2026-11-19", "2026-11-20", "2026-11-21")


def commits(directory, upto: int) -> None:
    """``__consumer_offsets-0``: group ``billing`` commits offset 5 of ``orders-0`` on the
    first night, 15 on the second, 25 on the third (each night's log holds the ones before:
    a growing segment, as a broker keeps it). ``upto``: how many nights' commits."""
    with SegmentWriter(directory, 0) as w:
        for n in range(upto):
            at = T0 + n * 24 * HOUR + 1000
            w.append([internal_record("offsets", {
                "key": {"type": 1, "data": {"group": "billing", "topic": "orders", "partition": 0}},
                "value": {"version": 3, "data": {"offset": 5 + 10 * n, "leaderEpoch": 0,
                                                 "metadata": "", "commitTimestamp": at}}},
                timestamp=at)])


def night_snapshot(root, n: int, *, drop=()):
    """Night ``n`` (0, 1, 2) of a small cluster: ``orders-0`` grows by 10 records a night
    (a new segment each night, the earlier ones kept), ``orders-1`` and ``payments-0`` hold
    5 records each, ``__consumer_offsets-0`` the commits so far. ``drop``: partition folders
    this night's copy lacks."""
    out = root / NIGHTS[n]
    folders = {
        "orders-0": [(10 * k, lambda w, k=k: w.append(recs(10, T0 + k * 24 * HOUR)))
                     for k in range(n + 1)],
        "orders-1": [(0, lambda w: w.append(recs(5)))],
        "payments-0": [(0, lambda w: w.append(recs(5)))],
    }
    for name, spec in folders.items():
        if name not in drop:
            write_segments(out / name, spec)
    commits(out / "__consumer_offsets-0", n + 1)
    return out


def run_night(spark, W, snapshot, run_id: str, night: str, *, publish=True) -> int:
    """Decode ``snapshot`` as run ``run_id`` of ``night``, audit it, publish it if it passed;
    the audit's exit status."""
    from spark_jobs import check_quality
    from spark_jobs import publish as publishing

    decode(spark, snapshot, W, run_id, "--no-publish", night=night)
    code = check_quality.main(["--warehouse", W, "--run-id", run_id, "--no-docs"], spark=spark)
    if publish and code == 0:
        publishing.publish(W, run_id)
    return code


def verdict_rows(W, run_id: str) -> list[tuple]:
    """Run ``run_id``'s dq_results rows without their run metadata (``checked_at``), the
    details as parsed JSON: what must be the same however often and whenever the night is
    audited."""
    out = []
    for r in dq_rows(W, run_id):
        details = json.loads(r["details"])
        out.append((r["check"], r["topic"], r["partition"], r["status"], r["severity"],
                    r["observed"], r["failed"], r["night"],
                    json.dumps(details["classes"], sort_keys=True),
                    json.dumps(details["items"], sort_keys=True)))
    return sorted(out, key=repr)


def lag_rows(W, run_id: str) -> list[tuple]:
    from pyiceberg.expressions import EqualTo

    rows = tables.read_arrow(W, "consumer_lag", row_filter=EqualTo("run_id", run_id)).to_pylist()
    return sorted((r["group"], r["topic"], r["partition"], r["committed_offset"],
                   r["log_end_offset"], r["status"]) for r in rows)


@pytest.fixture(scope="module")
def in_order(spark, tmp_path_factory):
    """Nights 1 and 2 run in order into one warehouse: ``(W, snapshots, {run: rows},
    {run: consumer_lag rows})`` as they were right after."""
    tmp = tmp_path_factory.mktemp("in-order")
    W = str(tmp / "w")
    snaps = [night_snapshot(tmp / "s", n) for n in range(3)]
    rows, lags = {}, {}
    for n, run in enumerate(("n1", "n2")):
        assert run_night(spark, W, snaps[n], run, NIGHTS[n]) == 0
        rows[run], lags[run] = verdict_rows(W, run), lag_rows(W, run)
    return W, snaps, rows, lags


def test_a_night_audited_again_after_later_nights_says_the_same(spark, in_order):
    """Nights 1 and 2 in order, then night 1 rerun (its decode and audit, the same run id,
    as clearing the run in Airflow does) and audited once more: the same rows each time.
    Night 2's commit (offset 15 of orders-0) is past night 1's log end (10): as of night 1
    the group had committed 5, and the rerun must not see night 2's commit (before the
    fix it read main's latest commits and warned committed_offset_beyond_log_end)."""
    from spark_jobs import check_quality

    W, snaps, rows, lags = in_order
    assert lags == {"n1": [("billing", "orders", 0, 5, 10, "ok")],
                    "n2": [("billing", "orders", 0, 15, 20, "ok")]}
    assert run_night(spark, W, snaps[0], "n1", NIGHTS[0]) == 0  # the rerun, after night 2
    assert verdict_rows(W, "n1") == rows["n1"]
    assert lag_rows(W, "n1") == lags["n1"]
    assert check_quality.main(["--warehouse", W, "--run-id", "n1", "--no-docs"], spark=spark) == 0
    assert verdict_rows(W, "n1") == rows["n1"]
    assert {r[7] for r in rows["n1"]} == {NIGHTS[0]}  # every row names the night it is about
    # nothing of it is a warning: the night is whole
    assert [r[:4] for r in rows["n1"] if r[3] != "pass"] == []


def test_a_backfilled_night_says_what_it_would_have_said_in_order(spark, in_order, tmp_path):
    """Night 2 run after night 3 (a backfill: a new run of an older night) gives the rows it
    gives when the nights run in order: what came before it is the nights before it, not
    the runs that happened to run before it; the later night's rows of night 2's new
    offsets are audited as night 2's (spark_jobs/audit/as_of.py)."""
    _, snaps, rows, lags = in_order
    backfilled = str(tmp_path / "backfilled")
    for n in (0, 2, 1):
        assert run_night(spark, backfilled, snaps[n], f"n{n + 1}", NIGHTS[n]) == 0
    assert verdict_rows(backfilled, "n2") == rows["n2"]
    assert lag_rows(backfilled, "n2") == lags["n2"]


def test_a_partition_earlier_nights_held_and_tonight_lacks_is_named(spark, tmp_path):
    """Night 2's copy lacks orders-1's folder, and every partition of payments: orders-1 is a
    missing_partition warning naming its last offset and the night it was last seen;
    payments-0 too (issue 42: a topic gone whole without evidence of its deletion is not
    "deleted"); the partitions that are there pass; a run that did not ask for payments does
    not miss it; a third night with everything back finds nothing missing."""
    from spark_jobs import check_quality

    W = str(tmp_path / "w")
    s1 = night_snapshot(tmp_path / "s", 0)
    s2 = night_snapshot(tmp_path / "s", 1, drop=("orders-1", "payments-0"))
    assert run_night(spark, W, s1, "n1", NIGHTS[0]) == 0
    assert run_night(spark, W, s2, "n2", NIGHTS[1]) == 0  # warnings publish
    rows = {(r["topic"], r["partition"]): r for r in dq_rows(W, "n2")
            if r["check"] == "missing_partition"}
    # payments is gone whole, and nothing in the snapshot says it was deleted (no -delete
    # folder, no __cluster_metadata): its partition is missing, as orders-1 is; 2 of the 4
    # partitions of night 1 is not more than max_share (0.5): warnings
    assert {k: (r["status"], r["failed"]) for k, r in rows.items()} == {
        ("orders", 0): ("pass", 0), ("__consumer_offsets", 0): ("pass", 0),
        ("orders", 1): ("warn", 1), ("payments", 0): ("warn", 1)}
    [item] = json.loads(rows[("orders", 1)]["details"])["items"]
    assert item["class"] == "missing" and item["status"] == "warn"
    assert item["last_offset"] == 4  # orders-1 held offsets 0..4
    assert item["segment"] == str(s1 / "orders-1" / f"{0:020d}.log")
    assert f"last seen on {NIGHTS[0]}" in item["message"] and "offset 4" in item["message"]
    [gone] = json.loads(rows[("payments", 0)]["details"])["items"]
    assert (gone["class"], gone["status"]) == ("missing", "warn")
    assert "nothing in the snapshot says it was deleted" in gone["message"]
    # the absent partition gets no other result (nothing was checked there)
    assert {r["check"] for r in dq_rows(W, "n2") if (r["topic"], r["partition"]) == ("orders", 1)} \
        == {"missing_partition"}
    assert results.verdict(dq_rows(W, "n2"))["warned"] == {
        "missing_partition": ["orders-1", "payments-0"]}

    # the run asked for orders* and __* only: payments is not missing (the DAG passes its
    # `topics`), orders-1 still is
    assert check_quality.main(["--warehouse", W, "--run-id", "n2", "--no-docs",
                               "--topics", "orders*, __*"], spark=spark) == 0
    assert [(r["topic"], r["partition"]) for r in dq_rows(W, "n2")
            if r["check"] == "missing_partition" and r["topic"] == "payments"] == []
    assert results.verdict(dq_rows(W, "n2"))["warned"] == {"missing_partition": ["orders-1"]}

    s3 = night_snapshot(tmp_path / "s", 2)
    assert run_night(spark, W, s3, "n3", NIGHTS[2]) == 0
    assert [r for r in dq_rows(W, "n3") if r["check"] == "missing_partition" and r["status"] != "pass"] \
        == []


def test_a_log_outside_any_partition_folder_does_not_pass(spark, tmp_path):
    """A .log whose folder is no partition is graded like the same bad name inside orders-0:
    a decoder_findings failure (unparsable_name: `other` in the policy), not a silent pass."""
    W = str(tmp_path / "w")
    snap = night_snapshot(tmp_path / "s", 0)
    stray = snap / "misc" / f"{0:020d}.log"
    stray.parent.mkdir()
    stray.write_bytes((snap / "orders-1" / f"{0:020d}.log").read_bytes())
    assert run_night(spark, W, snap, "n1", NIGHTS[0], publish=False) == 65
    [row] = [r for r in dq_rows(W, "n1") if r["topic"] is None]
    assert (row["check"], row["partition"], row["status"], row["failed"]) == (
        "decoder_findings", None, "fail", 1)
    [item] = json.loads(row["details"])["items"]
    assert item["class"] == "unparsable_name" and item["segment"] == str(stray)
    assert results.verdict(dq_rows(W, "n1"))["failed"] == {"decoder_findings": [results.UNPLACED]}


def test_snapshot_missing_rows_and_a_late_snapshot_replaces_them(tmp_path):
    """The plan's rows for nights without a snapshot: one per night, graded by the policy,
    kept by the run's audit, replaced by a later run that found the night's snapshot."""
    from pyiceberg.expressions import EqualTo

    from kafkalog_pipeline import tasks
    from spark_jobs.audit.policy import Policy

    wh = Warehouse(str(tmp_path / "w"))
    where = {NIGHTS[0]: "s3://b/snapshots/2026-11-19/", NIGHTS[1]: "s3://b/snapshots/2026-11-20/"}
    rows = tasks.record_missing_nights(wh, "late", where, {NIGHTS[1]: 3})
    assert [(r["night"], r["status"], r["topic"], r["partition"]) for r in rows] == [
        (NIGHTS[0], "warn", None, None)]
    assert tasks.record_missing_nights(wh, "other", where, {NIGHTS[1]: 1}) != []
    assert tasks.missing_verdict(rows) == {"fail": 0, "warn": 1, "pass": 0, "failed": {},
                                           "warned": {"snapshot_missing": [NIGHTS[0]]}}
    # the audit replaces a run's rows but its snapshot_missing ones
    results.write(wh, "late", [{**rows[0], "check": "crc", "topic": "orders", "partition": 0,
                                "status": "pass"}])
    assert sorted(r["check"] for r in dq_rows(wh, "late")) == ["crc", "snapshot_missing"]
    assert results.run_missing_nights(wh, "late")[0]["night"] == NIGHTS[0]
    # the snapshot arrives late: a run that finds it drops every run's result of that night
    assert tasks.record_missing_nights(wh, "found", {NIGHTS[0]: where[NIGHTS[0]]},
                                       {NIGHTS[0]: 2}) == []
    left = tables.read_arrow(wh, "dq_results", row_filter=EqualTo("check", "snapshot_missing"))
    assert left.num_rows == 0
    assert sorted(r["check"] for r in dq_rows(wh, "late")) == ["crc"]
    # nothing missing and nothing to replace: no commit at all
    before = wh.table("dq_results").current_snapshot().snapshot_id
    assert tasks.record_missing_nights(wh, "quiet", {NIGHTS[1]: where[NIGHTS[1]]},
                                       {NIGHTS[1]: 1}) == []
    assert wh.table("dq_results").current_snapshot().snapshot_id == before
    # fail is settable in the policy
    strict = Policy({"checks": {**Policy.load().checks, "snapshot_missing": {"severity": "fail"}}})
    [row] = results.missing_night_rows("r", {NIGHTS[0]: where[NIGHTS[0]]}, strict)
    assert (row["status"], row["severity"], row["failed"]) == ("fail", "fail", 1)


# ------------------------------------------------------------------ absence that explains itself
# issue 42 item 4: a night holding one partition of the previous night's 19. Its topics'
# ids and their removal are __cluster_metadata records whose value bytes are written here by
# hand from Apache Kafka's specs (4.3.0, commit a9ce3221537b8653448750697915607dc7936cf3,
# metadata/src/main/resources/common/metadata/TopicRecord.json: apiKey 2, v0 flexible, Name
# string, TopicId uuid; RemoveTopicRecord.json: apiKey 9, v0 flexible, TopicId uuid), framed
# as MetadataRecordSerde frames them (AbstractApiMessageSerde: unsigned varint frame version
# 1, api key, record version, then the record; a flexible record ends in its tagged fields'
# count, 0 here) — not with kafkalog's own spec writer, so the decoder is checked too.
#: the 18 data partitions of night 1 (+ __cluster_metadata-0: 19)
WIDE = {"orders": 4, "payments": 3, "clicks": 4, "users": 2, "audit": 3, "events": 2}


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def topic_id(topic: str) -> bytes:
    """16 bytes of the topic's id (deterministic)."""
    return topic.encode().ljust(16, b"#")[:16]


def kafka_uuid(raw: bytes) -> str:
    """As Kafka's Uuid.toString() prints it: URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def topic_record(topic: str) -> bytes:
    name = topic.encode()
    return (_uvarint(1) + _uvarint(2) + _uvarint(0)  # frame v1, TopicRecord, v0
            + _uvarint(len(name) + 1) + name + topic_id(topic) + _uvarint(0))


def remove_topic_record(topic: str) -> bytes:
    return _uvarint(1) + _uvarint(9) + _uvarint(0) + topic_id(topic) + _uvarint(0)


def cluster_metadata(directory, *, removed=()) -> None:
    """``__cluster_metadata-0``: one TopicRecord per topic of :data:`WIDE` (a batch), then
    one batch of RemoveTopicRecords of ``removed`` (night 1's bytes are a prefix)."""
    from kafkalog.writer import WriteRecord

    with SegmentWriter(directory, 0) as w:
        w.append([WriteRecord(None, topic_record(t), timestamp=T0) for t in WIDE])
        if removed:
            w.append([WriteRecord(None, remove_topic_record(t), timestamp=T0 + 24 * HOUR)
                      for t in removed])


def wide_night(root, night: str, *, only_metadata=False, removed=()):
    """Night 1: the 18 partitions of :data:`WIDE` (5 records each) and __cluster_metadata-0;
    ``only_metadata``: a copy that kept only __cluster_metadata-0 (what a broker's failed
    copy leaves)."""
    out = root / night
    if not only_metadata:
        for topic, n in WIDE.items():
            for p in range(n):
                write_segments(out / f"{topic}-{p}", [(0, lambda w: w.append(recs(5)))])
    cluster_metadata(out / "__cluster_metadata-0", removed=removed)
    return out


def test_a_night_that_kept_one_partition_of_19_fails_unless_the_metadata_says_why(spark, tmp_path):
    """Night 2 holds only __cluster_metadata-0 of night 1's 19 partitions: with no deletion in
    it, each of the 18 is missing, 18/19 beyond max_share (0.5): the night fails naming
    them (before, the 6 topics were graded topic_deleted, a pass). The same night with a
    RemoveTopicRecord of payments' id: payments is one topic_deleted item (pass) naming the
    record, its 3 partitions are not missing; the other 15 still fail the night."""
    W = str(tmp_path / "w")
    assert run_night(spark, W, wide_night(tmp_path / "s", NIGHTS[0]), "n1", NIGHTS[0]) == 0
    every = sorted(f"{t}-{p}" for t, n in WIDE.items() for p in range(n))

    lost = wide_night(tmp_path / "lost", NIGHTS[1], only_metadata=True)
    assert run_night(spark, W, lost, "n2", NIGHTS[1], publish=False) == 65
    rows = [r for r in dq_rows(W, "n2") if r["check"] == "missing_partition"]
    failed = {f"{r['topic']}-{r['partition']}": r for r in rows if r["status"] == "fail"}
    assert sorted(failed) == every
    assert results.verdict(dq_rows(W, "n2"))["failed"] == {"missing_partition": every}
    [item] = json.loads(failed["payments-2"]["details"])["items"]
    assert (item["class"], item["status"], item["last_offset"]) == ("beyond_max_share", "fail", 4)
    assert "one of 18 of the 19 partitions" in item["message"]
    assert "nothing in the snapshot says it was deleted" in item["message"]
    assert {(r["topic"], r["status"]) for r in rows if r["status"] != "fail"} == {
        ("__cluster_metadata", "pass")}

    removed = wide_night(tmp_path / "removed", NIGHTS[1], only_metadata=True,
                         removed=("payments",))
    assert run_night(spark, W, removed, "n2b", NIGHTS[1], publish=False) == 65
    rows = [r for r in dq_rows(W, "n2b") if r["check"] == "missing_partition"]
    [deleted] = [r for r in rows if r["topic"] == "payments"]
    assert (deleted["partition"], deleted["status"], deleted["failed"]) == (None, "pass", 0)
    [item] = json.loads(deleted["details"])["items"]
    assert (item["class"], item["status"], item["value"]) == ("topic_deleted", "pass", 3)
    assert f"a RemoveTopicRecord of its id {kafka_uuid(topic_id('payments'))}" in item["message"]
    others = [p for p in every if not p.startswith("payments-")]
    assert results.verdict(dq_rows(W, "n2b"))["failed"] == {"missing_partition": others}


def test_what_counts_as_evidence_of_a_deletion():
    """The evidence rules without Spark (spark_jobs.audit.absence): a -delete folder (Kafka's
    LocalLog.logDeleteDirName: ``<topic>-<partition>.<32 hex digits>-delete``); a
    RemoveTopicRecord of the id of the topic's latest TopicRecord (a topic deleted and made
    again under a new id is not deleted); the night's newest KRaft snapshot listing topics and
    not this one, unless a TopicRecord of it follows; no metadata at all is no evidence."""
    from collections import namedtuple

    from spark_jobs.audit import absence

    unique = "0c4f9a3e5b7d41e2a8c6f0b1d2e3f405"
    assert absence.deleted_folder(f"s3://b/n/gone-3.{unique}-delete/{0:020d}.log") == \
        f"s3://b/n/gone-3.{unique}-delete/"
    for live in (f"s3://b/n/gone-3/{0:020d}.log", f"s3://b/n/gone-3.{unique}-future/{0:020d}.log",
                 f"s3://b/n/gone-3.{unique[:-1]}-delete/{0:020d}.log", None):
        assert absence.deleted_folder(live) is None

    log = [("log", "TOPIC_RECORD", "A", "orders", 0, "m/0.log"),
           ("log", "TOPIC_RECORD", "B", "payments", 1, "m/0.log"),
           ("log", "REMOVE_TOPIC_RECORD", "B", None, 5, "m/0.log"),
           ("log", "TOPIC_RECORD", "C", "clicks", 2, "m/0.log"),
           ("log", "REMOVE_TOPIC_RECORD", "C", None, 6, "m/0.log"),
           ("log", "TOPIC_RECORD", "C2", "clicks", 7, "m/0.log")]  # made again
    said = absence.metadata_deletions(log, {"orders", "payments", "clicks", "users"})
    assert set(said) == {"payments"} and "RemoveTopicRecord of its id B" in said["payments"]
    # the night's KRaft snapshot (end offset 10) names orders only; users appears after it
    snap = [("tonight", "TOPIC_RECORD", "A", "orders", 10, "k/10-1.checkpoint"),
            ("snapshot", "TOPIC_RECORD", "D", "users", 4, "k/4-1.checkpoint")]
    said = absence.metadata_deletions(snap, {"orders", "users", "clicks"})
    assert set(said) == {"users", "clicks"}
    assert "k/10-1.checkpoint lists 1 topics and not this one" in said["users"]
    later = snap + [("log", "TOPIC_RECORD", "E", "clicks", 12, "m/0.log")]
    assert set(absence.metadata_deletions(later, {"clicks", "users"})) == {"users"}
    assert absence.metadata_deletions([], {"orders"}) == {}

    Gone = namedtuple("Gone", "topic partition last_night last_offset last_segment topic_here")
    gone = [Gone("a", 0, NIGHTS[0], 4, "s/a-0/0.log", False),
            Gone("a", 1, NIGHTS[0], 9, "s/a-1/0.log", False),
            Gone("b", 0, NIGHTS[0], 2, "s/b-0/0.log", True)]
    classes = [(o[1], o[2], o[3]) for o in absence.gone_observations(
        gone, {"a": "a -delete folder"}, expected=2, max_share=0.5)]
    assert classes == [("a", None, "topic_deleted"), ("b", 0, "missing")]  # 1 of 2: not beyond
    classes = [(o[1], o[2], o[3]) for o in absence.gone_observations(gone, {}, 4, 0.5)]
    assert classes == [("a", 0, "beyond_max_share"), ("a", 1, "beyond_max_share"),
                       ("b", 0, "beyond_max_share")]  # 3 of 4
    assert {o[3] for o in absence.gone_observations(gone, {}, 4, None)} == {"missing"}


def test_max_share_is_a_share_or_null():
    """missing_partition.max_share: 0.5 by default (expectations/policy.yaml), null for never,
    anything else than a share between 0 and 1 refused when the policy loads."""
    from spark_jobs.audit.policy import Policy, PolicyError

    default = Policy.load()
    assert default.missing_share() == 0.5
    assert default.severity("orders", "missing_partition", "beyond_max_share") == "fail"
    checks = default.checks

    def with_share(value):
        return Policy({"checks": {**checks, "missing_partition": {
            **checks["missing_partition"], "max_share": value}}})

    assert with_share(None).missing_share() is None and with_share(1).missing_share() == 1.0
    for bad in (1.5, -0.1, "half", True):
        with pytest.raises(PolicyError, match="missing_partition.max_share"):
            with_share(bad)
