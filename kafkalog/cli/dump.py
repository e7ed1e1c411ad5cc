"""``kafkalog dump``: every batch (and record) of segments, index entries, state files.

A file is read as its name says (:mod:`.files`); a segment's batches and records are
printed by :mod:`.render`, an index file as ``index`` prints it (:mod:`.index`), a
tiered-storage segment through a temporary copy of its ``.log`` (:mod:`.tiered`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from itertools import chain
from typing import TextIO

from .. import schemas as sr
from ..errors import KafkaLogError
from ..indexes import base_offset_of
from ..internal import DECODERS, decoder_for_path
from ..kraft import METADATA_SNAPSHOT, QUORUM_STATE
from ..log_dir import META_PROPERTIES, OFFSET_CHECKPOINT, READERS as STATE_READERS
from ..log_reader import MAGIC_OFFSET, scan
from ..model import Batch, Finding, Limits
from ..state_files import LEADER_EPOCH_CHECKPOINT, PRODUCER_SNAPSHOT
from ..tiered import RemoteSegment
from .files import LOG_SUFFIX, MANIFEST_SUFFIX, dump_type
from .index import dump_index
from .output import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_STATUS,
    Refused,
    bool_text,
    compact,
    count,
    emit,
    finding_text,
    num_text,
    say_error,
    summary_text,
    write_summary,
)
from .render import (
    batch_json,
    batch_text,
    decode_record,
    internal_record_finding,
    record_json,
    record_text,
    schema_decode_findings,
)
from .tiered import add_argument_private_key, exit_status, materialized, read_key_ring
from .txn_stat import cmd_txn_stat

#: --decoder: "auto" goes by the partition folder's topic, "none" decodes nothing.
DECODER_CHOICES = ("auto", "none", *DECODERS)


def cmd_dump(args, out: TextIO) -> int:
    if args.txn_stat:  # counts of transactions, not a dump (:mod:`.txn_stat`)
        return cmd_txn_stat(args, out)
    try:  # everything wrong with the arguments is said before any output
        if (args.start is not None and args.start < 0) or (
                args.end is not None and args.end < (args.start or 0)):
            raise Refused(f"bad byte range --start {args.start} --end {args.end}: "
                           "need 0 <= start <= end")
        types = [dump_type(path, args.force_log) for path in args.files]
        if args.schemas is not None and not args.records:
            raise Refused("--schemas decodes records: it needs --records")
        if args.start is not None or args.end is not None:
            for path, ext in zip(args.files, types):
                if ext not in (LOG_SUFFIX, MANIFEST_SUFFIX):
                    raise Refused(f"{path}: --start/--end apply to .log segments only "
                                   "(a .log, or an .rsm-manifest's segment)")
    except Refused as err:
        print(f"kafkalog: {err}", file=sys.stderr)
        return EXIT_ERROR
    args.registry = None
    if args.schemas is not None:
        try:  # the registry is read before any output, as the files are opened
            args.registry = sr.open_source(args.schemas)
        except KafkaLogError as err:
            print(f"kafkalog: --schemas {args.schemas}: {err}", file=sys.stderr)
            return EXIT_ERROR
        for problem in args.registry.problems:  # skipped _schemas records: said, not fatal
            print(f"kafkalog: --schemas {args.schemas}: skipped {problem}", file=sys.stderr)
    args.ring = read_key_ring(args)
    if args.ring is False:
        return EXIT_ERROR
    status = EXIT_OK
    for path, ext in zip(args.files, types):
        try:
            if ext == LOG_SUFFIX:
                s = _dump_log(args, path, out)
            elif ext == MANIFEST_SUFFIX:
                s = _dump_remote_log(args, path, out)
            elif ext in STATE_READERS:
                s = _dump_state(args, path, ext, out)
            else:
                s = dump_index(args, path, ext, None, out)
        except KafkaLogError as err:
            say_error(path, err)
            s = EXIT_ERROR
        status = max(status, s)
    return status


def _peek(items) -> list:
    """The first items of a scan, up to its first batch (at most 3): enough to
    tell a segment from something else. Opening the file happens here."""
    head = []
    for item in items:
        head.append(item)
        if isinstance(item, Batch) or len(head) == 3:
            break
    return head


def not_a_segment(head: list, start: int, stop: int, size: int) -> str | None:
    """Why the bytes ``start..stop`` of a ``size``-byte file are no log segment
    at all, from the first items :func:`_peek` took; None if they may be one.

    They are not when the file is empty, when they are too few for one entry
    header, or when the first entry is impossible (magic, size) and no valid
    entry follows anywhere. Damage after a first plausible entry, a truncated
    first entry and a zero-filled (preallocated) file stay findings.
    """
    if any(isinstance(i, Batch) for i in head):
        return None
    if size == 0:
        return "empty file (0 bytes), not a Kafka log segment"
    n = stop - start
    if n == 0:
        return None  # an empty range of a segment: nothing to decode, nothing wrong
    if start == 0 and stop == size:
        where = f"not a Kafka log segment ({count(n, 'byte', 'bytes')})"
    else:
        where = f"no Kafka log entry in bytes {start}..{stop}"
    if n <= MAGIC_OFFSET:
        return f"{where}: fewer bytes than an entry header ({MAGIC_OFFSET + 1})"
    if (len(head) == 2 and head[0].kind == "corrupt_batch" and head[0].position == start
            and head[1].kind == "skipped_bytes" and head[1].end == stop):
        return f"{where}: {head[0].message}, and no valid entry follows"
    return None


def _dump_log(args, path: str, out: TextIO, name: str | None = None) -> int:
    """Dump the segment at ``path``; ``name`` is what output calls it (default ``path``)."""
    shown = name or path
    byte_range = None
    if args.start is not None or args.end is not None:
        byte_range = (args.start or 0, args.end)
    decoder = decoder_for_path(shown) if args.decoder == "auto" else (
        None if args.decoder == "none" else args.decoder)
    items = scan(path, verify_crc=not args.no_verify_crc,
                 limits=Limits(max_decompressed_size=args.max_decompressed_size),
                 byte_range=byte_range)
    try:
        head = _peek(items)  # open errors and bad ranges: raised before any output
        size = os.stat(path).st_size
        start = args.start or 0
        stop = size if args.end is None else args.end
        why = not_a_segment(head, start, stop, size)
        if why:
            print(f"kafkalog: {shown}: {why}", file=sys.stderr)
            return EXIT_FINDINGS
        if not args.json:
            out.write(f"Dumping {shown}\n")
            try:
                out.write(f"Log starting offset: {base_offset_of(shown)}\n")
            except KafkaLogError:
                pass
        batches = records = control = 0
        kinds: Counter = Counter()
        for item in chain(head, items):
            if isinstance(item, Finding):
                kinds[item.kind] += 1
                emit(out, args.json, {**item.to_dict(), "file": shown},
                     lambda: finding_text(item))
                continue
            batches += 1
            records += len(item.records)
            control += len(item.records) if item.is_control else 0
            emit(out, args.json, batch_json(item, shown), lambda: batch_text(item))
            if args.records:
                _dump_records(args, item, shown, decoder, out, kinds)
    finally:
        items.close()
    write_summary(args, out, shown, summary_text(
        [count(batches, "batch", "batches"), records_text(records, control)], kinds,
        stop - start))
    return EXIT_FINDINGS if kinds else EXIT_OK


def records_text(records: int, control: int) -> str:
    """``36 records (34 data, 2 control)``: a segment's records, its control records (the
    transaction markers, which the warehouse keeps in ``markers``, not ``records``) apart."""
    text = count(records, "record", "records")
    return f"{text} ({records - control} data, {control} control)" if control else text


def _dump_records(args, b: Batch, shown: str, decoder: str | None, out: TextIO,
                  kinds: Counter) -> None:
    """Print the records of ``b`` (``--records``), each followed by its findings (a record of
    an internal topic that does not decode; with ``--schemas``, a key or value that does not
    decode or validate), counted into ``kinds``."""
    for r in b.records:
        obj = record_json(b, r, shown)
        decoded = why = fields = None
        found = []
        if decoder is not None and not b.is_control:
            decoded, why = decode_record(decoder, r, args.expand_consumer_protocol)
            obj["decoded"] = decoded
        if args.registry is not None and not b.is_control:
            fields, found = schema_decode_findings(b, r, args.registry)
            obj.update(fields)
        emit(out, args.json, obj, lambda: record_text(b, r, args.print_data, decoded, fields))
        if why is not None:
            found.insert(0, internal_record_finding(b, r, why))
        for f in found:
            kinds[f.kind] += 1
            emit(out, args.json, {**f.to_dict(), "file": shown}, lambda: finding_text(f))


def _dump_remote_log(args, path: str, out: TextIO) -> int:
    """Dump a remote segment: its chunks (of --start/--end only) are read and checked into a
    temporary file first, so a bad chunk is said before any output."""
    try:
        seg = RemoteSegment.open(path, key_ring=args.ring)
        with materialized(seg, args.start or 0, args.end) as log:
            return _dump_log(args, log, out, name=path)
    except KafkaLogError as err:
        say_error(path, err)
        return exit_status(err)


#: The JSON "type" of a state file's rows, and how the summary counts them.
_STATE_ROW_TYPES = {
    PRODUCER_SNAPSHOT: ("producer_entry", "entry", "entries"),
    LEADER_EPOCH_CHECKPOINT: ("epoch_entry", "entry", "entries"),
    OFFSET_CHECKPOINT: ("offset_entry", "entry", "entries"),
    META_PROPERTIES: ("property", "property", "properties"),
    QUORUM_STATE: ("voter", "voter", "voters"),
    METADATA_SNAPSHOT: ("snapshot_record", "record", "records"),
}


def _field_text(v) -> str:
    if isinstance(v, bool):
        return bool_text(v)
    return compact(v) if isinstance(v, (dict, list)) else num_text(v)


def _fields_text(obj: dict) -> str:
    return " ".join(f"{k}: {_field_text(v)}" for k, v in obj.items())


def _dump_state(args, path: str, kind: str, out: TextIO) -> int:
    """Print a state file: its header, its rows (producers, epochs) and findings."""
    state = STATE_READERS[kind](path)  # an open error is raised before any output
    if not args.json:
        out.write(f"Dumping {path}\n")
    emit(out, args.json, {"type": kind, "file": path, **state.header},
         lambda: _fields_text(state.header))
    for row in state.rows:
        emit(out, args.json, {"type": _STATE_ROW_TYPES[kind][0], "file": path, **row},
             lambda: _fields_text(row))
    for f in state.findings:
        emit(out, args.json, {**f.to_dict(), "file": path}, lambda: finding_text(f))
    counts = [] if kind not in _STATE_ROW_TYPES else [count(len(state.rows),
                                                            *_STATE_ROW_TYPES[kind][1:])]
    write_summary(args, out, path, summary_text(
        counts or ["1 header"], Counter(f.kind for f in state.findings), state.size))
    return EXIT_FINDINGS if state.findings else EXIT_OK


def add_parser(sub) -> None:
    dump = sub.add_parser(
        "dump",
        help="print the batches (and records) of .log segments, or index entries",
        description="""\
Print every batch of each segment in file order, like kafka-dump-log.sh, with
findings (CRC mismatches, truncated tails, corruption) where they occur, then a
summary line per file (batches, records, findings by kind, bytes; on stderr
with --json, so stdout stays JSON Lines).

The file name decides what a FILE is: .log a segment; .index, .timeindex and
.txnindex an index, printed as `kafkalog index` prints it; the state files a
broker writes, read with their faults as findings: a producer-state .snapshot
(producers, CRC-32C checked), leader-epoch-checkpoint (epochs),
partition.metadata (topic id), meta.properties (the directory's identity),
.kafka_cleanshutdown (broker epoch), recovery-point-, replication-,
log-start- and cleaner-offset-checkpoint (topic partition offset), KRaft's
quorum-state (election state, voters) and snapshots, <offset>-<epoch>.checkpoint
and bootstrap.checkpoint (header, then every record decoded); an .rsm-manifest
(a path or s3:// URI) a tiered-storage segment, read as its .log
(--private-key for an encrypted one; see kafkalog tiered). Kafka's rename
suffixes are looked through: 0.log.deleted, .log.cleaned and .log.swap are
logs, 0.index.swap an index, ….checkpoint.deleted a snapshot. Anything else (a
file without a suffix, say) is refused (exit 2) unless --force-log.

Records of Kafka's internal topics are decoded with Kafka's message specs
(--records: a "decoded" object per data record in JSON, `key: {...} payload:
{...}` in text) when the partition folder names the topic (__consumer_offsets-N,
__transaction_state-N, __cluster_metadata-0, __share_group_state-N,
__remote_log_metadata-N), or as
--decoder says; a record that does not decode is an internal_record_error
finding.

With --schemas SOURCE, keys and values in Schema Registry's wire format are
decoded (JSON: key_schema_id, value_schema_id, key_format, value_format,
key_decoded, value_decoded, key_error, value_error on each record; text: a
`schemas: {...}` object); one that does not decode is a key_decode_error or
value_decode_error finding, a JSON document that breaks its schema a
key_schema_violation or value_schema_violation. Values not in the wire format
are not errors.

An empty .log, or one whose first bytes are no entry header and where no valid
entry follows (a text file, say), is said in one line on stderr (exit 1);
damage inside a segment is reported as findings in place.""",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dump.add_argument("files", nargs="+", metavar="FILE",
                      help="segment (.log), index (.index, .timeindex, .txnindex) or state "
                      "(.snapshot, leader-epoch-checkpoint, partition.metadata, "
                      "meta.properties, .kafka_cleanshutdown, *-offset-checkpoint, "
                      "quorum-state, *.checkpoint) files, or a tiered-storage segment's "
                      ".rsm-manifest")
    dump.add_argument("--records", action="store_true", help="also print every record")
    dump.add_argument("--txn-stat", action="store_true",
                      help="instead of a dump, count each partition's transactions (FILE: a "
                      ".log, a partition folder or a log directory): committed, aborted, "
                      "empty (a marker that ends no data), open at the end (listed), stale "
                      "markers (an epoch below the open transaction's), batches and duration "
                      "per transaction; klog's txn-stat, offline")
    dump.add_argument("--json", action="store_true",
                      help="JSON Lines: batch, record and finding objects (index_entry and "
                      "finding for index files; for a state file its header, its rows "
                      "(producer_entry, epoch_entry, offset_entry, property, voter, "
                      "snapshot_record) and findings); bytes as base64; the summary goes to "
                      "stderr")
    dump.add_argument("--print-data", action="store_true",
                      help="text mode: also print keys and values (UTF-8, escaped)")
    dump.add_argument("--force-log", action="store_true",
                      help="decode every FILE as a log segment, whatever its name "
                      "(e.g. a segment saved under another name)")
    dump.add_argument("--no-verify-crc", action="store_true", help="skip CRC verification")
    dump.add_argument("--start", type=int, metavar="BYTE",
                      help="decode from this byte position (must be an entry start; .log only)")
    dump.add_argument("--end", type=int, metavar="BYTE",
                      help="decode up to this byte position (.log only)")
    dump.add_argument("--decoder", choices=DECODER_CHOICES, default="auto",
                      help="how to decode the records' keys and values (with --records): "
                      "auto (default) by the partition folder's topic (__consumer_offsets: "
                      "offsets, __transaction_state: transaction-log, __cluster_metadata: "
                      "cluster-metadata, __share_group_state: share-group-state, "
                      "__remote_log_metadata: remote-log-metadata; other "
                      "topics: none), or as named")
    dump.add_argument("--schemas", metavar="SOURCE",
                      help="with --records, decode keys and values in Schema Registry's wire "
                      "format (Avro, JSON Schema, Protobuf) with the schemas of SOURCE: a "
                      "_schemas segment, its partition folder or a snapshot folder holding "
                      "_schemas-0; a folder of schema files (<id>.avsc, <id>.proto, <id>.json, "
                      "or the registry's version JSON); or a registry URL (http[s]://, read "
                      "only); adds key/value_schema_id, _format, _decoded, _error to each record")
    dump.add_argument("--expand-consumer-protocol", action="store_true",
                      help="offsets decoder: also read the subscription and assignment bytes "
                      "of a consumer group's members (Kafka's consumer protocol)")
    add_argument_private_key(dump)
    dump.add_argument("--max-decompressed-size", type=int, metavar="BYTES",
                      default=Limits().max_decompressed_size,
                      help="largest payload one compressed batch may inflate to "
                      "(default: %(default)s)")
    dump.set_defaults(run=cmd_dump)
