"""Tables derived from Kafka's internal topics and the partitions' state files (issue 19;
columns: :mod:`spark_jobs.schemas`, docs/tables.md).

* ``consumer_offsets``, ``group_metadata`` (``__consumer_offsets``), ``transactions``
  (``__transaction_state``), ``cluster_metadata`` (``__cluster_metadata``): decoded with
  Kafka's own message specs (:mod:`kafkalog.internal`) from the run's *deduplicated*
  ``records`` files of those topics — what the run commits, so reruns, overlapping
  snapshots and replicas never give a record twice. The executors read the files and
  write the derived tables' files (:func:`derive_records`); only file names reach the
  driver. A record that does not decode is an ``internal_record_error`` finding.
* ``share_group_state`` (``__share_group_state``, KIP-932): one row per record, as
  :func:`kafkalog.internal.share_group_state.share_group_state_row` makes it.
* ``producer_state`` (producer-state ``.snapshot`` files) and ``leader_epochs``
  (``leader-epoch-checkpoint``), each row with the ``topic_id`` of the ``partition.metadata``
  beside it: read by the driver (a few small files, :func:`state_tables`); CRC and parse
  faults are ``state_crc_mismatch`` / ``state_file_corrupt`` findings.

A run that has neither internal topics nor state files does nothing here: no table is
made and nothing committed. ``consumer_lag`` is the audit's (spark_jobs.check_quality).
The executors' half runs through :func:`spark_jobs.derive.files.map_files`.
"""

from __future__ import annotations

import concurrent.futures
import json

import pyarrow as pa

from kafkalog import state_files as sf
from kafkalog.internal import (CLUSTER_METADATA, OFFSETS, SHARE_GROUP_STATE, TOPIC_DECODERS,
                               TRANSACTION_LOG, MessageError, decode, expand_consumer_protocol)
from kafkalog.internal.share_group_state import share_group_state_row
from kafkalog.internal.topics import coordinator_keys
from spark_jobs import layout, schemas, storage
from spark_jobs.derive.files import FILE_ROWS, map_files
from spark_jobs.derive.step import Output, Submission
from spark_jobs.findings import Finding
from spark_jobs.parquet import PartWriter, partition_path, topic_of

#: decoder -> the tables its records go to
DECODER_TABLES = {
    OFFSETS: ("consumer_offsets", "group_metadata"),
    TRANSACTION_LOG: ("transactions",),
    CLUSTER_METADATA: ("cluster_metadata",),
    SHARE_GROUP_STATE: ("share_group_state",),
}
#: the internal topics whose records have tables here (kafkalog decodes more:
#: ``__remote_log_metadata`` stays records only here)
TABLED_TOPICS = {t: d for t, d in TOPIC_DECODERS.items() if d in DECODER_TABLES}
#: state file kind -> the table its rows go to (partition.metadata: a column of both)
STATE_TABLES = {sf.PRODUCER_SNAPSHOT: "producer_state", sf.LEADER_EPOCH_CHECKPOINT: "leader_epochs"}
#: the finding kind of a record of an internal topic that does not decode
RECORD_ERROR = "internal_record_error"
#: Kafka's TransactionState ids (TransactionState.java), as the transactions table names them
TRANSACTION_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
                      4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
#: rows an executor keeps before it writes them
FLUSH_ROWS = 50_000
#: state files read at once on the driver (as the planner reads .index files: 16)
STATE_READERS = 16


def internal_files(record_files: list[str]) -> dict[str, list[str]]:
    """The run's records files of internal topics, by topic (a records file holds one
    topic, named by its folder: :func:`spark_jobs.parquet.topic_of`)."""
    out: dict[str, list[str]] = {}
    for path in record_files:
        topic = topic_of(path)
        if topic in TABLED_TOPICS:
            out.setdefault(topic, []).append(path)
    return out


def _ms(value):
    """A Kafka millisecond timestamp, None for its -1 (none)."""
    return None if value is None or value < 0 else value


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def derived_row(decoder: str, key: bytes | None, value: bytes | None) -> tuple[str, dict]:
    """``(table, row)`` of one internal-topic record (the row without its source columns);
    :class:`MessageError` when it does not decode."""
    d = decode(decoder, key, value)
    if decoder == CLUSTER_METADATA:
        return "cluster_metadata", {"version": d["version"],
                                    **metadata_columns(d["type"], d["data"])}
    if decoder == SHARE_GROUP_STATE:
        return "share_group_state", share_group_state_row(d)
    record_type, k = d["key"]["type"], d["key"]["data"]
    v = d["value"]
    keyed = {"record_type": record_type, "value_version": v["version"] if v else None,
             "tombstone": v is None}
    data = v["data"] if v else {}
    if decoder == TRANSACTION_LOG:
        return "transactions", {
            "transactional_id": k.get("transactionalId"), **keyed,
            "producer_id": data.get("producerId"), "producer_epoch": data.get("producerEpoch"),
            "previous_producer_id": data.get("previousProducerId"),
            "next_producer_id": data.get("nextProducerId"),
            "timeout_ms": data.get("transactionTimeoutMs"),
            "state": (TRANSACTION_STATES.get(data["transactionStatus"],
                                             str(data["transactionStatus"]))
                      if "transactionStatus" in data else None),
            "partitions_json": _json(data["transactionPartitions"])
            if data.get("transactionPartitions") is not None else None,
            "last_update_timestamp": _ms(data.get("transactionLastUpdateTimestampMs")),
            "start_timestamp": _ms(data.get("transactionStartTimestampMs"))}
    if record_type in (0, 1):  # OffsetCommitKey
        epoch = data.get("leaderEpoch")
        return "consumer_offsets", {
            "group": k.get("group"), "topic": k.get("topic"), "partition": k.get("partition"),
            "committed_offset": data.get("offset"),
            "leader_epoch": epoch if epoch is not None and epoch >= 0 else None,
            "metadata": data.get("metadata"),
            "commit_timestamp": _ms(data.get("commitTimestamp")),
            "expire_timestamp": _ms(data.get("expireTimestamp")), **keyed}
    try:
        expanded = expand_consumer_protocol(d)["value"] if v else None
    except MessageError:
        expanded = v  # the member bytes stay base64: the record itself decoded
    members = data.get("members")
    return "group_metadata", {
        "group": k.get("group", k.get("groupId")),
        "record": coordinator_keys(decoder)[record_type][0].name[:-len("Key")], **keyed,
        "protocol_type": data.get("protocolType"), "generation": data.get("generation"),
        "protocol": data.get("protocol"), "leader": data.get("leader"),
        "state_timestamp": _ms(data.get("currentStateTimestamp")),
        "members": len(members) if isinstance(members, list) else None,
        "key_json": _json(k), "value_json": _json(expanded["data"]) if expanded else None}


def metadata_columns(record_type: str, data: dict | None) -> dict:
    """A decoded ``__cluster_metadata`` record's columns (``cluster_metadata``, and the
    KRaft snapshots' ``kraft_snapshots``): its type, the topic id, topic name (of a
    TOPIC_RECORD) and partition id where it has them, its fields as JSON."""
    fields = data or {}
    return {"type": record_type, "topic_id": fields.get("topicId"),
            "topic_name": fields.get("name") if record_type == "TOPIC_RECORD" else None,
            "partition_id": fields.get("partitionId"),
            "data_json": None if data is None else _json(data)}


_SOURCE_COLUMNS = ("topic", "partition", "offset", "timestamp", "batch_position", "key",
                   "value", "segment", "segment_base_offset", "run_id")


def rows_of_file(records: pa.Table) -> tuple[dict[str, list[dict]], list[dict]]:
    """The derived rows (by table) and findings of one records file's rows."""
    cols = {c: records.column(c).to_pylist() for c in _SOURCE_COLUMNS}
    out: dict[str, list[dict]] = {}
    findings: list[dict] = []
    for i in range(records.num_rows):
        topic = cols["topic"][i]
        decoder = TABLED_TOPICS.get(topic)
        if decoder is None:
            continue
        source = {"source_topic": topic, "source_partition": cols["partition"][i],
                  "source_offset": cols["offset"][i], "timestamp": cols["timestamp"][i],
                  "segment": cols["segment"][i],
                  "segment_base_offset": cols["segment_base_offset"][i],
                  "run_id": cols["run_id"][i]}
        try:
            table, row = derived_row(decoder, cols["key"][i], cols["value"][i])
        except MessageError as err:
            offset, position = cols["offset"][i], cols["batch_position"][i]
            findings.append(Finding(
                topic=topic, partition=cols["partition"][i], kind=RECORD_ERROR,
                position=position, end=position, base_offset=offset, last_offset=offset,
                message=f"{decoder} record at offset {offset} (batch at position {position}) "
                        f"does not decode: {err}",
                segment=cols["segment"][i], segment_base_offset=cols["segment_base_offset"][i],
                run_id=cols["run_id"][i]).row())
            continue
        out.setdefault(table, []).append({**row, **source})
    return out, findings


def _write_rows(writer, rows: dict[str, list[dict]], findings: list[dict], counts: dict) -> None:
    for table, rs in rows.items():
        if rs:
            writer.write(table, "", pa.Table.from_pylist(rs, schema=schemas.TABLES[table]))
            counts[table] = counts.get(table, 0) + len(rs)
    by_topic: dict = {}
    for f in findings:
        by_topic.setdefault(f["topic"], []).append(f)
    for topic, fs in by_topic.items():
        writer.write("findings", partition_path(topic),
                     pa.Table.from_pylist(fs, schema=schemas.FINDINGS))
        counts["findings"] = counts.get("findings", 0) + len(fs)


def derive_records(spark, ctx, roots: dict, paths: list[str]) -> tuple[dict, dict]:
    """Decode the internal-topic records files ``paths`` on the executors into the
    derived tables' data files (``roots``: table -> data folder, findings included).
    Returns ``({table: [file URIs]}, {table: rows})``."""
    from pyspark import TaskContext

    from spark_jobs.tables import read_file

    def task(paths):
        writer = PartWriter(ctx, f"internal{TaskContext.get().partitionId():05d}", roots)
        counts: dict = {}
        try:
            for path in paths:
                records = read_file(path, "records", ctx.s3)
                for part in records.to_batches(FLUSH_ROWS):
                    rows, findings = rows_of_file(pa.Table.from_batches([part]))
                    _write_rows(writer, rows, findings, counts)
        except BaseException:
            writer.abort()
            raise
        files = writer.commit()
        out = [(t, f, None) for t, fs in files.items() for f in fs]
        out += [(t, None, n) for t, n in counts.items()]
        yield pa.RecordBatch.from_pylist([{"table": t, "file": f, "rows": n} for t, f, n in out],
                                         schema=FILE_ROWS)

    return map_files(spark, paths, task)


# ------------------------------------------------------------------ state files


def state_tables(uris: list[str], s3, run_id: str) -> dict[str, pa.Table]:
    """``producer_state``, ``leader_epochs`` and ``findings`` rows of the state files
    ``uris`` (each ``<topic>-<partition>/<name>``: layout.STATE_FILE_KEY); only the
    tables that have rows. A file that cannot be read is a ``state_file_corrupt``
    finding, as is every fault the readers report."""
    folders: dict[str, dict[str, list]] = {}
    for uri in uris:
        parsed = layout.parse_state_key(uri)
        if parsed is None:
            continue
        folders.setdefault(uri[:uri.rstrip("/").rfind("/")], {}).setdefault(
            sf.state_file_kind(parsed[2]), []).append((uri, parsed))

    jobs = [(kind, uri) for kinds in folders.values() for kind, found in kinds.items()
            for uri, _ in found]
    fetched = read_files(jobs, sf.READERS, s3)
    out: dict[str, list[dict]] = {"producer_state": [], "leader_epochs": [], "findings": []}
    for folder, kinds in sorted(folders.items()):
        read = {}
        for kind, found in kinds.items():
            for uri, (topic, partition, name) in sorted(found):
                state, err = fetched[(kind, uri)]
                if err is not None:
                    out["findings"].append(state_finding(topic, partition, uri, run_id, 0, 0,
                                                         f"{uri}: cannot be read: {err}"))
                    continue
                read.setdefault(kind, []).append((uri, topic, partition, name, state))
                for f in state.findings:
                    out["findings"].append(state_finding(topic, partition, uri, run_id,
                                                         f.position, f.end,
                                                         f"{uri}: {f.message}", f.kind))
        metadata = read.get(sf.PARTITION_METADATA, [])
        topic_id = metadata[0][4].header.get("topic_id") if metadata else None
        for uri, topic, partition, name, state in read.get(sf.PRODUCER_SNAPSHOT, []):
            offset = int(name[:-len(sf.SNAPSHOT_SUFFIX)])
            for row in state.rows:
                out["producer_state"].append({
                    **row, "topic": topic, "partition": partition, "snapshot_offset": offset,
                    "timestamp": _ms(row["timestamp"]), "topic_id": topic_id, "file": uri,
                    "run_id": run_id})
        for uri, topic, partition, name, state in read.get(sf.LEADER_EPOCH_CHECKPOINT, []):
            for row in state.rows:
                out["leader_epochs"].append({**row, "topic": topic, "partition": partition,
                                             "topic_id": topic_id, "file": uri,
                                             "run_id": run_id})
    return {name: pa.Table.from_pylist(rows, schema=schemas.TABLES[name])
            for name, rows in out.items() if rows}


def read_files(jobs: list[tuple[str, str]], readers: dict, s3) -> dict:
    """``{(kind, uri): (StateFile, None) or (None, error)}``: each file of ``jobs`` (``(kind,
    uri)``) read with ``readers[kind]`` from its bytes, one GET per file, many at once (on
    S3 each is a round trip; thousands of partitions). An error is the file's that could
    not be fetched or read."""
    def fetch(job):
        kind, uri = job
        try:
            store, key = storage.open_object(uri, s3)
            return readers[kind](store.read(key)), None
        except (storage.StorageError, OSError, ValueError) as err:
            return None, err

    with concurrent.futures.ThreadPoolExecutor(max(1, min(STATE_READERS, len(jobs)))) as pool:
        return dict(zip(jobs, pool.map(fetch, jobs)))


def state_finding(topic, partition, uri, run_id, position, end, message,
                  kind="state_file_corrupt") -> dict:
    """A finding row about a state file ``uri`` (``segment``: the file)."""
    return Finding(topic=topic, partition=partition, kind=kind, position=position, end=end,
                   message=message, segment=uri, run_id=run_id).row()


def write_state_tables(ctx, roots: dict, found: dict[str, pa.Table],
                       tag: str = "state") -> dict[str, list[str]]:
    """Write :func:`state_tables`' output (or another driver's tables and findings) on the
    driver, its files named by ``tag``; ``{table: [file URIs]}``."""
    writer = PartWriter(ctx, tag, roots)
    counts: dict = {}
    _write_rows(writer, {n: t.to_pylist() for n, t in found.items() if n != "findings"},
                found["findings"].to_pylist() if "findings" in found else [], counts)
    return writer.commit()


# ------------------------------------------------------------------ the job's step


def derive(sub: Submission) -> Output:
    """The derived tables' data files of one submission (and their findings, under
    ``findings``), written into the tables' data folders; ``({table: files}, {table: rows})``.
    Tables are made only where the run has an internal topic or state file for them."""
    spark, ctx, wh, state_uris, run_id = sub.spark, sub.ctx, sub.wh, sub.state_uris, sub.run_id
    by_topic = internal_files(sub.records)
    state = state_tables(state_uris, ctx.s3, run_id) if state_uris else {}
    if not by_topic and not state:
        return {}, {}
    needed = {t for topic in by_topic for t in DECODER_TABLES[TABLED_TOPICS[topic]]}
    needed |= {n for n in state if n != "findings"}
    roots = {n: wh.data_root(n) for n in sorted(needed)}
    roots["findings"] = ctx.roots["findings"]
    files: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    if by_topic:
        files, counts = derive_records(spark, ctx, roots,
                                       [p for ps in by_topic.values() for p in ps])
    if state:
        for name, fs in write_state_tables(ctx, roots, state).items():
            files.setdefault(name, []).extend(fs)
        for name, t in state.items():
            counts[name] = counts.get(name, 0) + t.num_rows
    return files, counts


__all__ = ["DECODER_TABLES", "RECORD_ERROR", "STATE_TABLES", "TRANSACTION_STATES", "derive",
           "derive_records", "derived_row", "internal_files", "metadata_columns", "read_files",
           "rows_of_file", "state_finding", "state_tables", "write_state_tables"]
