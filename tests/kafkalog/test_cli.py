"""The kafkalog command line: output forms, exit statuses, errors without tracebacks."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalog
from kafkalog.cli import main

from tests.segments import CORPUS_FILES as FILES

SMALL = next(p for p in FILES if "first_topic-2" in str(p))  # 16 batches, 18 records


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalog", *argv],
                          capture_output=True, text=True, timeout=120)


def test_text_dump_reads_like_kafka_dump_log(capsys):
    assert main(["dump", "--records", "--print-data", str(SMALL)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Dumping {SMALL}"
    assert lines[1] == "Log starting offset: 0"
    batch_lines = [ln for ln in lines if ln.startswith("baseOffset:")]
    record_lines = [ln for ln in lines if ln.startswith("| offset:")]
    assert len(batch_lines) == 16 and len(record_lines) == 18
    assert batch_lines[0].startswith("baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1")
    assert "compresscodec: none crc: 3324522531 isvalid: true" in batch_lines[0]
    assert record_lines[0].endswith("key: null payload: hello Stephane")


def test_findings_exit_1_and_output_stays_complete(tmp_path, capsys):
    data = bytearray(SMALL.read_bytes())
    data[82 + 70] ^= 0xFF  # a byte inside the second batch's records: CRC fails
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(bytes(data) + b"\x00" * 100)  # and a preallocated zero tail
    assert main(["dump", "--json", "--records", str(bad)]) == 1
    objs = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    findings = [(o["kind"], o["position"]) for o in objs if o["type"] == "finding"]
    assert findings == [("crc_mismatch", 82), ("truncated_tail", len(data))]
    batches = [o for o in objs if o["type"] == "batch"]
    assert len(batches) == 16 and [b["crc_valid"] for b in batches].count(False) == 1
    tail = [o for o in objs if o["type"] == "finding"][-1]
    assert tail["bytes"] == 100


def test_missing_file_is_one_line_exit_2():
    p = run("dump", "/nonexistent/00000000000000000000.log")
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0
    assert "cannot open /nonexistent/00000000000000000000.log" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("argv", [["dump"], ["dump", "--bogus", "x"], ["nope"], []])
def test_usage_errors_are_one_line_exit_2(argv):
    p = run(*argv)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("argv", [["--help"], ["dump", "--help"], ["index", "--help"]])
def test_help_documents_the_exit_statuses(argv):
    p = run(*argv)
    assert p.returncode == 0
    assert "Exit status" in p.stdout
    for status in ("0  read completely", "1  the input is wrong", "2  could not run"):
        assert status in p.stdout, status
    if argv == ["--help"]:
        assert "dump" in p.stdout and "index" in p.stdout
    if argv[0] == "dump":
        assert "--force-log" in p.stdout and ".deleted" in p.stdout


def test_dump_starts_without_importing_pandas():
    # pyarrow imports pandas (~0.3 s) at its first pa.array call: nothing in
    # `import kafkalog` or a plain dump may make one, or every `kafkalog`
    # command starts that much slower
    code = ("import sys, kafkalog, kafkalog.cli; "
            f"kafkalog.cli.main(['dump', '--records', {str(FILES[0])!r}]); "
            "print('pandas' in sys.modules, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.stderr.strip().splitlines()[-1] == "False", p.stderr


def test_byte_range_keeps_positions_absolute(capsys):
    assert main(["dump", "--json", "--start", "82", "--end", "164", str(SMALL)]) == 0
    objs = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert [(o["position"], o["base_offset"]) for o in objs] == [(82, 1)]


def test_bad_byte_range_is_an_error():
    p = run("dump", "--start", "10", "--end", "5", str(SMALL))
    assert p.returncode == 2 and "byte range" in p.stderr


def _offset_index(entries) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def test_index_dump_and_verify(tmp_path, capsys):
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(SMALL.read_bytes())
    # first_topic-2: batch 0 at position 0 holds offset 0; batch 1 at 82 holds offset 1
    (tmp_path / "00000000000000000000.index").write_bytes(
        _offset_index([(0, 0), (1, 82)]) + bytes(8 * 10))
    assert main(["index", "--json", "--verify", str(tmp_path / "00000000000000000000.index")]) == 0
    objs = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert [(o["offset"], o["position"]) for o in objs] == [(0, 0), (1, 82)]

    # (2, 82) is how a broker indexes an append of batches 1 and 2 (its largest offset at
    # the position where it starts): fine. (0, 82) names an offset before that batch.
    (tmp_path / "00000000000000000000.index").write_bytes(_offset_index([(2, 82)]))
    assert main(["index", "--verify", str(tmp_path / "00000000000000000000.index")]) == 0
    capsys.readouterr()
    (tmp_path / "00000000000000000000.index").write_bytes(_offset_index([(0, 0), (0, 82)]))
    assert main(["index", "--verify", str(tmp_path / "00000000000000000000.index")]) == 1
    out = capsys.readouterr().out
    assert "finding: index_mismatch" in out and "starts at offset 1" in out
    assert "(rule batch_starts_by_offset)" in out and "(rule offsets_increase)" in out


def test_txn_index_verify(tmp_path, capsys):
    from kafkalog.writer import SegmentWriter, WriteRecord

    with SegmentWriter(tmp_path, 0) as w:
        w.append([WriteRecord(b"k", b"v")], producer_id=5, producer_epoch=0, base_sequence=0,
                 transactional=True)
        abort = w.append_marker(producer_id=5, producer_epoch=0, commit=False)
    txn = tmp_path / "00000000000000000000.txnindex"
    assert main(["index", "--verify", str(txn)]) == 0
    out = capsys.readouterr().out
    assert f"producer_id: 5 first_offset: 0 last_offset: {abort}" in out
    assert not [ln for ln in out.splitlines() if ln.startswith("finding:")]
    assert out.splitlines()[-1].endswith(": OK")
    # an entry whose last offset is the data batch's, not the marker's
    txn.write_bytes(struct.pack(">hqqqq", 0, 5, 0, 0, 1))
    assert main(["index", "--verify", "--json", str(txn)]) == 1
    found = [o for o in map(json.loads, capsys.readouterr().out.splitlines())
             if o["type"] == "finding"]
    assert [(o["kind"], o["base_offset"]) for o in found] == [("index_mismatch", 0)]
    assert "no control record at offset 0" in found[0]["message"]


def test_index_rejects_other_files():
    p = run("index", str(SMALL))
    assert p.returncode == 2 and "not an index file" in p.stderr


# ---------------------------------------------------------------- issue 17
# Every bad input: one line on stderr, nothing on stdout, the documented status
# (1: the input is wrong; 2: the command could not run).

def _one_line_error(p: subprocess.CompletedProcess, status: int, *words: str) -> str:
    assert p.returncode == status, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == "", p.stdout  # nothing before (or instead of) the error
    assert len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)
    return p.stderr


def test_empty_log_says_so_exit_1(tmp_path):
    empty = tmp_path / "00000000000000000000.log"
    empty.write_bytes(b"")
    _one_line_error(run("dump", str(empty)), 1, "empty file", "not a Kafka log segment")
    _one_line_error(run("dump", "--json", str(empty)), 1, "empty file")


@pytest.mark.parametrize("content, why", [
    (b"this is a text file that someone saved as a segment\n" * 3, "impossible magic"),
    (b"hello\n", "fewer bytes than an entry header"),
])
def test_a_file_that_is_no_segment_says_so_exit_1(tmp_path, content, why):
    text = tmp_path / "00000000000000000000.log"
    text.write_bytes(content)
    err = _one_line_error(run("dump", "--records", str(text)), 1,
                          "not a Kafka log segment", why, str(text))
    assert "corrupt_batch" not in err


def test_damage_inside_a_segment_stays_findings(tmp_path, capsys):
    # the first entry's magic is impossible, but valid entries follow: not
    # "not a segment", the findings are printed in place as before
    data = bytearray(SMALL.read_bytes())
    data[16] = 99
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(bytes(data))
    assert main(["dump", str(bad)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("finding: corrupt_batch position: 0 end: 82 entry at position 0 has "
                        "impossible magic 99")
    assert lines[-1] == ("Summary: 15 batches, 17 records, 2 findings (corrupt_batch 1, "
                         f"skipped_bytes 1), {len(data)} bytes")


@pytest.mark.parametrize("name, words", [
    ("notes.txt", ["unknown file type '.txt'", "--force-log"]),
    ("segment", ["no file type suffix", "leader-epoch-checkpoint"]),
    (".lock", ["no file type suffix", "meta.properties"]),  # a log dir's, but no state
    ("quorum-state.tmp", ["unknown file type '.tmp'"]),
])
def test_dump_refuses_other_file_types_exit_2(tmp_path, name, words):
    other = tmp_path / name
    other.write_bytes(SMALL.read_bytes())
    # refused before anything is printed, even after a file that is fine
    _one_line_error(run("dump", str(SMALL), str(other)), 2, str(other), *words)


def test_force_log_reads_any_name_as_a_log(tmp_path, capsys):
    copy = tmp_path / "segment.bin"
    copy.write_bytes(SMALL.read_bytes())
    assert main(["dump", "--force-log", str(copy)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Dumping {copy}" and len([ln for ln in out if ln.startswith("baseOffset:")]) == 16


def _segment(tmp_path, rename: str = ""):
    """A written segment of 3 batches (offsets 0, 1 and an ABORT marker at 2) with an
    .index and a .timeindex of 2 entries (batches 1 and 2) and a .txnindex of 1."""
    from kafkalog.writer import SegmentWriter, WriteRecord

    with SegmentWriter(tmp_path, 0, index_interval_bytes=1) as w:
        w.append([WriteRecord(b"k", b"v", timestamp=1000)])
        w.append([WriteRecord(b"k", b"w", timestamp=2000)], producer_id=5, producer_epoch=0,
                 base_sequence=0, transactional=True)
        w.append_marker(producer_id=5, producer_epoch=0, commit=False)
    if rename:
        for f in list(tmp_path.iterdir()):
            f.rename(f.with_name(f.name + rename))
    return {f.name.split(".")[1]: f for f in tmp_path.iterdir()}


@pytest.mark.parametrize("rename", ["", ".deleted", ".swap"])
@pytest.mark.parametrize("kind", ["index", "timeindex", "txnindex"])
def test_dump_of_an_index_file_prints_it_as_index_does(tmp_path, capsys, kind, rename):
    path = str(_segment(tmp_path, rename)[kind])
    assert main(["dump", path]) == 0
    dumped = capsys.readouterr().out
    assert main(["index", path]) == 0
    assert dumped == capsys.readouterr().out
    lines = dumped.splitlines()
    assert lines[0] == f"Dumping {path}" and "baseOffset" not in dumped
    n = {"index": 2, "timeindex": 2, "txnindex": 1}[kind]
    assert len(lines) == n + 2 and lines[1].startswith(("offset:", "timestamp:", "version:"))
    assert lines[-1].startswith(f"Summary: {n} {'entry' if n == 1 else 'entries'}, no findings, ")


@pytest.mark.parametrize("rename", ["", ".deleted", ".cleaned", ".swap"])
def test_renamed_segments_are_still_logs(tmp_path, capsys, rename):
    log = _segment(tmp_path, rename)["log"]
    assert main(["dump", "--records", str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    assert len([ln for ln in out if ln.startswith("baseOffset:")]) == 3
    # --verify finds the .log of a renamed index beside it, renamed the same way
    assert main(["index", "--verify", str(log).replace(".log", ".index")]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"verified against {log}: OK")


def test_text_summary_line(tmp_path, capsys):
    assert main(["dump", str(SMALL)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"Summary: 16 batches, 18 records, no findings, {SMALL.stat().st_size} bytes")
    data = bytearray(SMALL.read_bytes())
    data[82 + 70] ^= 0xFF  # a CRC mismatch in batch 1, and a zero tail
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(bytes(data) + bytes(100))
    assert main(["dump", "--start", "82", str(bad)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Summary: 15 batches, 17 records, 2 findings (crc_mismatch 1, truncated_tail 1), "
        f"{len(data) + 100 - 82} bytes")


def test_json_output_stays_json_lines_summary_on_stderr(tmp_path):
    p = run("dump", "--json", "--records", str(SMALL))
    assert p.returncode == 0
    objs = [json.loads(ln) for ln in p.stdout.splitlines()]  # every line an object
    assert {o["type"] for o in objs} == {"batch", "record"}
    assert p.stderr == (f"kafkalog: {SMALL}: 16 batches, 18 records, no findings, "
                        f"{SMALL.stat().st_size} bytes\n")
    idx = str(_segment(tmp_path)["index"])
    p = run("index", "--json", "--verify", idx)
    assert p.returncode == 0
    assert {json.loads(ln)["type"] for ln in p.stdout.splitlines()} == {"index_entry"}
    assert p.stderr.startswith(f"kafkalog: {idx}: 2 entries, no findings, 16 bytes; verified ")
    assert p.stderr.endswith(": OK\n")


def test_index_verify_prints_its_verdict(tmp_path, capsys):
    seg = _segment(tmp_path)
    assert main(["index", "--verify", str(seg["index"])]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"Summary: 2 entries, no findings, 16 bytes; verified against {seg['log']}: OK")
    assert main(["index", str(seg["index"])]) == 0  # no verdict without --verify
    assert capsys.readouterr().out.splitlines()[-1] == "Summary: 2 entries, no findings, 16 bytes"
    data = bytearray(seg["index"].read_bytes())
    data[8:12] = (7).to_bytes(4, "big")  # entry 1 (batch 2 at position 140) names offset 7
    seg["index"].write_bytes(bytes(data))
    assert main(["index", "--verify", str(seg["index"])]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (f"Summary: 2 entries, 1 finding (index_mismatch 1), 16 bytes; "
                    f"verified against {seg['log']}: FAILED")


@pytest.mark.parametrize("argv, status, words", [
    (["dump", "/nonexistent/00000000000000000000.log"], 2, ["cannot open"]),
    (["dump", "--start", "0", "--end", "999999", str(SMALL)], 2, ["byte range", str(SMALL)]),
    (["dump", "--start", "10", "--end", "5", str(SMALL)], 2, ["byte range"]),
    (["dump", "--start", "-1", str(SMALL)], 2, ["byte range"]),
    (["dump", "--json", "--start", "99999", str(SMALL)], 2, ["byte range"]),
    (["index", "/nonexistent/00000000000000000000.index"], 2, ["cannot open"]),
    (["index", str(SMALL)], 2, ["not an index file"]),
])
def test_no_output_before_an_error(argv, status, words):
    _one_line_error(run(*argv), status, *words)


def test_no_output_before_a_verify_error(tmp_path):
    seg = _segment(tmp_path)
    seg["log"].unlink()
    # no .log beside the index (issue 42): the error says how to name one
    _one_line_error(run("index", "--verify", str(seg["index"])), 2, str(seg["log"]), "--log")
    _one_line_error(run("index", "--verify", "--log", str(seg["log"]), str(seg["index"])), 2,
                    "cannot open", str(seg["log"]))
    _one_line_error(run("dump", "--start", "0", str(seg["index"])), 2, "--start/--end", ".log")


def test_several_files_highest_status_wins(tmp_path):
    empty = tmp_path / "00000000000000000000.log"
    empty.write_bytes(b"")
    p = run("dump", str(SMALL), str(empty), "/nonexistent/00000000000000000000.log")
    assert p.returncode == 2
    assert p.stdout.startswith(f"Dumping {SMALL}\n") and p.stdout.count("Dumping") == 1
    assert len(p.stderr.splitlines()) == 2


# A v1 gzip wrapper holding offsets 6..17, built by kafka-python's legacy
# builder: inner offsets relative 0..11, the wrapper's own offset is the last
# (17). Its deflate body is zeroed and its CRC-32 recomputed, so the entry is
# valid but cannot be decompressed: the first inner offset is unknown.
def _undecodable_v1_wrapper(damaged: bool = True) -> bytes:
    import zlib

    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(1, LegacyRecordBatchBuilder.CODEC_GZIP, 1 << 20)
    for i in range(12):
        builder.append(i, timestamp=1000 + i, key=None, value=b"value %d" % i)
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, 17)  # the broker's offset: the last inner one
    value_at = 12 + 4 + 1 + 1 + 8 + 4 + 4  # offset, size, crc, magic, attrs, ts, key len, value len
    (value_len,) = struct.unpack_from(">i", buf, value_at - 4)
    assert struct.unpack_from(">i", buf, value_at - 8) == (-1,) and buf[value_at:value_at + 2] == b"\x1f\x8b"
    if damaged:  # the gzip body, not its 10-byte header or 8-byte trailer
        buf[value_at + 10:value_at + value_len - 8] = bytes(value_len - 18)
    struct.pack_into(">I", buf, 12, zlib.crc32(buf[16:]))  # CRC-32 from magic to the end
    return bytes(buf)


def test_undecodable_v1_wrapper_has_null_base_offset(tmp_path, capsys):
    from tests.paths import assert_same_tables, decode_both

    import kafkalog
    from kafkalog.writer import WriteRecord, encode_v2_batch

    wrapper = _undecodable_v1_wrapper()
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(wrapper)
    assert main(["dump", "--json", str(seg)]) == 1
    batch, finding = map(json.loads, capsys.readouterr().out.splitlines())
    assert (batch["base_offset"], batch["last_offset"], batch["status"]) == (None, 17, "undecoded")
    assert batch["crc_valid"] is True
    assert (finding["kind"], finding["base_offset"], finding["last_offset"]) == (
        "decompression_error", None, 17)
    assert "(last offset 17)" in finding["message"]
    assert main(["dump", str(seg)]) == 1
    assert "baseOffset: null lastOffset: 17 " in capsys.readouterr().out
    # the Arrow tables, on both decoder paths
    pure, compiled = decode_both(seg)
    assert_same_tables(pure, compiled)
    assert pure.batches.column("base_offset").to_pylist() == [None]
    assert pure.findings.column("base_offset").to_pylist() == [None]
    # undamaged, the same wrapper holds offsets 6..17
    (whole,) = kafkalog.iter_batches(_undecodable_v1_wrapper(damaged=False))
    assert (whole.base_offset, whole.last_offset, len(whole.records)) == (6, 17, 12)
    # a batch after the undecodable wrapper is checked against its last offset: no regression
    after = encode_v2_batch(18, [WriteRecord(b"k", b"v")])
    items = list(kafkalog.scan(wrapper + after))
    assert [(type(i).__name__, i.base_offset) for i in items] == [
        ("Batch", None), ("Finding", None), ("Batch", 18)]


def test_undecodable_wrapper_below_the_previous_batch_is_a_regression():
    import kafkalog
    from kafkalog.writer import WriteRecord, encode_v2_batch

    data = encode_v2_batch(20, [WriteRecord(b"k", b"v")]) + _undecodable_v1_wrapper()
    found = kafkalog.findings(data)
    assert [(f.kind, f.base_offset, f.last_offset) for f in found] == [
        ("decompression_error", None, 17), ("offset_regression", None, 17)]
    assert "ends at offset 17, not above the previous batch's last offset 20" in found[1].message


# -- internal topics (--decoder) and state files ----------------------------------------------

def _offsets_segment(tmp_path, folder="__consumer_offsets-7"):
    """Two offset commits, the second with a value version Kafka does not have."""
    from kafkalog.writer import SegmentWriter, WriteRecord, internal_record

    d = tmp_path / folder
    d.mkdir()
    good = internal_record("offsets", {
        "key": {"type": 1, "data": {"group": "g", "topic": "first_topic", "partition": 0}},
        "value": {"version": 3, "data": {"offset": 17, "leaderEpoch": 0, "metadata": "",
                                         "commitTimestamp": 1587577981556}}})
    with SegmentWriter(d, 0) as w:
        w.append([good])
        w.append([WriteRecord(good.key, b"\x00\x09" + good.value[2:])])
    return d / "00000000000000000000.log"


def test_dump_decodes_an_internal_topic_by_its_folder(tmp_path, capsys):
    seg = _offsets_segment(tmp_path)
    assert main(["dump", "--json", "--records", str(seg)]) == 1
    objs = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    records = [o for o in objs if o["type"] == "record"]
    assert records[0]["decoded"] == {
        "key": {"type": 1, "data": {"group": "g", "topic": "first_topic", "partition": 0}},
        "value": {"version": 3, "data": {"offset": 17, "leaderEpoch": 0, "metadata": "",
                                         "commitTimestamp": 1587577981556}}}
    assert records[1]["decoded"] is None
    (finding,) = [o for o in objs if o["type"] == "finding"]
    assert finding["kind"] == "internal_record_error"
    assert (finding["base_offset"], finding["last_offset"]) == (1, 1)
    assert "offset 1: OffsetCommitValue: unknown version 9" in finding["message"]
    assert objs.index(finding) == objs.index(records[1]) + 1  # right after its record

    assert main(["dump", "--records", str(seg)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].endswith(
        ' key: {"type":1,"data":{"group":"g","topic":"first_topic","partition":0}} payload: '
        '{"version":3,"data":{"offset":17,"leaderEpoch":0,"metadata":"",'
        '"commitTimestamp":1587577981556}}')
    assert lines[-2].startswith("finding: internal_record_error ")
    assert lines[-1] == "Summary: 2 batches, 2 records, 1 finding (internal_record_error 1), 228 bytes"


def test_decoder_option(tmp_path, capsys):
    seg = _offsets_segment(tmp_path)
    assert main(["dump", "--json", "--records", "--decoder", "none", str(seg)]) == 0
    assert not any("decoded" in json.loads(ln) for ln in capsys.readouterr().out.splitlines())
    outside = _offsets_segment(tmp_path, folder="copied")  # not named after the topic
    assert main(["dump", "--json", "--records", str(outside)]) == 0
    assert "decoded" not in capsys.readouterr().out
    assert main(["dump", "--json", "--records", "--decoder", "offsets", str(outside)]) == 1
    assert '"decoded":{"key":' in capsys.readouterr().out
    # a KRaft metadata log outside a __cluster_metadata folder (CodeCrafters' fixture)
    meta = next(p for p in FILES if "kafka-gleam" in str(p))
    assert main(["dump", "--json", "--records", "--decoder", "cluster-metadata", str(meta)]) == 0
    decoded = [json.loads(ln)["decoded"] for ln in capsys.readouterr().out.splitlines()
               if '"type":"record"' in ln]
    assert [d["type"] for d in decoded] == ["FEATURE_LEVEL_RECORD", "TOPIC_RECORD",
                                            "PARTITION_RECORD", "PARTITION_RECORD"]
    with pytest.raises(SystemExit) as exit_:
        main(["dump", "--decoder", "bogus", str(meta)])
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_dump_decodes_the_corpus_cluster_metadata_log(capsys):
    # its first 120 batches (every record of the log: tests/kafkalog/test_internal_topics.py)
    meta = next(p for p in FILES if "__cluster_metadata-0" in str(p))
    end = list(kafkalog.iter_batches(meta))[120].position
    assert main(["dump", "--json", "--records", "--end", str(end), str(meta)]) == 0
    records = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()
               if ln.startswith('{"type":"record"')]
    assert len(records) == 120 + 3  # the second batch holds four records
    control = [r for r in records if "control" in r]
    assert len(control) == 1 and "decoded" not in control[0]  # LEADER_CHANGE: not a data record
    assert all(r["decoded"]["type"].endswith("_RECORD") for r in records if "control" not in r)


def test_expand_consumer_protocol(capsys):
    seg = next(p for p in FILES if "__consumer_offsets-17" in str(p))
    assert main(["dump", "--json", "--records", "--expand-consumer-protocol", str(seg)]) == 0
    first = next(json.loads(ln) for ln in capsys.readouterr().out.splitlines()
                 if ln.startswith('{"type":"record"'))
    member = first["decoded"]["value"]["data"]["members"][0]
    assert member["assignment"]["data"]["assignedPartitions"] == [
        {"topic": "first_topic", "partitions": [0, 1, 2]}]


def _state_files(tmp_path):
    from kafkalog.writer import (encode_producer_snapshot, leader_epoch_checkpoint_text,
                                 partition_metadata_text)

    d = tmp_path / "orders-0"
    d.mkdir()
    entry = {"producer_id": 5, "producer_epoch": 0, "last_sequence": 3, "last_offset": 9,
             "offset_delta": 3, "timestamp": 1700000000000}
    (d / "00000000000000000010.snapshot").write_bytes(encode_producer_snapshot([entry]))
    (d / "00000000000000000004.snapshot.deleted").write_bytes(
        encode_producer_snapshot([entry], crc=1))
    (d / "leader-epoch-checkpoint").write_text(leader_epoch_checkpoint_text([(0, 0), (3, 7)]))
    (d / "partition.metadata").write_text(partition_metadata_text("gSnfpEbtQfSDpxM2lhEn9A"))
    return d


def test_dump_reads_state_files(tmp_path, capsys):
    d = _state_files(tmp_path)
    files = [str(d / n) for n in ("00000000000000000010.snapshot", "leader-epoch-checkpoint",
                                  "partition.metadata")]
    assert main(["dump", "--json", *files]) == 0
    objs = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert [o["type"] for o in objs] == ["producer_snapshot", "producer_entry",
                                         "leader_epoch_checkpoint", "epoch_entry", "epoch_entry",
                                         "partition_metadata"]
    assert objs[0]["crc_valid"] is True and objs[0]["snapshot_offset"] == 10
    assert (objs[1]["producer_id"], objs[1]["first_sequence"], objs[1]["last_sequence"]) == (5, 0, 3)
    assert objs[4]["epoch"] == 3 and objs[4]["start_offset"] == 7
    assert objs[5]["topic_id"] == "gSnfpEbtQfSDpxM2lhEn9A"

    assert main(["dump", files[0]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Dumping {files[0]}"
    assert lines[2].startswith("producer_id: 5 producer_epoch: 0 first_sequence: 0 ")
    assert lines[-1] == "Summary: 1 entry, no findings, 56 bytes"


def test_corrupt_snapshot_is_a_finding_exit_1(tmp_path, capsys):
    d = _state_files(tmp_path)
    bad = d / "00000000000000000004.snapshot.deleted"  # renamed: still a snapshot
    assert main(["dump", "--json", str(bad)]) == 1
    objs = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert objs[0]["crc_valid"] is False and objs[1]["type"] == "producer_entry"
    assert objs[2]["kind"] == "state_crc_mismatch" and "stored crc 0x00000001" in objs[2]["message"]
    (d / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n")
    assert main(["dump", str(d / "leader-epoch-checkpoint")]) == 1
    out = capsys.readouterr().out
    assert "finding: state_file_corrupt" in out and "declares 2 entries, holds 1" in out
    for argv, words in [([str(d / "missing.snapshot")], "cannot open"),
                        (["--start", "0", str(d / "partition.metadata")],
                         "--start/--end apply to .log segments only")]:
        assert main(["dump", *argv]) == 2
        got = capsys.readouterr()
        assert got.out == "" and len(got.err.splitlines()) == 1 and words in got.err, got


# -- the rest of a log directory's state files (issue 36) -------------------------------------

BROKER_DIRS = Path(__file__).parents[1] / "data" / "broker-dirs"
RONEM = BROKER_DIRS / "ronem123+rupia-transaction-service"
QKRCKSTJQ = BROKER_DIRS / "qkrckstjq+spring-kafka"


def test_dump_reads_a_log_directorys_files_as_json(capsys):
    deleted = "00000000000000007207-0000000001.checkpoint.deleted"
    files = [RONEM / "meta.properties", RONEM / ".kafka_cleanshutdown",
             RONEM / "cleaner-offset-checkpoint", RONEM / "__cluster_metadata-0" / "quorum-state",
             QKRCKSTJQ / "__cluster_metadata-0" / "quorum-state",
             QKRCKSTJQ / "__cluster_metadata-0" / deleted,
             RONEM / "bootstrap.checkpoint", BROKER_DIRS / "KAIPASUBHASH+kafka-logs"
             / "cleaner-offset-checkpoint"]
    assert main(["dump", "--json", *map(str, files)]) == 0
    got = capsys.readouterr()
    objs = [json.loads(ln) for ln in got.out.splitlines()]
    types = [o["type"] for o in objs]
    assert types == (["meta_properties"] + ["property"] * 4 + ["clean_shutdown"]
                     + ["offset_checkpoint"] + ["offset_entry"] * 2
                     + ["quorum_state", "quorum_state", "voter"]
                     + ["metadata_snapshot"] + ["snapshot_record"] * 6
                     + ["metadata_snapshot"] + ["snapshot_record"] * 6 + ["offset_checkpoint"])
    assert objs[0] == {"type": "meta_properties", "file": str(files[0]), "version": 1,
                       "cluster_id": "0wHLXdrKStejkyBzi8qBEw", "node_id": 1,
                       "directory_id": "yYuMrFRVQVSX0VVQPcMSrA"}
    assert objs[5]["broker_epoch"] == 11
    assert (objs[7]["topic"], objs[7]["partition"], objs[7]["offset"]) == ("__consumer_offsets",
                                                                           31, 3)
    assert objs[9]["voted_directory_id"] == "AAAAAAAAAAAAAAAAAAAAAA" and objs[11]["voter_id"] == 1
    snapshot = objs[12]
    assert (snapshot["end_offset"], snapshot["epoch"], snapshot["deleted"]) == (7207, 1, True)
    assert objs[15]["record_type"] == "ZK_MIGRATION_STATE_RECORD" and objs[15]["data"] == {
        "zkMigrationState": 0}
    assert objs[-1] == {"type": "offset_checkpoint", "file": str(files[-1]),
                        "checkpoint": "cleaner-offset-checkpoint", "version": None,
                        "entry_count": None}  # 0 bytes: created, never written
    summaries = got.err.splitlines()
    assert summaries[0] == f"kafkalog: {files[0]}: 4 properties, no findings, 122 bytes"
    assert summaries[4] == f"kafkalog: {files[4]}: 1 voter, no findings, 126 bytes"
    assert summaries[5] == f"kafkalog: {files[5]}: 6 records, no findings, 502 bytes"
    assert summaries[-1] == f"kafkalog: {files[-1]}: 0 entries, no findings, 0 bytes"


def test_dump_prints_a_snapshot_as_text(capsys):
    path = RONEM / "bootstrap.checkpoint"
    assert main(["dump", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        f"Dumping {path}",
        "end_offset: null epoch: null deleted: false last_contained_log_timestamp: 0 "
        "batch_count: 3 record_count: 4 control_count: 2",
        "offset: 0 batch_position: 0 control: true record_type: SNAPSHOT_HEADER version: 0 "
        'data: {"version":0,"lastContainedLogTimestamp":0}']
    assert lines[3] == ("offset: 1 batch_position: 83 control: false record_type: "
                        'FEATURE_LEVEL_RECORD version: 0 data: {"name":"metadata.version",'
                        '"featureLevel":27}')
    assert lines[-1] == "Summary: 6 records, no findings, 355 bytes"


def test_faulty_log_directory_files_are_findings_exit_1(tmp_path, capsys):
    metadata = tmp_path / "__cluster_metadata-0"
    metadata.mkdir()
    (metadata / "quorum-state").write_text('{"leaderId":1,"data_version":2}')
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\n")
    snapshot = QKRCKSTJQ / "__cluster_metadata-0" / "00000000000000014406-0000000001.checkpoint"
    cut = metadata / snapshot.name
    cut.write_bytes(snapshot.read_bytes()[:427])  # without its footer batch
    for path, words in [(metadata / "quorum-state", "quorum-state: data_version 2"),
                        (tmp_path / "meta.properties", "version 1 without cluster.id"),
                        (cut, "snapshot without its SNAPSHOT_FOOTER")]:
        assert main(["dump", str(path)]) == 1
        out = capsys.readouterr().out
        assert "finding: state_file_corrupt" in out and words in out, out
        assert out.splitlines()[-1].endswith(f"1 finding (state_file_corrupt 1), "
                                             f"{path.stat().st_size} bytes")


def test_dump_decodes_share_group_state_by_its_folder(tmp_path, capsys):
    from tests.share_group_state import SHARE_RECORDS, share_segment

    path = share_segment(tmp_path, SHARE_RECORDS)
    assert main(["dump", "--json", "--records", str(path)]) == 0
    records = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()
               if ln.startswith('{"type":"record"')]
    assert [r["decoded"] for r in records] == [d for _, _, d in SHARE_RECORDS]
    copy = tmp_path / "share.log"  # out of its folder: the decoder is named
    copy.write_bytes(path.read_bytes())
    assert main(["dump", "--json", "--records", "--decoder", "share-group-state", str(copy)]) == 0
    records = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()
               if ln.startswith('{"type":"record"')]
    assert records[1]["decoded"]["value"]["data"]["startOffset"] == -1


def test_a_directory_is_refused_saying_what_to_give_instead(tmp_path):
    """`dump DIR` says it is a directory and gives the glob of its segments: a partition
    folder's own, a log directory's partitions' (tests/data/real: a broker's log dir)."""
    log_dir = SMALL.parents[1]
    partition = SMALL.parent
    segments = sorted(log_dir.glob("*/*.log"))
    _one_line_error(run("dump", str(log_dir)), 2, f"{log_dir}: is a directory",
                    f"a log directory ({len(segments)} segment(s)", f"dump {log_dir}/*/*.log")
    own = sorted(partition.glob("*.log"))
    _one_line_error(run("dump", str(partition)), 2, f"{partition}: is a directory",
                    f"a partition folder ({len(own)} segment(s))", f"dump {partition}/*.log")
    _one_line_error(run("dump", str(tmp_path)), 2, "is a directory", "no .log segment")


def test_the_summary_counts_control_records_apart(capsys):
    """A segment's records are its data records and its control records (markers, KRaft's
    control batches), which the warehouse keeps apart (`markers`, not `records`): the
    summary says both, so its count matches the records table's (the real KRaft log of
    tests/data/real holds a control batch)."""
    metadata = next(p for p in FILES if "__cluster_metadata-0" in str(p))
    assert main(["dump", "--json", "--records", str(metadata)]) == 0
    out, err = capsys.readouterr()
    objs = [json.loads(ln) for ln in out.splitlines()]
    control = {o["base_offset"] for o in objs if o["type"] == "batch" and o["is_control"]}
    records = [o for o in objs if o["type"] == "record"]
    n_control = sum(1 for o in records if "control" in o)
    assert control and n_control > 0
    assert f"{len(records)} records ({len(records) - n_control} data, {n_control} control)" in err
    assert main(["dump", str(SMALL)]) == 0  # no control records: no parenthesis
    assert "18 records, no findings" in capsys.readouterr().out
