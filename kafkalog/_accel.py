"""Which decoder runs: the compiled fast path when it was built, else pure Python.

``KAFKALOG_PURE_PYTHON=1`` in the environment (read at each call) forces the
pure-Python reference path; the tests run the suite both ways.
"""

from __future__ import annotations

import os

from . import codecs

try:
    from . import _speedups
except ImportError:  # not built (no compiler at install time): pure Python only
    _speedups = None

#: Whether the compiled fast path is installed.
ACCELERATED = _speedups is not None


def reuse_limit(limit: int | None = None) -> int:
    """The most bytes of freed tables' buffers the compiled path keeps to decode into
    again (default 128 MiB); ``limit`` sets it, and 0 gives them all back.

    A table's big buffers (64 KiB and more) are kept when the table is freed, so the
    next chunk or call writes into pages that are already mapped: the allocator would
    give them back to the kernel, and writing fresh pages costs a page fault per
    4 KiB. 0 on the pure-Python-only install, where nothing is kept.
    """
    if _speedups is None:
        return 0
    return _speedups.spare_limit(limit)


def active() -> bool:
    """Whether this call should use the compiled path."""
    return ACCELERATED and os.environ.get("KAFKALOG_PURE_PYTHON", "") in ("", "0")


class FastSink:
    """What ``log_reader._scan`` drives on the compiled path (see ``arrow.stream``).

    ``columns`` accumulates the records table; :meth:`run` consumes runs of
    regular batches in C; :meth:`add_v2` takes one batch the Python reader
    framed; ``full`` says the caller should flush before more is added.
    """

    def __init__(self, schema, want_batch_rows: bool, max_rows: int, max_bytes: int) -> None:
        self.columns = _speedups.RecordColumns(schema)
        self.add_v2 = self.columns.add_v2
        self._want_rows = want_batch_rows
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._sized = False

    @property
    def full(self) -> bool:
        c = self.columns
        return c.rows >= self._max_rows or c.nbytes >= self._max_bytes or c.no_room

    def run(self, buf, pos, base, verify_crc, limits, prev_last):
        if not self._sized:  # a chunk holds at most max_bytes (plus a batch) of input
            self.columns.expect(min(len(buf) - pos, self._max_bytes) + (1 << 16), self._max_rows)
            self._sized = True
        rows = [] if self._want_rows else None
        new_pos, prev_last = self.columns.scan_run(
            buf, buf, pos, base, verify_crc, limits, prev_last, codecs.decompress, rows,
            self._max_rows, self._max_bytes,
        )
        return new_pos, prev_last, rows
