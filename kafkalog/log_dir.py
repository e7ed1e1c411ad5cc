"""A broker's log directory as a whole: its own files, the names of its partition folders,
and which reader reads each file a broker writes there.

Files at the top of a log directory (Kafka's ``LogManager``, ``MetaProperties``,
``CleanShutdownFileHandler``, ``OffsetCheckpointFile``):

``meta.properties``
    Java properties (``java.util.Properties``: ``key=value`` or ``key: value`` or
    ``key value``, ``#``/``!`` comments, backslash escapes and line continuations, read as
    ISO-8859-1 as Kafka reads it). Version 0 (ZooKeeper mode): ``broker.id``, optional
    ``cluster.id``; version 1 (KRaft): ``node.id`` and ``cluster.id`` required; both may
    hold ``directory.id`` (a Kafka UUID). A missing ``version`` is 0.
``.kafka_cleanshutdown``
    Written at a clean shutdown, deleted at startup: its presence is what says the
    shutdown was clean. Empty up to Kafka 3.6, then JSON ``{"version":0,"brokerEpoch":N}``
    (KIP-966); Kafka ignores unknown fields and reads the epoch as a long.
``{recovery-point,replication,log-start,cleaner}-offset-checkpoint``
    Kafka's checkpoint text (:func:`kafkalog.state_files.read_checkpoint`), version 0, one
    ``topic partition offset`` line per partition: the offset below which each partition
    was flushed, its high watermark, its log start offset (only where above the first
    segment's base offset), how far the cleaner compacted it. Kafka creates each one
    empty: an empty file holds no entries.

Partition folders and their renamed states (``-delete``, ``-future``, ``-stray``):
:mod:`kafkalog.folders`.

The registry (:func:`file_kind`, :data:`READERS`) names every state file a broker writes
in a log directory and its partition folders — the partition folders' own
(:mod:`kafkalog.state_files`), the files above, KRaft's (:mod:`kafkalog.kraft`) — so
``kafkalog dump`` and a later table job read them the same way. Each reader returns a
:class:`~kafkalog.state_files.StateFile`; bad content is a ``state_file_corrupt``
finding, only a file that cannot be opened raises.
"""

from __future__ import annotations

import json
import os
import re

from . import kraft
from .internal.schema import uuid_bytes
from .model import Finding
from .state_files import INT64, READERS as PARTITION_READERS, EntryFormat, StateFile
from .state_files import corrupt_finding as _corrupt
from .state_files import java_int, read_checkpoint, read_source, state_file_kind

META_PROPERTIES = "meta_properties"
CLEAN_SHUTDOWN = "clean_shutdown"
OFFSET_CHECKPOINT = "offset_checkpoint"

META_PROPERTIES_NAME = "meta.properties"
CLEAN_SHUTDOWN_NAME = ".kafka_cleanshutdown"
#: the log directory's offset checkpoints (OffsetCheckpointFile, version 0)
OFFSET_CHECKPOINT_NAMES = ("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                           "log-start-offset-checkpoint", "cleaner-offset-checkpoint")
OFFSET_CHECKPOINT_VERSION = 0
#: Kafka's suffix for a file renamed for asynchronous deletion (LogFileUtils,
#: Snapshots.DELETE_SUFFIX): the file still holds what its name before it says
DELETED_SUFFIX = ".deleted"


# ------------------------------------------------------------------ Java properties

_PROPERTY_SPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    """Properties.loadConvert: ``\\uXXXX``, ``\\t\\n\\r\\f``, and a backslash before any
    other character stands for that character. ValueError for a bad ``\\u``."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "\\" or i >= len(text):
            out.append(c if c != "\\" else "")
            continue
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i:i + 4]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uxxxx escape {'u' + digits!r} after a backslash")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def parse_properties(data: bytes) -> tuple[list[tuple[str, str, int, int]], list[Finding]]:
    """``(entries, findings)`` of a Java properties file read as ``Properties.load`` reads
    an InputStream (ISO-8859-1): each entry ``(key, value, start, end)`` in file order (a
    key given twice keeps its last value there), a logical line's byte range; a malformed
    ``\\u`` escape is a finding and its line is dropped."""
    text = data.decode("latin-1")
    entries: list[tuple[str, str, int, int]] = []
    findings: list[Finding] = []
    natural = [(m.start(), m.group(1)) for m in re.finditer(r"([^\r\n]*)(?:\r\n|\r|\n|$)", text)
               if m.start() < len(text)]
    i = 0
    while i < len(natural):
        start, line = natural[i]
        line = line.lstrip(_PROPERTY_SPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        end = start + len(natural[i - 1][1])
        # a line ending in an odd number of backslashes continues on the next one,
        # whose leading white space is dropped
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i >= len(natural):
                break
            nstart, nline = natural[i]
            line += nline.lstrip(_PROPERTY_SPACE)
            end = nstart + len(nline)
            i += 1
        key_end, value_start, has_sep, escaped = len(line), len(line), False, False
        for j, c in enumerate(line):
            if not escaped and c in "=:":
                key_end, value_start, has_sep = j, j + 1, True
                break
            if not escaped and c in _PROPERTY_SPACE:
                key_end, value_start = j, j + 1
                break
            escaped = c == "\\" and not escaped
        while value_start < len(line):
            c = line[value_start]
            if c not in _PROPERTY_SPACE:
                if has_sep or c not in "=:":
                    break
                has_sep = True
            value_start += 1
        try:
            entries.append((_unescape(line[:key_end]), _unescape(line[value_start:]), start, end))
        except ValueError as err:
            findings.append(_corrupt(start, end, f"line at byte {start}: {err}"))
    return entries, findings


# ------------------------------------------------------------------ meta.properties

def read_meta_properties(source) -> StateFile:
    """``meta.properties``: header ``{version, cluster_id, node_id, directory_id}`` as
    Kafka's MetaProperties reads them (``node_id`` from ``node.id``, or ``broker.id`` in
    version 0; null where absent), one row ``{key, value}`` per property in file order."""
    data = read_source(source)
    entries, findings = parse_properties(data)
    props = {k: (v, start, end) for k, v, start, end in entries}
    header: dict = {"version": None, "cluster_id": None, "node_id": None, "directory_id": None}

    def where(key: str) -> tuple[int, int]:
        return props[key][1:] if key in props else (0, len(data))

    raw_version = props.get("version", ("0",))[0]
    version = java_int(raw_version.strip())
    if version not in (0, 1):
        findings.append(_corrupt(*where("version"), f"meta.properties version {raw_version!r}; "
                                 "Kafka knows 0 and 1"))
    else:
        header["version"] = version
        id_key = "broker.id" if version == 0 else "node.id"
        if id_key in props:
            node_id = java_int(props[id_key][0])
            if node_id is None:
                findings.append(_corrupt(*where(id_key), f"meta.properties {id_key} "
                                         f"{props[id_key][0]!r} is not a base-10 int"))
            header["node_id"] = node_id
        elif version == 1:
            findings.append(_corrupt(0, len(data), "meta.properties version 1 without node.id"))
        if version == 1 and "cluster.id" not in props:
            findings.append(_corrupt(0, len(data), "meta.properties version 1 without cluster.id"))
    header["cluster_id"] = props["cluster.id"][0] if "cluster.id" in props else None
    if "directory.id" in props:
        try:
            uuid_bytes(props["directory.id"][0])
            header["directory_id"] = props["directory.id"][0]
        except ValueError as err:
            findings.append(_corrupt(*where("directory.id"),
                                     f"meta.properties directory.id: {err}"))
    rows = tuple({"key": k, "value": v} for k, v, _, _ in entries)
    return StateFile(META_PROPERTIES, header, rows, tuple(findings), len(data))


# ------------------------------------------------------------------ .kafka_cleanshutdown

def read_clean_shutdown(source) -> StateFile:
    """``.kafka_cleanshutdown``: header ``{version, broker_epoch}``, both null for the empty
    file of Kafka before 3.7; content that is not Kafka's JSON is a finding (Kafka then
    knows no broker epoch, and the file still says the shutdown was clean)."""
    data = read_source(source)
    header: dict = {"version": None, "broker_epoch": None}
    findings: list[Finding] = []
    if data:
        try:
            doc = json.loads(data.decode("utf-8"))
        except ValueError as err:
            doc, why = None, f"not JSON ({err})"
        else:
            why = None if isinstance(doc, dict) else f"JSON {type(doc).__name__}, not an object"
        if doc is not None and why is None:
            version, epoch = doc.get("version", 0), doc.get("brokerEpoch")
            if type(version) is int and java_int(str(version)) is not None:
                header["version"] = version
            else:
                why = f"version {version!r} is not an int"
            if type(epoch) is int and java_int(str(epoch), INT64) is not None:
                header["broker_epoch"] = epoch
            else:
                why = f"brokerEpoch {epoch!r} is not a long" + (f"; {why}" if why else "")
        if why:
            findings.append(_corrupt(0, len(data), f".kafka_cleanshutdown: {why}"))
    return StateFile(CLEAN_SHUTDOWN, header, (), tuple(findings), len(data))


# ------------------------------------------------------------------ offset checkpoints

OFFSET_ENTRY = EntryFormat("offset checkpoint", (
    ("topic", lambda t: t or None), ("partition", java_int),
    ("offset", lambda t: java_int(t, INT64))))


def read_offset_checkpoint(source) -> StateFile:
    """One of the four offset checkpoints: header ``{checkpoint (the file's name, null for
    bytes), version, entry_count}``, one row ``{topic, partition, offset}`` per line."""
    data = read_source(source)
    name = None if isinstance(source, (bytes, bytearray, memoryview)) else _base_name(source)
    fmt = EntryFormat(name or OFFSET_ENTRY.name, OFFSET_ENTRY.fields)
    header, rows, _, findings = read_checkpoint(data, fmt, OFFSET_CHECKPOINT_VERSION)
    return StateFile(OFFSET_CHECKPOINT, {"checkpoint": name, **header}, tuple(rows),
                     tuple(findings), len(data))


# ------------------------------------------------------------------ which file is what

def _base_name(path) -> str:
    return os.path.basename(os.fspath(path))


def file_kind(path) -> str | None:
    """Which state file ``path`` is by its name, for every kind :data:`READERS` reads
    (a ``.deleted`` leftover is the kind its name before that says), else None. Segments,
    index files and ``.lock`` are not state files."""
    name = _base_name(path)
    if name.endswith(DELETED_SUFFIX):
        name = name[:-len(DELETED_SUFFIX)]
    if name == META_PROPERTIES_NAME:
        return META_PROPERTIES
    if name == CLEAN_SHUTDOWN_NAME:
        return CLEAN_SHUTDOWN
    if name in OFFSET_CHECKPOINT_NAMES:
        return OFFSET_CHECKPOINT
    return state_file_kind(name) or kraft.kraft_file_kind(name)


#: kind -> reader (each takes a path or the file's bytes and returns a StateFile)
READERS = {
    **PARTITION_READERS,
    META_PROPERTIES: read_meta_properties,
    CLEAN_SHUTDOWN: read_clean_shutdown,
    OFFSET_CHECKPOINT: read_offset_checkpoint,
    **kraft.READERS,
}


def read_file(path) -> StateFile:
    """Read the state file ``path`` with the reader its name calls for; ValueError for a
    name that is no state file."""
    kind = file_kind(path)
    if kind is None:
        raise ValueError(f"{path}: not a state file Kafka writes in a log directory")
    return READERS[kind](path)
