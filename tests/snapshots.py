"""The one way tests build a night's snapshot of a broker's log directory.

``numbered`` writes partition folders of one segment each with ``kafkalog.writer`` (its
records numbered so that the same offset always holds the same record, whichever copy of
the segment holds it: counting lost and duplicated offsets needs nothing else); ``upload``
copies a local snapshot to (moto) S3 the way the demo does (``demo.data.upload``: every
file under the folder, its key the folder's relative path after a prefix). Snapshots with
content of their own write their partition folders with ``write_segments`` (a segment per
base offset, each filled by a function of the writer; ``recs`` the plain records) and share
``upload``.
"""

from __future__ import annotations

from pathlib import Path

from kafkalog.writer import SegmentWriter, WriteRecord

#: the records' first timestamp: 2025-11-21T00:00:00Z
T0 = 1_763_683_200_000
#: the codecs of the batches, in turn (a segment of four batches holds each once)
CODECS = ("none", "lz4", "zstd", "gzip")


def numbered(root: Path, topic: str = "orders", partitions=(0, 1), *, first: int = 0,
             batches: int = 4, codecs=CODECS) -> Path:
    """``root/<topic>-<p>/`` for each partition ``p``: one segment from offset ``first`` of
    ``batches`` batches of 5 records, the ``codecs`` in turn; offset ``i`` of partition ``p``
    holds key ``k``, value ``"p-i"``, timestamp ``T0 + i``. Returns ``root``."""
    for p in partitions:
        with SegmentWriter(root / f"{topic}-{p}", first) as w:
            for b in range(batches):
                i = w.next_offset
                w.append([WriteRecord(b"k", f"{p}-{i + k}".encode(), timestamp=T0 + i + k)
                          for k in range(5)], codec=codecs[b % len(codecs)])
    return root


def recs(n, ts=T0, step=1000):
    """``n`` records ``(k<i>, v<i>)``, their timestamps ``step`` ms apart from ``ts``."""
    return [WriteRecord(b"k%d" % i, b"v%d" % i, timestamp=ts + i * step) for i in range(n)]


def write_segments(directory, spec) -> str:
    """``spec``: list of (base_offset, fn(writer)); returns the directory."""
    for base, fill in spec:
        with SegmentWriter(directory, base) as w:
            fill(w)
    return str(directory)


def upload(root: Path, bucket: str, prefix: str, client) -> dict[str, Path]:
    """Every file under ``root`` to ``s3://bucket/prefix/<its path under root>`` (with the
    demo's own upload); each object's key and the local file it holds."""
    from demo import data as demo_data

    root = Path(root)
    demo_data.upload(root, bucket, prefix, client)
    folder = f"{prefix.strip('/')}/".lstrip("/")
    listed = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder)
    keys = [o["Key"] for page in listed for o in page.get("Contents", ())]
    return {key: root / key[len(folder):] for key in keys if (root / key[len(folder):]).is_file()}
