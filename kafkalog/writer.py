"""Write Kafka log segments as a broker leaves them on disk.

The decoder's twin, for tests, fixtures and tools that need real segments
without a broker: v0/v1 messages (plain and compressed wrappers), v2 record
batches (every codec, idempotent and transactional producers, control
markers, compaction gaps, empty batches, delete horizons), and the
``.index``/``.timeindex``/``.txnindex`` files Kafka keeps beside a ``.log``.

Wire grammars and CRC coverage are documented where they are read:
``default_records`` (v2: CRC-32C from ``attributes`` to the end) and
``legacy_records`` (v0/v1: CRC-32 from ``magic`` to the end). Codec quirks
(xerial snappy framing, the magic-0 lz4 header checksum) live in ``codecs``;
this module only calls :func:`kafkalog.codecs.compress`.

Choices a broker would make for us, fixed here so output is reproducible:

* A record without a timestamp gets :data:`DEFAULT_TIMESTAMP`; a batch with no
  records gets :data:`~kafkalog.model.NO_TIMESTAMP` (-1) as base and max
  timestamp unless told otherwise.
* Record offsets are ``base + offset_delta``; an unset ``offset_delta`` is the
  record's index in the batch. Explicit deltas (strictly increasing) write
  what log compaction leaves: gaps inside a batch, and a ``lastOffsetDelta``
  beyond the last surviving record.
* Indexes follow ``LogSegment.append`` of Kafka 3.7+: for every batch, *before*
  its bytes are counted, if more than ``index_interval_bytes`` were written
  since the last index entry, the offset index gets (batch's last offset,
  batch position) and the time index gets (largest timestamp so far, last
  offset of the batch holding it) if that timestamp is above its last entry.
  The first batch of a segment is therefore never indexed.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Iterable, NamedTuple, Sequence

from crc32c import crc32c

from . import codecs
from . import default_records as v2
from . import legacy_records as legacy
from .errors import UnknownCodecError
from .indexes import OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY
from .model import CODEC_NAMES, CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP

#: Timestamp given to records written without one (2023-11-14T22:13:20Z).
DEFAULT_TIMESTAMP = 1_700_000_000_000

#: Control record types of transaction markers (key: int16 version, int16 type).
ABORT, COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")

_OFFSET_AND_SIZE = struct.Struct(">qi")
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MAGIC_AND_ATTRIBUTES = struct.Struct(">bb")
_INT32_MAX = 0x7FFFFFFF


class WriteRecord(NamedTuple):
    """One record to write.

    ``headers`` keys are ``str`` (written UTF-8) or ``bytes`` (written as they
    are, e.g. to produce a header key that is not UTF-8). ``timestamp`` None
    means :data:`DEFAULT_TIMESTAMP`; ``offset_delta`` None means the record's
    index in its batch. v0/v1 ignore ``headers``; v0 ignores ``timestamp``.
    """

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    offset_delta: int | None = None


# ------------------------------------------------------------------ helpers
def _codec_id(codec, magic: int) -> int:
    """A codec name (``"gzip"``) or id (``1``) -> id, checked against ``magic``."""
    codec_id = codecs.CODEC_IDS.get(codec) if isinstance(codec, str) else codec
    if codec_id not in CODEC_NAMES or codec_id not in codecs.CODECS_BY_MAGIC[magic]:
        raise UnknownCodecError(f"codec {codec!r} does not exist for magic {magic}")
    return codec_id


def _deltas(records: Sequence[WriteRecord]) -> list[int]:
    """Offset deltas of ``records``; explicit ones must strictly increase."""
    out = []
    prev = -1
    for i, r in enumerate(records):
        delta = i if r.offset_delta is None else r.offset_delta
        if delta <= prev or delta > _INT32_MAX:
            raise ValueError(
                f"record {i}: offset delta {delta} does not follow {prev} "
                "(deltas must increase strictly, 0 .. 2**31-1)"
            )
        out.append(delta)
        prev = delta
    return out


def _timestamp(record: WriteRecord) -> int:
    return DEFAULT_TIMESTAMP if record.timestamp is None else record.timestamp


def _check_timestamp_type(timestamp_type: str, log_append_time: int | None) -> bool:
    """Whether ``timestamp_type`` is LogAppendTime (then ``log_append_time`` is required)."""
    if timestamp_type == LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("timestamp_type LogAppendTime needs log_append_time")
        return True
    if timestamp_type != CREATE_TIME:
        raise ValueError(
            f"timestamp_type must be {CREATE_TIME!r} or {LOG_APPEND_TIME!r}, not {timestamp_type!r}"
        )
    return False


# ----------------------------------------------------------------------- v2
def _v2_bytes(out: bytearray, data: bytes | None) -> None:
    """A nullable varint-length byte string (key, value, header value)."""
    if data is None:
        out += v2.encode_varint(-1)
    else:
        out += v2.encode_varint(len(data))
        out += data


def encode_v2_record(record: WriteRecord, offset_delta: int, timestamp_delta: int) -> bytes:
    """One v2 record, its length varint included (attributes are always 0)."""
    body = bytearray(b"\x00")  # record attributes: unused
    body += v2.encode_varint(timestamp_delta)
    body += v2.encode_varint(offset_delta)
    _v2_bytes(body, record.key)
    _v2_bytes(body, record.value)
    body += v2.encode_varint(len(record.headers))
    for h_key, h_value in record.headers:
        raw_key = h_key if isinstance(h_key, (bytes, bytearray)) else h_key.encode("utf-8")
        body += v2.encode_varint(len(raw_key))
        body += raw_key
        _v2_bytes(body, h_value)
    return v2.encode_varint(len(body)) + bytes(body)


def encode_v2_batch(
    base_offset: int,
    records: Iterable[WriteRecord],
    *,
    codec="none",
    timestamp_type: str = CREATE_TIME,
    log_append_time: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """One magic-2 record batch (61-byte header + records), CRC-32C filled in.

    ``baseTimestamp`` is the first record's timestamp, or ``delete_horizon_ms``
    when given (attributes bit 6; record timestamp deltas are then relative to
    the horizon, as Kafka's cleaner writes them). ``maxTimestamp`` is the
    largest record timestamp, or ``log_append_time`` for LogAppendTime.
    ``base_timestamp``/``max_timestamp`` override both (to write odd batches).
    A batch without records needs ``last_offset_delta``; its timestamps
    default to -1. ``codec`` is a name (``"none"``, ``"gzip"``, ``"snappy"``,
    ``"lz4"``, ``"zstd"``) or a codec id.
    """
    records = list(records)
    codec_id = _codec_id(codec, 2)
    log_append = _check_timestamp_type(timestamp_type, log_append_time)
    if delete_horizon_ms is not None and base_timestamp is not None:
        raise ValueError("give delete_horizon_ms or base_timestamp, not both")
    deltas = _deltas(records)
    timestamps = [_timestamp(r) for r in records]
    if last_offset_delta is None:
        if not records:
            raise ValueError("a batch without records needs last_offset_delta")
        last_offset_delta = deltas[-1]
    elif records and last_offset_delta < deltas[-1]:
        raise ValueError(
            f"last_offset_delta {last_offset_delta} is below the last record's delta {deltas[-1]}"
        )
    if base_timestamp is None:
        if delete_horizon_ms is not None:
            base_timestamp = delete_horizon_ms
        else:
            base_timestamp = timestamps[0] if records else NO_TIMESTAMP
    if max_timestamp is None:
        if log_append:
            max_timestamp = log_append_time
        else:
            max_timestamp = max(timestamps) if records else NO_TIMESTAMP

    payload = b"".join(
        encode_v2_record(r, d, ts - base_timestamp)
        for r, d, ts in zip(records, deltas, timestamps)
    )
    if codec_id != codecs.NONE:
        payload = codecs.compress(codec_id, payload, 2)

    attributes = codec_id
    if log_append:
        attributes |= v2.TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= v2.TRANSACTIONAL_FLAG_MASK
    if control:
        attributes |= v2.CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attributes |= v2.DELETE_HORIZON_FLAG_MASK

    buf = bytearray(v2.HEADER.size + len(payload))
    try:
        v2.HEADER.pack_into(
            buf, 0,
            base_offset,
            len(buf) - v2.LOG_OVERHEAD,
            partition_leader_epoch,
            2,
            0,  # crc, filled in below
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as err:
        raise ValueError(f"batch header field out of range: {err}") from err
    buf[v2.RECORDS_OFFSET :] = payload
    _CRC.pack_into(buf, v2.CRC_OFFSET, crc32c(memoryview(buf)[v2.ATTRIBUTES_OFFSET :]))
    return bytes(buf)


def encode_control_batch(
    offset: int,
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A COMMIT or ABORT transaction marker: a control batch of one record.

    key = int16 version 0, int16 type (0 ABORT, 1 COMMIT);
    value = int16 version 0, int32 coordinator epoch; baseSequence -1, as the
    broker's transaction coordinator writes it.
    """
    record = WriteRecord(
        key=_CONTROL_KEY.pack(0, COMMIT if commit else ABORT),
        value=_MARKER_VALUE.pack(0, coordinator_epoch),
        timestamp=timestamp,
    )
    return encode_v2_batch(
        offset,
        [record],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


# ------------------------------------------------------------------- v0/v1
def _legacy_bytes(data: bytes | None) -> bytes:
    if data is None:
        return _INT32.pack(-1)
    return _INT32.pack(len(data)) + data


def encode_legacy_message(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    *,
    magic: int,
    attributes: int = 0,
    timestamp: int | None = None,
) -> bytes:
    """One v0/v1 message with its ``offset``/``size`` prefix and CRC-32."""
    body = _MAGIC_AND_ATTRIBUTES.pack(magic, attributes)
    if magic == 1:
        body += _INT64.pack(NO_TIMESTAMP if timestamp is None else timestamp)
    body += _legacy_bytes(key) + _legacy_bytes(value)
    crc = _CRC.pack(zlib.crc32(body))
    return _OFFSET_AND_SIZE.pack(offset, len(crc) + len(body)) + crc + body


def encode_legacy_entry(
    offset: int,
    records: Iterable[WriteRecord],
    *,
    magic: int,
    codec="none",
    timestamp_type: str = CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """One top-level v0/v1 log entry.

    Uncompressed: exactly one record, one message at ``offset`` (plus its
    ``offset_delta`` if set). Compressed: a wrapper message whose value is the
    compressed inner message set; ``offset`` is the first inner offset, the
    wrapper's offset is the last inner absolute offset; inner offsets are
    absolute for magic 0 and relative (the offset deltas) for magic 1. For
    magic 1 the wrapper's timestamp is the largest inner timestamp
    (CreateTime), or ``log_append_time`` with attributes bit 3 set
    (LogAppendTime; inner messages keep their own timestamps, as a broker
    stamping in place leaves them). Inner messages carry their own CRC-32.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy entries have magic 0 or 1, not {magic}")
    records = list(records)
    codec_id = _codec_id(codec, magic)
    log_append = _check_timestamp_type(timestamp_type, log_append_time)
    if log_append and magic == 0:
        raise ValueError("magic 0 has no timestamps: LogAppendTime needs magic 1")
    if not records:
        raise ValueError("a legacy entry holds at least one message")
    deltas = _deltas(records)
    type_bit = legacy.TIMESTAMP_TYPE_MASK if log_append else 0
    if codec_id == codecs.NONE:
        if len(records) != 1:
            raise ValueError(
                f"an uncompressed v{magic} entry is one message, not {len(records)}"
            )
        r = records[0]
        ts = log_append_time if log_append else _timestamp(r)
        return encode_legacy_message(
            offset + deltas[0], r.key, r.value, magic=magic, attributes=type_bit, timestamp=ts
        )
    inner = b"".join(
        encode_legacy_message(
            offset + d if magic == 0 else d, r.key, r.value, magic=magic, timestamp=_timestamp(r)
        )
        for r, d in zip(records, deltas)
    )
    wrapper_ts = log_append_time if log_append else max(_timestamp(r) for r in records)
    return encode_legacy_message(
        offset + deltas[-1],
        None,
        codecs.compress(codec_id, inner, magic),
        magic=magic,
        attributes=codec_id | type_bit,
        timestamp=wrapper_ts,
    )


# ------------------------------------------------------------------ segment
def _segment_file(directory, base_offset: int, suffix: str) -> str:
    return os.path.join(os.fspath(directory), f"{base_offset:020d}{suffix}")


class SegmentWriter:
    """Write ``<directory>/<20-digit base offset>.log`` and its index files.

    Offsets are assigned from :attr:`next_offset` (initially ``base_offset``).
    The ``.index`` and ``.timeindex`` are kept as described in the module
    docstring. ``.txnindex`` is created when an ABORT marker closes a
    producer's open transaction; its entry is (version 0, producerId, first
    offset of that transaction, marker offset, lastStableOffset) where the
    last stable offset is computed as Kafka's ``ProducerStateManager`` does:
    the first offset of the earliest transaction of *another* producer still
    open, else the marker offset + 1.

    :meth:`close` leaves the files as a broker that closes or rolls the
    segment does: the time index gets one last entry for the largest
    timestamp (if above its last entry) and both indexes are trimmed. With
    ``preallocate_bytes > 0`` the files look like a live broker's *active*
    segment instead: no closing time-index entry, and ``.index``/``.timeindex``
    padded with zeros to ``preallocate_bytes`` (rounded down to whole entries).

    Existing files are never overwritten (``FileExistsError``).
    """

    def __init__(
        self,
        directory,
        base_offset: int = 0,
        *,
        index_interval_bytes: int = 4096,
        preallocate_bytes: int = 0,
    ) -> None:
        if base_offset < 0:
            raise ValueError(f"base offset {base_offset} is negative")
        os.makedirs(directory, exist_ok=True)
        self._directory = os.fspath(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.preallocate_bytes = preallocate_bytes
        self._path = _segment_file(directory, base_offset, ".log")
        self._log = open(self._path, "xb")
        try:
            self._index = open(_segment_file(directory, base_offset, ".index"), "xb")
            try:
                self._timeindex = open(_segment_file(directory, base_offset, ".timeindex"), "xb")
            except BaseException:
                self._index.close()
                raise
        except BaseException:
            self._log.close()
            raise
        self._txnindex = None
        self._next_offset = base_offset
        self._position = 0
        self._bytes_since_index = 0
        self._last_index_offset = -1
        self._index_entries = 0
        self._time_entries = 0
        self._max_timestamp = NO_TIMESTAMP  # largest batch max timestamp so far
        self._max_timestamp_offset = base_offset  # last offset of the batch holding it
        self._last_time_entry = NO_TIMESTAMP  # timestamp of the time index's last entry
        self._open_txns: dict[int, int] = {}  # producerId -> first offset
        self._closed = False

    # -------------------------------------------------------- properties
    @property
    def path(self) -> str:
        """The ``.log`` file's path."""
        return self._path

    @property
    def next_offset(self) -> int:
        """The offset the next appended record (or marker) gets."""
        return self._next_offset

    @property
    def position(self) -> int:
        """Bytes written to the ``.log`` so far (where the next entry starts)."""
        return self._position

    def skip_to(self, offset: int) -> None:
        """Start the next entry at ``offset``: the offsets in between exist in no batch, as
        where the log cleaner removed a segment's head (the file keeps its base offset)."""
        if offset < self._next_offset:
            raise ValueError(f"offset {offset} is below the next offset {self._next_offset}")
        self._next_offset = offset

    # ------------------------------------------------------------ appends
    def append(
        self, records: Iterable[WriteRecord], *, magic: int = 2, codec="none", **batch_options
    ) -> tuple[int, int]:
        """Append ``records`` at :attr:`next_offset`; return ``(base_offset, last_offset)``.

        magic 2: one batch; ``batch_options`` are :func:`encode_v2_batch`'s
        keywords (``last_offset_delta`` extends the batch past its last
        record). A transactional batch opens a transaction for its producer.
        magic 0/1: compressed, one wrapper (:func:`encode_legacy_entry`);
        uncompressed, one message per record, each its own entry.
        """
        records = list(records)
        base = self._next_offset
        if magic == 2:
            entry = encode_v2_batch(base, records, codec=codec, **batch_options)
            last = self._write_batch(entry)
            if batch_options.get("transactional"):
                self._open_txns.setdefault(batch_options.get("producer_id", -1), base)
            return base, last
        if magic not in (0, 1):
            raise ValueError(f"magic {magic} is not 0, 1 or 2")
        if _codec_id(codec, magic) != codecs.NONE:
            return base, self._write_batch(
                encode_legacy_entry(base, records, magic=magic, codec=codec, **batch_options)
            )
        if not records:
            raise ValueError("nothing to append: no records")
        deltas = _deltas(records)  # checked before anything is written
        last = base
        for r, d in zip(records, deltas):
            r = r._replace(offset_delta=None)
            last = self._write_batch(
                encode_legacy_entry(base + d, [r], magic=magic, codec=codec, **batch_options)
            )
        return base, last

    def append_marker(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
        timestamp: int | None = None,
        partition_leader_epoch: int = 0,
    ) -> int:
        """Append a COMMIT/ABORT marker at :attr:`next_offset`; return its offset.

        The marker closes ``producer_id``'s open transaction; an ABORT of an
        open transaction adds a ``.txnindex`` entry. ``timestamp`` defaults to
        :data:`DEFAULT_TIMESTAMP`.
        """
        offset = self._next_offset
        entry = encode_control_batch(
            offset,
            commit=commit,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=DEFAULT_TIMESTAMP if timestamp is None else timestamp,
            partition_leader_epoch=partition_leader_epoch,
        )
        self._write_batch(entry)
        first = self._open_txns.pop(producer_id, None)
        if first is not None and not commit:
            others = self._open_txns.values()
            lso = min(others) if others else offset + 1
            if self._txnindex is None:
                self._txnindex = open(_segment_file(self._directory, self.base_offset, ".txnindex"), "xb")
            self._txnindex.write(TXN_ENTRY.pack(0, producer_id, first, offset, lso))
        return offset

    def append_raw(self, entry_bytes: bytes, *, next_offset: int | None = None) -> int:
        """Append bytes as they are (e.g. damaged entries); return their position.

        Raw bytes are not indexed (only counted toward the index interval) and
        do not move :attr:`next_offset` unless ``next_offset`` is given.
        """
        self._check_open()
        position = self._position
        self._log.write(entry_bytes)
        self._position += len(entry_bytes)
        self._bytes_since_index += len(entry_bytes)
        if next_offset is not None:
            self._next_offset = next_offset
        return position

    # ------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"segment {self._path} is closed")

    def _write_batch(self, entry: bytes) -> int:
        """Write one well-formed entry, index it, return its last offset."""
        self._check_open()
        base_offset, _ = _OFFSET_AND_SIZE.unpack_from(entry)
        magic = entry[v2.MAGIC_OFFSET]
        if magic == 2:
            (last_delta,) = _INT32.unpack_from(entry, v2.LAST_OFFSET_DELTA_OFFSET)
            (max_ts,) = _INT64.unpack_from(entry, v2.MAX_TIMESTAMP_OFFSET)
            last = base_offset + last_delta
        else:
            last = base_offset  # a wrapper carries its last inner offset
            if magic == 1:
                (max_ts,) = _INT64.unpack_from(entry, legacy.TIMESTAMP_OFFSET)
            else:
                max_ts = NO_TIMESTAMP
        relative = last - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(
                f"offset {last} does not fit a segment based at {self.base_offset}"
            )
        position = self._position
        if max_ts > self._max_timestamp:
            self._max_timestamp = max_ts
            self._max_timestamp_offset = last
        if self._bytes_since_index > self.index_interval_bytes and last > self._last_index_offset:
            self._index.write(OFFSET_ENTRY.pack(relative, position))
            self._index_entries += 1
            self._last_index_offset = last
            self._maybe_append_time_entry()
            self._bytes_since_index = 0
        self._log.write(entry)
        self._position += len(entry)
        self._bytes_since_index += len(entry)
        self._next_offset = max(self._next_offset, last + 1)
        return last

    def _maybe_append_time_entry(self) -> None:
        if self._max_timestamp > self._last_time_entry:
            self._timeindex.write(
                TIME_ENTRY.pack(self._max_timestamp, self._max_timestamp_offset - self.base_offset)
            )
            self._time_entries += 1
            self._last_time_entry = self._max_timestamp

    # -------------------------------------------------------------- close
    def close(self) -> None:
        """Finish the files (see the class docstring); safe to call twice."""
        if self._closed:
            return
        try:
            if self.preallocate_bytes > 0:
                for f, entry, count in (
                    (self._index, OFFSET_ENTRY, self._index_entries),
                    (self._timeindex, TIME_ENTRY, self._time_entries),
                ):
                    size = self.preallocate_bytes - self.preallocate_bytes % entry.size
                    if size > count * entry.size:
                        f.write(bytes(size - count * entry.size))
            else:
                self._maybe_append_time_entry()
        finally:
            self._closed = True
            for f in (self._log, self._index, self._timeindex, self._txnindex):
                if f is not None:
                    f.close()

    def __enter__(self) -> "SegmentWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------------------------
# Internal topics' records and a partition directory's state files (for tests and samples).
# Records are encoded with the shipped message specs (kafkalog.internal.schema); the state
# files are packed here by hand, independently of their readers.

_INT16 = struct.Struct(">h")

def internal_record(decoder: str, decoded: dict, *, timestamp: int | None = None) -> WriteRecord:
    """The record of an internal topic whose key and value decode to ``decoded``, in the
    shape :func:`kafkalog.internal.decode` returns: ``{"key": {"type", "data"}, "value":
    {"version", "data"} | None}`` for ``offsets``/``transaction-log``, ``{"type":
    "PARTITION_RECORD", "version", "data"}`` for ``cluster-metadata`` and likewise for
    ``remote-log-metadata`` (its ``customMetadata`` is the data's bytes). Fields left out take
    their spec defaults; tagged fields are written when they differ from them."""
    from .internal import remote_log, topics
    from .internal.framing import METADATA_FRAME_VERSION, record_type_name
    from .internal.schema import write_uvarint

    framed = {topics.CLUSTER_METADATA: topics.metadata_records,
              topics.REMOTE_LOG_METADATA: remote_log.remote_log_records}
    if decoder in framed:
        by_name = {record_type_name(s.name): s for s in framed[decoder]().values()}
        s = by_name[decoded["type"]]
        value = (write_uvarint(METADATA_FRAME_VERSION) + write_uvarint(s.api_key)
                 + write_uvarint(decoded["version"]) + s.write(decoded["data"], decoded["version"]))
        return WriteRecord(None, value, timestamp=timestamp)
    record_type = decoded["key"]["type"]
    key_spec, key_version = topics.coordinator_keys(decoder)[record_type]
    key = _INT16.pack(record_type) + key_spec.write(decoded["key"]["data"], key_version)
    value = None
    if decoded.get("value") is not None:
        version = decoded["value"]["version"]
        value_spec = topics.spec(key_spec.name[:-3] + "Value")
        value = _INT16.pack(version) + value_spec.write(decoded["value"]["data"], version)
    return WriteRecord(key, value, timestamp=timestamp)


#: ProducerStateManager's snapshot entry: producerId int64, epoch int16, lastSequence int32,
#: lastOffset int64, offsetDelta int32, timestamp int64, coordinatorEpoch int32,
#: currentTxnFirstOffset int64.
_PRODUCER_ENTRY = struct.Struct(">qhiqiqiq")
_SNAPSHOT_HEAD = struct.Struct(">hI")


def encode_producer_snapshot(entries: Iterable[dict], *, version: int = 1,
                             crc: int | None = None) -> bytes:
    """A producer-state ``.snapshot`` holding ``entries`` (dicts with the keys
    :func:`kafkalog.state_files.read_producer_snapshot` gives its rows; ``first_sequence``
    is not stored). ``crc`` overrides the computed CRC-32C (to write a corrupt one)."""
    body = bytearray(_INT32.pack(0))
    n = 0
    for e in entries:
        body += _PRODUCER_ENTRY.pack(
            e["producer_id"], e["producer_epoch"], e["last_sequence"], e["last_offset"],
            e.get("offset_delta", 0), e.get("timestamp", DEFAULT_TIMESTAMP),
            e.get("coordinator_epoch", -1), e.get("current_txn_first_offset", -1))
        n += 1
    _INT32.pack_into(body, 0, n)
    return _SNAPSHOT_HEAD.pack(version, crc32c(bytes(body)) if crc is None else crc) + bytes(body)


def leader_epoch_checkpoint_text(entries: Iterable[tuple[int, int]], *, version: int = 0) -> str:
    """A ``leader-epoch-checkpoint`` of ``(epoch, start_offset)`` pairs."""
    entries = list(entries)
    lines = [str(version), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    return "\n".join(lines) + "\n"


def partition_metadata_text(topic_id: str, *, version: int = 0) -> str:
    """A ``partition.metadata`` naming ``topic_id`` (22-character URL-safe base64)."""
    return f"version: {version}\ntopic_id: {topic_id}\n"
