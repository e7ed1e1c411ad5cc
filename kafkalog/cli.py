"""The ``kafkalog`` command line: ``dump`` segments and index files, read ``index`` files.

``dump`` chooses what a file is by its name, as Kafka's ``kafka-dump-log.sh``
does: ``.log`` is a segment, ``.index``/``.timeindex``/``.txnindex`` an index
(printed as ``index`` prints it). Kafka renames a segment's files by appending
``.deleted``, ``.cleaned`` or ``.swap``; the suffix before that still decides
(``…0.log.deleted`` is a log). Every state file a broker writes in a log directory
is read too (:mod:`kafkalog.log_dir` says which is which): a partition folder's
producer-state ``.snapshot``, ``leader-epoch-checkpoint`` and ``partition.metadata``;
the directory's ``meta.properties``, ``.kafka_cleanshutdown`` and four offset
checkpoints; KRaft's ``quorum-state``, snapshots (``<offset>-<epoch>.checkpoint``, also
renamed ``.deleted``) and ``bootstrap.checkpoint``. Anything else (a file without a
suffix, say) is refused, unless ``--force-log`` decodes it as a log.

The records of Kafka's internal topics are decoded (``--records``: a ``decoded``
object in JSON, ``key: … payload: …`` in text) when the partition folder names the
topic (``__consumer_offsets-N``, ``__transaction_state-N``, ``__cluster_metadata-0``,
``__share_group_state-N``, ``__remote_log_metadata-N``) or ``--decoder`` says which
(:mod:`kafkalog.internal`).

``--schemas SOURCE`` decodes keys and values written in Schema Registry's wire format
with a registry rebuilt from SOURCE (the snapshot's ``_schemas`` topic, a schema folder
or a registry URL: :mod:`kafkalog.schemas`); a key or value that does not decode is a
``key_decode_error``/``value_decode_error`` finding, a JSON document that breaks its
schema a ``key_schema_violation``/``value_schema_violation``.

A tiered-storage segment's ``.rsm-manifest`` (a path or ``s3://`` URI) is read as its segment
(``dump``) or its indexes (``index``), given ``--private-key`` where it is encrypted; ``kafkalog
tiered`` cats and lists such segments (:mod:`kafkalog.tiered.command`).

Exit status, the same for both commands (with several files the highest wins):
see :data:`EXIT_STATUS`. Errors and refusals are one line on stderr, with no
traceback and nothing printed for that file before them.

Text output ends each file with a summary line; with ``--json`` stdout holds
only the JSON objects (one per line) and the summary line goes to stderr.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
from collections import Counter
from itertools import chain
from typing import Callable, TextIO

from . import __version__, _accel
from .errors import KafkaLogError
from .internal import DECODERS, MessageError, decode, decoder_for_path, expand_consumer_protocol
from .indexes import (
    base_offset_of,
    read_offset_index,
    read_time_index,
    read_txn_index,
    verify_offset_index,
    verify_time_index,
    verify_txn_index,
)
from .log_reader import MAGIC_OFFSET, scan
from .model import Batch, Finding, Limits, increment_sequence
from .kraft import METADATA_SNAPSHOT, QUORUM_STATE
from .log_dir import META_PROPERTIES, OFFSET_CHECKPOINT, READERS as STATE_READERS, file_kind
from .state_files import LEADER_EPOCH_CHECKPOINT, PRODUCER_SNAPSHOT
from . import schemas as sr

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

EXIT_STATUS = """\
Exit status (with several FILEs, the highest):
  0  read completely, nothing wrong (index --verify: every entry agrees)
  1  the input is wrong: findings were reported (the output is still complete),
     or a .log is empty or is not a Kafka log segment, or a remote segment's
     manifest or chunk is wrong (one line on stderr)
  2  could not run: usage error, a file type not read (dump --force-log reads
     any file as a log), a file that cannot be opened, a byte range outside the
     file, no key or not the right key for an encrypted remote segment (one
     line on stderr, nothing printed for that file)"""

#: --decoder: "auto" goes by the partition folder's topic, "none" decodes nothing.
DECODER_CHOICES = ("auto", "none", *DECODERS)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def batch_json(b: Batch, file: str) -> dict:
    return {
        "type": "batch",
        "file": file,
        "position": b.position,
        "size": b.size,
        "base_offset": b.base_offset,
        "last_offset": b.last_offset,
        "magic": b.magic,
        "compression": b.compression,
        "timestamp_type": b.timestamp_type,
        "first_timestamp": b.first_timestamp,
        "max_timestamp": b.max_timestamp,
        "partition_leader_epoch": b.partition_leader_epoch,
        "producer_id": b.producer_id,
        "producer_epoch": b.producer_epoch,
        "base_sequence": b.base_sequence,
        "last_sequence": b.last_sequence,
        "last_offset_delta": b.last_offset_delta,
        "record_count": b.record_count,
        "is_transactional": b.is_transactional,
        "is_control": b.is_control,
        "has_delete_horizon": b.has_delete_horizon,
        "delete_horizon_ms": b.delete_horizon_ms,
        "attributes": b.attributes,
        "crc": b.crc,
        "computed_crc": b.computed_crc,
        "crc_valid": b.crc_valid,
        "status": b.status,
    }


def record_json(b: Batch, r, file: str) -> dict:
    out = {
        "type": "record",
        "file": file,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestamp_type": b.timestamp_type,
        "key": _b64(r.key),
        "value": _b64(r.value),
        "headers": [[h.key, _b64(h.value)] for h in r.headers],
    }
    if b.is_control:
        c = r.control
        out["control"] = {
            "type": c.type if c else "UNREADABLE",
            "type_id": c.type_id if c else None,
            "version": c.version if c else None,
            "coordinator_epoch": c.coordinator_epoch if c else None,
        }
    return out


def _num(v) -> str:
    return "null" if v is None else str(v)


def _bool(v) -> str:
    return "null" if v is None else str(v).lower()


def batch_text(b: Batch) -> str:
    ts_name = b.timestamp_type or "NoTimestampType"
    horizon = f"OptionalLong[{b.delete_horizon_ms}]" if b.has_delete_horizon else "OptionalLong.empty"
    parts = [
        f"baseOffset: {_num(b.base_offset)} lastOffset: {b.last_offset} count: {b.record_count}",
    ]
    if b.magic == 2:
        parts.append(
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} "
            f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
            f"partitionLeaderEpoch: {b.partition_leader_epoch} "
            f"isTransactional: {_bool(b.is_transactional)} isControl: {_bool(b.is_control)} "
            f"deleteHorizonMs: {horizon}"
        )
    parts.append(
        f"position: {b.position} {ts_name}: {b.max_timestamp if b.max_timestamp is not None else -1} "
        f"size: {b.size} magic: {b.magic} compresscodec: {b.compression} "
        f"crc: {b.crc} isvalid: {_bool(b.crc_valid)}"
    )
    if not b.decoded:
        parts.append("records: undecodable")
    return " ".join(parts)


def _shown(value: bytes | None) -> str:
    if value is None:
        return "null"
    return value.decode("utf-8", "backslashreplace")


def record_text(b: Batch, r, print_data: bool, decoded: dict | None = None,
                fields: dict | None = None) -> str:
    ts_name = b.timestamp_type or "NoTimestampType"
    seq = "-1"
    if b.base_sequence is not None and b.base_sequence >= 0:
        seq = str(increment_sequence(b.base_sequence, r.offset - b.base_offset))
    line = (
        f"| offset: {r.offset} {ts_name}: {r.timestamp if r.timestamp is not None else -1} "
        f"keySize: {-1 if r.key is None else len(r.key)} "
        f"valueSize: {-1 if r.value is None else len(r.value)}"
    )
    if b.magic == 2:
        keys = ",".join(h.key for h in r.headers)
        line += f" sequence: {seq} headerKeys: [{keys}]"
    if b.is_control:
        c = r.control
        if c is None:
            line += " controlRecord: unreadable"
        elif c.coordinator_epoch is not None:
            line += f" endTxnMarker: {c.type} coordinatorEpoch: {c.coordinator_epoch}"
        else:
            line += f" controlType: {c.type}({c.type_id})"
    elif decoded is not None:  # as kafka-dump-log.sh prints its decoders' output
        if "key" in decoded:
            line += f" key: {_compact(decoded['key'])} payload: {_compact(decoded['value'])}"
        else:
            line += f" payload: {_compact(decoded)}"
    elif print_data:
        line += f" key: {_shown(r.key)} payload: {_shown(r.value)}"
    if fields is not None:
        line += f" schemas: {_compact(fields)}"
    return line


def _compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def decode_record(decoder: str, r, expand: bool) -> tuple[dict | None, str | None]:
    """``(decoded, why not)`` for one data record of an internal topic. A consumer-protocol
    expansion that fails keeps the record decoded, with its bytes as base64, and says why."""
    try:
        decoded = decode(decoder, r.key, r.value)
    except MessageError as err:
        return None, str(err)
    if expand:
        try:
            decoded = expand_consumer_protocol(decoded)
        except MessageError as err:
            return decoded, f"consumer protocol not expanded: {err}"
    return decoded, None


def internal_record_finding(b: Batch, r, why: str) -> Finding:
    """A record of ``b`` that does not decode with its internal topic's specs."""
    return Finding("internal_record_error", b.position, b.end, f"offset {r.offset}: {why}",
                   r.offset, r.offset)


def schema_decode_findings(b: Batch, r, registry) -> tuple[dict, list[Finding]]:
    """The eight fields of ``kafkalog.schemas.FIELDS`` for one record, and a
    ``key_decode_error``/``value_decode_error`` finding per side that did not decode
    (``*_schema_violation`` per JSON document that decoded but does not validate)."""
    found = []
    headers = r.headers
    key = sr.decode_one(registry, r.key, sr.wire_header(headers, sr.KEY_SCHEMA_HEADER))
    value = sr.decode_one(registry, r.value, sr.wire_header(headers, sr.VALUE_SCHEMA_HEADER))
    for side, d in (("key", key), ("value", value)):
        if d.error is not None:
            found.append(Finding(f"{side}_decode_error", b.position, b.end,
                                 f"offset {r.offset}: {side} {d.error}: {d.reason}", r.offset, r.offset))
        elif d.violations:
            found.append(Finding(f"{side}_schema_violation", b.position, b.end,
                                 f"offset {r.offset}: {side} (schema id {d.schema_id}) does not "
                                 f"validate: {'; '.join(d.violations)}", r.offset, r.offset))
    return sr.fields_of(key, value), found


def finding_text(f: Finding) -> str:
    return f"finding: {f.kind} position: {f.position} end: {f.end} {f.message}"


def _emit(out: TextIO, as_json: bool, obj: dict, text: Callable[[], str]) -> None:
    if as_json:
        out.write(json.dumps(obj, separators=(",", ":")))
    else:
        out.write(text())
    out.write("\n")


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary_text(counts: list[str], kinds: Counter, nbytes: int, verdict: str = "") -> str:
    """``16 batches, 18 records, 2 findings (crc_mismatch 1, truncated_tail 1), 1412 bytes``."""
    n = sum(kinds.values())
    found = "no findings" if not n else (
        f"{_count(n, 'finding', 'findings')} ({', '.join(f'{k} {c}' for k, c in kinds.items())})")
    return f"{', '.join(counts)}, {found}, {_count(nbytes, 'byte', 'bytes')}{verdict}"


def _summary(args, out: TextIO, path: str, text: str) -> None:
    if args.json:  # stdout stays JSON objects only
        print(f"kafkalog: {path}: {text}", file=sys.stderr)
    else:
        out.write(f"Summary: {text}\n")


def _error(path: str, err: Exception) -> None:
    """One line on stderr that names the file."""
    message = str(err)
    print(f"kafkalog: {message if path in message else f'{path}: {message}'}", file=sys.stderr)


class _Refused(Exception):
    """A file the command will not read (one line on stderr, exit 2)."""


#: Kafka renames a segment's files by appending one of these (deleted,
#: cleaned, swap); the suffix before it still says what the file holds.
RENAME_SUFFIXES = (".deleted", ".cleaned", ".swap")
LOG_SUFFIX = ".log"
#: a tiered-storage segment's manifest (kafkalog.tiered)
MANIFEST_SUFFIX = ".rsm-manifest"

_READERS = {
    ".index": (read_offset_index, verify_offset_index),
    ".timeindex": (read_time_index, verify_time_index),
    ".txnindex": (read_txn_index, verify_txn_index),
}



def _split_name(path: str) -> tuple[str, str, str]:
    """``(stem, type suffix, rename suffix)``: ``0.log.deleted`` -> ``("0", ".log", ".deleted")``."""
    stem, ext = os.path.splitext(path)
    rename = ""
    if ext in RENAME_SUFFIXES:
        rename = ext
        stem, ext = os.path.splitext(stem)
    return stem, ext, rename


def file_type(path: str) -> str:
    """The suffix that says what ``path`` holds (``.log``, ``.index``, ...),
    looking through Kafka's rename suffixes; ``""`` if it has none."""
    return _split_name(os.path.basename(path))[1]


def _dump_type(path: str, force_log: bool) -> str:
    """``.log``, an index suffix, or a state file kind (``producer_snapshot``, ...)."""
    if force_log:
        return LOG_SUFFIX
    ext = file_type(path)
    if ext in (LOG_SUFFIX, MANIFEST_SUFFIX) or ext in _READERS:
        return ext
    stem, ext, _ = _split_name(os.path.basename(path))
    state = file_kind(stem + ext)
    if state is not None:
        return state
    what = f"unknown file type {ext!r}" if ext else "no file type suffix"
    raise _Refused(
        f"{path}: {what}: dump reads .log, .index, .timeindex, .txnindex and .snapshot "
        f"files (also renamed .deleted, .cleaned or .swap), the state files of a log "
        f"directory (leader-epoch-checkpoint, partition.metadata, meta.properties, "
        f".kafka_cleanshutdown, the offset checkpoints, quorum-state, KRaft snapshots "
        f"<offset>-<epoch>.checkpoint, bootstrap.checkpoint) and .rsm-manifest; --force-log "
        f"decodes any file as a log"
    )


def _log_beside(index_path: str) -> str:
    """The ``.log`` of an index file's segment (``0.index.swap`` -> ``0.log.swap``)."""
    stem, _, rename = _split_name(index_path)
    return stem + LOG_SUFFIX + rename


def cmd_dump(args, out: TextIO) -> int:
    try:  # everything wrong with the arguments is said before any output
        if (args.start is not None and args.start < 0) or (
                args.end is not None and args.end < (args.start or 0)):
            raise _Refused(f"bad byte range --start {args.start} --end {args.end}: "
                           "need 0 <= start <= end")
        types = [_dump_type(path, args.force_log) for path in args.files]
        if args.schemas is not None and not args.records:
            raise _Refused("--schemas decodes records: it needs --records")
        if args.start is not None or args.end is not None:
            for path, ext in zip(args.files, types):
                if ext not in (LOG_SUFFIX, MANIFEST_SUFFIX):
                    raise _Refused(f"{path}: --start/--end apply to .log segments only "
                                   "(a .log, or an .rsm-manifest's segment)")
    except _Refused as err:
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
    args.ring = _key_ring(args)
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
                s = _dump_index(args, path, ext, None, out)
        except KafkaLogError as err:
            _error(path, err)
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
        where = f"not a Kafka log segment ({_count(n, 'byte', 'bytes')})"
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
        batches = records = 0
        kinds: Counter = Counter()
        for item in chain(head, items):
            if isinstance(item, Finding):
                kinds[item.kind] += 1
                _emit(out, args.json, {**item.to_dict(), "file": shown},
                      lambda: finding_text(item))
                continue
            batches += 1
            records += len(item.records)
            _emit(out, args.json, batch_json(item, shown), lambda: batch_text(item))
            if args.records:
                for r in item.records:
                    obj = record_json(item, r, shown)
                    decoded = why = fields = None
                    found = []
                    if decoder is not None and not item.is_control:
                        decoded, why = decode_record(decoder, r, args.expand_consumer_protocol)
                        obj["decoded"] = decoded
                    if args.registry is not None and not item.is_control:
                        fields, found = schema_decode_findings(item, r, args.registry)
                        obj.update(fields)
                    _emit(out, args.json, obj,
                          lambda: record_text(item, r, args.print_data, decoded, fields))
                    if why is not None:
                        found.insert(0, internal_record_finding(item, r, why))
                    for f in found:
                        kinds[f.kind] += 1
                        _emit(out, args.json, {**f.to_dict(), "file": shown},
                              lambda: finding_text(f))
    finally:
        items.close()
    _summary(args, out, shown, summary_text(
        [_count(batches, "batch", "batches"), _count(records, "record", "records")], kinds, stop - start))
    return EXIT_FINDINGS if kinds else EXIT_OK


def _key_ring(args):
    """``--private-key``'s key ring (None without keys), or False after saying why not."""
    from .tiered.command import key_ring

    try:
        return key_ring(args.private_key)
    except KafkaLogError as err:
        print(f"kafkalog: {err}", file=sys.stderr)
        return False


def _dump_remote_log(args, path: str, out: TextIO) -> int:
    """Dump a remote segment: its chunks (of --start/--end only) are read and checked into a
    temporary file first, so a bad chunk is said before any output."""
    from .tiered import RemoteSegment
    from .tiered.command import exit_status, materialized

    try:
        seg = RemoteSegment.open(path, key_ring=args.ring)
        with materialized(seg, args.start or 0, args.end) as log:
            return _dump_log(args, log, out, name=path)
    except KafkaLogError as err:
        _error(path, err)
        return exit_status(err)


def _index_entry_json(kind: str, e) -> dict:
    return {"type": "index_entry", "index": kind, **e._asdict()}


def _index_entry_text(e) -> str:
    return " ".join(f"{k}: {v}" for k, v in e._asdict().items())


def _dump_index(args, path: str, ext: str, log: str | None, out: TextIO, *,
                data: bytes | None = None, base_offset: int | None = None,
                log_name: str | None = None) -> int:
    """Print one index file's entries (and, with ``log``, its check against that .log).
    ``data``: the index's bytes, when ``path`` only names them (a remote segment's index)."""
    read, verify = _READERS[ext]
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
        _emit(out, args.json, {**_index_entry_json(index.kind, e), "file": path},
              lambda: _index_entry_text(e))
    for f in found:
        _emit(out, args.json, {**f.to_dict(), "file": path}, lambda: finding_text(f))
    verdict = "" if log is None else \
        f"; verified against {log}: {'FAILED' if found else 'OK'}"
    _summary(args, out, path, summary_text(
        [_count(len(index.entries), "entry", "entries")],
        Counter(f.kind for f in found), size, verdict))
    return EXIT_FINDINGS if found else EXIT_OK


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
        return _bool(v)
    return _compact(v) if isinstance(v, (dict, list)) else _num(v)


def _fields_text(obj: dict) -> str:
    return " ".join(f"{k}: {_field_text(v)}" for k, v in obj.items())


def _dump_state(args, path: str, kind: str, out: TextIO) -> int:
    """Print a state file: its header, its rows (producers, epochs) and findings."""
    state = STATE_READERS[kind](path)  # an open error is raised before any output
    if not args.json:
        out.write(f"Dumping {path}\n")
    _emit(out, args.json, {"type": kind, "file": path, **state.header},
          lambda: _fields_text(state.header))
    for row in state.rows:
        _emit(out, args.json, {"type": _STATE_ROW_TYPES[kind][0], "file": path, **row},
              lambda: _fields_text(row))
    for f in state.findings:
        _emit(out, args.json, {**f.to_dict(), "file": path}, lambda: finding_text(f))
    counts = [] if kind not in _STATE_ROW_TYPES else [_count(len(state.rows),
                                                            *_STATE_ROW_TYPES[kind][1:])]
    _summary(args, out, path, summary_text(
        counts or ["1 header"], Counter(f.kind for f in state.findings), state.size))
    return EXIT_FINDINGS if state.findings else EXIT_OK


def cmd_index(args, out: TextIO) -> int:
    bad = [p for p in args.files if file_type(p) not in _READERS and
           file_type(p) != MANIFEST_SUFFIX]
    if bad:  # before any output
        print(f"kafkalog: {bad[0]}: not an index file (.index, .timeindex or .txnindex, "
              "also renamed .deleted, .cleaned or .swap) or .rsm-manifest", file=sys.stderr)
        return EXIT_ERROR
    args.ring = _key_ring(args)
    if args.ring is False:
        return EXIT_ERROR
    status = EXIT_OK
    for path in args.files:
        if file_type(path) == MANIFEST_SUFFIX:
            status = max(status, _index_remote(args, path, out))
            continue
        log = (args.log or _log_beside(path)) if args.verify else None
        try:
            s = _dump_index(args, path, file_type(path), log, out)
        except KafkaLogError as err:
            _error(path, err)
            s = EXIT_ERROR
        status = max(status, s)
    return status


#: A remote segment's indexes that ``index`` prints, by the manifest's names.
_REMOTE_INDEXES = {"offset": ".index", "timestamp": ".timeindex", "transaction": ".txnindex"}


def _index_remote(args, path: str, out: TextIO) -> int:
    """``index`` of a remote segment: its offset, time and transaction indexes from
    ``.indexes``, each named ``<.indexes URI>#<Kafka's file name>``; with --verify, checked
    against its ``.log`` (read, chunk by chunk, into a temporary file) or --log."""
    from .tiered import RemoteSegment
    from .tiered.command import exit_status, materialized

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
                status = max(status, _dump_index(
                    args, shown, _REMOTE_INDEXES[name], log, out, data=data,
                    base_offset=seg.start_offset, log_name=log_name))
            return status
    except KafkaLogError as err:
        _error(path, err)
        return exit_status(err)


def build_parser() -> argparse.ArgumentParser:
    from .tiered.command import add_argument_private_key, add_parser as add_tiered_parser

    parser = _Parser(
        prog="kafkalog",
        description="Decode Kafka log segments (v0/v1/v2, every codec) and their index files.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kafkalog {__version__} ("
                        + ("compiled fast path" if _accel.active() else "pure Python") + ")")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

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
                       help="check entries against the segment (.index: positions and "
                       "last offsets; .timeindex: last offsets and max timestamps; .txnindex: "
                       "an ABORT marker of the producer at each entry's last offset)")
    index.add_argument("--log", metavar="FILE",
                       help="the .log to verify against (default: same name, .log)")
    add_argument_private_key(index)
    index.set_defaults(run=cmd_index)
    add_tiered_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args, sys.stdout)
    except BrokenPipeError:  # `kafkalog dump ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KafkaLogError as err:
        print(f"kafkalog: {err}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
