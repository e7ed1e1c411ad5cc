"""What every ``kafkalog`` command shares on its way out: exit statuses, one output line
(JSON or text), the summary line, and errors as one line on stderr."""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Callable, TextIO

from ..model import Finding

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

EXIT_STATUS = """\
Exit status (with several FILEs, the highest):
  0  read completely, nothing wrong (index --verify: every entry agrees)
  1  the input is wrong: findings were reported (the output is still complete),
     or a .log is empty or is not a Kafka log segment, or a remote segment's
     manifest or chunk is wrong (one line on stderr)
  2  could not run: usage error, a file type not read (dump --force-log reads
     any file as a log), a file that cannot be opened, a byte range outside the
     file, no key or not the right key for an encrypted remote segment (one
     line on stderr, nothing printed for that file)"""


class Refused(Exception):
    """A file the command will not read (one line on stderr, exit 2)."""


def num_text(v) -> str:
    return "null" if v is None else str(v)


def bool_text(v) -> str:
    return "null" if v is None else str(v).lower()


def compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def finding_text(f: Finding) -> str:
    return f"finding: {f.kind} position: {f.position} end: {f.end} {f.message}"


def emit(out: TextIO, as_json: bool, obj: dict, text: Callable[[], str]) -> None:
    if as_json:
        out.write(json.dumps(obj, separators=(",", ":")))
    else:
        out.write(text())
    out.write("\n")


def count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary_text(counts: list[str], kinds: Counter, nbytes: int, verdict: str = "") -> str:
    """``16 batches, 18 records, 2 findings (crc_mismatch 1, truncated_tail 1), 1412 bytes``."""
    n = sum(kinds.values())
    found = "no findings" if not n else (
        f"{count(n, 'finding', 'findings')} ({', '.join(f'{k} {c}' for k, c in kinds.items())})")
    return f"{', '.join(counts)}, {found}, {count(nbytes, 'byte', 'bytes')}{verdict}"


def write_summary(args, out: TextIO, path: str, text: str) -> None:
    if args.json:  # stdout stays JSON objects only
        print(f"kafkalog: {path}: {text}", file=sys.stderr)
    else:
        out.write(f"Summary: {text}\n")


def say_error(path: str, err: Exception) -> None:
    """One line on stderr that names the file."""
    message = str(err)
    print(f"kafkalog: {message if path in message else f'{path}: {message}'}", file=sys.stderr)
