"""Tables of a broker log directory's own files (issue 36; columns: :mod:`spark_jobs.schemas`,
docs/tables.md), read on the driver (a few small files per log directory).

The files (:data:`spark_jobs.layout.LOG_DIR_FILE_KEY`; the listing hands each log
directory's to one chunk of a run, so each is read once) and their readers are
:mod:`kafkalog.log_dir`'s and :mod:`kafkalog.kraft`'s. A log directory (``log_dir``) is the
folder holding the partition folders, as listed; ``night`` the snapshot night whose
listing held the file (null where the input named none).

* ``broker_state``: one row per night and log directory: ``meta.properties``' cluster id,
  node id (``node.id``, or ``broker.id`` of version 0), directory id and version;
  ``clean_shutdown`` = a ``.kafka_cleanshutdown`` was listed, ``broker_epoch`` from it
  (Kafka 3.7+); ``file`` the ``meta.properties`` read (null: none listed).
* ``partition_checkpoints``: one row per night, log directory and partition named by any of
  the four offset checkpoints: recovery point, high watermark (``replication-offset-
  checkpoint``), log start offset, cleaner offset, each with the file it came from.
* ``kraft_snapshots``: one row per record of each KRaft snapshot
  (``__cluster_metadata-0/<offset>-<epoch>.checkpoint``, ``.deleted`` ones too) and of
  ``bootstrap.checkpoint``, decoded like ``__cluster_metadata`` (control records marked).
* ``quorum_state``: one row per ``quorum-state``.

Every fault the readers report is a finding naming the file (``state_file_corrupt``, or the
batch decoder's and ``internal_record_error`` for a snapshot's records), as is a file listed
and then unreadable; everything that reads is kept. An empty checkpoint is no entries, no
finding (Kafka creates them empty).
"""

from __future__ import annotations

import os

import pyarrow as pa

from kafkalog import kraft
from kafkalog import log_dir as ld
from spark_jobs import layout, schemas
from spark_jobs.derive.internal import metadata_columns, read_files, state_finding, write_state_tables
from spark_jobs.derive.step import Output, Submission

#: the tables this module fills
TABLES = ("broker_state", "partition_checkpoints", "kraft_snapshots", "quorum_state")
#: offset checkpoint file -> its column in partition_checkpoints (``<column>_file``: the file)
CHECKPOINT_COLUMNS = dict(zip(ld.OFFSET_CHECKPOINT_NAMES, (
    "recovery_point", "high_watermark", "log_start_offset", "cleaner_offset")))


def log_dir_tables(entries: list[dict], s3, run_id: str) -> dict[str, pa.Table]:
    """The four tables' rows and ``findings`` of the log directories' files ``entries``
    (``{"uri", "night"}``, :func:`spark_jobs.decode.planning.discover`); only the tables
    that have rows."""
    files = []  # (night, log_dir, kind, uri)
    for e in entries:
        parsed = layout.parse_log_dir_key(e["uri"])
        kind = ld.file_kind(e["uri"])
        if parsed is not None and kind is not None:
            files.append((e["night"], parsed[0], kind, e["uri"]))
    files = sorted(set(files), key=lambda f: (f[0] or "", f[1], f[3]))
    fetched = read_files([(kind, uri) for _, _, kind, uri in files], ld.READERS, s3)
    out: dict[str, list[dict]] = {name: [] for name in (*TABLES, "findings")}
    dirs: dict[tuple, dict] = {}  # (night, log_dir) -> broker_state row
    checkpoints: dict[tuple, dict] = {}  # (night, log_dir, topic, partition) -> row
    for night, log_dir, kind, uri in files:
        where = {"night": night, "run_id": run_id}
        broker = dirs.setdefault((night, log_dir), {
            "log_dir": log_dir, "cluster_id": None, "node_id": None, "directory_id": None,
            "meta_version": None, "clean_shutdown": False, "broker_epoch": None, "file": None,
            **where})
        if kind == ld.CLEAN_SHUTDOWN:
            broker["clean_shutdown"] = True  # listed: the shutdown was clean
        state, err = fetched[(kind, uri)]
        if err is not None:
            out["findings"].append(state_finding(None, None, uri, run_id, 0, 0,
                                                 f"{uri}: cannot be read: {err}"))
            continue
        for f in state.findings:
            out["findings"].append(state_finding(None, None, uri, run_id, f.position, f.end,
                                                 f"{uri}: {f.message}", f.kind))
        h = state.header
        if kind == ld.META_PROPERTIES:
            broker.update(cluster_id=h["cluster_id"], node_id=h["node_id"],
                          directory_id=h["directory_id"], meta_version=h["version"], file=uri)
        elif kind == ld.CLEAN_SHUTDOWN:
            broker["broker_epoch"] = h["broker_epoch"]
        elif kind == ld.OFFSET_CHECKPOINT:
            column = CHECKPOINT_COLUMNS[os.path.basename(uri)]
            for r in state.rows:
                if r["topic"] is None or r["partition"] is None:
                    continue  # a line that did not read: its finding is above
                row = checkpoints.setdefault((night, log_dir, r["topic"], r["partition"]), {
                    "log_dir": log_dir, "topic": r["topic"], "partition": r["partition"],
                    **{c: None for col in CHECKPOINT_COLUMNS.values()
                       for c in (col, f"{col}_file")}, **where})
                row.update({column: r["offset"], f"{column}_file": uri})
        elif kind == kraft.QUORUM_STATE:
            out["quorum_state"].append({
                "log_dir": log_dir, **{k: h[k] for k in (
                    "data_version", "cluster_id", "leader_id", "leader_epoch", "voted_id",
                    "voted_directory_id", "applied_offset")},
                "current_voters": [r["voter_id"] for r in state.rows]
                if h["data_version"] == 0 else None, "file": uri, **where})
        elif kind == kraft.METADATA_SNAPSHOT:
            out["kraft_snapshots"].extend(_snapshot_rows(log_dir, uri, state, where))
    out["broker_state"] = list(dirs.values())
    out["partition_checkpoints"] = list(checkpoints.values())
    return {name: pa.Table.from_pylist(rows, schema=schemas.TABLES[name])
            for name, rows in out.items() if rows}


def _snapshot_rows(log_dir: str, uri: str, state, where: dict) -> list[dict]:
    """kraft_snapshots' rows of one snapshot file (its id from its name: Kafka's)."""
    offset, epoch, deleted = kraft.snapshot_id(uri)
    head = {"log_dir": log_dir, "snapshot_offset": offset, "snapshot_epoch": epoch,
            "bootstrap": os.path.basename(uri) == kraft.BOOTSTRAP_CHECKPOINT_NAME,
            "deleted": deleted,
            "last_contained_log_timestamp": state.header["last_contained_log_timestamp"],
            "file": uri, **where}
    return [{**head, "offset": r["offset"], "control": r["control"], "version": r["version"],
             **metadata_columns(r["record_type"], r["data"])} for r in state.rows]


def derive(sub: Submission) -> Output:
    """The four tables' data files (and their findings, under ``findings``) of one
    submission's log directory files; ``({table: files}, {table: rows})``, both empty
    where the submission has none."""
    ctx, wh, entries = sub.ctx, sub.wh, sub.log_dir_files
    found = log_dir_tables(entries, ctx.s3, sub.run_id) if entries else {}
    if not found:
        return {}, {}
    roots = {n: wh.data_root(n) for n in sorted(found) if n != "findings"}
    roots["findings"] = ctx.roots["findings"]
    files = write_state_tables(ctx, roots, found, tag="logdirs")
    return files, {name: t.num_rows for name, t in found.items()}


__all__ = ["CHECKPOINT_COLUMNS", "TABLES", "derive", "log_dir_tables"]
