"""``kafkalog tiered``: ``cat`` a remote segment back to its original bytes, ``ls`` a tier.

``cat MANIFEST -o OUT`` writes the segment of an ``.rsm-manifest`` (a path or ``s3://`` URI;
its ``.log`` and ``.indexes`` are the objects beside it) byte for byte, a chunk at a time, to a
temporary file beside OUT that replaces OUT only when every chunk has been checked; ``-o -``
streams to stdout (bytes already written stay written if a later chunk fails: the exit status
says so). A plain ``.log`` object (mgoblin/minio-rsm, a copied partition folder) is copied as it
is. ``--private-key`` loads the key ring (:mod:`..tiered.crypto`); ``--indexes DIR`` also writes the
segment's index files under Kafka's names.

``ls PREFIX`` lists the segments under a prefix (a local folder or ``s3://bucket/prefix``),
grouped from the object keys (:mod:`..tiered.layout`); with ``--metadata``
(``__remote_log_metadata`` segments, or folders holding ``__remote_log_metadata-N``) each gets
its state from Kafka's own record (a segment not live, an orphan copy say, is marked
``NOT LIVE (why)``; JSON ``live``), and live segments of the listed partitions whose objects are
not there are listed too; without it the summary says the states are unknown.

Errors are one line on stderr. Exit status: 0 done; 1 the objects are wrong (a malformed
manifest, a chunk that does not give its bytes back; ``ls``: a segment with objects missing, or
metadata that does not decode); 2 could not run (an object or key file that cannot be read, no
key or not the right key for an encrypted segment, usage).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
from collections import Counter

from ..errors import CorruptDataError, KafkaLogError, SourceError
from ..tiered.crypto import KeyRing
from ..tiered.layout import AIVEN, LOG, MANIFEST, group_segments
from ..tiered.objects import open_prefix, open_uri
from ..tiered.reader import RemoteSegment
from .output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, count, finding_text

#: bytes per read when copying a plain object
COPY_STEP = 8 * 1024 * 1024
STDOUT = "-"

EXIT_STATUS = """\
Exit status:
  0  done
  1  the objects are wrong: a malformed manifest, a chunk that does not give its
     bytes back (short, a GCM tag that does not verify, zstd); ls: a segment
     missing some of its objects, metadata that does not decode
  2  could not run: usage error, an object or key file that cannot be read, no
     key or not the right key for an encrypted segment"""


def exit_status(err: KafkaLogError) -> int:
    """1 for objects that are wrong, 2 for what kept the command from running."""
    return EXIT_FINDINGS if isinstance(err, CorruptDataError) else EXIT_ERROR


def key_ring(paths) -> KeyRing | None:
    """The key ring of ``--private-key`` files, or None without any."""
    return KeyRing.from_pem_files(paths) if paths else None


def read_key_ring(args):
    """``--private-key``'s key ring (None without keys), or False after saying why not."""
    try:
        return key_ring(args.private_key)
    except KafkaLogError as err:
        print(f"kafkalog: {err}", file=sys.stderr)
        return False


def is_manifest(uri: str) -> bool:
    return uri.endswith(MANIFEST)


@contextlib.contextmanager
def materialized(seg: RemoteSegment, start: int = 0, end: int | None = None):
    """A temporary file as large as the segment holding its bytes ``[start, end)`` where
    they are (the rest a hole): decoders read it as the segment itself, positions included.
    Chunks are checked before the file is handed out."""
    with tempfile.TemporaryDirectory(prefix="kafkalog-tiered-") as folder:
        path = os.path.join(folder, f"{seg.start_offset:020d}{LOG}")
        with open(path, "wb") as f:
            f.seek(start)
            seg.copy_to(f, start, end)
            f.truncate(seg.size)
        yield path


def add_argument_private_key(parser) -> None:
    parser.add_argument("--private-key", action="append", default=[], metavar="FILE",
                        help="an RSA private key (PKCS#8 PEM) of the plugin's key ring, for "
                        "encrypted segments; repeat for several. Its key id is the file name "
                        "without .pem (key-b.pem is key id key-b)")


def add_parser(sub) -> None:
    tiered = sub.add_parser(
        "tiered", help="read a tiered-storage bucket: cat a remote segment, ls a prefix",
        description="""\
Read the segments a tiered-storage plugin left in a bucket (docs/tiered.md).

cat writes the segment of an .rsm-manifest (a path or s3:// URI; the .log and
.indexes objects beside it are read, only the chunks needed) byte for byte; a
plain .log object (mgoblin/minio-rsm, a copied partition folder) is copied as
it is. Encrypted segments need the plugin's RSA private keys (--private-key).

ls lists the segments under a prefix (a folder or s3://bucket/prefix), with
their states from __remote_log_metadata (--metadata).""",
        epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = tiered.add_subparsers(dest="tiered_command", required=True,
                                     parser_class=type(tiered))
    cat = commands.add_parser(
        "cat", help="write a remote segment's original bytes",
        description="Write the segment of MANIFEST (an .rsm-manifest path or s3:// URI; a "
        "plain .log object is copied as it is) byte for byte to OUT.",
        epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    cat.add_argument("manifest", metavar="MANIFEST")
    cat.add_argument("-o", "--output", required=True, metavar="OUT",
                     help="the file to write (replaced only when complete); - for stdout")
    add_argument_private_key(cat)
    cat.add_argument("--start", type=int, default=0, metavar="BYTE",
                     help="from this byte of the segment (default 0)")
    cat.add_argument("--end", type=int, metavar="BYTE",
                     help="up to this byte of the segment (default: its end)")
    cat.add_argument("--indexes", metavar="DIR",
                     help="also write the segment's index files (.index, .timeindex, "
                     ".snapshot, leader-epoch-checkpoint, .txnindex) into DIR")
    cat.set_defaults(run=cmd_cat)
    ls = commands.add_parser(
        "ls", help="list the segments under a prefix",
        description="List the segments under PREFIX (a folder or s3://bucket/prefix): "
        "Aiven's three objects per segment, or plain .log files; with --metadata, their "
        "states from __remote_log_metadata.",
        epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    ls.add_argument("prefix", metavar="PREFIX")
    ls.add_argument("--metadata", action="append", default=[], metavar="PATH",
                    help="a __remote_log_metadata segment (.log), or a folder holding "
                    "__remote_log_metadata-N folders; repeat for several")
    ls.add_argument("--json", action="store_true",
                    help="JSON Lines, one remote_segment object per segment; the summary "
                    "goes to stderr")
    ls.set_defaults(run=cmd_ls)


# ------------------------------------------------------------------------------ cat
def _copy_plain(uri: str, out, start: int, end: int | None) -> None:
    """Copy bytes ``[start, end)`` of a plain object (a ``.log`` copied as it is)."""
    store, key = open_uri(uri)
    pos = start
    while end is None or pos < end:
        stop = pos + COPY_STEP if end is None else min(end, pos + COPY_STEP)
        data = store.read(key, pos, stop)
        out.write(data)
        pos += len(data)
        if pos < stop:  # a short read: the object ends here
            break
    if (end is not None and pos < end) or (pos == start and start > 0):
        raise SourceError(f"{store.uri(key)}: byte range {start}..{end} is outside the "
                          "object")


def _write(args, out) -> None:
    if args.manifest.endswith(LOG):
        _copy_plain(args.manifest, out, args.start, args.end)
        return
    seg = RemoteSegment.open(args.manifest, key_ring=key_ring(args.private_key))
    seg.copy_to(out, args.start, args.end)
    if args.indexes:
        os.makedirs(args.indexes, exist_ok=True)
        seg.write_indexes(args.indexes)


def cmd_cat(args, stdout) -> int:
    if args.start < 0 or (args.end is not None and args.end < args.start):
        print(f"kafkalog: bad byte range --start {args.start} --end {args.end}: need "
              "0 <= start <= end", file=sys.stderr)
        return EXIT_ERROR
    if not (is_manifest(args.manifest) or args.manifest.endswith(LOG)):
        print(f"kafkalog: {args.manifest}: not an {MANIFEST} or {LOG} object", file=sys.stderr)
        return EXIT_ERROR
    if args.indexes and not is_manifest(args.manifest):
        print(f"kafkalog: --indexes needs an {MANIFEST}", file=sys.stderr)
        return EXIT_ERROR
    try:
        if args.output == STDOUT:
            _write(args, getattr(stdout, "buffer", stdout))
            stdout.flush()
            return EXIT_OK
        folder = os.path.dirname(os.path.abspath(args.output))
        fd, tmp = tempfile.mkstemp(prefix=".kafkalog-", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                _write(args, f)
            os.replace(tmp, args.output)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    except KafkaLogError as err:
        print(f"kafkalog: {err}", file=sys.stderr)
        return exit_status(err)
    except OSError as err:  # OUT itself
        print(f"kafkalog: cannot write {args.output}: {err.strerror or err}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


# ------------------------------------------------------------------------------ ls
_METADATA_DIR = re.compile(r"__remote_log_metadata-(\d+)$")


def _metadata_files(paths) -> list[tuple[str, int | None]]:
    """``(segment path, metadata partition)`` of every ``--metadata`` argument."""
    out = []
    for path in paths:
        if os.path.isdir(path):
            found = []
            for dirpath, _, names in os.walk(path):
                m = _METADATA_DIR.search(dirpath)
                if m and os.path.basename(dirpath) == m.group(0):
                    found += [(os.path.join(dirpath, n), int(m.group(1)))
                              for n in names if n.endswith(LOG)]
            if not found:
                raise FileNotFoundError(f"{path}: no __remote_log_metadata-N/*.log under it")
            out += sorted(found)
        else:
            m = _METADATA_DIR.search(os.path.basename(os.path.dirname(os.path.abspath(path))))
            out.append((path, int(m.group(1)) if m else None))
    return out


def _metadata_rows(paths) -> tuple[list[dict], list]:
    from ..internal.remote_log import read_events, segment_rows

    events, findings = [], []
    for path, partition in _metadata_files(paths):
        events += read_events(path, metadata_partition=partition, findings=findings)
    return segment_rows(events), findings


def _row_json(seg, meta: dict | None, store, with_metadata: bool) -> dict:
    objects = {} if seg is None else {s: n for s, n in sorted(seg.objects.items())}
    return {
        "type": "remote_segment",
        "layout": None if seg is None else seg.layout,
        "topic": meta["topic"] if seg is None else seg.topic,
        "partition": meta["partition"] if seg is None else seg.partition,
        "start_offset": meta["start_offset"] if seg is None else seg.start_offset,
        "end_offset": None if meta is None else meta["end_offset"],
        "topic_id": meta["topic_id"] if seg is None else seg.topic_id,
        "segment_id": meta["segment_id"] if seg is None else seg.segment_id,
        "uri": None if seg is None else store.uri(seg.base),
        "objects": objects,
        "complete": False if seg is None else seg.complete,
        "state": None if meta is None else meta["state"],
        "live": live(None if meta is None else meta["state"], with_metadata),
        "segment_size_in_bytes": None if meta is None else meta["segment_size_in_bytes"],
    }


#: the one state in which a remote segment is live (readable by consumers); what the others mean
LIVE_STATE = "COPY_SEGMENT_FINISHED"
NOT_LIVE = {"COPY_SEGMENT_STARTED": "copy started, never finished: an orphan, or a copy under way",
            "DELETE_SEGMENT_STARTED": "being deleted", "DELETE_SEGMENT_FINISHED": "deleted"}


def live(state: str | None, with_metadata: bool) -> bool | None:
    """Whether a listed segment is live by Kafka's record: None where no metadata was read."""
    if not with_metadata:
        return None
    return state == LIVE_STATE


def _row_text(row: dict) -> str:
    where = f"{row['topic']}-{row['partition']} {row['start_offset']:020d}"
    ident = f" {row['segment_id']}" if row["segment_id"] else ""
    objects = " ".join(f"{s.lstrip('.-')}={n}" for s, n in row["objects"].items()) or "no objects"
    state = f" state={row['state']}" if row["state"] else ""
    if row.get("live") is False and row["layout"] != "plain":
        why = NOT_LIVE.get(row["state"] or "", "not in the metadata")
        state += f" NOT LIVE ({why})"
    end = f" end_offset={row['end_offset']}" if row["end_offset"] is not None else ""
    missing = "" if row["complete"] else " INCOMPLETE"
    return f"{where}{ident} {row['layout'] or '-'} {objects}{end}{state}{missing}"


def cmd_ls(args, stdout) -> int:
    try:
        rows, findings = _metadata_rows(args.metadata) if args.metadata else ([], [])
        store, prefix = open_prefix(args.prefix)
        segments, other = group_segments(store.list(prefix))
    except (KafkaLogError, OSError) as err:
        print(f"kafkalog: {err}", file=sys.stderr)
        return EXIT_ERROR
    by_id = {r["segment_id"]: r for r in rows}
    by_offset: dict = {}
    for r in rows:  # plain copies have no segment id: the live one at that offset, else the last
        key = (r["topic"], r["partition"], r["start_offset"])
        if key not in by_offset or r["state"] == "COPY_SEGMENT_FINISHED":
            by_offset[key] = r
    out_rows, seen = [], set()
    for seg in segments:
        meta = by_id.get(seg.segment_id) if seg.layout == AIVEN else \
            by_offset.get((seg.topic, seg.partition, seg.start_offset))
        if meta is not None:
            seen.add(meta["segment_id"])
        out_rows.append(_row_json(seg, meta, store, bool(args.metadata)))
    listed = {(s.topic, s.partition) for s in segments}
    for r in rows:  # live in Kafka's record, in a listed partition, but not in the listing
        if (r["segment_id"] not in seen and r["state"] == "COPY_SEGMENT_FINISHED"
                and (r["topic"], r["partition"]) in listed):
            out_rows.append(_row_json(None, r, store, True))
    for row in out_rows:
        stdout.write((json.dumps(row, separators=(",", ":")) if args.json else _row_text(row))
                     + "\n")
    for f in findings:
        print(f"kafkalog: metadata: {finding_text(f)}", file=sys.stderr)
    layouts = Counter(r["layout"] for r in out_rows if r["layout"])
    incomplete = sum(1 for r in out_rows if not r["complete"])
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(layouts.items())) or "none"
    summary = (f"{count(len(segments), 'segment', 'segments')} ({kinds}), {incomplete} "
               f"incomplete, {count(other, 'other object', 'other objects')}")
    if args.metadata:
        live = sum(1 for r in rows if r["state"] == "COPY_SEGMENT_FINISHED")
        summary += (f"; metadata: {count(len(rows), 'segment', 'segments')}, {live} live, "
                    f"{count(len(findings), 'finding', 'findings')}")
        not_live = sum(1 for r in out_rows if r["live"] is False and r["layout"] == AIVEN)
        if not_live:
            summary += f"; {not_live} listed not live (orphans, deleted or not in the metadata)"
    elif layouts.get(AIVEN):
        summary += ("; states unknown (live, orphan or deleted copy): give --metadata "
                    "SNAPSHOT/__remote_log_metadata-N")
    if args.json:  # stdout stays JSON objects only
        print(f"kafkalog: {store.uri(prefix)}: {summary}", file=sys.stderr)
    else:
        stdout.write(f"Summary: {summary}\n")
    return EXIT_FINDINGS if incomplete or findings else EXIT_OK
