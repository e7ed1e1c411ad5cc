"""Turning what callers pass (path, bytes, file object) into one buffer.

Files are memory-mapped, so decoding reads straight from the page cache and a
byte range touches only its own pages; bytes and memoryviews are used as they
are. Positions reported by the decoder are always absolute in the source, also
when only a byte range of it is decoded.
"""

from __future__ import annotations

import io
import mmap
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

from .errors import SourceError

#: Give mapped pages back after every this many bytes read.
RELEASE_STEP = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class View:
    buf: memoryview  # the bytes to decode (the byte range only)
    base: int  # absolute position of buf[0] in the source
    name: str  # file name, or "<bytes>"
    #: ``done(pos)``: the reader will not need ``buf[:pos]`` again (it may,
    #: and then it is read again); a mapped file gives those pages back.
    done: Callable[[int], None] = lambda pos: None


class Slice(NamedTuple):
    """Bytes that sit at position ``base`` of a larger segment (e.g. from a ranged GET).

    Decoding a Slice reports positions in the whole segment; a ``byte_range``
    passed with it is in those absolute positions too.
    """

    data: bytes | bytearray | memoryview
    base: int


def _range(total: int, byte_range) -> tuple[int, int]:
    if byte_range is None:
        return 0, total
    start, end = byte_range
    end = total if end is None else end
    if not (0 <= start <= end <= total):
        raise SourceError(f"byte range {start}..{end} is outside the source's {total} bytes")
    return start, end


@contextmanager
def open_source(source, byte_range=None) -> Iterator[View]:
    """Yield a :class:`View` of ``source``; close what was opened afterwards."""
    if isinstance(source, Slice):
        buf = memoryview(source.data).cast("B")
        lo = source.base
        if byte_range is None:
            yield View(buf, lo, "<slice>")
            return
        start, end = byte_range
        end = lo + len(buf) if end is None else end
        if not (lo <= start <= end <= lo + len(buf)):
            raise SourceError(f"byte range {start}..{end} is outside the slice "
                              f"{lo}..{lo + len(buf)}")
        yield View(buf[start - lo:end - lo], start, "<slice>")
        return
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf = memoryview(source).cast("B")
        start, end = _range(len(buf), byte_range)
        yield View(buf[start:end], start, "<bytes>")
        return
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        try:
            f = open(name, "rb")
        except OSError as err:
            raise SourceError(f"cannot open {name}: {err.strerror or err}") from err
        with f:
            with _map_file(f, name, byte_range) as view:
                yield view
        return
    if hasattr(source, "read"):
        name = getattr(source, "name", "<file>")
        name = name if isinstance(name, str) else "<file>"
        try:
            source.fileno()
            is_real_file = True
        except (AttributeError, OSError, io.UnsupportedOperation):
            is_real_file = False
        if is_real_file:
            with _map_file(source, name, byte_range) as view:
                yield view
            return
        try:
            data = source.read()
        except OSError as err:
            raise SourceError(f"cannot read {name}: {err}") from err
        if not isinstance(data, (bytes, bytearray)):
            raise SourceError(f"{name} is not opened in binary mode")
        buf = memoryview(data)
        start, end = _range(len(buf), byte_range)
        yield View(buf[start:end], start, name)
        return
    raise SourceError(
        f"cannot decode a {type(source).__name__}: pass a path, bytes, memoryview or binary file"
    )


@contextmanager
def _map_file(f, name: str, byte_range) -> Iterator[View]:
    try:
        size = os.fstat(f.fileno()).st_size
    except OSError as err:
        raise SourceError(f"cannot stat {name}: {err.strerror or err}") from err
    start, end = _range(size, byte_range)
    if size == 0:
        yield View(memoryview(b""), 0, name)
        return
    try:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as err:
        raise SourceError(f"cannot map {name}: {err}") from err
    whole = memoryview(mm)
    released = [start - start % mmap.PAGESIZE]

    def done(pos: int) -> None:
        # Pages of a file mapping count as the process's RSS until unmapped:
        # without this a 1 GB segment read front to back holds 1 GB of RSS.
        stop = start + pos
        stop -= stop % mmap.PAGESIZE
        if stop - released[0] >= RELEASE_STEP:
            mm.madvise(mmap.MADV_DONTNEED, released[0], stop - released[0])
            released[0] = stop

    try:
        yield View(whole[start:end], start, name, done)
    finally:
        try:
            whole.release()
            mm.close()
        except BufferError:
            pass  # a caller still holds a view; the map goes when that view does
