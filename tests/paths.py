"""Run kafkalog's table builders on both decoder paths and compare.

``KAFKALOG_PURE_PYTHON`` is read at every call, so flipping it around one call
selects the path for that call. The suite itself runs twice (``make test``):
once as installed (compiled where built) and once with the variable set.
"""

from __future__ import annotations

import contextlib
import os

import kafkalog


@contextlib.contextmanager
def pure_python(on: bool = True):
    old = os.environ.get("KAFKALOG_PURE_PYTHON")
    os.environ["KAFKALOG_PURE_PYTHON"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["KAFKALOG_PURE_PYTHON"]
        else:
            os.environ["KAFKALOG_PURE_PYTHON"] = old


def decode_both(source, **options) -> tuple[kafkalog.Tables, kafkalog.Tables]:
    with pure_python(True):
        pure = kafkalog.decode(source, **options)
    with pure_python(False):
        compiled = kafkalog.decode(source, **options)
    return pure, compiled


def assert_same_tables(a: kafkalog.Tables, b: kafkalog.Tables) -> None:
    for name, x, y in zip(a._fields, a, b):
        assert x.schema == y.schema, name
        if not x.equals(y):
            # name the first differing row, column by column
            for col in x.column_names:
                xs, ys = x.column(col).to_pylist(), y.column(col).to_pylist()
                if xs != ys:
                    i = next(i for i, (p, q) in enumerate(zip(xs, ys)) if p != q) \
                        if len(xs) == len(ys) else None
                    raise AssertionError(
                        f"{name}.{col} differs (rows {len(xs)} vs {len(ys)}; first at {i}: "
                        f"{xs[i] if i is not None else ''!r} vs {ys[i] if i is not None else ''!r})")
            raise AssertionError(f"{name} differs")
