"""Seven whole real broker log directories (tests/data/broker-dirs: Kafka 3.7 to 4.1,
ZooKeeper and KRaft, clean and unclean shutdowns), vendored byte for byte: each file is the
one its README names, each state file reads to the values a person reads from its bytes,
and each directory read whole gives no false finding."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

BROKER_DIRS = Path(__file__).parent / "data" / "broker-dirs"
#: the seven directories (a literal list: missing data fails the tests, never skips them)
DIRS = (
    "AdiletBatyrbayev0520+air_analyzer",
    "ItumelengMogase+Real-Time-Data-Pipeline-for-Patient-Admissions",
    "KAIPASUBHASH+kafka-logs",
    "Niloufar1171+LDI-POC",
    "VolodymyrZee+kafka",
    "qkrckstjq+spring-kafka",
    "ronem123+rupia-transaction-service",
)
#: the corpus's own description files, and ours (VENDORED.md)
DOCS = ("README.md", "SEGMENTS.md", "state-files-manifest.tsv", "VENDORED.md")

_SEGMENT_LINE = re.compile(r"^- `(?P<path>[^`]+)` <- `(?P<source>[^`]+)` \| (?P<size>\d+) B \| "
                           r"(?P<sha>[0-9a-f]{64}) \|")


def _listed() -> dict[str, tuple[str, int, str]]:
    """local path -> (source, bytes, sha256), from the manifest, SEGMENTS.md and VENDORED.md."""
    out: dict[str, tuple[str, int, str]] = {}
    lines = (BROKER_DIRS / "state-files-manifest.tsv").read_text().splitlines()
    assert lines[0].split("\t") == ["local_path", "source", "bytes", "sha256", "kind"]
    for line in lines[1:]:
        path, source, size, sha, _kind = line.split("\t")
        assert path not in out, path
        out[path] = (source, int(size), sha)
    for doc in ("SEGMENTS.md", "VENDORED.md"):
        for line in (BROKER_DIRS / doc).read_text().splitlines():
            m = _SEGMENT_LINE.match(line)
            if m:
                assert m["path"] not in out, m["path"]
                out[m["path"]] = (m["source"], int(m["size"]), m["sha"])
    return out


def test_the_seven_directories_are_here():
    assert sorted(p.name for p in BROKER_DIRS.iterdir() if p.is_dir()) == list(DIRS), \
        f"expected the vendored broker directories under {BROKER_DIRS}"


def test_every_file_is_the_one_its_readme_names():
    listed = _listed()
    files = {str(p.relative_to(BROKER_DIRS)) for p in BROKER_DIRS.rglob("*") if p.is_file()}
    assert files - set(DOCS) == set(listed)
    assert len(listed) == 1445  # 1,408 state and index files, 21 + 16 segments
    for path, (source, size, sha) in listed.items():
        owner_repo = path.split("/", 1)[0].replace("+", "/", 1)
        assert source.startswith(owner_repo + "@"), (path, source)
        data = (BROKER_DIRS / path).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, sha), path
