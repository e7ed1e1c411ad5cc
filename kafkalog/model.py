"""Immutable values the decoder produces.

``Record`` and ``Header`` are ``NamedTuple``s: the decoder makes one per record
on its hot path, and a tuple is the cheapest immutable object Python has.
``Batch``, ``Finding`` and ``Limits`` are frozen, slotted dataclasses; a Batch,
made once per log entry, is stored through its slots (:func:`_slot_init`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import NamedTuple

from .errors import CrcMismatchError

#: Codec ids of the attributes' low three bits, and their names.
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

#: Control record types (key: int16 version, int16 type). 0 and 1 are
#: transaction markers; 2-6 appear in KRaft metadata logs.
CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

#: Kafka's "no timestamp" sentinel (RecordBatch.NO_TIMESTAMP).
NO_TIMESTAMP = -1


class Header(NamedTuple):
    key: str
    value: bytes | None


class Control(NamedTuple):
    """The decoded key (and, for markers, value) of a control record."""

    type_id: int
    type: str  # "ABORT", "COMMIT", another known name, or "UNKNOWN"
    version: int
    coordinator_epoch: int | None  # COMMIT/ABORT only


class Record(NamedTuple):
    """One record (v2) or message (v0/v1).

    ``timestamp`` is milliseconds since the epoch, already resolved: for
    LogAppendTime it is the batch's max timestamp (v2) or the wrapper's (v1).
    It is ``None`` for magic 0, and the stored value otherwise, Kafka's
    NO_TIMESTAMP (-1) included (the Arrow tables turn -1 into null).
    ``key``/``value`` keep ``None`` (length -1) apart from ``b""`` (length 0).
    """

    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    control: Control | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that keep damaged or hostile input from exhausting memory.

    ``max_entry_size``: largest batch/message (12-byte overhead included) the
    reader accepts as plausible. ``max_decompressed_size``: largest payload one
    compressed batch may inflate to. ``max_records_per_batch``: most records
    one batch may declare.
    """

    max_entry_size: int = 256 * 1024 * 1024
    max_decompressed_size: int = 256 * 1024 * 1024
    max_records_per_batch: int = 16 * 1024 * 1024


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Finding:
    """Something wrong (or worth knowing) found while decoding.

    ``position``/``end`` are the absolute byte range in the source the finding
    is about (``end`` exclusive). ``kind`` is one of :data:`FINDING_KINDS`
    (segments), :data:`INDEX_FINDING_KINDS` (index files),
    :data:`INTERNAL_FINDING_KINDS` (internal topics' records) or
    :data:`STATE_FINDING_KINDS` (state files).
    """

    kind: str
    position: int
    end: int
    message: str
    base_offset: int | None = None
    last_offset: int | None = None
    bytes: int | None = None  # for truncated_tail / skipped_bytes: how many

    def to_dict(self) -> dict:
        return {
            "type": "finding",
            "kind": self.kind,
            "position": self.position,
            "end": self.end,
            "message": self.message,
            "base_offset": self.base_offset,
            "last_offset": self.last_offset,
            "bytes": self.bytes,
        }


FINDING_KINDS = (
    "crc_mismatch",  # stored CRC != computed; records still decoded where possible
    "truncated_tail",  # last entry incomplete, or zero-filled preallocated tail
    "corrupt_batch",  # impossible lengths, malformed records, trailing bytes
    "decompression_error",  # codec could not decompress the payload
    "unknown_codec",  # codec id 5-7 (or zstd in v0/v1)
    "limit_exceeded",  # payload larger than the caller's Limits
    "skipped_bytes",  # bytes passed over while resynchronising after corruption
    "offset_regression",  # a batch starts at or below the previous batch's last offset
    "invalid_header_key",  # a record header key that is not UTF-8 (kept, escaped)
    "corrupt_control_record",  # control batch whose record key/value cannot be read
)

#: Findings of the index readers and verifiers (kafkalog.indexes), not of segments.
INDEX_FINDING_KINDS = (
    "index_partial_entry",  # file size not a multiple of the entry size
    "index_mismatch",  # an entry that does not match the .log beside it
)

#: Findings about the content of internal topics' records (kafkalog.internal).
INTERNAL_FINDING_KINDS = (
    "internal_record_error",  # a data record that does not decode with its topic's specs
)

#: Findings of the state-file readers (kafkalog.state_files).
STATE_FINDING_KINDS = (
    "state_crc_mismatch",  # a producer snapshot whose stored CRC-32C is not the computed one
    "state_file_corrupt",  # a state file that does not parse (lines, sizes, versions, order)
)


def _slot_init(cls):
    """Give a frozen, slotted dataclass an ``__init__`` that stores each field
    through its slot descriptor. The generated one goes through
    ``object.__setattr__`` field by field, which for Batch's 23 fields costs
    about twice as much (timeit, 23 keyword arguments: 8.9-16.8 us against
    4.8-5.8 us on a loaded machine); the pure-Python decoder builds one per
    log entry. Same signature and defaults; instances stay frozen."""
    params, body, ns = [], [], {}
    for i, f in enumerate(fields(cls)):
        assert f.default_factory is MISSING, f.name
        ns[f"_set{i}"] = getattr(cls, f.name).__set__
        if f.default is MISSING:
            params.append(f.name)
        else:
            ns[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
        body.append(f"    _set{i}(self, {f.name})\n")
    exec(f"def __init__(self, {', '.join(params)}):\n{''.join(body)}", ns)
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init
    return cls


@_slot_init
@dataclass(frozen=True, slots=True)
class Batch:
    """One top-level log entry: a v2 record batch or a v0/v1 message.

    A compressed v0/v1 wrapper is one Batch whose ``records`` are its inner
    messages; ``base_offset``/``last_offset`` are its first/last inner offsets.
    When the wrapper cannot be decompressed (``decoded`` False) its first inner
    offset is unknown: ``base_offset`` is None (``last_offset`` is the
    wrapper's own offset). It is an int everywhere else.
    Fields that exist only in v2 are ``None`` for v0/v1.
    """

    position: int
    size: int  # total bytes of the entry, 12-byte offset+size overhead included
    magic: int
    base_offset: int | None  # None only for an undecodable v0/v1 compressed wrapper
    last_offset: int
    crc: int
    computed_crc: int | None  # None when CRC verification was off
    attributes: int
    compression: str  # "none", "gzip", "snappy", "lz4", "zstd", or "unknown(N)"
    timestamp_type: str | None  # None for magic 0
    first_timestamp: int | None
    max_timestamp: int | None
    partition_leader_epoch: int | None
    producer_id: int | None
    producer_epoch: int | None
    base_sequence: int | None
    last_offset_delta: int | None
    record_count: int
    is_transactional: bool
    is_control: bool
    has_delete_horizon: bool
    records: tuple[Record, ...] = field(default=(), repr=False)
    decoded: bool = True  # False when the records could not be decoded

    @property
    def end(self) -> int:
        return self.position + self.size

    @property
    def crc_valid(self) -> bool | None:
        """True/False after verification; None when verification was off."""
        if self.computed_crc is None:
            return None
        return self.computed_crc == self.crc

    @property
    def delete_horizon_ms(self) -> int | None:
        """v2 with the delete-horizon bit: baseTimestamp holds the horizon."""
        return self.first_timestamp if self.has_delete_horizon else None

    @property
    def last_sequence(self) -> int | None:
        if self.base_sequence is None or self.last_offset_delta is None:
            return None
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def status(self) -> str:
        """``ok``, ``crc_mismatch``, ``undecoded`` or ``unverified``."""
        return batch_status(self.decoded, self.crc_valid)

    def is_valid(self) -> bool:
        """Whether the stored CRC matches the bytes (verifies if it was not)."""
        return self.crc_valid is True

    def ensure_valid(self) -> None:
        """Raise :class:`CrcMismatchError` unless the CRC matched."""
        if self.computed_crc is None:
            raise CrcMismatchError(
                f"batch at position {self.position} was read without CRC verification",
                self.position,
            )
        if self.computed_crc != self.crc:
            raise CrcMismatchError(
                f"batch at position {self.position}: stored crc 0x{self.crc:08x}, "
                f"computed 0x{self.computed_crc:08x}",
                self.position,
            )


def batch_status(decoded: bool, crc_valid: bool | None) -> str:
    """A batch's ``status``: ``undecoded`` (its records could not be read), else
    ``unverified`` (CRC not checked), ``ok`` or ``crc_mismatch``."""
    if not decoded:
        return "undecoded"
    if crc_valid is None:
        return "unverified"
    return "ok" if crc_valid else "crc_mismatch"


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequence arithmetic: wraps from 2**31-1 to 0; -1 stays -1."""
    if sequence < 0:
        return -1
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment
