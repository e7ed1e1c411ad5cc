"""Write Kafka log segments as a broker leaves them on disk.

The decoder's twin, for tests, fixtures and tools that need real segments
without a broker: a ``.log`` of entries (encoded by :mod:`kafkalog.encoding`: v0/v1
messages, v2 record batches, control markers) and the ``.index``/``.timeindex``/``.txnindex``
files Kafka keeps beside it; the records of internal topics and the state files of a
partition folder come from :mod:`kafkalog.state_writer`. Both are re-exported here.

Choices a broker would make for us, fixed here so output is reproducible
(the entries' own: :mod:`kafkalog.encoding`):

* Indexes follow ``LogSegment.append`` of Kafka 3.7+: for every batch, *before*
  its bytes are counted, if more than ``index_interval_bytes`` were written
  since the last index entry, the offset index gets (batch's last offset,
  batch position) and the time index gets (largest timestamp so far, last
  offset of the batch holding it) if that timestamp is above its last entry.
  The first batch of a segment is therefore never indexed.
"""

from __future__ import annotations

import os
from typing import Iterable

from . import codecs
from . import default_records as v2
from . import legacy_records as legacy
from .encoding import (
    ABORT,
    COMMIT,
    DEFAULT_TIMESTAMP,
    INT32,
    INT32_MAX,
    INT64,
    OFFSET_AND_SIZE,
    WriteRecord,
    codec_id_of,
    encode_control_batch,
    encode_legacy_entry,
    encode_legacy_message,
    encode_v2_batch,
    encode_v2_record,
    offset_deltas,
)
from .indexes import OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY
from .model import NO_TIMESTAMP
from .state_writer import (
    encode_producer_snapshot,
    internal_record,
    leader_epoch_checkpoint_text,
    partition_metadata_text,
)

#: The writer's API: :class:`SegmentWriter`, and the entries and state files it re-exports.
__all__ = [
    "ABORT", "COMMIT", "DEFAULT_TIMESTAMP", "SegmentWriter", "WriteRecord",
    "encode_control_batch", "encode_legacy_entry", "encode_legacy_message",
    "encode_producer_snapshot", "encode_v2_batch", "encode_v2_record", "internal_record",
    "leader_epoch_checkpoint_text", "partition_metadata_text",
]


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
        if codec_id_of(codec, magic) != codecs.NONE:
            return base, self._write_batch(
                encode_legacy_entry(base, records, magic=magic, codec=codec, **batch_options)
            )
        if not records:
            raise ValueError("nothing to append: no records")
        deltas = offset_deltas(records)  # checked before anything is written
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
        base_offset, _ = OFFSET_AND_SIZE.unpack_from(entry)
        magic = entry[v2.MAGIC_OFFSET]
        if magic == 2:
            (last_delta,) = INT32.unpack_from(entry, v2.LAST_OFFSET_DELTA_OFFSET)
            (max_ts,) = INT64.unpack_from(entry, v2.MAX_TIMESTAMP_OFFSET)
            last = base_offset + last_delta
        else:
            last = base_offset  # a wrapper carries its last inner offset
            if magic == 1:
                (max_ts,) = INT64.unpack_from(entry, legacy.TIMESTAMP_OFFSET)
            else:
                max_ts = NO_TIMESTAMP
        relative = last - self.base_offset
        if not 0 <= relative <= INT32_MAX:
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
