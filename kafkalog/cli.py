"""The ``kafkalog`` command line: ``dump`` segments, read ``index`` files.

Exit status: 0 when nothing was found wrong, 1 when findings were reported
(the output is still complete), 2 for usage or I/O errors (one line on
stderr, no traceback).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from typing import Callable, TextIO

from . import __version__, _accel
from .errors import KafkaLogError, SourceError
from .indexes import (
    base_offset_of,
    read_offset_index,
    read_time_index,
    read_txn_index,
    verify_offset_index,
    verify_time_index,
    verify_txn_index,
)
from .log_reader import scan
from .model import Batch, Finding, Limits, increment_sequence

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


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


def _bool(v) -> str:
    return "null" if v is None else str(v).lower()


def batch_text(b: Batch) -> str:
    ts_name = b.timestamp_type or "NoTimestampType"
    horizon = f"OptionalLong[{b.delete_horizon_ms}]" if b.has_delete_horizon else "OptionalLong.empty"
    parts = [
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.record_count}",
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


def record_text(b: Batch, r, print_data: bool) -> str:
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
    elif print_data:
        line += f" key: {_shown(r.key)} payload: {_shown(r.value)}"
    return line


def finding_text(f: Finding) -> str:
    return f"finding: {f.kind} position: {f.position} end: {f.end} {f.message}"


def _emit(out: TextIO, as_json: bool, obj: dict, text: Callable[[], str]) -> None:
    if as_json:
        out.write(json.dumps(obj, separators=(",", ":")))
    else:
        out.write(text())
    out.write("\n")


def cmd_dump(args, out: TextIO) -> int:
    limits = Limits(max_decompressed_size=args.max_decompressed_size)
    status = EXIT_OK
    byte_range = None
    if args.start is not None or args.end is not None:
        byte_range = (args.start or 0, args.end)
    for path in args.files:
        if not args.json:
            out.write(f"Dumping {path}\n")
            try:
                out.write(f"Log starting offset: {base_offset_of(path)}\n")
            except KafkaLogError:
                pass
        try:
            for item in scan(path, verify_crc=not args.no_verify_crc, limits=limits,
                             byte_range=byte_range):
                if isinstance(item, Finding):
                    status = max(status, EXIT_FINDINGS)
                    _emit(out, args.json, {**item.to_dict(), "file": path},
                          lambda: finding_text(item))
                    continue
                _emit(out, args.json, batch_json(item, path), lambda: batch_text(item))
                if args.records:
                    for r in item.records:
                        _emit(out, args.json, record_json(item, r, path),
                              lambda: record_text(item, r, args.print_data))
        except SourceError as err:
            print(f"kafkalog: {err}", file=sys.stderr)
            status = EXIT_ERROR
    return status


_READERS = {
    ".index": (read_offset_index, verify_offset_index),
    ".timeindex": (read_time_index, verify_time_index),
    ".txnindex": (read_txn_index, verify_txn_index),
}


def _index_entry_json(kind: str, e) -> dict:
    return {"type": "index_entry", "index": kind, **e._asdict()}


def _index_entry_text(e) -> str:
    return " ".join(f"{k}: {v}" for k, v in e._asdict().items())


def cmd_index(args, out: TextIO) -> int:
    status = EXIT_OK
    for path in args.files:
        ext = os.path.splitext(path)[1]
        if ext not in _READERS:
            print(f"kafkalog: {path}: not an index file (.index, .timeindex or .txnindex)",
                  file=sys.stderr)
            status = EXIT_ERROR
            continue
        read, verify = _READERS[ext]
        try:
            index = read(path)
            found = list(index.findings)
            if args.verify:
                log = args.log or os.path.splitext(path)[0] + ".log"
                found = verify(index, log)
        except KafkaLogError as err:
            print(f"kafkalog: {err}", file=sys.stderr)
            status = EXIT_ERROR
            continue
        if not args.json:
            out.write(f"Dumping {path}\n")
        for e in index.entries:
            _emit(out, args.json, {**_index_entry_json(index.kind, e), "file": path},
                  lambda: _index_entry_text(e))
        for f in found:
            status = max(status, EXIT_FINDINGS)
            _emit(out, args.json, {**f.to_dict(), "file": path}, lambda: finding_text(f))
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kafkalog",
        description="Decode Kafka log segments (v0/v1/v2, every codec) and their index files.",
        epilog="Exit status: 0 nothing wrong, 1 findings reported (output complete), "
        "2 usage or I/O error.",
    )
    parser.add_argument("--version", action="version", version=f"kafkalog {__version__} ("
                        + ("compiled fast path" if _accel.active() else "pure Python") + ")")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    dump = sub.add_parser(
        "dump",
        help="print the batches (and records) of .log segments",
        description="Print every batch of each segment in file order, like kafka-dump-log.sh, "
        "with findings (CRC mismatches, truncated tails, corruption) where they occur.",
    )
    dump.add_argument("files", nargs="+", metavar="FILE", help="segment (.log) files")
    dump.add_argument("--records", action="store_true", help="also print every record")
    dump.add_argument("--json", action="store_true",
                      help="JSON Lines: batch, record and finding objects; bytes as base64")
    dump.add_argument("--print-data", action="store_true",
                      help="text mode: also print keys and values (UTF-8, escaped)")
    dump.add_argument("--no-verify-crc", action="store_true", help="skip CRC verification")
    dump.add_argument("--start", type=int, metavar="BYTE",
                      help="decode from this byte position (must be an entry start)")
    dump.add_argument("--end", type=int, metavar="BYTE", help="decode up to this byte position")
    dump.add_argument("--max-decompressed-size", type=int, metavar="BYTES",
                      default=Limits().max_decompressed_size,
                      help="largest payload one compressed batch may inflate to "
                      "(default: %(default)s)")
    dump.set_defaults(run=cmd_dump)

    index = sub.add_parser(
        "index",
        help="print .index/.timeindex/.txnindex entries",
        description="Print the entries of index files; --verify checks them against the .log.",
    )
    index.add_argument("files", nargs="+", metavar="FILE")
    index.add_argument("--json", action="store_true", help="JSON Lines output")
    index.add_argument("--verify", action="store_true",
                       help="check entries against the segment (.index: positions and "
                       "last offsets; .timeindex: last offsets and max timestamps; .txnindex: "
                       "an ABORT marker of the producer at each entry's last offset)")
    index.add_argument("--log", metavar="FILE",
                       help="the .log to verify against (default: same name, .log)")
    index.set_defaults(run=cmd_index)
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
