"""The kafkalog command line: output forms, exit statuses, errors without tracebacks."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalog.cli import main

from test_corpus import FILES

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


def test_help_names_both_commands():
    p = run("--help")
    assert p.returncode == 0
    assert "dump" in p.stdout and "index" in p.stdout and "Exit status" in p.stdout


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

    (tmp_path / "00000000000000000000.index").write_bytes(_offset_index([(0, 0), (2, 82)]))
    assert main(["index", "--verify", str(tmp_path / "00000000000000000000.index")]) == 1
    out = capsys.readouterr().out
    assert "finding: index_mismatch" in out and "ends at offset 1" in out


def test_txn_index_verify(tmp_path, capsys):
    from kafkalog.writer import SegmentWriter, WriteRecord

    with SegmentWriter(tmp_path, 0) as w:
        w.append([WriteRecord(b"k", b"v")], producer_id=5, producer_epoch=0, base_sequence=0,
                 transactional=True)
        abort = w.append_marker(producer_id=5, producer_epoch=0, commit=False)
    txn = tmp_path / "00000000000000000000.txnindex"
    assert main(["index", "--verify", str(txn)]) == 0
    out = capsys.readouterr().out
    assert f"producer_id: 5 first_offset: 0 last_offset: {abort}" in out and "finding" not in out
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
