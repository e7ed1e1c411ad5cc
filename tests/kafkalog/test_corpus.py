"""Every real broker-written segment in tests/data/real decodes exactly as
kafka-python reads it, through the API, the Arrow tables and the CLI's JSON; and
those files are the bytes their README says (repository, commit, path, sha256)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

import kafkalog
from kafkalog.cli import main

from tests.reference import ours, theirs
from tests.segments import CORPUS_DIR as CORPUS, CORPUS_FILES as FILES, CORPUS_IDS as IDS


def test_corpus_is_there():
    assert len(FILES) >= 18, f"expected the real corpus under {CORPUS}"


class Listed(NamedTuple):
    """A file's line of the corpus README."""

    source: str  # owner/repo@commit:path
    size: int
    sha256: str
    batches: int
    records: int  # control records included
    first: int  # offsets
    last: int


def _readme() -> dict[str, Listed]:
    """The README's line of each file, by its path here (each listed once)."""
    line_re = re.compile(
        r"^- `(?P<path>[^`]+)` <- `(?P<source>[\w.-]+/[\w.-]+@[0-9a-f]{40}:[^`]+)` "
        r"\| (?P<size>\d+) B \| (?P<sha256>[0-9a-f]{64}) \| (?P<batches>\d+) batches, "
        r"(?P<records>\d+) records, offsets (?P<first>\d+)\.\.(?P<last>\d+)"
    )
    listed = {}
    for line in (CORPUS / "README.md").read_text().splitlines():
        m = line_re.match(line)
        if m:
            assert m["path"] not in listed, f"{m['path']} is listed twice"
            listed[m["path"]] = Listed(**{k: m[k] if k in ("source", "sha256") else int(m[k])
                                          for k in Listed._fields})
    return listed


def test_every_file_is_the_one_its_readme_names():
    # the vendored files, byte for byte: each listed with its size and sha256, and
    # nothing here that the README does not list
    listed = _readme()
    here = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()} - {"README.md"}
    assert here == set(listed)
    for path, f in listed.items():
        data = (CORPUS / path).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f.size, f.sha256), (path, f.source)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_decodes_like_kafka_python(path):
    expected = theirs(path.read_bytes())
    got = ours(kafkalog.iter_batches(path))
    assert got == expected
    assert kafkalog.findings(path) == []


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_matches_corpus_readme(path):
    f = _readme()[str(path.relative_to(CORPUS))]
    got = list(kafkalog.iter_batches(path))
    # README counts control records among records; so do we here
    assert (len(got), sum(len(b.records) for b in got)) == (f.batches, f.records)
    offsets = [r.offset for b in got for r in b.records]
    assert (offsets[0], offsets[-1]) == (f.first, f.last)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_tables_match_kafka_python(path):
    t = kafkalog.decode(path)
    ref = theirs(path.read_bytes())
    data = [r for b in ref if not b["is_control"] for r in b["records"]]
    markers = [r for b in ref if b["is_control"] for r in b["records"]]
    rows = t.records.to_pylist()
    assert [r["offset"] for r in rows] == [r["offset"] for r in data]
    assert [r["key"] for r in rows] == [r["key"] for r in data]
    assert [r["value"] for r in rows] == [r["value"] for r in data]
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [
        r["headers"] for r in data
    ]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [r["timestamp"] for r in data]
    assert t.markers.column("control_type_id").to_pylist() == [r["control"] for r in markers]
    assert t.batches.num_rows == len(ref)
    assert t.batches.column("crc_valid").to_pylist() == [True] * len(ref)
    assert t.findings.num_rows == 0


def test_kraft_leader_change_marker():
    path = CORPUS / "Niloufar1171+LDI-POC" / "__cluster_metadata-0" / "00000000000000000000.log"
    markers = kafkalog.markers_table(path).to_pylist()
    assert [(m["control_type"], m["control_type_id"]) for m in markers] == [("LEADER_CHANGE", 2)]


def _json_lines(argv, capsys) -> tuple[int, list[dict]]:
    status = main(argv)
    out = capsys.readouterr().out
    return status, [json.loads(line) for line in out.splitlines()]


def _unb64(v):
    return None if v is None else base64.b64decode(v)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_dump_json_records_match_kafka_python(path, capsys):
    status, lines = _json_lines(["dump", "--json", "--records", str(path)], capsys)
    assert status == 0
    ref = theirs(path.read_bytes())
    batches = [o for o in lines if o["type"] == "batch"]
    records = [o for o in lines if o["type"] == "record"]
    assert [o for o in lines if o["type"] == "finding"] == []
    keys = ("base_offset", "last_offset", "magic", "compression", "timestamp_type",
            "first_timestamp", "max_timestamp", "partition_leader_epoch", "producer_id",
            "producer_epoch", "base_sequence", "record_count", "is_transactional",
            "is_control", "crc", "crc_valid")
    assert [{k: b[k] for k in keys} for b in batches] == [{k: b[k] for k in keys} for b in ref]
    expected = [r for b in ref for r in b["records"]]
    assert [{
        "offset": o["offset"], "timestamp": o["timestamp"], "key": _unb64(o["key"]),
        "value": _unb64(o["value"]), "headers": [(k, _unb64(v)) for k, v in o["headers"]],
        "control": o["control"]["type_id"] if "control" in o else None,
    } for o in records] == expected
    # every record follows its own batch
    owner = None
    for o in lines:
        if o["type"] == "batch":
            owner = o
        else:
            assert owner["base_offset"] <= o["offset"] <= owner["last_offset"]


def test_console_script_and_module_agree():
    path = str(FILES[0])
    exe = Path(sys.executable).with_name("kafkalog")
    a = subprocess.run([str(exe), "dump", "--json", "--records", path],
                       capture_output=True, check=True).stdout
    b = subprocess.run([sys.executable, "-m", "kafkalog", "dump", "--json", "--records", path],
                       capture_output=True, check=True).stdout
    assert a == b and a.count(b'"type":"record"') == 3
