"""Framing: split a segment into entries and dispatch each on its magic byte.

Every entry of every magic starts ``offset int64 | size int32`` and has its
magic byte at byte 16, so a segment that was upgraded across versions (v0/v1
messages followed by v2 batches) is read entry by entry; the total length of
an entry is ``12 + size``. Framing reads only offset, size and magic; the
format modules (``legacy_records``, ``default_records``) do the rest.

What the reader does with bad bytes, in file order, as :class:`Finding`\\ s:

* an entry that runs past the end of the data, or a zero-filled
  (preallocated) remainder, is a ``truncated_tail``: it ends iteration, with
  the number of bytes left;
* an impossible size or magic is ``corrupt_batch``: the reader looks for the
  next position where a plausible entry *verifies* (known magic, sane size,
  fits, CRC matches), reports the bytes in between as ``skipped_bytes`` and
  goes on;
* a stored CRC that does not match is ``crc_mismatch``: the batch is still
  yielded, with the records that can be decoded (as kafka-dump-log does);
* records that cannot be decoded (codec, malformed records) give a batch with
  ``decoded=False`` and a finding of the error's kind.

No input makes this module raise anything but :class:`KafkaLogError`: low-level
errors are translated here, at one boundary.

Two lighter reads for callers that need no records: :func:`frame` lists a
segment's entries by their framing (position, size, magic, offsets, stored CRC
and whether it verifies), stopping where the reader would report a finding; and
:func:`read_batch_head` reads the fixed header of the entry at a position.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from crc32c import crc32c

from . import _accel, codecs
from . import default_records as v2
from . import legacy_records as legacy
from .errors import CorruptBatchError, CorruptDataError, LimitExceededError
from .model import DEFAULT_LIMITS, Batch, Finding, Limits
from .source import open_source

class FastRun(NamedTuple):
    """Internal (``arrow.stream`` only): batches the compiled sink consumed.

    Their records are in the sink; ``rows`` are their batches-table rows
    (None when that table is not wanted).
    """

    rows: list | None


OFFSET_AND_SIZE = struct.Struct(">qi")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
#: how many bytes :func:`entry_offset` reads
ENTRY_OFFSET_SIZE = _I64.size
LOG_OVERHEAD = OFFSET_AND_SIZE.size
MAGIC_OFFSET = LOG_OVERHEAD + 4  # after the v2 leader epoch / the v0-v1 crc
#: Smallest plausible ``size`` field per magic.
MIN_SIZE = {0: legacy.MIN_SIZE[0], 1: legacy.MIN_SIZE[1], 2: v2.MIN_LENGTH}

_tuple_new = tuple.__new__

#: Errors that malformed bytes can raise inside the format modules.
_LOW_LEVEL = (IndexError, struct.error, ValueError, OverflowError, UnicodeDecodeError)


class BatchHead(NamedTuple):
    """The fixed header of one entry, as stored (:func:`read_batch_head`): no CRC is
    computed, no record read. The fields every magic has, then v2's own (``None`` for
    v0/v1), named as :class:`Batch` names them."""

    size: int  # bytes of the whole entry, 12-byte offset+size overhead included
    magic: int
    #: v2: the base offset; v0/v1: the message's (a compressed wrapper's: its last inner one)
    offset: int
    crc: int  # as stored: CRC-32C (v2) or CRC-32 (v0/v1)
    attributes: int
    first_timestamp: int | None  # v2: baseTimestamp; v1: the timestamp; v0: None
    max_timestamp: int | None  # v2: maxTimestamp; v1: the timestamp; v0: None
    partition_leader_epoch: int | None
    last_offset_delta: int | None
    producer_id: int | None
    producer_epoch: int | None
    base_sequence: int | None
    record_count: int | None


#: Bytes from an entry's start that hold its whole fixed header, whatever its magic (a
#: v2 batch's 61; a v0/v1 message's header is shorter, and so can the entry be).
BATCH_HEAD_SIZE = v2.HEADER.size


def entry_offset(buf, pos: int = 0) -> int:
    """The offset field every entry starts with (a v2 batch's base offset, a v0/v1 message's
    offset) at ``pos`` of ``buf``: its first :data:`ENTRY_OFFSET_SIZE` bytes are enough."""
    return _I64.unpack_from(buf, pos)[0]


def read_batch_head(buf, pos: int = 0) -> BatchHead:
    """The fixed header of the entry at ``pos`` of ``buf`` (bytes, bytearray or
    memoryview), whatever its magic. Raises :class:`CorruptBatchError` where no
    entry's header can be there: fewer bytes than its magic's header takes, or a
    magic no Kafka writes. Nothing else is checked (see :func:`scan` and
    :func:`frame` for that)."""
    left = len(buf) - pos
    if left <= MAGIC_OFFSET:
        raise CorruptBatchError(
            f"entry at position {pos}: {max(left, 0)} bytes, fewer than an entry header needs", pos)
    magic = buf[pos + MAGIC_OFFSET]
    need = v2.HEADER.size if magic == 2 else legacy.KEY_LENGTH_OFFSET.get(magic)
    if need is None:
        raise CorruptBatchError(f"entry at position {pos} has impossible magic {magic}", pos)
    if left < need:
        raise CorruptBatchError(
            f"entry at position {pos}: {left} bytes, fewer than a magic {magic} header's {need}",
            pos)
    # (made as v2.read_records makes records: tuple.__new__ skips the NamedTuple's
    # Python-level __new__, 1.6 -> 1.3 us a call; frame's pure loop calls it per entry)
    if magic == 2:
        (offset, length, leader_epoch, _, crc, attributes, last_offset_delta, base_timestamp,
         max_timestamp, producer_id, producer_epoch, base_sequence,
         count) = v2.HEADER.unpack_from(buf, pos)
        return _tuple_new(BatchHead, (
            LOG_OVERHEAD + length, magic, offset, crc, attributes, base_timestamp, max_timestamp,
            leader_epoch, last_offset_delta, producer_id, producer_epoch, base_sequence, count))
    offset, size, crc, _, attributes = legacy.HEADER.unpack_from(buf, pos)
    timestamp = legacy.TIMESTAMP.unpack_from(buf, pos + legacy.TIMESTAMP_OFFSET)[0] \
        if magic == 1 else None
    return _tuple_new(BatchHead, (LOG_OVERHEAD + size, magic, offset, crc, attributes, timestamp,
                                  timestamp, None, None, None, None, None, None))


#: What :func:`frame` gives per entry, in this order (:attr:`Frames.data`);
#: ``has_base_offset`` is 0 for a compressed v0/v1 wrapper, whose ``base_offset`` column
#: then holds its stored offset, its last (the first is inside the compressed value).
FRAME_COLUMNS = ("position", "size", "magic", "base_offset", "last_offset", "crc", "crc_valid",
                 "has_base_offset")


class Frame(NamedTuple):
    """One top-level entry as :func:`frame` reads it: no record decoded."""

    position: int  # absolute
    size: int  # bytes of the whole entry, 12-byte offset+size overhead included
    magic: int
    base_offset: int | None  # None: a compressed v0/v1 wrapper (its first offset is inside)
    last_offset: int
    crc: int  # as stored
    crc_valid: bool  # the stored CRC matches the bytes

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(frozen=True)
class Frames:
    """What :func:`frame` read: the entries (iterate for :class:`Frame` tuples, or take
    ``data`` for all of them at once), where framing stopped, and where an entry that
    verifies starts after that."""

    #: int64s, the :data:`FRAME_COLUMNS` of each entry, one entry after another
    #: (``numpy.frombuffer(data, numpy.int64).reshape(-1, len(FRAME_COLUMNS))`` is the
    #: table of them, without a copy)
    data: array
    #: absolute position where framing stopped: the end of the data, or the start of
    #: bytes it could not frame (a torn tail, zeros, damage)
    end: int
    #: absolute position of the first entry at or after ``end`` that verifies (as
    #: :func:`first_entry` finds it); None if none does
    next_entry: int | None

    def __len__(self) -> int:
        return len(self.data) // len(FRAME_COLUMNS)

    def __iter__(self) -> Iterator[Frame]:
        data, width = self.data, len(FRAME_COLUMNS)
        for i in range(0, len(data), width):
            position, size, magic, first, last, crc, valid, known = data[i:i + width]
            yield Frame(position, size, magic, first if known else None, last, crc, bool(valid))


def frame(source, *, limits: Limits | None = None,
          byte_range: tuple[int, int | None] | None = None) -> Frames:
    """The top-level entries of ``source`` (a path, bytes/bytearray/memoryview, a binary
    file or a :class:`Slice`; ``byte_range`` as for :func:`scan`) by their framing: each
    entry's offset, size and magic, then its stored CRC and offsets from its header, and
    whether the CRC verifies; records are not decoded. Framing stops at the first entry
    that is not one as it stands: an impossible size or magic, an entry that runs past
    the end of the data, a v2 batch whose last offset would leave int64 (its base offset
    is outside the CRC: only that shows such damage). :attr:`Frames.end` says where,
    :attr:`Frames.next_entry` whether an entry that verifies follows. Runs of v2 batches
    are framed by the compiled path where it is active, the rest here (its twin)."""
    limits = limits or DEFAULT_LIMITS
    max_size = limits.max_entry_size - LOG_OVERHEAD
    fast = _accel.active()
    rows = array("q")
    with open_source(source, byte_range) as view:
        buf, base, n = view.buf, view.base, len(view.buf)
        pos = 0
        while n - pos > MAGIC_OFFSET:
            if fast and buf[pos + MAGIC_OFFSET] == 2:
                new_pos = _accel.frame_v2(buf, pos, base, max_size, rows)
                if new_pos != pos:
                    pos = new_pos
                    continue
            try:
                head = read_batch_head(buf, pos)
            except CorruptBatchError:
                break  # fewer bytes than its header, or a magic no entry has
            end = pos + head.size
            if not MIN_SIZE[head.magic] <= head.size - LOG_OVERHEAD <= max_size or end > n:
                break
            if head.magic == 2:
                last = head.offset + head.last_offset_delta
                if not v2.INT64_MIN <= last <= v2.INT64_MAX:
                    break  # an offset no log holds (the base offset is outside the CRC)
                valid = crc32c(buf[pos + v2.ATTRIBUTES_OFFSET:end]) == head.crc
                known = True
            else:
                last = head.offset
                valid = zlib.crc32(buf[pos + legacy.MAGIC_OFFSET:end]) == head.crc
                known = not head.attributes & legacy.CODEC_MASK
            rows.extend((base + pos, end - pos, head.magic, head.offset, last, head.crc, valid,
                         known))
            pos = end
        next_entry = None if pos >= n else _resync(buf, pos, n, limits)
        return Frames(rows, base + pos, None if next_entry is None else base + next_entry)


def scan(
    source,
    *,
    verify_crc: bool = True,
    limits: Limits | None = None,
    byte_range: tuple[int, int | None] | None = None,
    _sink=None,
) -> Iterator[Batch | Finding]:
    """Yield every :class:`Batch` and :class:`Finding` of ``source`` in file order.

    ``source`` is a path, bytes/bytearray/memoryview or a binary file object.
    ``byte_range=(start, end)`` decodes only that part (batch-aligned ranges,
    e.g. from ``.index`` positions); positions stay absolute.

    ``_sink`` is internal (``arrow.stream``): a records-table accumulator
    (compiled, or pure Python's columns). The data records of v2 batches it
    accepts go straight into it, and those batches are yielded with ``records=()``.
    """
    limits = limits or DEFAULT_LIMITS
    with open_source(source, byte_range) as view:
        yield from _scan(view.buf, view.base, verify_crc, limits, _sink, view.done)


def first_entry(source, *, limits: Limits | None = None,
                byte_range: tuple[int, int | None] | None = None) -> int | None:
    """Absolute position of the first entry in ``source`` (or its byte range) that verifies.

    An entry verifies when its magic and size are plausible, it fits, and its
    CRC matches. Used to find a batch boundary from an arbitrary position, e.g.
    when splitting a segment whose ``.index`` cannot be trusted. None if no
    entry verifies.
    """
    limits = limits or DEFAULT_LIMITS
    with open_source(source, byte_range) as view:
        q = _resync(view.buf, 0, len(view.buf), limits)
        return None if q is None else view.base + q


def _scan(buf, base: int, verify_crc: bool, limits: Limits, sink=None,
          done=None) -> Iterator[Batch | Finding]:
    n = len(buf)
    pos = 0
    prev_last = None
    max_size = limits.max_entry_size - LOG_OVERHEAD
    run = getattr(sink, "run", None)
    while pos < n:
        if done is not None:
            done(pos)
        if run is not None:
            # the sink (compiled, or the pure path's columns) consumes the run
            # of regular batches from here; the entry it left (if any) is read below
            new_pos, prev_last, rows = run(buf, pos, base, verify_crc, limits, prev_last)
            if new_pos != pos or sink.full:
                yield FastRun(rows)
                pos = new_pos
                continue
        if n - pos <= MAGIC_OFFSET:
            yield _tail(buf, pos, base, "are fewer than an entry header needs")
            return
        offset, size = OFFSET_AND_SIZE.unpack_from(buf, pos)
        magic = buf[pos + MAGIC_OFFSET]
        min_size = MIN_SIZE.get(magic)
        plausible = min_size is not None and min_size <= size <= max_size
        end = pos + LOG_OVERHEAD + size
        if not plausible or end > n:
            if _all_zero(buf, pos):
                yield _tail(buf, pos, base, "are zero-filled (preallocated)")
                return
            nxt = _resync(buf, pos + 1, n, limits)
            if plausible and nxt is None:
                yield _tail(
                    buf, pos, base, f"hold an incomplete entry (offset {offset}, "
                    f"magic {magic}, declares {LOG_OVERHEAD + size} bytes)"
                )
                return
            stop = n if nxt is None else nxt
            if plausible:
                why = f"declares {LOG_OVERHEAD + size} bytes, past the end at {base + n}"
            elif min_size is None:
                why = f"has impossible magic {magic}"
            else:
                why = f"has impossible size {size} for magic {magic} (min {min_size}, max {max_size})"
            yield Finding("corrupt_batch", base + pos, base + stop,
                          f"entry at position {base + pos} {why}", base_offset=offset)
            yield _skipped(base, pos, stop, nxt)
            if nxt is None:
                return
            pos = nxt
            continue

        batch, found, trusted = _decode(buf, pos, end, base, magic, verify_crc, limits, sink)
        # an undecodable v0/v1 wrapper's first offset is unknown: its last must do
        first = batch.last_offset if batch.base_offset is None else batch.base_offset
        if prev_last is not None and first <= prev_last:
            starts = "ends" if batch.base_offset is None else "starts"
            found.append(Finding(
                "offset_regression", batch.position, batch.end,
                f"batch at position {batch.position} {starts} at offset {first}, "
                f"not above the previous batch's last offset {prev_last}",
                batch.base_offset, batch.last_offset,
            ))
        prev_last = batch.last_offset
        yield batch
        if found:
            yield from found
        if trusted or end == n:
            pos = end
            continue
        # Neither the CRC nor the records confirm this entry's size, which may
        # itself be the damaged field: go on at the first entry that verifies
        # after this one's start, so valid batches it seems to cover are kept.
        nxt = _resync(buf, pos + 1, n, limits)
        if nxt is None and _all_zero(buf, end):
            pos = end  # the zero-filled rest is reported as a truncated tail next
            continue
        stop = n if nxt is None else nxt
        if stop > end:
            yield _skipped(base, end, stop, nxt)
        if nxt is None:
            return
        pos = nxt


def _decode(buf, pos, end, base, magic, verify_crc, limits, sink=None):
    """Decode one entry -> ``(batch, findings, trusted)``.

    ``trusted`` says the entry's declared size is confirmed, by a matching
    CRC or by records that decoded to exactly its end.
    """
    try:
        if magic == 2:
            batch, error, notes = _decode_v2(buf, pos, end, base, verify_crc, limits, sink)
        else:
            batch, error, notes = _decode_legacy(buf, pos, end, base, verify_crc, limits)
    except CorruptDataError as err:  # the header itself is unreadable
        batch, error, notes = None, err, []
    except _LOW_LEVEL as err:
        batch, error, notes = None, CorruptBatchError(f"{type(err).__name__}: {err}"), []
    found: list[Finding] = []
    if batch is None:  # only legacy headers can fail this way; report the bytes
        found.append(Finding(error.kind, base + pos, base + end,
                             f"entry at position {base + pos}: {error}"))
        return _placeholder(buf, pos, end, base, magic), found, False
    crc_valid = batch.crc_valid
    if crc_valid is False:
        found.append(Finding(
            "crc_mismatch", batch.position, batch.end,
            f"batch at position {batch.position} ({_offsets(batch)}): "
            f"stored crc 0x{batch.crc:08x}, computed 0x{batch.computed_crc:08x}",
            batch.base_offset, batch.last_offset,
        ))
    if error is not None:
        found.append(Finding(
            error.kind, batch.position, batch.end,
            f"batch at position {batch.position} ({_offsets(batch)}): {error}",
            batch.base_offset, batch.last_offset,
        ))
    for kind, message in notes:
        found.append(Finding(kind, batch.position, batch.end,
                             f"batch at position {batch.position}: {message}",
                             batch.base_offset, batch.last_offset))
    trusted = crc_valid is True or batch.decoded
    return batch, found, trusted


def _offsets(batch: Batch) -> str:
    """``offsets 6..17``; ``last offset 17`` where the first is unknown."""
    if batch.base_offset is None:
        return f"last offset {batch.last_offset}"
    return f"offsets {batch.base_offset}..{batch.last_offset}"


def _decode_v2(buf, pos, end, base, verify_crc, limits, sink=None):
    (base_offset, _length, leader_epoch, magic, crc, attributes, last_offset_delta,
     base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
     count) = v2.HEADER.unpack_from(buf, pos)
    computed = crc32c(buf[pos + v2.ATTRIBUTES_OFFSET : end]) if verify_crc else None
    codec = attributes & v2.COMPRESSION_CODEC_MASK
    compression = codecs.codec_name(codec)
    is_control = bool(attributes & v2.CONTROL_FLAG_MASK)
    log_append = bool(attributes & v2.TIMESTAMP_TYPE_MASK)
    records = None
    error = None
    notes: list[tuple[str, str]] = []
    last_offset = base_offset + last_offset_delta
    try:
        if not v2.INT64_MIN <= last_offset <= v2.INT64_MAX:
            last_offset = base_offset
            raise CorruptBatchError(
                f"base offset {base_offset} + last offset delta {last_offset_delta} is out of int64"
            )
        if count > limits.max_records_per_batch:
            raise LimitExceededError(
                f"record count {count} exceeds the limit of {limits.max_records_per_batch}"
            )
        payload = buf[pos + v2.RECORDS_OFFSET : end]
        if codec == codecs.NONE:
            data = payload
        else:
            data = codecs.decompress(codec, payload, 2, limits.max_decompressed_size)
        bad_keys: list[int] = []
        if sink is not None and not is_control and sink.add_v2(
            data, count, base_offset, last_offset, base_timestamp, max_timestamp, log_append,
            base + pos, end - pos, compression, producer_id, producer_epoch,
            base_sequence, leader_epoch, bool(attributes & v2.TRANSACTIONAL_FLAG_MASK),
            None if computed is None else computed == crc,
        ) >= 0:
            records = ()  # decoded into the sink; -1 leaves the batch to read_records
        else:
            if codec == codecs.NONE:
                data = payload.tobytes()
            records = v2.read_records(data, count, base_offset, base_timestamp,
                                      max_timestamp if log_append else None, bad_keys)
        if bad_keys:
            notes.append(("invalid_header_key",
                          f"header keys that are not UTF-8 (kept escaped) at offsets {bad_keys[:10]}"))
        if is_control:
            records = _with_controls(records, notes)
    except CorruptDataError as err:
        error = err
    except _LOW_LEVEL as err:
        error = CorruptBatchError(f"records end early or are malformed ({type(err).__name__}: {err})")
    batch = Batch(
        position=base + pos,
        size=end - pos,
        magic=2,
        base_offset=base_offset,
        last_offset=last_offset,
        crc=crc,
        computed_crc=computed,
        attributes=attributes,
        compression=compression,
        timestamp_type=v2.timestamp_type(attributes),
        first_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        partition_leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        last_offset_delta=last_offset_delta,
        record_count=count,
        is_transactional=bool(attributes & v2.TRANSACTIONAL_FLAG_MASK),
        is_control=is_control,
        has_delete_horizon=bool(attributes & v2.DELETE_HORIZON_FLAG_MASK),
        records=tuple(records) if records is not None else (),
        decoded=records is not None,
    )
    return batch, error, notes


def _with_controls(records, notes):
    out = []
    for record in records:
        try:
            record = record._replace(control=v2.read_control(record))
        except (CorruptDataError, struct.error) as err:
            notes.append(("corrupt_control_record", str(err)))
        out.append(record)
    return out


def _decode_legacy(buf, pos, end, base, verify_crc, limits):
    fields, records, bad_crc, error = legacy.decode_entry(buf, pos, end, verify_crc, limits)
    notes = []
    if bad_crc:
        notes.append(("crc_mismatch",
                      f"inner messages at offsets {bad_crc[:10]} fail their CRC-32 "
                      f"({len(bad_crc)} in all)"))
    batch = Batch(
        position=base + pos,
        partition_leader_epoch=None,
        producer_id=None,
        producer_epoch=None,
        base_sequence=None,
        last_offset_delta=None,
        is_transactional=False,
        is_control=False,
        has_delete_horizon=False,
        records=tuple(records) if records is not None else (),
        decoded=records is not None,
        **fields,
    )
    return batch, error, notes


def _placeholder(buf, pos, end, base, magic) -> Batch:
    """A batch for an entry whose header could not even be read."""
    offset, _ = OFFSET_AND_SIZE.unpack_from(buf, pos)
    return Batch(
        position=base + pos, size=end - pos, magic=magic, base_offset=offset,
        last_offset=offset, crc=0, computed_crc=None, attributes=0,
        compression="none", timestamp_type=None, first_timestamp=None,
        max_timestamp=None, partition_leader_epoch=None, producer_id=None,
        producer_epoch=None, base_sequence=None, last_offset_delta=None,
        record_count=0, is_transactional=False, is_control=False,
        has_delete_horizon=False, records=(), decoded=False,
    )


def _tail(buf, pos: int, base: int, what: str) -> Finding:
    left = len(buf) - pos
    return Finding(
        "truncated_tail", base + pos, base + len(buf),
        f"the last {left} bytes, from position {base + pos}, {what}",
        bytes=left,
    )


def _skipped(base: int, start: int, stop: int, nxt: int | None) -> Finding:
    where = f"resynchronised at position {base + nxt}" if nxt is not None else "no valid entry follows"
    return Finding(
        "skipped_bytes", base + start, base + stop,
        f"skipped {stop - start} bytes from position {base + start}: {where}",
        bytes=stop - start,
    )


_WINDOW = 1 << 16
_ZEROS = bytes(_WINDOW)


def _all_zero(buf, pos: int) -> bool:
    """Whether ``buf[pos:]`` is all zero bytes; reads it a window at a time."""
    n = len(buf)
    while pos < n:
        stop = min(pos + _WINDOW, n)
        if buf[pos:stop] != _ZEROS[: stop - pos]:
            return False
        pos = stop
    return True


def _zero_run(buf, start: int, n: int) -> int:
    """How many zero bytes start at ``start`` (looked at a window at a time)."""
    run = 0
    while start + run < n:
        window = buf[start + run : min(start + run + _WINDOW, n)].tobytes()
        lead = len(window) - len(window.lstrip(b"\0"))
        run += lead
        if lead < len(window):
            break
    return run


def _verifies(buf, q: int, n: int, limits: Limits) -> bool:
    """Whether a plausible entry starts at ``q`` and its CRC matches."""
    if q + MAGIC_OFFSET >= n:
        return False
    magic = buf[q + MAGIC_OFFSET]
    min_size = MIN_SIZE.get(magic)
    if min_size is None:
        return False
    (size,) = _I32.unpack_from(buf, q + 8)
    end = q + LOG_OVERHEAD + size
    if size < min_size or size > limits.max_entry_size - LOG_OVERHEAD or end > n:
        return False
    if magic == 2:
        (stored,) = _U32.unpack_from(buf, q + v2.CRC_OFFSET)
        return crc32c(buf[q + v2.ATTRIBUTES_OFFSET : end]) == stored
    (stored,) = _U32.unpack_from(buf, q + legacy.CRC_OFFSET)
    return zlib.crc32(buf[q + legacy.MAGIC_OFFSET : end]) == stored


def _resync(buf, start: int, n: int, limits: Limits) -> int | None:
    """The first position at or after ``start`` where an entry verifies.

    Zero runs (a preallocated file can hold a gigabyte of them) are skipped a
    window at a time: an entry's size field, bytes 8-11, is never all zero, so
    no entry starts more than 11 bytes before the end of a run of zeros.
    """
    last = n - MAGIC_OFFSET
    q = start
    while q < last:
        if not (buf[q + 8] or buf[q + 9] or buf[q + 10] or buf[q + 11]):
            run = _zero_run(buf, q + 8, n)
            if run >= 4:
                q += run - 3  # first q whose size field reaches the next non-zero byte
                continue
        if buf[q + MAGIC_OFFSET] <= 2 and _verifies(buf, q, n, limits):
            return q
        q += 1
    return None
