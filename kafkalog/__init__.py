"""kafkalog: decode (and write) Kafka's on-disk log format.

The public API is this module's ``__all__``. Everything takes a ``source``:
a path, bytes/bytearray/memoryview, a binary file object, or a
:class:`Slice` (bytes that start at a known position of a larger segment).

    >>> import kafkalog
    >>> for batch in kafkalog.iter_batches("00000000000000000000.log"):
    ...     print(batch.base_offset, batch.crc_valid, len(batch.records))
    >>> table = kafkalog.records_table("00000000000000000000.log")
"""

from __future__ import annotations

from typing import Iterator

from .arrow import (
    BATCHES_SCHEMA,
    FINDINGS_SCHEMA,
    MARKERS_SCHEMA,
    RECORDS_SCHEMA,
    Tables,
    batches_table,
    decode,
    findings_table,
    iter_record_batches,
    markers_table,
    records_table,
    stream,
)
from .errors import (
    CodecUnavailableError,
    CorruptBatchError,
    CorruptDataError,
    CrcMismatchError,
    DecompressionError,
    KafkaLogError,
    LimitExceededError,
    SourceError,
    UnknownCodecError,
)
from .indexes import (
    INDEX_RULES,
    IndexEntry,
    TimeIndexEntry,
    AbortedTxn,
    check_offset_index,
    check_time_index,
    check_txn_index,
    read_offset_index,
    read_offset_index_range,
    read_time_index,
    read_txn_index,
    verify_offset_index,
    verify_time_index,
    verify_txn_index,
)
from ._accel import ACCELERATED, reuse_limit
from .log_reader import (
    BATCH_HEAD_SIZE,
    ENTRY_OFFSET_SIZE,
    FRAME_COLUMNS,
    BatchHead,
    Frame,
    Frames,
    entry_offset,
    first_entry,
    frame,
    read_batch_head,
    scan,
)
from .source import Slice
from .model import Batch, Control, Finding, Header, Limits, Record

__version__ = "0.1.0"


def iter_batches(source, *, verify_crc: bool = True, **options) -> Iterator[Batch]:
    """Every top-level entry of ``source`` as an immutable :class:`Batch`.

    Findings are not raised: use :func:`scan` to get them in file order, or
    :func:`findings` for the list.
    """
    for item in scan(source, verify_crc=verify_crc, **options):
        if isinstance(item, Batch):
            yield item


def findings(source, **options) -> list[Finding]:
    """Everything wrong with ``source``, in file order."""
    return [item for item in scan(source, **options) if isinstance(item, Finding)]


__all__ = [
    "ACCELERATED",
    "AbortedTxn",
    "BATCHES_SCHEMA",
    "BATCH_HEAD_SIZE",
    "ENTRY_OFFSET_SIZE",
    "Batch",
    "BatchHead",
    "CodecUnavailableError",
    "Control",
    "CorruptBatchError",
    "CorruptDataError",
    "CrcMismatchError",
    "DecompressionError",
    "FINDINGS_SCHEMA",
    "FRAME_COLUMNS",
    "Finding",
    "Frame",
    "Frames",
    "Header",
    "IndexEntry",
    "KafkaLogError",
    "LimitExceededError",
    "Limits",
    "MARKERS_SCHEMA",
    "RECORDS_SCHEMA",
    "Record",
    "Slice",
    "SourceError",
    "Tables",
    "TimeIndexEntry",
    "UnknownCodecError",
    "INDEX_RULES",
    "batches_table",
    "decode",
    "findings",
    "check_offset_index",
    "check_time_index",
    "check_txn_index",
    "read_offset_index_range",
    "entry_offset",
    "first_entry",
    "findings_table",
    "frame",
    "iter_batches",
    "iter_record_batches",
    "markers_table",
    "read_batch_head",
    "read_offset_index",
    "read_time_index",
    "read_txn_index",
    "records_table",
    "reuse_limit",
    "scan",
    "stream",
    "verify_offset_index",
    "verify_time_index",
    "verify_txn_index",
]
