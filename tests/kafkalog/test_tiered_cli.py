"""``kafkalog tiered cat|ls`` and ``dump``/``index`` of an ``.rsm-manifest``: the segment
back byte for byte (sha256), and every bad input one line on stderr, no traceback, the exit
status of docs/cli.md (1: the objects are wrong; 2: could not run), no partial OUT."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from kafkalog.cli import main
from kafkalog.writer import SegmentWriter, WriteRecord, internal_record

from tests import tiered_data as td
from tests import tiered_encoder as enc

LOG = td.log_bytes()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*argv, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kafkalog", *map(str, argv)],
                          capture_output=True, timeout=120, cwd=cwd, env=env)


def one_line(p: subprocess.CompletedProcess | str) -> str:
    err = p if isinstance(p, str) else p.stderr.decode()
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    a, b = td.key_files(folder, "key-a", "key-b")
    (wrong,) = td.key_files(tmp_path_factory.mktemp("wrong"), "key-b", swap={"key-b": "key-a"})
    return {"a": a, "b": b, "wrong": wrong}


def upload(tmp_path, **kw):
    opts = dict(chunk_size=1000, compression=True, key_id="key-b",
                public_key=td.private_key("key-b").public_key(), indexes=td.indexes())
    opts.update(kw)
    up = enc.upload(LOG, **opts)
    up.write_to(tmp_path / "bucket")
    return up, tmp_path / "bucket" / up.key("rsm-manifest")


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.mark.parametrize("form", ["plain", "compressed", "encrypted", "compressed+encrypted"])
def test_cat_writes_the_segment(tmp_path, keys, form):
    up, manifest = upload(tmp_path, compression="compressed" in form,
                          key_id="key-b" if "encrypted" in form else None)
    out = tmp_path / "out.log"
    argv = ["tiered", "cat", str(manifest), "-o", str(out)]
    if "encrypted" in form:
        argv[2:2] = ["--private-key", keys["a"], "--private-key", keys["b"]]  # key-b: the 2nd
    assert main(argv) == 0
    assert sha(out) == td.LOG_SHA256


def test_cat_to_stdout_a_range_and_the_indexes(tmp_path, keys):
    up, manifest = upload(tmp_path, indexes=td.indexes(with_txn=True))
    p = run("tiered", "cat", "--private-key", keys["b"], manifest, "-o", "-")
    assert p.returncode == 0 and p.stderr == b""
    assert hashlib.sha256(p.stdout).hexdigest() == td.LOG_SHA256
    p = run("tiered", "cat", "--private-key", keys["b"], "--start", 2500, "--end", 7001,
            manifest, "-o", "-")
    assert p.returncode == 0 and p.stdout == LOG[2500:7001]
    out, folder = tmp_path / "seg.log", tmp_path / "partition"
    assert main(["tiered", "cat", "--private-key", keys["b"], "--indexes", str(folder),
                 str(manifest), "-o", str(out)]) == 0
    assert sorted(os.listdir(folder)) == [
        "00000000000000000000.index", "00000000000000000000.timeindex",
        "00000000000000000000.txnindex", "00000000000000000013.snapshot",
        "leader-epoch-checkpoint"]
    assert (folder / "00000000000000000000.index").read_bytes() == td.indexes()["offset"]


def test_cat_copies_a_plain_log_object(tmp_path, capsysbinary):
    folder = tmp_path / "clicks-1"  # mgoblin/minio-rsm's layout
    folder.mkdir()
    (folder / "00000000000000000042.log").write_bytes(LOG)
    out = tmp_path / "x.log"
    assert main(["tiered", "cat", str(folder / "00000000000000000042.log"), "-o", str(out)]) == 0
    assert sha(out) == td.LOG_SHA256
    assert main(["tiered", "cat", "--start", "13000", str(folder / "00000000000000000042.log"),
                 "-o", str(out)]) == 0
    assert out.read_bytes() == LOG[13000:]
    assert main(["tiered", "cat", "--end", "20000", str(folder / "00000000000000000042.log"),
                 "-o", str(out)]) == 2
    assert "outside the object" in one_line(capsysbinary.readouterr().err.decode())


def _cut_last_chunk(up, tmp_path):
    path = tmp_path / "bucket" / up.key("log")
    path.write_bytes(path.read_bytes()[:-1])


def _flip(up, tmp_path):
    path = tmp_path / "bucket" / up.key("log")
    data = bytearray(path.read_bytes())
    data[sum(up.chunk_sizes[:3]) + 20] ^= 4
    path.write_bytes(bytes(data))


def _no_log(up, tmp_path):
    os.remove(tmp_path / "bucket" / up.key("log"))


def _bad_manifest(up, tmp_path):
    path = tmp_path / "bucket" / up.key("rsm-manifest")
    doc = json.loads(path.read_bytes())
    doc["chunkIndex"]["originalChunkSize"] = 0
    path.write_text(json.dumps(doc))


# (damage, key files, exit status, what stderr says)
BAD = {
    "short chunk": (_cut_last_chunk, ["b"], 1, "chunk 13 of 14 (segment bytes 13000..13751"),
    "unknown key id": (None, ["a"], 2, "key id 'key-b', which the key ring does not hold"),
    "wrong key": (None, ["wrong"], 2, "private key 'key-b' does not unwrap the data key"),
    "flipped byte": (_flip, ["b"], 1, "chunk 3 of 14 (segment bytes 3000..4000"),
    "missing key": (None, [], 2, "encrypted with key id 'key-b': a private key is needed"),
    "missing object": (_no_log, ["b"], 2, ".log: no such object"),
    "malformed manifest": (_bad_manifest, ["b"], 1, "chunkIndex.originalChunkSize is 0"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_and_leaves_out_alone(tmp_path, keys, case):
    damage, key_ids, status, says = BAD[case]
    up, manifest = upload(tmp_path)
    if damage:
        damage(up, tmp_path)
    out = tmp_path / "out.log"
    out.write_bytes(b"what was there")
    keys_argv = [x for k in key_ids for x in ("--private-key", keys[k])]
    p = run("tiered", "cat", *keys_argv, manifest, "-o", out)
    assert p.returncode == status
    assert says in one_line(p) and p.stdout == b""
    assert out.read_bytes() == b"what was there"  # not replaced, no temporary file left
    assert sorted(os.listdir(tmp_path)) == ["bucket", "out.log"]
    # dump, and index --verify (which reads the .log too), say the same before any output
    for command in (["dump"], ["index", "--verify"]):
        p = run(*command, *keys_argv, manifest)
        assert p.returncode == status, (command, p.stderr)
        assert says in one_line(p) and p.stdout == b"", command


def test_a_bad_key_file_is_one_line_exit_2(tmp_path):
    up, manifest = upload(tmp_path)
    (tmp_path / "key-b.pem").write_text("not a key")
    for argv in (["tiered", "cat", "--private-key", tmp_path / "key-b.pem", manifest, "-o", "-"],
                 ["dump", "--private-key", tmp_path / "key-b.pem", manifest],
                 ["index", "--private-key", tmp_path / "nope.pem", manifest]):
        p = run(*argv)
        assert p.returncode == 2 and p.stdout == b""
        assert "key-b.pem: not a PEM private key" in one_line(p) or "nope.pem" in one_line(p)


def test_dump_and_index_read_a_manifest_as_its_segment(tmp_path, keys, capsys, monkeypatch):
    up, manifest = upload(tmp_path)
    assert main(["dump", "--json", "--records", "--private-key", keys["b"], str(manifest)]) == 0
    objs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sum(o["type"] == "batch" for o in objs) == 13
    assert {o["file"] for o in objs} == {str(manifest)}
    # the same as dumping the segment itself, file names aside
    plain = tmp_path / "p" / "00000000000000000000.log"
    plain.parent.mkdir()
    plain.write_bytes(LOG)
    assert main(["dump", "--json", "--records", str(plain)]) == 0
    same = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [{**o, "file": None} for o in objs] == [{**o, "file": None} for o in same]
    # a byte range reads its chunks only and keeps absolute positions
    from kafkalog.tiered.objects import LocalObjects

    reads = []
    real_read = LocalObjects.read
    monkeypatch.setattr(LocalObjects, "read", lambda self, key, start, end: (
        reads.append((os.path.basename(key)[-4:], start, end)) or real_read(self, key, start, end)))
    assert main(["dump", "--json", "--private-key", keys["b"], "--start", "4730",
                 "--end", "9571", str(manifest)]) == 0
    starts = [sum(up.chunk_sizes[:i]) for i in range(len(up.chunk_sizes) + 1)]
    assert [r for r in reads if r[0] == ".log"] == [(".log", starts[i], starts[i + 1])
                                                    for i in range(4, 10)]
    batches = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert batches[0]["position"] == 4730 and batches[-1]["base_offset"] == 6
    assert main(["index", "--verify", "--private-key", keys["b"], str(manifest)]) == 0
    out = capsys.readouterr().out
    assert f"Dumping {tmp_path / 'bucket' / up.key('indexes')}#00000000000000000000.index" in out
    assert out.count("verified against") == 2 and out.count(": OK") == 2
    assert "offset: 3 position: 4730" in out


def _metadata_segment(folder, events) -> None:
    w = SegmentWriter(folder)
    for e in events:
        w.append([internal_record("remote-log-metadata", e)])
    w.close()


def _event(kind, sid, state, partition=3, start=0, custom=None):
    tip = {"name": "orders", "id": "lZ6vvmajTWKDBUTV6SQAtQ", "partition": partition}
    if kind == "start":
        return {"type": "REMOTE_LOG_SEGMENT_METADATA_RECORD", "version": 0, "data": {
            "remoteLogSegmentId": {"topicIdPartition": tip, "id": sid}, "startOffset": start,
            "endOffset": start + 12, "brokerId": 1, "maxTimestampMs": 1, "eventTimestampMs": 2,
            "segmentLeaderEpochs": [{"leaderEpoch": 0, "offset": start}],
            "segmentSizeInBytes": len(LOG), "remoteLogSegmentState": state}}
    return {"type": "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD", "version": 0, "data": {
        "remoteLogSegmentId": {"topicIdPartition": tip, "id": sid}, "brokerId": 1,
        "eventTimestampMs": 3, "customMetadata": custom, "remoteLogSegmentState": state}}


def test_ls_lists_a_tier_with_states_from_the_metadata(tmp_path, capsys):
    up, _ = upload(tmp_path, key_id=None)  # segment adh9f8BMS4anaUnD8KWfWg, orders-3
    other, _ = upload(tmp_path, key_id=None, segment_id="Bdh9f8BMS4anaUnD8KWfWg",
                      start_offset=13)
    os.remove(tmp_path / "bucket" / other.key("indexes"))  # an incomplete segment
    plain = tmp_path / "bucket" / "clicks-1"  # a plain copy beside them
    plain.mkdir()
    (plain / "00000000000000000042.log").write_bytes(LOG)
    missing = "Cdh9f8BMS4anaUnD8KWfWg"  # live in the metadata, gone from the tier
    _metadata_segment(tmp_path / "logs" / "__remote_log_metadata-0", [
        _event("start", "adh9f8BMS4anaUnD8KWfWg", 0), _event("start", missing, 0, start=26),
        _event("update", "adh9f8BMS4anaUnD8KWfWg", 1, custom="AQAC"),
        _event("update", missing, 1)])
    assert main(["tiered", "ls", "--json", "--metadata", str(tmp_path / "logs"),
                 str(tmp_path / "bucket")]) == 1
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    got = [(r["layout"], r["topic"], r["partition"], r["start_offset"], r["segment_id"],
            sorted(r["objects"]), r["complete"], r["state"]) for r in rows]
    assert got == [
        ("plain", "clicks", 1, 42, None, [".log"], True, None),
        ("aiven", "orders", 3, 0, "adh9f8BMS4anaUnD8KWfWg",
         [".indexes", ".log", ".rsm-manifest"], True, "COPY_SEGMENT_FINISHED"),
        ("aiven", "orders", 3, 13, "Bdh9f8BMS4anaUnD8KWfWg", [".log", ".rsm-manifest"], False,
         None),
        (None, "orders", 3, 26, missing, [], False, "COPY_SEGMENT_FINISHED"),
    ]
    assert rows[1]["end_offset"] == 12 and rows[1]["segment_size_in_bytes"] == len(LOG)
    assert [r["live"] for r in rows] == [False, True, False, True]
    assert "3 segments (aiven 2, plain 1), 2 incomplete, 0 other objects; metadata: " \
           "2 segments, 2 live, 0 findings; 1 listed not live" in captured.err
    # text, and a tier with nothing wrong
    os.remove(tmp_path / "bucket" / other.key("log"))
    os.remove(tmp_path / "bucket" / other.key("rsm-manifest"))
    assert main(["tiered", "ls", str(tmp_path / "bucket")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("orders-3 00000000000000000000 adh9f8BMS4anaUnD8KWfWg aiven "
                      f"indexes={len(up.objects[up.key('indexes')])} "
                      f"log={len(up.objects[up.key('log')])} "
                      f"rsm-manifest={len(up.objects[up.key('rsm-manifest')])}")
    assert out[-1] == ("Summary: 2 segments (aiven 1, plain 1), 0 incomplete, 0 other objects; "
                       "states unknown (live, orphan or deleted copy): give --metadata "
                       "SNAPSHOT/__remote_log_metadata-N")


def test_ls_marks_an_orphan_copy_not_live(tmp_path, capsys):
    """A copy whose COPY_SEGMENT_STARTED was never followed by its FINISHED (an orphan, as the
    demo plants one) has all its objects, yet is not live: ls says so, not like a finished one."""
    upload(tmp_path, key_id=None)  # adh9f8BMS4anaUnD8KWfWg, finished below
    orphan = "Xdh9f8BMS4anaUnD8KWfWg"
    upload(tmp_path, key_id=None, segment_id=orphan)  # the same offsets, copy never finished
    _metadata_segment(tmp_path / "logs" / "__remote_log_metadata-0", [
        _event("start", "adh9f8BMS4anaUnD8KWfWg", 0), _event("start", orphan, 0),
        _event("update", "adh9f8BMS4anaUnD8KWfWg", 1)])
    assert main(["tiered", "ls", "--metadata", str(tmp_path / "logs"),
                 str(tmp_path / "bucket")]) == 0
    out = capsys.readouterr().out.splitlines()
    [finished] = [line for line in out if "adh9f8BMS4anaUnD8KWfWg" in line]
    [copy] = [line for line in out if orphan in line]
    assert finished.endswith("state=COPY_SEGMENT_FINISHED") and "NOT LIVE" not in finished
    assert copy.endswith("state=COPY_SEGMENT_STARTED NOT LIVE (copy started, never finished: "
                         "an orphan, or a copy under way)")
    assert out[-1].endswith("metadata: 2 segments, 1 live, 0 findings; 1 listed not live "
                            "(orphans, deleted or not in the metadata)")


def test_ls_of_nothing_there_is_one_line_exit_2(tmp_path):
    p = run("tiered", "ls", tmp_path / "nope")
    assert p.returncode == 2 and "nope: no such folder" in one_line(p)
    p = run("tiered", "ls", "--metadata", tmp_path, tmp_path)
    assert p.returncode == 2 and "no __remote_log_metadata-N/*.log under it" in one_line(p)


@pytest.mark.parametrize("argv", [["tiered"], ["tiered", "cat", "x.rsm-manifest"],
                                  ["tiered", "cat", "x.json", "-o", "-"],
                                  ["tiered", "cat", "--start", "5", "--end", "2", "a.log", "-o", "-"],
                                  ["tiered", "cat", "--indexes", "d", "a.log", "-o", "-"]])
def test_usage_errors_are_one_line_exit_2(argv):
    p = run(*argv)
    assert p.returncode == 2 and p.stdout == b""
    one_line(p)
