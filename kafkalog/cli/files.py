"""What a file is, by its name as Kafka names it: a segment, an index, a state file or a
tiered-storage manifest, looking through the suffixes Kafka appends when it renames one."""

from __future__ import annotations

import os

from ..indexes import (
    read_offset_index,
    read_time_index,
    read_txn_index,
    verify_offset_index,
    verify_time_index,
    verify_txn_index,
)
from ..log_dir import file_kind
from .output import Refused

#: Kafka renames a segment's files by appending one of these (deleted,
#: cleaned, swap); the suffix before it still says what the file holds.
RENAME_SUFFIXES = (".deleted", ".cleaned", ".swap")
LOG_SUFFIX = ".log"
#: a tiered-storage segment's manifest (kafkalog.tiered)
MANIFEST_SUFFIX = ".rsm-manifest"

INDEX_READERS = {
    ".index": (read_offset_index, verify_offset_index),
    ".timeindex": (read_time_index, verify_time_index),
    ".txnindex": (read_txn_index, verify_txn_index),
}


def _split_name(path: str) -> tuple[str, str, str]:
    """``(stem, type suffix, rename suffix)``: ``0.log.deleted`` -> ``("0", ".log", ".deleted")``."""
    stem, ext = os.path.splitext(path)
    rename = ""
    if ext in RENAME_SUFFIXES:
        rename = ext
        stem, ext = os.path.splitext(stem)
    return stem, ext, rename


def file_type(path: str) -> str:
    """The suffix that says what ``path`` holds (``.log``, ``.index``, ...),
    looking through Kafka's rename suffixes; ``""`` if it has none."""
    return _split_name(os.path.basename(path))[1]


def directory_refusal(path: str) -> str:
    """Why a directory is not dumped, and what to give instead: its segments (a partition
    folder) or its partitions' (a log directory), as shell globs, with how many there are."""
    here = os.path.join(path.rstrip("/") or "/", "*" + LOG_SUFFIX)
    below = os.path.join(path.rstrip("/") or "/", "*", "*" + LOG_SUFFIX)
    try:
        names = sorted(os.listdir(path))
    except OSError:
        names = []
    own = [n for n in names if n.endswith(LOG_SUFFIX)]
    nested = sum(1 for n in names if os.path.isdir(os.path.join(path, n))
                 for m in _listing(os.path.join(path, n)) if m.endswith(LOG_SUFFIX))
    if own:
        hint = f"a partition folder ({len(own)} segment(s)): dump {here}"
    elif nested:
        hint = f"a log directory ({nested} segment(s) in its partition folders): dump {below}"
    else:
        hint = f"no .log segment in it or its folders; dump {here} or {below} of a snapshot"
    return f"{path}: is a directory, and dump reads files: {hint}"


def _listing(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def dump_type(path: str, force_log: bool) -> str:
    """``.log``, an index suffix, or a state file kind (``producer_snapshot``, ...)."""
    if os.path.isdir(path):
        raise Refused(directory_refusal(path))
    if force_log:
        return LOG_SUFFIX
    ext = file_type(path)
    if ext in (LOG_SUFFIX, MANIFEST_SUFFIX) or ext in INDEX_READERS:
        return ext
    stem, ext, _ = _split_name(os.path.basename(path))
    state = file_kind(stem + ext)
    if state is not None:
        return state
    what = f"unknown file type {ext!r}" if ext else "no file type suffix"
    raise Refused(
        f"{path}: {what}: dump reads .log, .index, .timeindex, .txnindex and .snapshot "
        f"files (also renamed .deleted, .cleaned or .swap), the state files of a log "
        f"directory (leader-epoch-checkpoint, partition.metadata, meta.properties, "
        f".kafka_cleanshutdown, the offset checkpoints, quorum-state, KRaft snapshots "
        f"<offset>-<epoch>.checkpoint, bootstrap.checkpoint) and .rsm-manifest; --force-log "
        f"decodes any file as a log"
    )


def log_beside(index_path: str) -> str:
    """The ``.log`` of an index file's segment (``0.index.swap`` -> ``0.log.swap``)."""
    stem, _, rename = _split_name(index_path)
    return stem + LOG_SUFFIX + rename
