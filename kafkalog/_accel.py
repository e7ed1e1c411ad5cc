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


def active() -> bool:
    """Whether this call should use the compiled path."""
    return ACCELERATED and os.environ.get("KAFKALOG_PURE_PYTHON", "") in ("", "0")


def record_columns(schema):
    """A compiled accumulator for the records table (only when :func:`active`)."""
    return _speedups.RecordColumns(schema)
