"""``kafkalog index``: the entries of ``.index``, ``.timeindex`` and ``.txnindex`` files (and
of a remote segment's ``.indexes``), with ``--verify`` checked against the segment."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import Counter
from typing import TextIO

from ..errors import KafkaLogError
from ..tiered import RemoteSegment
from .files import INDEX_READERS, MANIFEST_SUFFIX, file_type, log_beside
from .output import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_STATUS,
    count,
    emit,
    finding_text,
    say_error,
    summary_text,
    write_summary,
)
from .tiered import add_argument_private_key, exit_status, materialized, read_key_ring


def _index_entry_json(kind: str, e) -> dict:
    return {"type": "index_entry", "index": kind, **e._asdict()}


def _index_entry_text(e) -> str:
    return " ".join(f"{k}: {v}" for k, v in e._asdict().items())


def dump_index(args, path: str, ext: str, log: str | None, out: TextIO, *,
               data: bytes | None = None, base_offset: int | None = None,
               log_name: str | None = None) -> int:
    """Print one index file's entries (and, with ``log``, its check against that .log).
    ``data``: the index's bytes, when ``path`` only names them (a remote segment's index)."""
    read, verify = INDEX_READERS[ext]
    # everything that can fail happens before any output
    index = read(path) if data is None else read(data, base_offset=base_offset)
    found = list(index.findings)
    if log is not None:
        found = verify(index, log)
        log = log_name or log
    size = os.stat(path).st_size if data is None else len(data)
    if not args.json:
        out.write(f"Dumping {path}\n")
    for e in index.entries:
        emit(out, args.json, {**_index_entry_json(index.kind, e), "file": path},
             lambda: _index_entry_text(e))
    for f in found:
        emit(out, args.json, {**f.to_dict(), "file": path}, lambda: finding_text(f))
    verdict = "" if log is None else \
        f"; verified against {log}: {'FAILED' if found else 'OK'}"
    write_summary(args, out, path, summary_text(
        [count(len(index.entries), "entry", "entries")],
        Counter(f.kind for f in found), size, verdict))
    return EXIT_FINDINGS if found else EXIT_OK


def cmd_index(args, out: TextIO) -> int:
    bad = [p for p in args.files if file_type(p) not in INDEX_READERS and
           file_type(p) != MANIFEST_SUFFIX]
    if bad:  # before any output
        print(f"kafkalog: {bad[0]}: not an index file (.index, .timeindex or .txnindex, "
              "also renamed .deleted, .cleaned or .swap) or .rsm-manifest", file=sys.stderr)
        return EXIT_ERROR
    args.ring = read_key_ring(args)
    if args.ring is False:
        return EXIT_ERROR
    status = EXIT_OK
    for path in args.files:
        if file_type(path) == MANIFEST_SUFFIX:
            status = max(status, _index_remote(args, path, out))
            continue
        log = (args.log or log_beside(path)) if args.verify else None
        if log is not None and not args.log and not os.path.exists(log):
            print(f"kafkalog: {path}: no {log} beside it to verify against; name the "
                  "segment with --log FILE", file=sys.stderr)
            status = max(status, EXIT_ERROR)
            continue
        try:
            s = dump_index(args, path, file_type(path), log, out)
        except KafkaLogError as err:
            say_error(path, err)
            s = EXIT_ERROR
        status = max(status, s)
    return status


#: A remote segment's indexes that ``index`` prints, by the manifest's names.
_REMOTE_INDEXES = {"offset": ".index", "timestamp": ".timeindex", "transaction": ".txnindex"}


def _index_remote(args, path: str, out: TextIO) -> int:
    """``index`` of a remote segment: its offset, time and transaction indexes from
    ``.indexes``, each named ``<.indexes URI>#<Kafka's file name>``; with --verify, checked
    against its ``.log`` (read, chunk by chunk, into a temporary file) or --log."""
    try:
        seg = RemoteSegment.open(path, key_ring=args.ring)
        pieces = [(name, seg.index_bytes(name)) for name in _REMOTE_INDEXES]
        with contextlib.ExitStack() as stack:
            log = log_name = None
            if args.verify:
                log = args.log or stack.enter_context(materialized(seg))
                log_name = args.log or seg.uri(seg.log_key)
            status = EXIT_OK
            for name, data in pieces:
                if data is None:
                    continue
                shown = f"{seg.uri(seg.indexes_key)}#{seg.index_file_name(name)}"
                status = max(status, dump_index(
                    args, shown, _REMOTE_INDEXES[name], log, out, data=data,
                    base_offset=seg.start_offset, log_name=log_name))
            return status
    except KafkaLogError as err:
        say_error(path, err)
        return exit_status(err)


def add_parser(sub) -> None:
    index = sub.add_parser(
        "index",
        help="print .index/.timeindex/.txnindex entries",
        description="""\
Print the entries of index files, then a summary line per file (entries,
findings, bytes; on stderr with --json). --verify checks the entries against
the segment's .log and the summary line ends with the verdict, OK or FAILED.
An .rsm-manifest (tiered storage) prints its segment's offset, time and
transaction indexes (--verify: against its remote .log).
An empty index is normal: Kafka writes the first entry after 4 KiB of a
segment.""",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    index.add_argument("files", nargs="+", metavar="FILE")
    index.add_argument("--json", action="store_true",
                       help="JSON Lines output; the summary goes to stderr")
    index.add_argument("--verify", action="store_true",
                       help="check entries against the segment by Kafka's index rules "
                       "(.index: a batch starts at each position, at or before the entry's "
                       "offset, and a batch from there to the next entry holds it; "
                       ".timeindex: the batch holding each offset has the entry's timestamp as "
                       "its max; .txnindex: an ABORT marker of the producer at each entry's "
                       "last offset; entries in order); each finding names its rule")
    index.add_argument("--log", metavar="FILE",
                       help="the .log to verify against (default: the index's name with "
                       ".log, which must be there)")
    add_argument_private_key(index)
    index.set_defaults(run=cmd_index)
