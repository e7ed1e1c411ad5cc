"""The state files of a partition directory: producer-state snapshots, the leader-epoch
checkpoint and ``partition.metadata``.

``<20-digit offset>.snapshot`` (Kafka's ``ProducerStateManager``; the layout is the
``ProducerSnapshot`` message spec shipped in ``internal/specs``), big-endian::

    version int16 (1) | crc uint32 | count int32 | count x (producerId int64, epoch int16,
    lastSequence int32, lastOffset int64, offsetDelta int32, timestamp int64,
    coordinatorEpoch int32, currentTxnFirstOffset int64)

The CRC is CRC-32C over everything after it (from the entry count to the end), so a broken
version or CRC field is only caught by their values. The file name is the offset the
snapshot was taken at (the log end offset then). Kafka refuses a snapshot whose CRC fails;
here the entries are still read, and the mismatch is a finding.

``leader-epoch-checkpoint`` (``LeaderEpochCheckpointFile``), text in the layout of Kafka's
``CheckpointFile``, which the log directory's offset checkpoints share
(:func:`read_checkpoint`; :mod:`kafkalog.log_dir`)::

    0                  <- version
    2                  <- number of entries
    0 0                <- "epoch startOffset", one line per entry
    1 120

Kafka creates a checkpoint file empty before it first writes it, and replaces it whole
(through a temporary file) after: an empty file holds no entries and is not corrupt.

``partition.metadata`` (``PartitionMetadataFile``), text: ``version: 0`` and
``topic_id: <the topic's UUID, 22-character URL-safe base64>``.

Each reader returns a :class:`StateFile`: a header dict, rows (plain dicts with
snake_case keys, ready to become Arrow rows) and findings (``state_crc_mismatch``,
``state_file_corrupt``). Only a file that cannot be read at all raises (:class:`SourceError`).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from .errors import SourceError
from .internal.schema import MessageError, spec, uuid_bytes
from .model import Finding

PRODUCER_SNAPSHOT = "producer_snapshot"
LEADER_EPOCH_CHECKPOINT = "leader_epoch_checkpoint"
PARTITION_METADATA = "partition_metadata"

SNAPSHOT_SUFFIX = ".snapshot"
LEADER_EPOCH_CHECKPOINT_NAME = "leader-epoch-checkpoint"
PARTITION_METADATA_NAME = "partition.metadata"

_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
VERSION_OFFSET = 0
CRC_OFFSET = VERSION_OFFSET + _VERSION.size
ENTRIES_OFFSET = CRC_OFFSET + _CRC.size  # the CRC covers the bytes from here to the end
SNAPSHOT_VERSION = 1

LEADER_EPOCH_CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0


@dataclass(frozen=True, slots=True)
class StateFile:
    kind: str  # PRODUCER_SNAPSHOT, LEADER_EPOCH_CHECKPOINT or PARTITION_METADATA
    header: dict
    rows: tuple[dict, ...]
    findings: tuple[Finding, ...]
    size: int


def read_source(source) -> bytes:
    """A state file's bytes: ``source`` is a path or the bytes; SourceError when the file
    cannot be opened (the only fault a reader raises)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError as err:
        raise SourceError(f"cannot open {source}: {err.strerror or err}") from err


def corrupt_finding(position: int, end: int, message: str) -> Finding:
    """A ``state_file_corrupt`` finding at bytes ``position..end``."""
    return Finding("state_file_corrupt", position, end, message)


def _snapshot_offset(source) -> int | None:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return None
    stem = os.path.basename(os.fspath(source))
    stem = stem[:-len(SNAPSHOT_SUFFIX)] if stem.endswith(SNAPSHOT_SUFFIX) else stem
    return int(stem) if stem.isdigit() else None


def read_producer_snapshot(source) -> StateFile:
    """A producer-state ``.snapshot``: header ``{version, crc, computed_crc, crc_valid,
    snapshot_offset, entry_count}`` and one row per producer."""
    data = read_source(source)
    header = {"version": None, "crc": None, "computed_crc": None, "crc_valid": None,
              "snapshot_offset": _snapshot_offset(source), "entry_count": None}
    findings: list[Finding] = []
    rows: list[dict] = []

    def corrupt(message: str, position: int = 0) -> None:
        findings.append(Finding("state_file_corrupt", position, len(data), message))

    if len(data) < ENTRIES_OFFSET:
        corrupt(f"producer snapshot of {len(data)} bytes, shorter than its version and CRC "
                f"({ENTRIES_OFFSET} bytes)")
        return StateFile(PRODUCER_SNAPSHOT, header, (), tuple(findings), len(data))
    (version,) = _VERSION.unpack_from(data, VERSION_OFFSET)
    (crc,) = _CRC.unpack_from(data, CRC_OFFSET)
    computed = crc32c(data[ENTRIES_OFFSET:])
    header.update(version=version, crc=crc, computed_crc=computed, crc_valid=crc == computed)
    if crc != computed:
        findings.append(Finding(
            "state_crc_mismatch", CRC_OFFSET, len(data),
            f"producer snapshot: stored crc 0x{crc:08x}, computed 0x{computed:08x} "
            f"(over bytes {ENTRIES_OFFSET}..{len(data)})"))
    snapshot_spec = spec("ProducerSnapshot")
    if version not in snapshot_spec.valid:
        corrupt(f"producer snapshot version {version}; this reader knows {SNAPSHOT_VERSION}")
        return StateFile(PRODUCER_SNAPSHOT, header, (), tuple(findings), len(data))
    try:
        body = snapshot_spec.read_exactly(data, version, CRC_OFFSET)
    except MessageError as err:
        corrupt(f"producer snapshot: {err}", err.position or 0)
        return StateFile(PRODUCER_SNAPSHOT, header, (), tuple(findings), len(data))
    entries = body["producerEntries"]
    header["entry_count"] = len(entries)
    for e in entries:
        last_seq, delta = e["lastSequence"], e["offsetDelta"]
        rows.append({
            "producer_id": e["producerId"],
            "producer_epoch": e["epoch"],
            "first_sequence": _decrement_sequence(last_seq, delta),
            "last_sequence": last_seq,
            "last_offset": e["lastOffset"],
            "offset_delta": delta,
            "timestamp": e["timestamp"],
            "coordinator_epoch": e["coordinatorEpoch"],
            # -1: no transaction in progress (Kafka prints Optional.empty)
            "current_txn_first_offset": e["currentTxnFirstOffset"],
        })
    return StateFile(PRODUCER_SNAPSHOT, header, tuple(rows), tuple(findings), len(data))


def _decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: the inverse of increment_sequence."""
    if sequence < 0:
        return -1
    if sequence < decrement:
        return 0x7FFFFFFF - (decrement - sequence) + 1
    return sequence - decrement


def _lines(data: bytes) -> list[tuple[int, int, str]]:
    """``(start, end, text)`` per line; a non-UTF-8 line keeps escapes (and fails to parse)."""
    out, pos = [], 0
    for raw in data.splitlines(keepends=True):
        out.append((pos, pos + len(raw), raw.decode("utf-8", "backslashreplace").rstrip("\r\n")))
        pos += len(raw)
    return out


_WS = re.compile(r"\s+")
_INT = re.compile(r"^-?\d+$")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")  # Integer.parseInt / Long.parseLong: a sign, digits
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


def java_int(text: str, bits: tuple[int, int] = INT32) -> int | None:
    """``text`` as Java's Integer.parseInt (``bits=INT32``) or Long.parseLong (``INT64``)
    reads it, or None where Java throws (no spaces, no other characters, in range)."""
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if bits[0] <= value <= bits[1] else None


@dataclass(frozen=True, slots=True)
class EntryFormat:
    """The entry lines of one kind of checkpoint file: ``fields`` are (row key, parse)
    pairs, each parse returning None for a value Kafka's formatter would refuse."""
    name: str  # the file, for messages
    fields: tuple[tuple[str, object], ...]

    @property
    def grammar(self) -> str:
        return " ".join(key for key, _ in self.fields)


class Checkpoint(NamedTuple):
    header: dict  # {version, entry_count}: as declared, None where the file ends before
    rows: list[dict]
    lines: list[tuple[int, int, int]]  # each row's line: (number from 1, start, end byte)
    findings: list[Finding]


def read_checkpoint(data: bytes, fmt: EntryFormat, version: int = 0) -> Checkpoint:
    """A Kafka checkpoint file's header ``{version, entry_count}``, rows and findings, read
    as Kafka's CheckpointFile.CheckpointReadBuffer reads it: an empty file, or one that
    ends after its version line, holds no entries (Kafka creates the file empty and
    replaces it whole); then ``version``, the entry count and one entry per line, fields
    split on whitespace, each a Java number where it is one; the count must match.
    Every line Kafka would refuse is a ``state_file_corrupt`` finding naming it."""
    lines = data.splitlines(keepends=True)
    out = Checkpoint({"version": None, "entry_count": None}, [], [], [])
    header, rows, findings = out.header, out.rows, out.findings
    pos = 0
    texts = []
    for i, raw in enumerate(lines):
        try:
            texts.append((pos, pos + len(raw), raw.decode("utf-8").rstrip("\r\n")))
        except UnicodeDecodeError as err:
            findings.append(Finding("state_file_corrupt", pos, pos + len(raw),
                                    f"{fmt.name} line {i + 1}: not UTF-8 ({err.reason} at byte "
                                    f"{pos + err.start})"))
            return out
        pos += len(raw)

    def corrupt(i: int, message: str) -> None:
        start, end, _ = texts[i]
        findings.append(Finding("state_file_corrupt", start, end, f"{fmt.name} line {i + 1}: "
                                f"{message}"))

    for i, what in ((0, "version"), (1, "entry_count")):
        if i >= len(texts):
            return out  # Kafka reads no entries
        value = java_int(texts[i][2])
        if value is None:
            corrupt(i, f"{what.replace('_', ' ')} {texts[i][2]!r} is not a number")
            return out
        header[what] = value
        if what == "version" and value != version:
            corrupt(i, f"version {value}; Kafka reads only version {version}")
            return out
    if header["entry_count"] < 0:
        corrupt(1, f"entry count {header['entry_count']} is negative")
        return out
    for i in range(2, len(texts)):
        parts = _WS.split(texts[i][2])
        while parts and parts[-1] == "":  # Java's split drops trailing empty strings
            parts.pop()
        values = [parse(p) for (_, parse), p in zip(fmt.fields, parts)]
        if len(parts) != len(fmt.fields) or any(v is None for v in values):
            corrupt(i, f"{texts[i][2]!r} is not '{fmt.grammar}'")
            continue
        rows.append(dict(zip((key for key, _ in fmt.fields), values)))
        out.lines.append((i + 1, *texts[i][:2]))
    if len(rows) != header["entry_count"] and not findings:
        findings.append(Finding("state_file_corrupt", len(data), len(data),
                                f"{fmt.name} declares {header['entry_count']} entries, holds "
                                f"{len(rows)}"))
    return out


LEADER_EPOCH_ENTRY = EntryFormat(LEADER_EPOCH_CHECKPOINT_NAME, (
    ("epoch", java_int), ("start_offset", lambda t: java_int(t, INT64))))


def read_leader_epoch_checkpoint(source) -> StateFile:
    """A ``leader-epoch-checkpoint``: header ``{version, entry_count}`` (as declared; both
    None for an empty file, which Kafka reads as no entries) and one row ``{epoch,
    start_offset}`` per entry line. Beyond what Kafka's reader refuses, epochs that do not
    increase or start offsets that decrease are findings (Kafka's LeaderEpochFileCache
    drops such entries when it loads them)."""
    data = read_source(source)
    header, rows, lines, findings = read_checkpoint(data, LEADER_EPOCH_ENTRY,
                                                    LEADER_EPOCH_CHECKPOINT_VERSION)
    for previous, row, (line, start, end) in zip(rows, rows[1:], lines[1:]):
        if row["epoch"] <= previous["epoch"] or row["start_offset"] < previous["start_offset"]:
            findings.append(Finding(
                "state_file_corrupt", start, end,
                f"leader-epoch-checkpoint line {line}: epoch {row['epoch']} from offset "
                f"{row['start_offset']} after epoch {previous['epoch']} from offset "
                f"{previous['start_offset']} (epochs must increase, start offsets must not "
                "decrease)"))
    return StateFile(LEADER_EPOCH_CHECKPOINT, header, tuple(rows), tuple(findings), len(data))


def read_partition_metadata(source) -> StateFile:
    """A ``partition.metadata``: header ``{version, topic_id}``, no rows."""
    data = read_source(source)
    lines = _lines(data)
    findings: list[Finding] = []
    header: dict = {"version": None, "topic_id": None}
    expect = (("version", 0), ("topic_id", 1))
    for name, i in expect:
        if i >= len(lines):
            findings.append(Finding("state_file_corrupt", len(data), len(data),
                                    f"partition.metadata: no {name} line"))
            break
        start, end, text = lines[i]
        label, sep, value = text.partition(":")
        if label.strip() != name or not sep or not value.strip():
            findings.append(Finding("state_file_corrupt", start, end,
                                    f"partition.metadata line {i + 1}: {text!r}, expected "
                                    f"'{name}: …'"))
            break
        value = value.strip()
        if name == "version":
            if not _INT.match(value) or int(value) != PARTITION_METADATA_VERSION:
                findings.append(Finding("state_file_corrupt", start, end,
                                        f"partition.metadata version {value!r}; this reader "
                                        f"knows {PARTITION_METADATA_VERSION}"))
                break
            header["version"] = int(value)
        else:
            try:
                uuid_bytes(value)
            except ValueError as err:
                findings.append(Finding("state_file_corrupt", start, end,
                                        f"partition.metadata topic_id: {err}"))
                break
            header["topic_id"] = value
    return StateFile(PARTITION_METADATA, header, (), tuple(findings), len(data))


def state_file_kind(path: str) -> str | None:
    """Which state file ``path`` is by its name (Kafka's rename suffixes looked through
    by the caller), or None."""
    name = os.path.basename(path)
    if name.endswith(SNAPSHOT_SUFFIX):
        return PRODUCER_SNAPSHOT
    if name == LEADER_EPOCH_CHECKPOINT_NAME:
        return LEADER_EPOCH_CHECKPOINT
    if name == PARTITION_METADATA_NAME:
        return PARTITION_METADATA
    return None


READERS = {
    PRODUCER_SNAPSHOT: read_producer_snapshot,
    LEADER_EPOCH_CHECKPOINT: read_leader_epoch_checkpoint,
    PARTITION_METADATA: read_partition_metadata,
}


def read_state_file(path: str) -> StateFile:
    kind = state_file_kind(path)
    if kind is None:
        raise ValueError(f"{path}: not a state file (.snapshot, leader-epoch-checkpoint, "
                         "partition.metadata)")
    return READERS[kind](path)
