"""Which decoder runs: the compiled fast path when it was built, else pure Python.

``KAFKALOG_PURE_PYTHON=1`` in the environment (read at each call) forces the
pure-Python reference path; the tests run the suite both ways.
"""

from __future__ import annotations

import os

try:
    from . import _speedups
except ImportError:  # not built (no compiler at install time): pure Python only
    _speedups = None

#: Whether the compiled fast path is installed.
ACCELERATED = _speedups is not None

#: The compiled path's entry points (None where it is not built; callers ask
#: :func:`active` first): ``frame_v2(buf, pos, base, max_size, rows)`` frames a run of
#: v2 batches (``log_reader.frames``), ``RecordColumns(dictionary_timestamp_type)`` writes
#: records into Arrow's buffers (``kafkalog.arrow``'s ``FastSink``).
frame_v2 = _speedups.frame_v2 if _speedups is not None else None
RecordColumns = _speedups.RecordColumns if _speedups is not None else None


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
