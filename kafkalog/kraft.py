"""KRaft's files in a log directory: ``quorum-state``, metadata snapshots and
``bootstrap.checkpoint``.

``__cluster_metadata-0/quorum-state`` (``FileQuorumStateStore``): one line of JSON, the
``QuorumStateData`` message in the form of Kafka's JSON converter (read with the shipped
spec) plus ``"data_version"``, the version it was written as::

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1}],"data_version":0}              <- kraft.version 0
    {"leaderId":1,"leaderEpoch":1,"votedId":-1,
     "votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}   <- kraft.version 1

Kafka reads the first line only; an empty file, a ``data_version`` outside 0-1 or a field
its version needs that is missing stops the controller (here: findings).

``__cluster_metadata-0/<20-digit end offset>-<10-digit epoch>.checkpoint`` (``Snapshots``,
``RecordsSnapshotReader``): a snapshot of the metadata log up to (not including) the end
offset, written by the leader of that epoch, as record batches exactly like a segment's.
The first batch is a control batch whose first record is a SNAPSHOT_HEADER (its value a
``SnapshotHeaderRecord``: version, the append time of the last record contained); with
kraft.version 1 the same batch carries KRAFT_VERSION and KRAFT_VOTERS records; then the
metadata records (decoded as ``__cluster_metadata``'s); the last record is a
SNAPSHOT_FOOTER. Kafka writes a snapshot to a ``.checkpoint.part`` file and renames it
whole, so a snapshot without its footer was cut short. ``….checkpoint.deleted`` is a
snapshot renamed for asynchronous deletion (``Snapshots.markForDelete``), its content
unchanged. ``bootstrap.checkpoint`` (the log directory's top, written by ``kafka-storage
format``) is a snapshot too: the metadata version and other features the cluster starts
with.

Each reader returns a :class:`~kafkalog.state_files.StateFile`; what does not read is a
finding (``state_file_corrupt``; the batch decoder's own kinds for damaged batches,
``internal_record_error`` for a record that does not decode); only a file that cannot be
opened raises.
"""

from __future__ import annotations

import json
import os
import re

from .internal.json_form import read_json
from .internal.schema import MessageError, snake_name, spec
from .internal.topics import KRAFT_CONTROL_SPECS, decode_cluster_metadata, decode_kraft_control
from .log_reader import scan
from .model import CONTROL_TYPES, Batch, Finding
from .state_files import StateFile, corrupt_finding as _corrupt, read_source

QUORUM_STATE = "quorum_state"
METADATA_SNAPSHOT = "metadata_snapshot"

QUORUM_STATE_NAME = "quorum-state"
BOOTSTRAP_CHECKPOINT_NAME = "bootstrap.checkpoint"
#: Snapshots.filenameFromSnapshotId + SUFFIX (and DELETE_SUFFIX)
SNAPSHOT_NAME = re.compile(r"(?P<offset>[0-9]{20})-(?P<epoch>[0-9]{10})\.checkpoint"
                           r"(?P<deleted>\.deleted)?")
DATA_VERSION = "data_version"
SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 3, 4



def kraft_file_kind(name: str) -> str | None:
    """:data:`QUORUM_STATE` or :data:`METADATA_SNAPSHOT` (snapshots, their ``.deleted``
    leftovers and ``bootstrap.checkpoint``) for a file name, else None."""
    if name == QUORUM_STATE_NAME:
        return QUORUM_STATE
    if name == BOOTSTRAP_CHECKPOINT_NAME or SNAPSHOT_NAME.fullmatch(name):
        return METADATA_SNAPSHOT
    return None


# ------------------------------------------------------------------ quorum-state

def read_quorum_state(source) -> StateFile:
    """``quorum-state``: header ``{data_version, cluster_id, leader_id, leader_epoch,
    voted_id, voted_directory_id, applied_offset}`` (null where the version has no such
    field), one row ``{voter_id}`` per voter of ``currentVoters`` (version 0)."""
    data = read_source(source)
    qs = spec("QuorumStateData")
    header: dict = {DATA_VERSION: None,
                    **{snake_name(f.name): None for f in qs.struct.fields
                       if f.name != "currentVoters"}}
    line = data.split(b"\n", 1)[0].split(b"\r", 1)[0]

    def done(message: str | None = None, rows=()) -> StateFile:
        found = () if message is None else (_corrupt(0, len(line), f"quorum-state: {message}"),)
        return StateFile(QUORUM_STATE, header, tuple(rows), found, len(data))

    if not line:
        return done("no JSON on the first line (Kafka: 'File ended prematurely')")
    try:
        doc = json.loads(line.decode("utf-8"))
    except ValueError as err:
        return done(f"the first line is not JSON ({err})")
    if not isinstance(doc, dict):
        return done("the first line is not a JSON object")
    version = doc.get(DATA_VERSION)
    if type(version) is not int or version not in qs.valid:
        return done(f"data_version {version!r}; Kafka reads "
                    f"{qs.valid.low}-{qs.valid.high}")
    header[DATA_VERSION] = version
    try:
        values = read_json(qs, doc, version)
    except MessageError as err:
        return done(str(err))
    voters = values.pop("currentVoters", None) or ()
    header.update({snake_name(k): v for k, v in values.items()})
    return done(rows=[{"voter_id": v["voterId"]} for v in voters])


# ------------------------------------------------------------------ snapshots

def snapshot_id(path) -> tuple[int | None, int | None, bool]:
    """``(end offset, epoch, deleted)`` from a snapshot's file name (Kafka's
    ``Snapshots.parse``); ``(None, None, False)`` for ``bootstrap.checkpoint`` or bytes."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        return None, None, False
    m = SNAPSHOT_NAME.fullmatch(os.path.basename(os.fspath(path)))
    if m is None:
        return None, None, False
    return int(m["offset"]), int(m["epoch"]), m["deleted"] is not None


def read_metadata_snapshot(source) -> StateFile:
    """A KRaft snapshot or ``bootstrap.checkpoint``: header ``{end_offset, epoch, deleted}``
    (from the name), ``last_contained_log_timestamp`` (from the snapshot header),
    ``batch_count``, ``record_count`` (metadata records) and ``control_count``; one row per
    record in file order ``{offset, batch_position, control, record_type, version, data}``
    (``record_type`` as Kafka names it: ``SNAPSHOT_HEADER``, ``FEATURE_LEVEL_RECORD``…;
    ``data`` the decoded fields, null when the record does not decode)."""
    data = read_source(source)
    end_offset, epoch, deleted = snapshot_id(source)
    header = {"end_offset": end_offset, "epoch": epoch, "deleted": deleted,
              "last_contained_log_timestamp": None, "batch_count": 0, "record_count": 0,
              "control_count": 0}
    rows: list[dict] = []
    findings: list[Finding] = []
    last: tuple[Batch, object] | None = None
    for item in scan(data):
        if isinstance(item, Finding):
            findings.append(item)
            continue
        header["batch_count"] += 1
        for record in item.records:
            row, problem = _snapshot_row(item, record)
            rows.append(row)
            if problem is not None:
                findings.append(problem)
            if not rows[1:] and not _is_control(row, SNAPSHOT_HEADER):
                findings.append(_corrupt(item.position, item.end, "snapshot: the first record "
                                         f"(offset {record.offset}) is {row['record_type']}, "
                                         "not a SNAPSHOT_HEADER control record"))
            elif rows[1:] and (_is_control(row, SNAPSHOT_HEADER)
                               or last is not None and _is_control(last[1], SNAPSHOT_FOOTER)):
                what = "a second SNAPSHOT_HEADER" if _is_control(row, SNAPSHOT_HEADER) else \
                    f"{row['record_type']} after the SNAPSHOT_FOOTER"
                findings.append(_corrupt(item.position, item.end,
                                         f"snapshot: offset {record.offset} is {what}"))
            last = (item, row)
            header["control_count" if row["control"] else "record_count"] += 1
    if rows and _is_control(rows[0], SNAPSHOT_HEADER) and rows[0]["data"]:
        header["last_contained_log_timestamp"] = rows[0]["data"]["lastContainedLogTimestamp"]
    if last is None:
        findings.append(_corrupt(0, len(data), f"snapshot of {len(data)} bytes without a "
                                 "record (a snapshot starts with a SNAPSHOT_HEADER)"))
    elif not _is_control(last[1], SNAPSHOT_FOOTER):
        findings.append(_corrupt(last[0].end, len(data), "snapshot without its SNAPSHOT_FOOTER: "
                                 f"it ends after offset {last[1]['offset']} (cut short)"))
    return StateFile(METADATA_SNAPSHOT, header, tuple(rows), tuple(findings), len(data))


def _is_control(row: dict, type_id: int) -> bool:
    return row["control"] and row["record_type"] == CONTROL_TYPES[type_id]


def _snapshot_row(batch: Batch, record) -> tuple[dict, Finding | None]:
    """One record's row, and an ``internal_record_error`` when its value does not decode."""
    row = {"offset": record.offset, "batch_position": batch.position,
           "control": batch.is_control, "record_type": None, "version": None, "data": None}
    try:
        if batch.is_control:
            control = record.control
            if control is None:
                raise MessageError("control record key does not read", 0)
            row["record_type"] = control.type if control.type != "UNKNOWN" else \
                f"UNKNOWN({control.type_id})"
            if control.type_id not in KRAFT_CONTROL_SPECS:
                return row, None  # Kafka skips control types it does not know
            decoded = decode_kraft_control(control.type_id, record.value)
        else:
            decoded = decode_cluster_metadata(record.key, record.value)
            row["record_type"] = decoded["type"]
    except MessageError as err:
        return row, Finding("internal_record_error", batch.position, batch.end,
                            f"offset {record.offset}: {err}", record.offset, record.offset)
    row.update(record_type=decoded["type"], version=decoded["version"], data=decoded["data"])
    return row, None


READERS = {QUORUM_STATE: read_quorum_state, METADATA_SNAPSHOT: read_metadata_snapshot}
